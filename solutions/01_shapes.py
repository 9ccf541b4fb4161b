# ---
# jupyter:
#   jitlab:
#     hints:
#     - 'Part 1 has three pieces: a size function, a jitted kernel that sees only bucket
#       sizes, and a wrapper that pads. Start with bucket_size: what is the smallest
#       power of two that is at least n?'
#     - In padded_rms, build a mask with jnp.arange(padded.shape[0]) < n. Both the sum
#       of squares and the count must ignore positions past n.
#     - 'n must stay a traced argument: if you make it static, every new length compiles
#       again. In rms, pad with np.pad (or np.zeros + assignment) to bucket_size(len(x)),
#       then return padded_rms(padded, len(x)).'
#     - 'Part 2: jnp.nonzero needs to know the length of its answer when it is traced.
#       The most positions there can be is len(x), and x.shape[0] is known at trace
#       time.'
#     - jnp.nonzero(x > threshold, size=x.shape[0], fill_value=-1) returns a tuple with
#       one index array; the count is jnp.sum(x > threshold). Keep threshold an ordinary
#       (traced) argument.
#     title: Any length, one compilation per bucket; any count, one compilation
#   jupytext:
#     formats: py:percent
#     notebook_metadata_filter: jitlab,kernelspec,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise 01 · Any length, one compilation per bucket; any count, one compilation
#
# ## Part 1: one compilation per bucket
#
# A data pipeline hands you 1-D float32 arrays of any length from 1 to 1,000, and you need
# the root mean square of each: `sqrt(mean(x**2))`. Jitting the obvious function compiles
# once per distinct length. Make it compile **at most once per bucket**:
#
# 1. `bucket_size(n)`: the padded length for an array of length `n`: at least `n`, and
#    wasting less than half (anything up to 16 is fine for tiny `n`), with **at most 12
#    distinct bucket sizes** over the lengths 1 to 1,000 (powers of two are the classic
#    choice; a bucket per length compiles once per length).
# 2. `padded_rms(padded, n)`: jitted; `padded` has a bucket's length, only the first `n`
#    values are real, and whatever lies past `n` must not change the answer.
# 3. `rms(x)`: a plain Python function (not jitted) that pads `x` to its bucket, calls
#    `padded_rms` (by that name) and returns its result. It must not change `x`.
#
# The grader draws fresh lengths and data every run, including lengths that fill a
# bucket exactly, compares with a NumPy reference, and calls `padded_rms` itself on
# arrays padded with your `bucket_size`. Then it calls `rms` and counts compilations of
# `padded_rms` with `jitlab.count_compiles` after emptying its cache: exactly one at the
# first length of each bucket, none after. So `rms` calls `padded_rms` itself, with jit
# on (not inside a `jax.jit` of your own), and passes `n` the same way every time.
#
# ## Part 2: positions of any count, one compilation
#
# A detector flags the positions of the samples above a threshold. How many there are
# depends on the data, so `jnp.nonzero(x > threshold)` cannot be traced as it stands
# (lesson 01, "Sizes that depend on the data"). Write
#
# 4. `loud_positions(x, threshold)`: jitted; returns `(positions, count)`, where
#    `positions` has the same length as `x` and holds, in increasing order, every index
#    `i` with `x[i] > threshold` (strictly greater), followed by `-1` in every unused
#    slot, and `count` is how many indices are real. For arrays of one length it must
#    compile **once**, whatever the data and the threshold.
#
# Run `jitlab check shapes` for a verdict, `jitlab hint shapes` for a hint.

# %%
import jax
import jax.numpy as jnp
import numpy as np


# %%
def bucket_size(n: int) -> int:
    # BEGIN SOLUTION
    # The next power of two: at most 2x the real length, and only 11 sizes up to 1,000.
    return 1 << max(n - 1, 0).bit_length()
    # END SOLUTION


@jax.jit
def padded_rms(padded: jax.Array, n: jax.Array) -> jax.Array:
    # BEGIN SOLUTION
    # `n` is traced, so every length that shares a bucket shares this executable.
    mask = jnp.arange(padded.shape[0]) < n
    squares = jnp.where(mask, padded * padded, 0.0)
    return jnp.sqrt(jnp.sum(squares) / n)
    # END SOLUTION


def rms(x: np.ndarray) -> jax.Array:
    # BEGIN SOLUTION
    n = len(x)
    padded = np.zeros(bucket_size(n), dtype=np.float32)
    padded[:n] = x  # padding happens in NumPy, outside jit, where shapes are free
    return padded_rms(padded, n)
    # END SOLUTION


# %%
@jax.jit
def loud_positions(x: jax.Array, threshold: jax.Array) -> tuple[jax.Array, jax.Array]:
    # BEGIN SOLUTION
    # The answer's length must be known when tracing: the most there can be is len(x),
    # so that is the size, and the unused slots hold -1. The count says how many are
    # real. No shape depends on the data, so one program serves every array of this
    # length and every threshold.
    loud = x > threshold
    (positions,) = jnp.nonzero(loud, size=x.shape[0], fill_value=-1)
    return positions, jnp.sum(loud)
    # END SOLUTION


# %% tags=["grader"]
from jitlab.graders import shapes

shapes.grade(bucket_size, padded_rms, rms)

# %% tags=["grader"]
from jitlab.graders import shapes

shapes.grade_positions(loud_positions)
