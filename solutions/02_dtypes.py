# ---
# jupyter:
#   jitlab:
#     hints:
#     - 'Run the cell that prints what the loader yields: six dtypes arrive. Which of
#       them reach the cache as the same key (see the table in lesson 02), and how many
#       compilations does that make if score passes the batches through untouched?'
#     - The cache lookup uses the dtype a batch has when it reaches score_core; anything
#       score_core does to it afterwards (x.astype, for instance) is too late. The conversion
#       belongs in score, before the call.
#     - Pick one float dtype for every batch. An integer dtype truncates the float batches,
#       and float16 keeps only about three significant digits; float32 keeps the numbers
#       right.
#     - In score, convert with jnp.asarray(batch, dtype=...) and pass the result on
#       to score_core. In score_core, x.mean(axis=0) and x.std(axis=0) give each column's
#       statistics.
#     title: Score batches of any dtype with one compilation
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
# # Exercise 02 · Score batches of any dtype with one compilation
#
# A data loader hands you batches of sensor readings, always of shape `(rows, cols)`, but
# in whatever dtype each source stores: float64 from a CSV read by pandas, float32 from a
# feature cache, int32 and int64 counters, uint8 pixel intensities, int16 raw readings.
# For every batch you need one score per row:
#
# 1. standardise each column by the batch's own mean and standard deviation
#    (`(x - mean) / std`, population standard deviation, as `jnp.std` computes it);
# 2. return `z @ weights`, where `weights` is a float32 vector of length `cols`.
#
# Write two functions:
#
# - `score_core(x, weights)`: jitted; does the arithmetic above.
# - `score(batch, weights)`: a plain Python function (not jitted), the one the loader
#   calls with raw batches; it prepares `batch`, calls `score_core` (by that name) and
#   returns its result. It must not change `batch` or `weights`, nor remember anything
#   between calls: a loader may hand over a new batch in an array it has used before,
#   or the same readings again with other weights.
#
# Solved means: the numbers match a float64 NumPy reference to float32 accuracy for every
# source dtype, **and** `score_core` compiles **once** for a whole pass of the loader.
# The grader draws fresh batches every run, each with weights of its own, checks that
# every call of `score` calls `score_core` itself, empties `score_core`'s
# cache, and counts its compilations with `jitlab.count_compiles`.
# Run `jitlab check dtypes` for a verdict, `jitlab hint dtypes` for a hint.

# %%
import jax
import jax.numpy as jnp  # noqa: F401 (you will need it)
import numpy as np


def loader(rng, n_batches=12, shape=(32, 6)):
    """Batches of one shape in the dtypes of six different sources."""
    sources = [np.float64, np.float32, np.int32, np.int64, np.uint8, np.int16]
    for i in range(n_batches):
        dtype = sources[i % len(sources)]
        if np.dtype(dtype).kind == "f":
            values = rng.normal(50.0, 12.0, size=shape)
        else:
            values = rng.integers(0, 200, size=shape)
        yield values.astype(dtype)


# %%
# What the loader yields (run this: no code of yours is needed yet).
for batch in loader(np.random.default_rng(0), n_batches=6):
    print(batch.shape, batch.dtype)


# %%
@jax.jit
def score_core(x: jax.Array, weights: jax.Array) -> jax.Array:
    # BEGIN SOLUTION
    # x is always float32 here (score sees to that), so this traces and compiles once.
    z = (x - x.mean(axis=0)) / x.std(axis=0)
    return z @ weights
    # END SOLUTION


def score(batch: np.ndarray, weights: jax.Array) -> jax.Array:
    # BEGIN SOLUTION
    # The boundary: whatever dtype the loader produced, decide it here, once, before
    # the jitted call. The cache lookup uses the argument's dtype after JAX
    # canonicalises it (float64 is float32 by then, int64 int32) but before the body
    # runs, so a cast inside score_core would come too late. float32 keeps the float
    # batches' digits (an integer cast would truncate them) and holds every integer up
    # to 2**24.
    # From NumPy, jnp.asarray converts on the host and compiles nothing.
    x = jnp.asarray(batch, jnp.float32)
    return score_core(x, weights)
    # END SOLUTION


# %% tags=["grader"]
from jitlab.graders import dtypes

dtypes.grade(score, score_core)
