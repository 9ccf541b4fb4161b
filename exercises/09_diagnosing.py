# ---
# jupyter:
#   jitlab:
#     title: A training step that compiles twice, and nobody knows why
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
# # Exercise 09 · A training step that compiles twice, and nobody knows why
#
# Stuck? Run `jitlab hint 09` in a terminal for the next hint, mildest first;
# the hints are not in this file.
#
# A colleague's training loop for a small linear model pauses once, a few steps in, and
# `sgd_step` turns out to compile **twice** in a run of 20 steps. Every batch has the
# same shapes and dtypes. The schedule and the loader are from a library you cannot
# change; `sgd_step` is theirs too.
#
# 1. Find out *why* it compiles twice, with the tools of lesson 09. Do not guess: the
#    reason is not in `sgd_step`.
# 2. Write `prepare_batch(batch, lr)`, the boundary between the library and the jitted
#    step: it returns the pair `(batch, lr)` (a tuple or a list) ready for the step, so
#    that the step compiles **once** for the whole run and the weights come out
#    **exactly as before**.
# 3. Leave `fixed_step = sgd_step` unless your fix needs a different jitted step.
#
# The grader draws a fresh schedule, fresh batches and a fresh starting point for the
# weights. It calls `fixed_step(w, *prepare_batch(batch, lr))` itself at every step,
# compares every step's weights and update with a reference (so the learning rate's
# value must be kept), and counts compilations of `fixed_step` from a cleared cache: at
# most one for the whole run, with jit switched on.
# Run `jitlab check diagnosing` for a verdict, `jitlab hint diagnosing` for a hint.

# %%
import jax
import jax.numpy as jnp
import jitlab
import numpy as np

# --- the library: do not edit ------------------------------------------------------
BASE_LR = 0.05
WARMUP = 4
MIN_LR = 0.001
STEPS = 20
TRUE_W = np.array([0.5, -1.0, 2.0, 0.25], dtype=np.float32)


def learning_rate(step, total):
    """Linear warm-up, then cosine decay, never below MIN_LR."""
    if step < WARMUP:
        return BASE_LR * (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, total - WARMUP)
    return max(MIN_LR, BASE_LR * 0.5 * (1.0 + np.cos(np.pi * progress)))


def load_batch(rng, size=32):
    """One batch of a noisy linear problem, as float32 NumPy arrays."""
    x = rng.normal(size=(size, 4)).astype(np.float32)
    y = (x @ TRUE_W + 0.1 * rng.normal(size=size)).astype(np.float32)
    return {"x": x, "y": y}


# --- their step and driver ---------------------------------------------------------
@jax.jit
def sgd_step(w, batch, lr):
    def loss(w):
        return jnp.mean((batch["x"] @ w - batch["y"]) ** 2)

    return w - lr * jax.grad(loss)(w)


def train(step_fn, prepare, rng, total=STEPS):
    w = jnp.zeros(4, jnp.float32)
    for step in range(total):
        batch, lr = prepare(load_batch(rng), learning_rate(step, total))
        w = step_fn(w, batch, lr)
    return w


def unchanged(batch, lr):
    return batch, lr


# %% [markdown]
# The symptom, measured: one run of the driver as it is today.

# %%
with jitlab.count_compiles(sgd_step) as n:
    w = train(sgd_step, unchanged, np.random.default_rng(0))
print(n)
print("weights:", np.round(np.asarray(w), 3))
assert n.compiles == 2

# %% [markdown]
# Your turn. Diagnose first (add cells as you like), then fix.


# %%
def prepare_batch(batch, lr):
    """Return (batch, lr), ready for the jitted step: one compilation for the run."""
    raise NotImplementedError


fixed_step = sgd_step  # change only if your fix needs a different jitted step

# %% tags=["grader"]
from jitlab.graders import diagnosing

diagnosing.grade(prepare_batch, fixed_step)
