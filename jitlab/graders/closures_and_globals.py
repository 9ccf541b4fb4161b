"""Grader for exercise 08 (closures and globals): a calibrated-confidence scorer whose
temperature and threshold change between calls.

The learner writes ``confident_probs(logits, temperature, threshold)``: the top-class
softmax probability of each row of ``logits / temperature``, or 0.0 where it is below
``threshold``. The grader draws fresh logits of a fresh shape, then calls the function
``CHANGES`` times, with a new temperature and a new threshold on every call, and checks
each result against a NumPy reference.

What it rejects, and how:
- a hard-coded answer: every run draws new logits, a new shape and new settings;
- a silently stale result (the values reach the jitted code through a module-level
  global, read once while tracing): a result that matches an *earlier* call's settings,
  or the module's ``TEMPERATURE``/``THRESHOLD``, is named as stale;
- work done outside ``jit`` (a plain NumPy or eager function, or a Python wrapper
  around a jitted helper): the function handed in must itself be jitted;
- the changing floats made static: more than one compilation (or trace) for
  ``CHANGES`` calls at one shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from jitlab.grading import (
    all_passed,
    call_learner,
    fail,
    fresh_rng,
    passed,
    require,
    require_close,
    require_jitted,
)
from jitlab.instruments.counting import count_compiles

CHANGES = 8
DEFAULT_TEMPERATURE = 1.0  # the exercise's module-level values, used only to name a failure
DEFAULT_THRESHOLD = 0.5
RTOL, ATOL = 1e-4, 1e-6
MARGIN = 2e-3  # no row's top probability lies closer than this to the threshold


def reference(logits: np.ndarray, temperature: float, threshold: float) -> np.ndarray:
    """Top softmax probability per row at ``temperature``, zeroed below ``threshold``."""
    z = logits.astype(np.float64) / temperature
    z = z - z.max(axis=-1, keepdims=True)
    probs = np.exp(z)
    probs /= probs.sum(axis=-1, keepdims=True)
    top = probs.max(axis=-1)
    return np.where(top >= threshold, top, 0.0)


def _top(logits: np.ndarray, temperature: float) -> np.ndarray:
    return reference(logits, temperature, threshold=0.0)


def _threshold_between_rows(rng: np.random.Generator, top: np.ndarray) -> float | None:
    """A threshold that keeps some rows and zeroes others, and sits well clear of every
    row's value (so float32 against float64 rounding can never flip a row)."""
    ordered = np.sort(top)
    low, high = int(0.2 * len(ordered)), int(0.8 * len(ordered))
    gaps = [k for k in range(low, high) if ordered[k + 1] - ordered[k] > 2 * MARGIN]
    if not gaps:
        return None
    k = int(rng.choice(gaps))
    return float((ordered[k] + ordered[k + 1]) / 2)


def draw_settings(
    rng: np.random.Generator, logits: np.ndarray, count: int = CHANGES
) -> list[tuple[float, float]]:
    """``count`` distinct (temperature, threshold) pairs, each giving a clearly different
    answer from the one before and from the exercise's default globals."""
    settings: list[tuple[float, float]] = []
    seen = [reference(logits, DEFAULT_TEMPERATURE, DEFAULT_THRESHOLD)]
    for _attempt in range(100_000):
        temperature = float(np.round(rng.uniform(0.3, 3.0), 3))
        if abs(temperature - DEFAULT_TEMPERATURE) < 0.1:
            continue
        if any(abs(temperature - t) < 0.05 for t, _ in settings):
            continue
        threshold = _threshold_between_rows(rng, _top(logits, temperature))
        if threshold is None:
            continue
        want = reference(logits, temperature, threshold)
        if any(np.allclose(want, old, rtol=10 * RTOL, atol=10 * ATOL) for old in seen):
            continue
        settings.append((temperature, threshold))
        seen.append(want)
        if len(settings) == count:
            return settings
    raise RuntimeError("could not draw distinct settings for these logits (grader bug)")


