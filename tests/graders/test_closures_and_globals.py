"""The closures-and-globals grader passes the solution and rejects plausible wrong answers."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.graders import closures_and_globals
from jitlab.grading import GradingFailure

TEMPERATURE = 1.0
THRESHOLD = 0.5


def _score(logits, temperature, threshold):
    top = jax.nn.softmax(logits / temperature, axis=-1).max(axis=-1)
    return jnp.where(top >= threshold, top, 0.0)


def test_reference_solution_passes():
    @jax.jit
    def confident_probs(logits, temperature, threshold):
        return _score(logits, temperature, threshold)

    closures_and_globals.grade(confident_probs)


def test_rejects_unfinished_stub():
    def confident_probs(logits, temperature, threshold):
        raise NotImplementedError

    with pytest.raises(GradingFailure, match="not solved yet"):
        closures_and_globals.grade(confident_probs)


def test_rejects_stale_global_set_by_a_wrapper():
    global TEMPERATURE, THRESHOLD

    # Plausible: "update the setting, then call the jitted function that reads it".
    @jax.jit
    def scored_from_globals(logits):
        return _score(logits, TEMPERATURE, THRESHOLD)

    def confident_probs(logits, temperature, threshold):
        global TEMPERATURE, THRESHOLD
        TEMPERATURE, THRESHOLD = temperature, threshold
        return scored_from_globals(logits)

    try:
        with pytest.raises(GradingFailure, match="stale result"):
            closures_and_globals.grade(confident_probs)
    finally:
        TEMPERATURE, THRESHOLD = 1.0, 0.5  # restore the module's globals


def test_rejects_jitted_function_that_still_reads_the_globals():
    @jax.jit
    def confident_probs(logits, temperature, threshold):
        return _score(logits, TEMPERATURE, THRESHOLD)  # arguments ignored

    with pytest.raises(GradingFailure, match="arguments were ignored"):
        closures_and_globals.grade(confident_probs)


def test_rejects_static_float_settings():
    @partial(jax.jit, static_argnames=("temperature", "threshold"))
    def confident_probs(logits, temperature, threshold):
        return _score(logits, temperature, threshold)

    with pytest.raises(GradingFailure, match="one compilation") as failure:
        closures_and_globals.grade(confident_probs)
    assert "8 compilation(s)" in failure.value.seen


def test_rejects_static_threshold_only():
    @partial(jax.jit, static_argnums=2)
    def confident_probs(logits, temperature, threshold):
        return _score(logits, temperature, threshold)

    with pytest.raises(GradingFailure, match="one compilation"):
        closures_and_globals.grade(confident_probs)


def test_rejects_work_outside_jit():
    def confident_probs(logits, temperature, threshold):
        z = logits / temperature
        probs = np.exp(z - z.max(axis=-1, keepdims=True))
        top = (probs / probs.sum(axis=-1, keepdims=True)).max(axis=-1)
        return np.where(top >= threshold, top, 0.0)

    with pytest.raises(GradingFailure, match="itself jitted"):
        closures_and_globals.grade(confident_probs)


def test_rejects_wrapper_around_a_jitted_helper():
    @jax.jit
    def scored(scaled_logits, threshold):
        return _score(scaled_logits, 1.0, threshold)

    def confident_probs(logits, temperature, threshold):
        return scored(logits / temperature, threshold)  # the division runs outside jit

    with pytest.raises(GradingFailure, match="itself jitted"):
        closures_and_globals.grade(confident_probs)


def test_rejects_ignored_threshold():
    @jax.jit
    def confident_probs(logits, temperature, threshold):
        return jax.nn.softmax(logits / temperature, axis=-1).max(axis=-1)

    with pytest.raises(GradingFailure, match="uses the values passed in"):
        closures_and_globals.grade(confident_probs)


def test_settings_are_fresh_and_distinct():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(50, 5)).astype(np.float32)
    settings = closures_and_globals.draw_settings(rng, logits)
    temperatures = [t for t, _ in settings]
    assert len(settings) == closures_and_globals.CHANGES
    assert len(set(temperatures)) == len(temperatures)
    for temperature, threshold in settings:
        top = closures_and_globals.reference(logits, temperature, 0.0)
        assert np.min(np.abs(top - threshold)) > closures_and_globals.MARGIN
        assert 0 < np.count_nonzero(top >= threshold) < len(top)
