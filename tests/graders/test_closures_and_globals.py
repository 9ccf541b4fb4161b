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


G = closures_and_globals
JIT_ON = "jit is on and the compile counter hears JAX"


def failure(fn) -> GradingFailure:
    with pytest.raises(GradingFailure) as caught:
        G.grade(fn)
    return caught.value


def good():
    @jax.jit
    def confident_probs(logits, temperature, threshold):
        return _score(logits, temperature, threshold)

    return confident_probs


# --- right answers ----------------------------------------------------------------------


def test_reference_solution_passes(capsys):
    G.grade(good())
    assert "All checks passed" in capsys.readouterr().out


def test_another_correct_answer_passes():
    """By hand: a stable log-sum-exp, the top logit's probability, a multiply by a mask."""

    @jax.jit
    def confident_probs(logits, temperature, threshold):
        z = logits / temperature
        top = jnp.exp(z.max(axis=-1) - jax.scipy.special.logsumexp(z, axis=-1))
        return top * (top >= threshold)

    G.grade(confident_probs)


def test_passes_twice_with_one_function():
    fn = good()
    G.grade(fn)
    G.grade(fn)  # the grader empties the cache: a warm function is counted from zero


# --- wrong answers ----------------------------------------------------------------------


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
        found = failure(confident_probs)
    finally:
        TEMPERATURE, THRESHOLD = 1.0, 0.5  # restore the module's globals
    assert found.check == G.USES_VALUES
    assert "call 2 returned the result for temperature" in found.seen
    assert "(call 1's)" in found.seen and "stale result" in found.seen
    assert "global" in found.hint and "mask" not in found.hint


def test_rejects_jitted_function_that_still_reads_the_globals():
    @jax.jit
    def confident_probs(logits, temperature, threshold):
        return _score(logits, TEMPERATURE, THRESHOLD)  # arguments ignored

    found = failure(confident_probs)
    assert found.check == G.USES_VALUES
    assert "the module's TEMPERATURE" in found.seen
    assert "the module's THRESHOLD" in found.seen
    assert "arguments" in found.hint


def test_names_the_one_argument_that_was_ignored():
    @jax.jit
    def confident_probs(logits, temperature, threshold):
        return _score(logits, temperature, THRESHOLD)  # the threshold argument ignored

    found = failure(confident_probs)
    assert found.check == G.USES_VALUES
    assert "threshold 0.5000 (the module's THRESHOLD)" in found.seen
    assert "temperature" not in found.seen.split("returned the result for")[1]


def test_rejects_static_float_settings():
    @partial(jax.jit, static_argnames=("temperature", "threshold"))
    def confident_probs(logits, temperature, threshold):
        return _score(logits, temperature, threshold)

    found = failure(confident_probs)
    assert found.check == G.ONCE
    assert found.seen.startswith(f"{G.CHANGES} compilation(s)")
    assert "a new temperature and threshold alone compiled again" in found.seen


def test_rejects_static_threshold_only_and_names_it():
    @partial(jax.jit, static_argnums=2)
    def confident_probs(logits, temperature, threshold):
        return _score(logits, temperature, threshold)

    found = failure(confident_probs)
    assert found.check == G.ONCE
    assert "a new threshold alone compiled again" in found.seen
    assert found.hint.startswith("threshold changes on every call")


def test_rejects_a_rounded_temperature():
    """Rounding the temperature to one decimal 'to save compilations' shows in the numbers:
    one setting is always within 2% of the one before it."""

    @jax.jit
    def confident_probs(logits, temperature, threshold):
        return _score(logits, jnp.round(temperature, 1), threshold)

    assert failure(confident_probs).check == G.USES_VALUES


def test_rejects_work_outside_jit():
    def confident_probs(logits, temperature, threshold):
        z = logits / temperature
        probs = np.exp(z - z.max(axis=-1, keepdims=True))
        top = (probs / probs.sum(axis=-1, keepdims=True)).max(axis=-1)
        return np.where(top >= threshold, top, 0.0)

    assert failure(confident_probs).check == G.JITTED


def test_rejects_wrapper_around_a_jitted_helper():
    @jax.jit
    def scored(scaled_logits, threshold):
        return _score(scaled_logits, 1.0, threshold)

    def confident_probs(logits, temperature, threshold):
        return scored(logits / temperature, threshold)  # the division runs outside jit

    assert failure(confident_probs).check == G.JITTED


def test_rejects_numpy_with_a_decoy_jitted_call():
    decoy = good()

    def confident_probs(logits, temperature, threshold):
        decoy(logits, 1.0, 0.5)
        return G._reference(np.asarray(logits), temperature, threshold)

    assert failure(confident_probs).check == G.JITTED


def test_rejects_numpy_through_a_host_callback():
    @jax.jit
    def confident_probs(logits, temperature, threshold):
        def numpy_score(lg, t, thr):
            return G._reference(np.asarray(lg), float(t), float(thr)).astype(np.float32)

        shape = jax.ShapeDtypeStruct(logits.shape[:1], jnp.float32)
        return jax.pure_callback(numpy_score, shape, logits, temperature, threshold)

    found = failure(confident_probs)
    assert found.check == G.INSIDE
    assert "pure_callback" in found.seen


def test_rejects_ignored_threshold():
    @jax.jit
    def confident_probs(logits, temperature, threshold):
        return jax.nn.softmax(logits / temperature, axis=-1).max(axis=-1)

    assert failure(confident_probs).check == G.USES_VALUES


def test_rejects_jit_switched_off_around_the_learners_call():
    inner = good()

    def confident_probs(logits, temperature, threshold):
        with jax.disable_jit():
            return inner(logits, temperature, threshold)

    assert failure(confident_probs).check == G.JITTED


# --- the drawn settings -----------------------------------------------------------------


def test_settings_are_fresh_and_distinct():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(50, 5)).astype(np.float32)
    settings = G._draw_settings(rng, logits)
    temperatures = [t for t, _ in settings]
    assert len(settings) == G.CHANGES
    assert len(set(temperatures)) == len(temperatures)
    near = temperatures[G.NEAR] / temperatures[G.NEAR - 1]
    assert 0.97 < near < 1.03 and near != 1.0  # one temperature within 2% of the last
    for temperature, threshold in settings:
        top = G._reference(logits, temperature, 0.0)
        assert np.min(np.abs(top - threshold)) > G.MARGIN
        assert 0 < np.count_nonzero(top >= threshold) < len(top)
