# ---
# jupyter:
#   jitlab:
#     title: A configuration class that compiles once per value
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
# # Exercise 06 · A configuration class that compiles once per value
#
# Stuck? Run `jitlab hint 06` in a terminal for the next hint, mildest first;
# the hints are not in this file.
#
# `block` below is one residual MLP block with an optional layer norm, followed by a
# temperature-scaled softmax. Its configuration (which activation, whether to add the
# residual, whether to normalise, the normaliser's `eps`) is read with Python `if`s and
# a dictionary lookup, so `cfg` has to be a **static** argument of `jax.jit`.
# `temperature` is different. A sampling loop changes it on every call.
#
# Write two things:
#
# 1. `BlockConfig(activation, residual, layer_norm, eps)`, a configuration class with
#    the fields `activation: str`, `residual: bool`, `layer_norm: bool` and `eps: float`,
#    built by position or by keyword, that works as a static argument:
#    - two configs built from the same values are **equal and hash alike**, so they share
#      one compiled program, however many times you build them;
#    - configs that differ in **any** field are unequal, however small the difference
#      (an `eps` that differs in its twelfth digit too), so none of them ever gets another
#      config's (stale) numbers;
#    - **no field** of a config can be changed or deleted after it is built.
# 2. `make_forward()`, which returns `block` wrapped by `jax.jit` with the right
#    arguments static (and only those). The caller passes the same `params` and `x`
#    again on later calls.
#
# Solved means the numbers match a NumPy reference for every config, **and** the compile
# counts are right. Fresh but equal configs compile once, a new temperature compiles
# nothing, and a changed config compiles exactly once. The grader draws fresh weights,
# inputs and `eps` values on every run and counts compilations with
# `jitlab.count_compiles`. Run `jitlab check static_arguments` for a verdict and
# `jitlab hint static_arguments` for a hint.

# %%
import jax
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {"relu": jax.nn.relu, "tanh": jnp.tanh, "softplus": jax.nn.softplus}


def block(params, x, cfg, temperature):
    """A residual MLP block, an optional layer norm, then softmax(h / temperature)."""
    h = ACTIVATIONS[cfg.activation](x @ params["w1"] + params["b1"])
    h = h @ params["w2"] + params["b2"]
    if cfg.residual:
        h = h + x
    if cfg.layer_norm:
        mean = h.mean(axis=-1, keepdims=True)
        var = h.var(axis=-1, keepdims=True)
        h = (h - mean) / jnp.sqrt(var + cfg.eps)
    return jax.nn.softmax(h / temperature, axis=-1)


# Weights and a batch to try your code on (the grader draws its own).
_rng = np.random.default_rng(0)
params = {
    "w1": jnp.asarray(_rng.normal(0.0, 0.5, size=(8, 24)), jnp.float32),
    "b1": jnp.zeros(24, jnp.float32),
    "w2": jnp.asarray(_rng.normal(0.0, 0.5, size=(24, 8)), jnp.float32),
    "b2": jnp.zeros(8, jnp.float32),
}
x = jnp.asarray(_rng.normal(size=(16, 8)), jnp.float32)
print({name: w.shape for name, w in params.items()}, x.shape)


# %%
class BlockConfig:
    """activation: str, residual: bool, layer_norm: bool, eps: float.

    Equal by value, hashable by value, and immutable.
    """

    def __init__(self, activation, residual, layer_norm, eps):
        raise NotImplementedError


def make_forward():
    """Return `block` wrapped by jax.jit, with the right arguments static."""
    raise NotImplementedError


# %% [markdown]
# Try it before you ask the grader. Build a config twice, compare the two, then call
# `make_forward()(params, x, cfg, 1.0)` inside `jitlab.count_compiles`.

# %% tags=["grader"]
from jitlab.graders import static_arguments

static_arguments.grade(BlockConfig, make_forward)
