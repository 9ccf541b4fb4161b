# ---
# jupyter:
#   jitlab:
#     hints:
#     - 'Try jax.jit on the NumPy versions first and read the error: it names the argument
#       whose value the Python `if` or `while` needed. That value must stay traced,
#       so the decision has to move into the program.'
#     - 'Do not mark max_norm, lr or tol static: they change on every call, and each
#       new value would compile a new program (the grader counts).'
#     - 'clip_by_norm is a choice between two numbers: the factor max_norm / norm or
#       1.0. jnp.where(condition, a, b) picks one without Python ever seeing a bool.'
#     - descend needs lax.while_loop(cond_fun, body_fun, init). Carry the pair (x, steps)
#       with steps starting at jnp.int32(0); cond_fun returns (norm > tol) & (steps
#       < MAX_STEPS); body_fun takes one clipped step and adds 1 to steps.
#     title: Gradient clipping and early stopping, compiled once for every value
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
# # Exercise 05 · Gradient clipping and early stopping, compiled once for every value
#
# A training script has two helpers written for NumPy (below, in the setup cell):
#
# - `clip_by_norm_numpy(g, max_norm)`: if the gradient `g` is longer than `max_norm`,
#   scale it down to length `max_norm` (same direction); otherwise, a zero gradient
#   included, return it unchanged. `max_norm` is any number `>= 0`, zero included.
# - `descend_numpy(x0, curvature, lr, tol)`: gradient descent on the bowl
#   `0.5 * sum(curvature * x**2)` (its gradient is `curvature * x`), clipping every
#   gradient to norm `CLIP_NORM` before the step, until the gradient's norm is at most
#   `tol` or `MAX_STEPS` steps were taken. The rule is tested before every step, so a
#   start that already meets it takes 0 steps. It returns `(x, steps)`.
#
# Both decide with a Python `if` or `while` on a *value*, so `jax.jit` cannot trace them.
# Write `clip_by_norm` and `descend` as jitted functions that
#
# 1. return the same numbers as the NumPy versions (float32 is fine), and
# 2. compile **once** for every value of their arguments: the grader calls each with
#    fresh vectors and a different `max_norm`, `lr` and `tol` every time, all of the
#    same shapes, and counts compilations with `jitlab.count_compiles`;
# 3. make their decisions inside the compiled program (`jnp` and `lax` operations, no
#    callback into NumPy).
#
# Run `jitlab check control_flow` for a verdict, `jitlab hint control_flow` for a hint.

# %%
import jax
import jax.numpy as jnp  # noqa: F401 (for your solution)
import numpy as np
from jax import lax  # noqa: F401 (for your solution)

MAX_STEPS = 100
CLIP_NORM = 1.0


def clip_by_norm_numpy(g, max_norm):
    norm = np.linalg.norm(g)
    if norm > max_norm:
        return g * (max_norm / norm)
    return g


def descend_numpy(x0, curvature, lr, tol):
    x, steps = x0, 0
    while np.linalg.norm(curvature * x) > tol and steps < MAX_STEPS:
        x = x - lr * clip_by_norm_numpy(curvature * x, CLIP_NORM)
        steps += 1
    return x, steps


x0 = np.array([3.0, -2.0, 0.5], np.float32)
curvature = np.array([1.0, 0.5, 2.0], np.float32)
print(descend_numpy(x0, curvature, lr=0.5, tol=1e-2))

# %% [markdown]
# Your turn. Keep the signatures and replace each `raise NotImplementedError`. Try your
# functions on `x0` and `curvature` from the setup cell and compare with the NumPy
# versions before asking the grader.


# %%
@jax.jit
def clip_by_norm(g, max_norm):
    # BEGIN SOLUTION
    norm = jnp.linalg.norm(g)
    # The Python `if norm > max_norm` becomes a choice between two factors, made inside
    # the program. Both are computed; when norm is 0 the unused max_norm / norm is inf,
    # and jnp.where simply does not pick it.
    scale = jnp.where(norm > max_norm, max_norm / norm, 1.0)
    return g * scale
    # END SOLUTION


@jax.jit
def descend(x0, curvature, lr, tol):
    # BEGIN SOLUTION
    # The Python `while` becomes lax.while_loop: the stopping rule is read when the
    # compiled loop runs, so lr and tol stay traced and one program serves every value.
    def keep_going(state):
        x, steps = state
        return (jnp.linalg.norm(curvature * x) > tol) & (steps < MAX_STEPS)

    def step(state):
        x, steps = state
        # Calling the jitted clip_by_norm here inlines it into descend's program.
        return x - lr * clip_by_norm(curvature * x, CLIP_NORM), steps + 1

    # The carry's types must not change between iterations: steps starts as an int32
    # array, and x keeps x0's dtype.
    return lax.while_loop(keep_going, step, (x0, jnp.int32(0)))
    # END SOLUTION


# %% tags=["grader"]
from jitlab.graders import control_flow

control_flow.grade_clip(clip_by_norm)

# %% tags=["grader"]
from jitlab.graders import control_flow

control_flow.grade_descend(descend)
