# ---
# jupyter:
#   jitlab:
#     hints:
#     - Build BlockConfig('tanh', True, True, 1e-3) twice and compare the two with ==.
#       An ordinary class says False, so jax.jit treats every new instance as a new
#       static value and compiles again. What would make two instances with the same
#       fields equal, and hash alike?
#     - Everything block reads from cfg is baked into the compiled program, so all four
#       fields must take part in == and hash, and a config must not change after it
#       is used. The standard library has a decorator that writes __eq__ and __hash__
#       over every field and refuses assignment.
#     - '@dataclasses.dataclass compares instances field by field. With frozen=True
#       it also writes a matching __hash__ and refuses assignment; without it, the class
#       gets no hash at all and jax.jit raises ValueError.'
#     - In make_forward, only cfg decides the program's structure. params and x are
#       arrays, and temperature changes on every call, so they stay traced. Return jax.jit(block,
#       static_argnames=...) with cfg alone.
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
# BEGIN SOLUTION (no stub)
import dataclasses


# frozen=True does three jobs at once. @dataclass writes __eq__ over every field, frozen
# adds a __hash__ over the same fields (a mutable dataclass gets __hash__ = None), and
# assignment after construction raises FrozenInstanceError. Equal configs then share one
# executable, a change in any field compiles its own, and a config used as a cache key
# can never be changed under it. Build variants with dataclasses.replace(cfg, eps=...).
@dataclasses.dataclass(frozen=True)
# END SOLUTION
class BlockConfig:
    """activation: str, residual: bool, layer_norm: bool, eps: float.

    Equal by value, hashable by value, and immutable.
    """

    # BEGIN SOLUTION (no stub)
    activation: str
    residual: bool
    layer_norm: bool
    eps: float
    # END SOLUTION
    # STUB: def __init__(self, activation, residual, layer_norm, eps):
    # STUB:     raise NotImplementedError


def make_forward():
    """Return `block` wrapped by jax.jit, with the right arguments static."""
    # BEGIN SOLUTION
    # Only cfg shapes the program: its fields drive Python `if`s and a dict lookup.
    # params and x are arrays. temperature changes on every call, so it stays traced
    # (a Python float arrives as a weakly typed float32 scalar), and one executable
    # serves them all.
    return jax.jit(block, static_argnames="cfg")
    # END SOLUTION


# %% [markdown]
# Try it before you ask the grader. Build a config twice, compare the two, then call
# `make_forward()(params, x, cfg, 1.0)` inside `jitlab.count_compiles`.

# %% tags=["grader"]
from jitlab.graders import static_arguments

static_arguments.grade(BlockConfig, make_forward)
