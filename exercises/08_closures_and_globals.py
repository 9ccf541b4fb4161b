# ---
# jupyter:
#   jitlab:
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
# Stuck? Run `jitlab hint 08` in a terminal for the next hint, mildest first;
# the hints are not in this file.
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
def confident_probs(logits, temperature, threshold):
    """Top-class probability of each row of ``logits / temperature``, or 0.0 where it is
    below ``threshold``. Jitted; one compilation for all temperatures and thresholds."""
    raise NotImplementedError


# %% tags=["grader"]
from jitlab.graders import closures_and_globals

closures_and_globals.grade(confident_probs)
