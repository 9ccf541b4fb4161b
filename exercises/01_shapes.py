# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   jitlab:
#     title: Root mean square of arrays of any length, one compilation per bucket
#     hints:
#       - "Three pieces: a size function, a jitted kernel that sees only bucket sizes, and a wrapper that pads. Start with bucket_size: what is the smallest power of two that is at least n?"
#       - "In padded_rms, build a mask with jnp.arange(padded.shape[0]) < n. Both the sum of squares and the count must ignore positions past n."
#       - "n must stay a traced argument: if you make it static, every new length compiles again. In rms, pad with np.pad (or np.zeros + assignment) to bucket_size(len(x)), then call padded_rms(padded, len(x))."
# ---

# %% [markdown]
# # Exercise 01 · Shapes
#
# A data pipeline hands you 1-D float32 arrays of any length from 1 to 1,000, and you need
# the root mean square of each: `sqrt(mean(x**2))`. Jitting the obvious function compiles
# once per distinct length. Make it compile **at most once per bucket**:
#
# 1. `bucket_size(n)`: the padded length for an array of length `n`: at least `n`, and
#    wasting less than half (powers of two are the classic choice; anything up to 16 is
#    fine for tiny `n`).
# 2. `padded_rms(padded, n)`: jitted; `padded` has a bucket's length, only the first `n`
#    values are real, and whatever lies past `n` must not change the answer.
# 3. `rms(x)`: pads `x` to its bucket and calls `padded_rms`.
#
# The grader draws fresh lengths and data, compares with a NumPy reference, and counts
# compilations of `padded_rms` with `jitlab.count_compiles`.
# Run `jitlab check 01` for a verdict, `jitlab hint 01` for a hint.

# %%
import jax
import jax.numpy as jnp
import numpy as np


# %%
def bucket_size(n: int) -> int:
    raise NotImplementedError


@jax.jit
def padded_rms(padded: jax.Array, n: jax.Array) -> jax.Array:
    raise NotImplementedError


def rms(x: np.ndarray) -> jax.Array:
    raise NotImplementedError


# %% tags=["grader"]
from jitlab.graders import shapes

shapes.grade(bucket_size, padded_rms, rms)
