# ---
# jupyter:
#   jitlab:
#     hints:
#     - 'For every function that gets jitted in slow_fit, ask: is it the same object
#       as on the previous batch? A lambda, a functools.partial or jax.value_and_grad(...)
#       built inside the loop never is.'
#     - Do the whole step (loss, gradient, update) in one function defined once at top
#       level and decorated with @jax.jit. Everything that changes between calls (params,
#       x, y, weight_decay) comes in as an argument.
#     - 'Keep weight_decay an ordinary traced argument: in static_argnames it would
#       compile once per value. Inside sgd_step, jax.value_and_grad(loss) differentiates
#       with respect to the first argument (params) only.'
#     title: A weight-decay sweep whose training loop compiles once
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
# # Exercise 07 · A weight-decay sweep whose training loop compiles once
#
# You inherit a hyperparameter sweep: a small linear model `x @ w + b`, trained with
# plain SGD on a mean-squared-error loss with an L2 penalty, once per weight-decay value.
# The numbers are right, but `slow_fit` (below) builds a new function for every batch,
# so `jax.jit` traces and compiles on every batch of every run.
#
# Write two functions:
#
# 1. `sgd_step(params, x, y, weight_decay)`: jitted, defined once. It returns
#    `(new_params, loss_value)`, where `loss_value` is `loss(params, x, y, weight_decay)`
#    at the params it was given and `new_params = params - LEARNING_RATE * gradient`
#    (same dict structure, keys `"w"` and `"b"`).
# 2. `fit(params, batches, weight_decay)`: the same results as `slow_fit`, namely the
#    final params and a 1-D array with one loss per batch, computed by calling your
#    `sgd_step` once per batch: in a Python loop, or in the body of a `lax.scan` over
#    the stacked batches (the grader watches those calls: a loop that never calls
#    `sgd_step` fails, and so does a loop that calls it and then computes its results
#    some other way; a scan traces `sgd_step` once, so its results are checked by their
#    numbers alone, and the checks of a loop's calls are left out). A
#    scan's body is traced when the scan compiles, so define it once, at top level: a
#    body defined inside `fit` is a new function on every fit, and the scan compiles
#    again on every fit, which is what you are removing. `fit` must leave the caller's
#    `params` and `batches` as they were.
#
# Solved means: the numbers match a reference on fresh random data and fresh
# weight-decay values, `sgd_step` does not compile again when only `weight_decay`
# changes, and once `fit` has run, further fits with new data and new weight-decay
# values (same shapes) compile **nothing**. The grader counts every function JAX
# compiles, so renaming a lambda does not hide it. It hands `fit` its batches as NumPy
# float32 arrays at every fit, as a data loader would, and like a loader it may refill
# the same arrays with new data between fits.
#
# Run `jitlab check functions_as_arguments` for a verdict,
# `jitlab hint functions_as_arguments` for a hint.

# %%
import jax
import jax.numpy as jnp
import jitlab
import numpy as np

LEARNING_RATE = 0.1


def loss(params, x, y, weight_decay):
    """Mean squared error of a linear model, plus an L2 penalty on the weights."""
    prediction = x @ params["w"] + params["b"]
    return jnp.mean((prediction - y) ** 2) + weight_decay * jnp.sum(params["w"] ** 2)


def slow_fit(params, batches, weight_decay):
    """The code you inherited: right numbers, one compilation per batch."""
    losses = []
    for x, y in batches:
        # A new lambda, so a new jax.value_and_grad(...) and a new jax.jit, per batch.
        objective = jax.value_and_grad(
            lambda p: loss(p, x, y, weight_decay)  # noqa: B023
        )
        value, grads = jax.jit(objective)(params)
        params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
        losses.append(value)
    return params, jnp.stack(losses)


# Some data to try things on: 8 batches of 32 examples with 4 features.
rng = np.random.default_rng(0)
true_w = np.array([1.5, -2.0, 0.5, 0.0], dtype=np.float32)
batches = []
for _ in range(8):
    x = rng.normal(size=(32, 4)).astype(np.float32)
    y = x @ true_w + 0.3 + 0.1 * rng.normal(size=32).astype(np.float32)
    batches.append((jnp.asarray(x), jnp.asarray(y)))
initial = {"w": jnp.zeros(4, dtype=jnp.float32), "b": jnp.float32(0.0)}

# %% [markdown]
# How bad is it? `slow_fit` for one weight-decay value, counted. The jitted function is
# a new `lambda` on every batch, so JAX reports it as `<lambda>`.

# %%
with jitlab.count_compiles("<lambda>") as slow:
    slow_params, slow_losses = slow_fit(initial, batches, 1e-3)
print(slow)
print(slow.explanations[-1])
print("losses:", np.round(np.asarray(slow_losses), 3))

# %% [markdown]
# Your turn. Keep `loss` as it is; write `sgd_step` and `fit`.


# %%
# BEGIN SOLUTION (no stub)
@jax.jit  # wraps a function defined once: one cache for the whole program
# END SOLUTION
def sgd_step(params, x, y, weight_decay):
    # BEGIN SOLUTION
    # weight_decay stays a traced argument, so a new value is new data, not a new
    # program. value_and_grad differentiates with respect to the first argument.
    value, grads = jax.value_and_grad(loss)(params, x, y, weight_decay)
    # This lambda is built while tracing, once per compilation, not once per call:
    # inside a jitted function a lambda costs nothing extra.
    new_params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return new_params, value
    # END SOLUTION


def fit(params, batches, weight_decay):
    # BEGIN SOLUTION
    # A plain Python loop around the same jitted object: the first batch compiles,
    # every later batch, and every later weight_decay, reuses that executable.
    losses = []
    for x, y in batches:
        params, value = sgd_step(params, x, y, weight_decay)
        losses.append(value)
    return params, jnp.stack(losses)
    # END SOLUTION


# %% tags=["grader"]
from jitlab.graders import functions_as_arguments

functions_as_arguments.grade(sgd_step, fit)
