# ---
# jupyter:
#   jitlab:
#     hints:
#     - 'slow_fit compiles on every call for two reasons. Ask of everything the jitted
#       step receives: is it the same object, or an equal value, as in the last run?
#       optax.sgd(learning_rate) is neither: each call builds a new pair of functions
#       with the rate inside them, and nnx.Optimizer keeps that pair in its GraphDef.'
#     - 'Build one Optax transformation at top level, with the learning rate in its
#       state: optax.inject_hyperparams(optax.sgd)(learning_rate=0.1). In init, set
#       opt_state.hyperparams[''learning_rate''] to jnp.asarray(learning_rate, jnp.float32),
#       an array, never a Python float.'
#     - In init, graphdef, params = nnx.split(model). In a @jax.jit train_step, write
#       a loss of params that rebuilds the model with nnx.merge(graphdef, params), take
#       jax.value_and_grad of it, then OPTIMIZER.update(grads, opt_state, params) and
#       optax.apply_updates.
#     title: A learning-rate sweep over re-created NNX models that compiles once
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
# # Exercise 13 · A learning-rate sweep over re-created NNX models that compiles once
#
# You inherit a sweep: a small Flax NNX regressor, trained with plain SGD on a
# mean-squared error, for several learning rates and several freshly initialised models
# of the same size. The numbers are right, but `slow_fit` (below) compiles its step on
# **every** call, for two of the reasons in lesson 13.
#
# Write three functions:
#
# 1. `init(model, learning_rate) -> (graphdef, params, opt_state)`. `params` and
#    `opt_state` must be **pytrees of arrays**: containers (dict, tuple, `nnx.State`,
#    a named tuple) with arrays (JAX or NumPy) at the leaves. Not the model, not an
#    `nnx.Optimizer`, not an Optax transformation, no Python numbers. The learning rate
#    goes into `opt_state`.
# 2. `train_step(graphdef, params, opt_state, x, y) -> (params, opt_state, loss)`: one
#    jitted SGD step, defined once. It rebuilds the model from `graphdef` and `params`
#    and calls it through `mse`; `loss` is `mse` at the params it was given, and the new
#    params are `params - learning_rate * gradient`.
# 3. `fit(model, learning_rate, batches) -> losses`: the same numbers as `slow_fit`, a
#    1-D array with one loss per batch, computed by calling `train_step` once per batch.
#    The sweep hands every `fit` the same list of batches: leave it as it is.
#
# Solved means: the losses match a reference on fresh data, fresh models and fresh
# learning rates; and after a first run, runs with re-created models of the same size
# and new learning rates compile **nothing**, counted over every function JAX compiles.
# The grader draws a new model size each time, so take everything from the model you
# are given. Its models also record where they run: the model must run inside a
# compiled program on every batch, and never outside one.
#
# Run `jitlab check frameworks` for a verdict, `jitlab hint frameworks` for a hint.

# %%
import jax
import jax.numpy as jnp
import jitlab
import numpy as np
import optax
from flax import nnx


class Regressor(nnx.Module):
    """Two dense layers, features -> hidden -> 1, with a ReLU between."""

    def __init__(self, features: int, hidden: int, *, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(features, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, 1, rngs=rngs)

    def __call__(self, x):
        return self.out(nnx.relu(self.hidden(x)))[:, 0]


def mse(model, x, y):
    return jnp.mean((model(x) - y) ** 2)


@nnx.jit
def nnx_step(model, optimizer, x, y):
    loss, grads = nnx.value_and_grad(mse)(model, x, y)
    optimizer.update(model, grads)
    return loss


def slow_fit(model, learning_rate, batches):
    """The code you inherited: right numbers, one compilation per call."""
    optimizer = nnx.Optimizer(model, optax.sgd(learning_rate), wrt=nnx.Param)
    return jnp.stack([nnx_step(model, optimizer, x, y) for x, y in batches])


# Some data to try things on: 6 batches of 32 examples with 4 features.
FEATURES, HIDDEN = 4, 16
rng = np.random.default_rng(0)
true_w = rng.normal(size=FEATURES)
batches = []
for _ in range(6):
    x = rng.normal(size=(32, FEATURES)).astype(np.float32)
    y = (np.tanh(x @ true_w) + 0.1 * rng.normal(size=32)).astype(np.float32)
    batches.append((jnp.asarray(x), jnp.asarray(y)))
LEARNING_RATES = (0.3, 0.1)
SEEDS = (0, 1)


def fresh_model(seed):
    """A newly initialised Regressor of the sweep's size."""
    return Regressor(FEATURES, HIDDEN, rngs=nnx.Rngs(seed))


# %% [markdown]
# How bad is it? The sweep with `slow_fit`, counted: two learning rates, two models.

# %%
with jitlab.count_compiles(nnx_step) as slow:
    slow_losses = {
        (lr, seed): slow_fit(fresh_model(seed), lr, batches)
        for lr in LEARNING_RATES
        for seed in SEEDS
    }
print(slow)
print("losses at lr=0.3, seed 0:", np.round(np.asarray(slow_losses[0.3, 0]), 3))

# %% [markdown]
# Your turn. Keep `Regressor` and `mse` as they are; write `init`, `train_step` and
# `fit`.

# %%
# BEGIN SOLUTION (no stub)
# One transformation for the whole sweep, built once: the learning rate is an array in
# its state, so a new rate is new data, not a new pair of functions.
OPTIMIZER = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
# END SOLUTION


def init(model, learning_rate):
    # BEGIN SOLUTION
    # graphdef: the structure, equal for every model of this size (static, no arrays).
    # params: an nnx.State whose leaves are the weights.
    graphdef, params = nnx.split(model)
    opt_state = OPTIMIZER.init(params)
    # A float32 array, like the one init made: a Python float would be weakly typed.
    opt_state.hyperparams["learning_rate"] = jnp.asarray(learning_rate, jnp.float32)
    return graphdef, params, opt_state
    # END SOLUTION


@jax.jit
def train_step(graphdef, params, opt_state, x, y):
    # BEGIN SOLUTION
    def loss_of(p):
        # merge runs while tracing: the model exists only inside the compiled program.
        return mse(nnx.merge(graphdef, p), x, y)

    loss, grads = jax.value_and_grad(loss_of)(params)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss
    # END SOLUTION


def fit(model, learning_rate, batches):
    # BEGIN SOLUTION
    graphdef, params, opt_state = init(model, learning_rate)
    losses = []
    for x, y in batches:
        params, opt_state, loss = train_step(graphdef, params, opt_state, x, y)
        losses.append(loss)
    return jnp.stack(losses)
    # END SOLUTION


# %% [markdown]
# Try it: the same sweep with your `fit`. After the first run, nothing should compile.

# %%
try:
    fit(fresh_model(7), 0.05, batches)  # the first run compiles
    with jitlab.count_compiles(jitlab.ANY_FUNCTION) as fast:
        fast_losses = {
            (lr, seed): fit(fresh_model(seed), lr, batches)
            for lr in LEARNING_RATES
            for seed in SEEDS
        }
except NotImplementedError:
    print("init, train_step and fit are not written yet")
else:
    print(fast)
    for key, losses in fast_losses.items():
        same = np.allclose(losses, slow_losses[key], rtol=1e-5)
        print(key, "same losses as slow_fit:", same)

# %% tags=["grader"]
from jitlab.graders import frameworks

frameworks.grade(init, train_step, fit)