def _module_settings(fn: Any) -> tuple[float, float]:
    """The TEMPERATURE and THRESHOLD the learner's module holds now (for naming a stale
    result only; the grade never depends on them)."""
    inner = getattr(fn, "__wrapped__", fn)
    namespace = getattr(inner, "__globals__", {})
    try:
        return (
            float(namespace.get("TEMPERATURE", DEFAULT_TEMPERATURE)),
            float(namespace.get("THRESHOLD", DEFAULT_THRESHOLD)),
        )
    except (TypeError, ValueError):
        return DEFAULT_TEMPERATURE, DEFAULT_THRESHOLD


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=RTOL, atol=ATOL))


def _check_call(
    fn: Any,
    index: int,
    logits: np.ndarray,
    settings: list[tuple[float, float]],
    got: Any,
) -> None:
    temperature, threshold = settings[index]
    check = f"call {index + 1} of {len(settings)} uses the values passed in"
    got_np = np.asarray(got)
    want = reference(logits, temperature, threshold)
    if _close(got_np, want):
        return
    earlier = [j for j in range(index) if _close(got_np, reference(logits, *settings[j]))]
    if earlier:
        t_old, thr_old = settings[earlier[-1]]
        raise fail(
            check,
            expected=f"the result for temperature={temperature}, threshold={threshold:.4f}",
            seen=f"the result for call {earlier[-1] + 1}'s values (temperature={t_old}, "
            f"threshold={thr_old:.4f}): a stale result, with no error",
            hint="the values reached the jitted code through a global that JAX read once, "
            "while tracing; use the `temperature` and `threshold` arguments inside the "
            "jitted function instead",
        )
    t_mod, thr_mod = _module_settings(fn)
    for t_guess, thr_guess in {(t_mod, thr_mod), (DEFAULT_TEMPERATURE, DEFAULT_THRESHOLD)}:
        if _close(got_np, reference(logits, t_guess, thr_guess)):
            raise fail(
                check,
                expected=f"the result for temperature={temperature}, threshold={threshold:.4f}",
                seen=f"the result for the module's TEMPERATURE={t_guess}, "
                f"THRESHOLD={thr_guess}: the arguments were ignored",
                hint="read `temperature` and `threshold` from the arguments, not from the "
                "module-level names",
            )
    require_close(
        check,
        got_np,
        want,
        rtol=RTOL,
        atol=ATOL,
        hint="divide the logits by temperature, softmax over the last axis, take the "
        "largest probability per row, and set it to 0.0 where it is below threshold",
    )


def grade(confident_probs: Callable[..., Any]) -> None:
    """Grade ``confident_probs(logits, temperature, threshold)`` of exercise 08."""
    rng = fresh_rng()
    batch, classes = int(rng.integers(40, 97)), int(rng.integers(3, 11))
    logits = (rng.normal(size=(batch, classes)) * rng.uniform(1.0, 3.0)).astype(np.float32)
    settings = draw_settings(rng, logits)

    with count_compiles(confident_probs) as count:
        for index, (temperature, threshold) in enumerate(settings):
            got = call_learner(
                "confident_probs runs", confident_probs, logits, temperature, threshold
            )
            _check_call(confident_probs, index, logits, settings, got)
    passed(
        f"results match the reference after each of {CHANGES} changes of temperature "
        f"and threshold (logits of shape {batch}x{classes})"
    )

    require_jitted(
        "confident_probs is itself jitted (the work happens inside jit)",
        confident_probs,
        hint="decorate confident_probs with @jax.jit; do not wrap a jitted helper in "
        "Python code that does part of the work or sets globals",
    )

    last_reason = count.last_reason
    require(
        f"one compilation for {CHANGES} calls with new values each time",
        count.compiles <= 1 and count.traces <= 1,
        expected=f"at most 1 trace and 1 compilation for {CHANGES} calls at one shape",
        seen=f"{count.traces} trace(s), {count.compiles} compilation(s); JAX said: {last_reason}",
        hint="keep temperature and threshold as ordinary (traced) arguments: a static "
        "float is part of the cache key, so every new value compiles a new program",
    )
    all_passed("08 closures and globals")
