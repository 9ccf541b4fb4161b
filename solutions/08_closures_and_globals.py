# ---
# jupyter:
#   jitlab:
#     hints:
#     - 'Set TEMPERATURE = 3.0, then print `confident_probs_global.trace(demo).jaxpr`
#       and look for the temperature: the program still divides by the literal 1.0.
#       JAX read the global once, while tracing, and will not read it again.'
#     - 'Every value that may change between calls has to come in through the argument
#       list; then JAX sees the current value on every call. The grader passes `temperature`
#       and `threshold` to your function explicitly: use them, not the module-level
#       names.'
#     - Leave temperature and threshold as ordinary, traced arguments. Marking a float
#       static makes it part of the cache key, so each new value compiles a new program,
#       and the grader changes both on every call.
#     - 'Inside the jitted function the threshold is a tracer, so a Python `if` on it
#       fails: choose per row with jnp.where.'
#     title: A confidence score whose temperature and threshold change between calls
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
# # Exercise 08 · A confidence score whose temperature and threshold change between calls
#
# A classifier's logits are turned into a *calibrated confidence*: divide the logits by a
# temperature, take the softmax over classes, and keep each row's largest probability.
# Rows whose confidence is below a threshold abstain and score `0.0`. A calibration loop
# elsewhere in the program keeps adjusting the temperature and the threshold.
#
# The code you inherited (next cells) reads both from module-level globals inside a jitted
# function. The demo shows what happens when the calibration loop changes one of them:
# nothing. The result is silently stale.
#
# Write `confident_probs(logits, temperature, threshold)` so that:
#
# 1. it returns, for each row, the top softmax probability of `logits / temperature`, or
#    `0.0` where that probability is below `threshold`;
# 2. every call uses the `temperature` and `threshold` it was given, however often they
#    change, and however small the temperature (down to 1e-7: no floor, clip or eps);
# 3. it is itself jitted (the softmax and the threshold computed inside the compiled
#    program), and compiles **once** for any number of temperatures and thresholds at
#    a given shape of `logits`.
#
# The grader draws fresh logits of a fresh shape, calls your function 8 times with a new
# temperature and threshold each time, compares every result with a NumPy reference, and
# counts compilations with `jitlab.count_compiles`.
# Run `jitlab check closures_and_globals` for a verdict, `jitlab hint closures_and_globals`
# for a hint.

# %%
import jax
import jax.numpy as jnp
import numpy as np

# %% [markdown]
# The inherited code. Do not fix this one; write the new function below.

# %%
TEMPERATURE = 1.0  # adjusted by the calibration loop
THRESHOLD = 0.5  # rows less confident than this abstain (score 0.0)


@jax.jit
def confident_probs_global(logits):
    probs = jax.nn.softmax(logits / TEMPERATURE, axis=-1)
    top = probs.max(axis=-1)
    return jnp.where(top >= THRESHOLD, top, 0.0)


demo = np.random.default_rng(8).normal(scale=2.0, size=(5, 4)).astype(np.float32)
before = confident_probs_global(demo)
TEMPERATURE = 3.0  # the calibration loop softens the scores...
after = confident_probs_global(demo)
print("TEMPERATURE = 1:", before)
print("TEMPERATURE = 3:", after)
print(
    "identical, so the new temperature was never used:", np.array_equal(before, after)
)
assert np.array_equal(before, after)
TEMPERATURE = 1.0


# %% [markdown]
# Your turn: every value that changes between calls must be visible to JAX on every call.


# %%
# BEGIN SOLUTION (no stub)
@jax.jit
# END SOLUTION
def confident_probs(logits, temperature, threshold):
    """Top-class probability of each row of ``logits / temperature``, or 0.0 where it is
    below ``threshold``. Jitted; one compilation for all temperatures and thresholds."""
    # BEGIN SOLUTION
    # Both settings arrive as arguments, so they are traced: they are inputs of the
    # compiled program, read afresh on every call, instead of constants frozen into it
    # at trace time. Python floats trace as weakly typed float32 scalars, so every
    # temperature and threshold reuses the one program compiled for this logits shape.
    probs = jax.nn.softmax(logits / temperature, axis=-1)
    top = probs.max(axis=-1)
    # `threshold` is a tracer here: a Python `if top >= threshold` cannot decide per row
    # (nor at all, on a traced value). jnp.where keeps the choice inside the program.
    return jnp.where(top >= threshold, top, 0.0)
    # END SOLUTION


# %% tags=["grader"]
from jitlab.graders import closures_and_globals

closures_and_globals.grade(confident_probs)
