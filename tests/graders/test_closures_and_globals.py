"""The closures-and-globals grader passes the solution and rejects plausible wrong answers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tables import fails, passes, rows

from jitlab.graders import closures_and_globals as G

TEMPERATURE = 1.0
THRESHOLD = 0.5


def _score(logits, temperature, threshold):
    top = jax.nn.softmax(logits / temperature, axis=-1).max(axis=-1)
    return jnp.where(top >= threshold, top, 0.0)


def good():
    @jax.jit
    def confident_probs(logits, temperature, threshold):
        return _score(logits, temperature, threshold)

    return confident_probs


# --- right answers ----------------------------------------------------------------------


def log_sum_exp(keep=jnp.greater_equal):
    """By hand: the top probability as exp(-logsumexp) of the shifted logits, a multiply by
    a mask. Under jit XLA rounds a big row's top to 1 +- 1e-6, not 1.0 (a held-out answer)."""

    @jax.jit
    def confident_probs(logits, temperature, threshold):
        z = logits / temperature
        top = jnp.exp(-jax.nn.logsumexp(z - z.max(axis=-1, keepdims=True), axis=-1))
        return top * keep(top, threshold)

    return confident_probs


def test_another_correct_answer_passes():
    passes(G.grade, log_sum_exp())


def test_a_right_answer_passes_twice():
    fn = good()
    passes(G.grade, fn)
    passes(G.grade, fn)  # the grader empties the cache: a warm function is counted from zero


# --- wrong answers ----------------------------------------------------------------------


def jitted(body, **options):
    return lambda: jax.jit(body, **options)


def stale_global_set_by_a_wrapper():
    # Plausible: "update the setting, then call the jitted function that reads it".
    @jax.jit
    def scored_from_globals(logits):
        return _score(logits, TEMPERATURE, THRESHOLD)

    def confident_probs(logits, temperature, threshold):
        global TEMPERATURE, THRESHOLD
        TEMPERATURE, THRESHOLD = temperature, threshold
        return scored_from_globals(logits)

    return confident_probs


def numpy_with_a_decoy():
    decoy = good()

    def confident_probs(logits, temperature, threshold):
        decoy(logits, 1.0, 0.5)
        return G._reference(np.asarray(logits), temperature, threshold)

    return confident_probs


def host_callback(logits, temperature, threshold):
    def numpy_score(lg, t, thr):
        return G._reference(np.asarray(lg), float(t), float(thr)).astype(np.float32)

    shape = jax.ShapeDtypeStruct(logits.shape[:1], jnp.float32)
    return jax.pure_callback(numpy_score, shape, logits, temperature, threshold)


def jit_off_around(logits, temperature, threshold):
    with jax.disable_jit():
        return good()(logits, temperature, threshold)


def unshifted_softmax(logits, temperature, threshold):
    e = jnp.exp(logits / temperature)  # overflows to inf past a logit of about 88 * T
    top = (e / e.sum(axis=-1, keepdims=True)).max(axis=-1)
    return jnp.where(top >= threshold, top, 0.0)


def shifted_by_the_global_max(logits, temperature, threshold):
    z = logits / temperature
    e = jnp.exp(z - z.max())  # the whole batch's max: far rows underflow to 0
    top = (e / e.sum(axis=-1, keepdims=True)).max(axis=-1)
    return jnp.where(top >= threshold, top, 0.0)


def over_rows(logits, temperature, threshold):
    top = jax.nn.softmax(logits / temperature, axis=0).max(axis=-1)
    return jnp.where(top >= threshold, top, 0.0)


def strictly_above(logits, temperature, threshold):
    top = jax.nn.softmax(logits / temperature, axis=-1).max(axis=-1)
    return jnp.where(top > threshold, top, 0.0)


def nudged_down(logits, temperature, threshold):
    top = jax.nn.softmax(logits / temperature, axis=-1).max(axis=-1)
    return jnp.where(top >= threshold - 1e-6, top, 0.0)  # "against rounding"


def wrapped_helper():
    scored = jax.jit(lambda scaled, threshold: _score(scaled, 1.0, threshold))
    return lambda logits, t, threshold: scored(logits / t, threshold)  # divides outside jit


def numpy_score(logits, temperature, threshold):
    z = logits / temperature
    probs = np.exp(z - z.max(axis=-1, keepdims=True))
    top = (probs / probs.sum(axis=-1, keepdims=True)).max(axis=-1)
    return np.where(top >= threshold, top, 0.0)


def reads_globals(logits, temperature, threshold):
    return _score(logits, TEMPERATURE, THRESHOLD)  # the arguments ignored


def reads_the_threshold_global(logits, temperature, threshold):
    return _score(logits, temperature, THRESHOLD)


def rounded(logits, temperature, threshold):
    return _score(logits, jnp.round(temperature, 1), threshold)


def no_threshold(logits, temperature, threshold):
    return jax.nn.softmax(logits / temperature, axis=-1).max(axis=-1)


def threshold_on_unscaled(logits, temperature, threshold):
    top = jax.nn.softmax(logits / temperature, axis=-1).max(axis=-1)
    unscaled = jax.nn.softmax(logits, axis=-1).max(axis=-1)  # the temperature forgotten here
    return jnp.where(unscaled >= threshold, top, 0.0)


