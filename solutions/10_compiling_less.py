# ---
# jupyter:
#   jitlab:
#     hints:
#     - 'warm_up needs no data at all: jax.ShapeDtypeStruct((size,), dtype) describes
#       a padded request, and jax.ShapeDtypeStruct((), jnp.int32) describes n. What
#       does jax.jit(fn).lower(...) do with them, and what does .compile() hand back?'
#     - In serve, the bucket of a request is the smallest key of `compiled` that is
#       at least len(x). The grader's bucket sizes are not powers of two and do not
#       arrive sorted, so read them from the dict and take the smallest that fits.
#     - 'Pad in NumPy, in the request''s own dtype: np.zeros(size, dtype=x.dtype), then
#       copy x into the front. np.zeros(size) is float64, and jnp.zeros or jnp.pad compile
#       a small program for every new length.'
#     title: A server that compiles at start-up and never again
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
# # Exercise 10 · A server that compiles at start-up and never again
#
# A scoring service receives 1-D requests of any length up to its largest bucket, and
# answers each with `summarise(padded, n)`: the mean, standard deviation and maximum of
# the request's `n` real values. A compilation in the middle of serving is a request that
# waits. Move every compilation to start-up:
#
# 1. `warm_up(fn, bucket_sizes, dtype)`: return a dict `{size: executable}` with one
#    `jax.stages.Compiled` of `fn` per bucket size, for a padded request `dtype[size]`
#    and a length `n` given as an `int32` scalar. `fn` is a plain Python function with
#    `summarise`'s signature; no real request exists yet. The sizes may come in any
#    order.
# 2. `serve(requests, compiled)`: for each request (a NumPy array), pick the
#    **smallest** bucket that holds it (a request as long as a bucket fits in it), pad
#    it to that size without changing the caller's array, call that bucket's executable
#    with the padded array and the real length, and return the list of what the
#    executables returned (as they are, or as NumPy arrays), one result per request, in
#    request order. The caller may refill the same arrays with new values and call
#    `serve` again.
#
# Solved means: the right numbers, one compilation per bucket inside `warm_up`, and
# **zero** traces and compilations of anything inside `serve`.
#
# The grader calls `warm_up` with a function of its own (it computes what `summarise`
# does, then scales and shifts the result by numbers drawn for each run, so only the
# executables can produce its answers), fresh bucket sizes and a dtype (float32, then
# float16, then float32 again with a new function on the first round's sizes and
# requests), and counts what `serve` compiles with `jitlab.count_compiles(None)`. Run
# `jitlab check compiling_less` for a verdict, `jitlab hint compiling_less` for a hint.

# %%
import jax
import jax.numpy as jnp
import numpy as np


def summarise(padded, n):
    """[mean, std, max] of the first n values of `padded`, in float32.

    The rest of `padded` is padding.
    """
    valid = jnp.arange(padded.shape[0]) < n
    x = jnp.where(valid, padded.astype(jnp.float32), 0.0)
    count = jnp.asarray(n, jnp.float32)
    mean = jnp.sum(x) / count
    var = jnp.sum(jnp.where(valid, (x - mean) ** 2, 0.0)) / count
    peak = jnp.max(jnp.where(valid, x, -jnp.inf))
    return jnp.stack([mean, jnp.sqrt(var), peak])


# One request of 3 values, padded by hand to a bucket of 8 (the 9s are padding):
example = np.array([1.0, 2.0, 4.0, 9, 9, 9, 9, 9], dtype=np.float32)
print(jax.jit(summarise)(example, 3))  # mean, std and max of 1, 2, 4


# %%
def warm_up(fn, bucket_sizes, dtype):
    # BEGIN SOLUTION
    # Shapes and dtypes are all that tracing looks at, so no data is needed: describe
    # a padded request and the length, trace and lower once per bucket, and let XLA
    # compile.
    jitted = jax.jit(fn)
    length = jax.ShapeDtypeStruct((), jnp.int32)
    return {
        size: jitted.lower(jax.ShapeDtypeStruct((size,), dtype), length).compile()
        for size in bucket_sizes
    }
    # END SOLUTION


def serve(requests, compiled):
    # BEGIN SOLUTION
    sizes = sorted(compiled)
    results = []
    for x in requests:
        n = len(x)
        size = next(s for s in sizes if s >= n)  # the smallest bucket that holds x
        # Pad in NumPy, in the request's own dtype: NumPy compiles nothing, and the
        # executable accepts exactly dtype[size] (anything else is a TypeError).
        padded = np.zeros(size, dtype=x.dtype)
        padded[:n] = x
        results.append(compiled[size](padded, np.int32(n)))
    return results
    # END SOLUTION


# %% tags=["grader"]
from jitlab.graders import compiling_less

compiling_less.grade(warm_up, serve)
