# ---
# jupyter:
#   jitlab:
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
# Stuck? Run `jitlab hint 10` in a terminal for the next hint, mildest first;
# the hints are not in this file.
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
    raise NotImplementedError


def serve(requests, compiled):
    raise NotImplementedError


# %% tags=["grader"]
from jitlab.graders import compiling_less

compiling_less.grade(warm_up, serve)