def value_unscaled(logits, temperature, threshold):
    top = jax.nn.softmax(logits / temperature, axis=-1).max(axis=-1)
    unscaled = jax.nn.softmax(logits, axis=-1).max(axis=-1)
    return jnp.where(top >= threshold, unscaled, 0.0)


STATIC_BOTH = jitted(_score, static_argnames=("temperature", "threshold"))
USES, STALE = G.USES_VALUES, ["call 2 returned the result for temperature", "(call 1's)", "stale"]
# fmt: off
WRONG = {  # answer: (the check it fails, words in expected + seen, words in hint)
    "wrapper sets globals": (stale_global_set_by_a_wrapper, USES, STALE, ["global"]),
    "reads the globals": (jitted(reads_globals), USES,
                          ["the module's TEMPERATURE", "the module's THRESHOLD"], ["arguments"]),
    "ignores threshold only": (jitted(reads_the_threshold_global), USES,
                               ["threshold 0.5000 (the module's THRESHOLD)"], []),
    "static floats": (STATIC_BOTH, G.ONCE, [f"{G.CHANGES} compilation(s)",
                      "a new temperature and threshold alone compiled again"], []),
    "static threshold": (jitted(_score, static_argnums=2), G.ONCE,
                         ["a new threshold alone compiled again"], ["threshold changes on every"]),
    "rounded temperature": (jitted(rounded), USES, [], []),
    "numpy": (lambda: numpy_score, G.JITTED, [], []),
    "wrapped helper": (wrapped_helper, G.JITTED, [], []),
    "numpy + decoy": (numpy_with_a_decoy, G.JITTED, [], []),
    "host callback": (jitted(host_callback), G.INSIDE, ["pure_callback"], []),
    "ignored threshold": (jitted(no_threshold), USES, [], ["0.0 below it"]),
    "jit off around": (lambda: jit_off_around, G.JITTED, [], []),
    "no max shift": (jitted(unshifted_softmax), USES, ["largest logit "], ["overflows"]),
    "> for >=": (jitted(strictly_above), USES, ["threshold=1.0000", "= 0"], [">="]),
    "> for >= by log-sum-exp": (lambda: log_sum_exp(jnp.greater), USES, ["own confidence as the"],
                                [">="]),
    "threshold nudged down": (jitted(nudged_down), USES, ["one step above it"], ["however"]),
    "shift by the global max": (jitted(shifted_by_the_global_max), USES, [],
                                ["the whole batch", "each row's own max"]),
    "softmax over rows": (jitted(over_rows), USES, ["largest logit "], ["last axis"]),
    "temperature floored": (jitted(lambda z, t, h: _score(z, jnp.maximum(t, 0.01), h)), USES,
                            ["at temperature"], ["no floor"]),
    "threshold tested unscaled": (jitted(threshold_on_unscaled), USES,
                                  ["threshold tested on the unscaled softmax"],
                                  ["compare the scaled top"]),  # blind set 2
    "value returned unscaled": (jitted(value_unscaled), USES, ["the value of the unscaled softmax"],
                                ["return the scaled top"]),
    "an eps on the temperature": (jitted(lambda z, t, h: _score(z, t + 1e-6, h)), USES,
                                  ["at temperature"], ["eps"]),  # blind set 9
}
DRAWN = ("no max shift", "shift by the global max", "> for >=", "> for >= by log-sum-exp",
         "rounded temperature", "softmax over rows", "temperature floored",
         "an eps on the temperature", "threshold nudged down",
         "threshold tested unscaled")  # drawn on purpose every run
# fmt: on


@pytest.mark.parametrize(("wrong", "seed"), rows(WRONG, seeded=DRAWN))
def test_wrong_answer_is_rejected_and_named(wrong, seed):
    make, check, seen, hint = WRONG[wrong]
    try:
        fails(G.grade, make(), check=check, words=seen, hint=hint, seed=seed)
    finally:
        globals().update(TEMPERATURE=1.0, THRESHOLD=0.5)  # restore the module's globals


# --- the drawn settings -----------------------------------------------------------------


def test_settings_are_fresh_and_distinct():
    rng = np.random.default_rng(0)
    logits, ordinary = G._logits(rng)
    settings = G._draw_settings(rng, logits, ordinary)
    temperatures = [t for t, _ in settings]
    assert len(settings) == G.CHANGES
    assert len(set(temperatures)) == len(temperatures)
    near = temperatures[G.NEAR] / temperatures[G.NEAR - 1]
    assert 0.97 < near < 1.03 and near != 1.0  # one temperature within 2% of the last
    for temperature, threshold in settings[:-1]:
        top = G._reference(logits, temperature, 0.0)[ordinary]
        assert np.min(np.abs(top - threshold)) > G.MARGIN
        assert 0 < np.count_nonzero(top >= threshold) < len(top)
    temperature, threshold = settings[-1]
    top = np.asarray(jax.nn.softmax(logits / temperature, axis=-1).max(axis=-1))
    assert threshold == 1.0 and np.all(top[~ordinary] == 1.0) and top[ordinary].max() < 0.99
