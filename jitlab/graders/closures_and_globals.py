"""Grader for the closures and globals exercise: a calibrated-confidence scorer whose
temperature and threshold change between calls.

The learner writes ``confident_probs(logits, temperature, threshold)``: the top-class
softmax probability of each row of ``logits / temperature``, or 0.0 where it is below
``threshold``. The grader draws fresh logits of a fresh shape, empties the function's
cache, then calls it ``CHANGES`` times with a new temperature and a new threshold on
every call, and checks each result against a NumPy reference kept inside this module.

What it rejects, and how:

- a hard-coded answer: every run draws new logits, a new shape and new settings;
- a silently stale or ignored value (read through a module-level global once, while
  tracing, or from an earlier call): the verdict names which argument was not used and
  which value was used instead (an earlier call's, or the module's ``TEMPERATURE`` /
  ``THRESHOLD``), found by matching the output against the reference at each candidate;
- a temperature that differs from the previous call's by only 2% is drawn on purpose,
  so rounding or bucketing the temperature shows in the numbers;
- work done outside ``jit``: the function handed in must itself be the real ``jax.jit``
  type (a NumPy function, or a Python wrapper around a jitted helper, fails), the grader
  calls it itself, and a host callback into NumPy fails "the work happens inside the
  compiled program";
- the changing floats made static: exactly one compilation for ``CHANGES`` calls at one
  shape, counted from an emptied cache; the verdict names the argument(s) whose change
  alone compiled again (probed by the grader, JAX's own guess only quoted).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from jitlab.grading import call_learner, fail, fresh_rng, grader, is_jitted, passed, require
from jitlab.grading.checks import require_close, require_compiles, require_jitted, shorten
from jitlab.grading.kernel import host_callbacks, recompiled_by
from jitlab.instruments.counting import count_compiles

CHANGES = 8
DEFAULT_TEMPERATURE = 1.0  # the exercise's module-level values, used only to name a failure
DEFAULT_THRESHOLD = 0.5
RTOL, ATOL = 1e-4, 1e-6
MARGIN = 2e-3  # no row's top probability lies closer than this to the threshold
NEAR = 4  # the setting whose temperature is within 2% of the one before it

JITTED = "confident_probs is itself jitted (the work happens inside jit)"
RUNS = "confident_probs runs"
USES_VALUES = "every call uses the temperature and threshold passed in"
ONCE = "one compilation for every temperature and threshold"
INSIDE = "the work happens inside the compiled program"
CHECKS = (RUNS, USES_VALUES, JITTED, ONCE, INSIDE)


def _reference(logits: np.ndarray, temperature: float, threshold: float) -> np.ndarray:
    """Top softmax probability per row at ``temperature``, zeroed below ``threshold``."""
    z = logits.astype(np.float64) / temperature
    z = z - z.max(axis=-1, keepdims=True)
    probs = np.exp(z)
    probs /= probs.sum(axis=-1, keepdims=True)
    top = probs.max(axis=-1)
    return np.where(top >= threshold, top, 0.0)


def _top(logits: np.ndarray, temperature: float) -> np.ndarray:
    return _reference(logits, temperature, threshold=0.0)


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


def _draw_settings(
    rng: np.random.Generator, logits: np.ndarray, count: int = CHANGES
) -> list[tuple[float, float]]:
    """``count`` distinct (temperature, threshold) pairs, each giving a clearly different
    answer from every one before it and from the exercise's default globals; setting
    ``NEAR`` has a temperature within 2% of the setting before it."""
    settings: list[tuple[float, float]] = []
    seen = [_reference(logits, DEFAULT_TEMPERATURE, DEFAULT_THRESHOLD)]
    for _attempt in range(100_000):
        if len(settings) == NEAR:
            temperature = float(np.round(settings[-1][0] * rng.choice([0.98, 1.02]), 4))
        else:
            temperature = float(np.round(rng.uniform(0.3, 3.0), 3))
            if any(abs(temperature - t) < 0.05 for t, _ in settings):
                continue
        if abs(temperature - DEFAULT_TEMPERATURE) < 0.1:
            continue
        threshold = _threshold_between_rows(rng, _top(logits, temperature))
        if threshold is None:
            continue
        want = _reference(logits, temperature, threshold)
        if any(np.allclose(want, old, rtol=10 * RTOL, atol=10 * ATOL) for old in seen):
            continue
        # Ignoring either argument must show, and must not look like ignoring both.
        if _close(want, _reference(logits, temperature, DEFAULT_THRESHOLD)) or _close(
            _reference(logits, DEFAULT_TEMPERATURE, threshold), seen[0]
        ):
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


def _which_values(
    fn: Any, index: int, logits: np.ndarray, settings: list[tuple[float, float]], got: np.ndarray
) -> str | None:
    """If ``got`` is the answer for other values than call ``index``'s, say which were
    used instead of which: "temperature 1.0 (the module's TEMPERATURE) instead of 2.31"."""
    temperature, threshold = settings[index]
    t_mod, thr_mod = _module_settings(fn)
    temperatures = {temperature: "passed in"}
    thresholds = {threshold: "passed in"}
    for j in range(index):
        temperatures.setdefault(settings[j][0], f"call {j + 1}'s")
        thresholds.setdefault(settings[j][1], f"call {j + 1}'s")
    for t, thr, label in (
        (t_mod, thr_mod, "the module's"),
        (DEFAULT_TEMPERATURE, DEFAULT_THRESHOLD, "the exercise's default"),
    ):
        temperatures.setdefault(t, f"{label} TEMPERATURE")
        thresholds.setdefault(thr, f"{label} THRESHOLD")
    # Try pairs from one source first (both the module's, both call 2's), then mixed.
    pairs = sorted(
        itertools.product(temperatures.items(), thresholds.items()),
        key=lambda pair: _source(pair[0][1]) != _source(pair[1][1]),
    )
    for (t, t_from), (thr, thr_from) in pairs:
        if (t, thr) == (temperature, threshold):
            continue
        if _close(got, _reference(logits, t, thr)):
            wrong = []
            if t != temperature:
                wrong.append(f"temperature {t:g} ({t_from}) instead of {temperature:g}")
            if thr != threshold:
                wrong.append(f"threshold {thr:.4f} ({thr_from}) instead of {threshold:.4f}")
            return "; ".join(wrong)
    return None


def _source(label: str) -> str:
    return label.replace("TEMPERATURE", "").replace("THRESHOLD", "").strip()


def _check_call(
    fn: Any, index: int, logits: np.ndarray, settings: list[tuple[float, float]], got: Any
) -> None:
    temperature, threshold = settings[index]
    got_np = np.asarray(got)
    want = _reference(logits, temperature, threshold)
    if _close(got_np, want):
        return
    used = _which_values(fn, index, logits, settings, got_np)
    if used is not None:
        earlier = "call " in used
        raise fail(
            USES_VALUES,
            expected=f"call {index + 1}: the result for temperature={temperature:g}, "
            f"threshold={threshold:.4f}",
            seen=f"call {index + 1} returned the result for {used}"
            + (": a stale result, with no error" if earlier else ""),
            hint="the value reached the jitted code through a global (or a closure) that "
            "JAX read once, while tracing; use the `temperature` and `threshold` arguments "
            "inside the jitted function instead"
            if earlier
            else "read `temperature` and `threshold` from the arguments, not from the "
            "module-level names",
        )
    require_close(
        USES_VALUES,
        got_np,
        want,
        rtol=RTOL,
        atol=ATOL,
        hint="divide the logits by temperature, softmax over the last axis, take the "
        "largest probability per row, and set it to 0.0 where it is below threshold",
    )


def _recompiled_by(fn: Any, logits: np.ndarray) -> list[str]:
    """The arguments whose new value alone compiled ``fn`` again (values never used)."""
    other = np.ascontiguousarray(logits[::-1])
    variants = {
        "logits": (other, 0.777, 0.4321),
        "temperature": (logits, 0.888, 0.4321),
        "threshold": (logits, 0.777, 0.4567),
    }
    return recompiled_by(fn, (logits, 0.777, 0.4321), variants)


@grader("closures_and_globals", checks=CHECKS)
def grade(confident_probs: Callable[..., Any]) -> None:
    """Grade ``confident_probs(logits, temperature, threshold)`` of the exercise."""
    rng = fresh_rng()
    batch, classes = int(rng.integers(40, 97)), int(rng.integers(3, 11))
    logits = (rng.normal(size=(batch, classes)) * rng.uniform(1.0, 3.0)).astype(np.float32)
    settings = _draw_settings(rng, logits)

    # One call first, so that an unwritten stub reads "not solved yet".
    call_learner(RUNS, confident_probs, logits, *settings[0])
    if is_jitted(confident_probs):
        confident_probs.clear_cache()  # count from empty: every compile is seen
    with count_compiles(confident_probs) as count:
        outputs = [call_learner(RUNS, confident_probs, logits, t, thr) for t, thr in settings]
    passed(RUNS)
    # The values first: a stale global is the lesson's point, whatever else is wrong.
    for index, got in enumerate(outputs):
        _check_call(confident_probs, index, logits, settings, got)
    passed(USES_VALUES)
    require_jitted(
        JITTED,
        confident_probs,
        hint="decorate confident_probs with @jax.jit; do not wrap a jitted helper in "
        "Python code that does part of the work or sets globals",
    )

    causes = _recompiled_by(confident_probs, logits) if count.compiles > 1 else []
    what = " and ".join(causes) or "a value"
    jax_says = (
        f'; JAX\'s own guess: "{shorten(count.last_reason, 160)}"' if count.explanations else ""
    )
    require_compiles(
        ONCE,
        count,
        exactly=1,
        what=f"compilation(s) for {CHANGES} calls at one shape of logits",
        hint=f"{what} changes on every call: keep temperature and threshold as ordinary "
        "(traced) arguments; a static float is part of the cache key, so every new value "
        "compiles a new program",
        seen_extra=(f"a new {what} alone compiled again" if causes else "") + jax_says
        if count.compiles > 1
        else "",
    )

    found = host_callbacks(confident_probs, logits, *settings[0])
    require(
        INSIDE,
        not found,
        expected="the softmax and the threshold computed by the compiled program",
        seen=f"the program calls back into Python ({', '.join(found)})",
        hint="write the computation with jax.nn.softmax and jnp.where inside the jitted "
        "function; a host callback runs it outside the compiled program",
    )
