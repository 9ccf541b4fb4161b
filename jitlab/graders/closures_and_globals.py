"""Grader for closures_and_globals: the jitted ``confident_probs``, called CHANGES times with
new values; a wrong result is named by the values it matches. What the drawing covers:
  a new temperature and threshold on every call  a global or closure read once; a static float
  a temperature within 2% of the one before      a rounded or bucketed temperature
  rows with a logit of 300 to 400                a softmax without the max shift (inf/inf)
  threshold 1.0 last: those rows' top is 1.0     ``>`` for ``>=`` (below means strictly);
  then a big row's own confidence as threshold    the same, whatever the formula rounds to
  a threshold one float32 step above a row's own  a threshold nudged down (>= thr - 1e-6)
  every other row clear of every threshold       (float32 rounding never flips a row)
  a temperature of 1e-4 to 5e-3, a close row      a temperature floored or clipped
  and one of 1e-7 to 1e-6                         an eps added to the temperature
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from jitlab.grading import Hints, Recorder, fail, grader, is_jitted
from jitlab.grading.calls import host_callbacks, python_work
from jitlab.grading.checks import (
    LOST_DIGITS,
    Grading,
    as_numbers,
    lost_digits,
    shorten,
)
from jitlab.grading.kernel import recompiled_by
from jitlab.instruments.counting import count_compiles

CHANGES, NEAR = 8, 4  # setting NEAR has a temperature within 2% of the one before it
DEFAULTS = (1.0, 0.5)  # the exercise's TEMPERATURE and THRESHOLD, to name a stale value
RTOL, ATOL, MARGIN = 1e-4, 1e-6, 2e-3
CHECKS = RUNS, USES_VALUES, JITTED, ONCE, INSIDE = (
    "confident_probs runs",
    "every call matches the reference for the temperature and threshold passed in",
    "confident_probs is itself jitted (the work happens inside jit)",
    "one compilation for every temperature and threshold",
    "the work happens inside the compiled program",
)
HINTS = Hints(  # a check's hint, and the mistakes a wrong result of one call points to
    {
        JITTED: "decorate confident_probs with @jax.jit; no Python wrapper doing part of the work",
        INSIDE: "compute with jax.nn.softmax and jnp.where in the jitted function, no callback",
        "stale": "JAX read that global (or closure) once, while tracing: use the arguments",
        "module": "read `temperature` and `threshold` from the arguments, not the globals",
        "formula": "softmax(logits / temperature) on the last axis, top per row, 0.0 below it",
        ">=": "a row whose confidence equals the threshold is not below it: keep it (>=)",
        "overflow": "exp overflows on big logits (inf/inf is nan): subtract each row's max",
        "global max": """rows far below the batch's largest logit came out 0 or NaN: the shift
        is by the largest logit of the whole batch, and exp of every other row underflows to
        0 (0 / 0 is NaN). Subtract each row's own max (over the last axis, kept so it
        broadcasts)""",
        "unscaled test": """the threshold was tested on the softmax of the unscaled logits
        (temperature 1), the value returned at the temperature: compare the scaled top,
        softmax(logits / temperature), with the threshold""",
        "unscaled value": """the threshold was tested at the temperature, but the value
        returned is the top of the unscaled softmax (temperature 1): return the scaled top,
        softmax(logits / temperature)""",
        "cold": "use the temperature as it is given, however small: no floor, clip or eps",
        "nudge": "a row below the threshold, however little, is 0.0: compare top >= threshold"
        " with nothing added to or taken from either side",
    }
)


def _reference(logits: np.ndarray, temperature: float, threshold: float) -> np.ndarray:
    """Top softmax probability per row at ``temperature``, zeroed below ``threshold``."""
    z = logits.astype(np.float64) / temperature
    probs = np.exp(z - z.max(axis=-1, keepdims=True))
    top = (probs / probs.sum(axis=-1, keepdims=True)).max(axis=-1)
    return np.where(top.astype(np.float32) >= threshold, top, 0.0)  # decided in float32


def _global_shift(logits: np.ndarray, temperature: float, threshold: float) -> np.ndarray:
    """What a softmax shifted by the whole batch's largest logit returns, in float32: every
    row far below it underflows to 0 (flushed, as XLA does), and 0 / 0 is NaN, then 0.0."""
    z = logits.astype(np.float32) / np.float32(temperature)
    e = np.exp(z - z.max())
    e[e < np.finfo(np.float32).tiny] = 0.0
    with np.errstate(invalid="ignore"):
        top = (e / e.sum(axis=-1, keepdims=True)).max(axis=-1)
    return np.where(top >= threshold, top, 0.0)


MIXED = {  # a mix-up of the scaled and unscaled softmax, as the verdict names it
    "unscaled test": "the threshold tested on the unscaled softmax (temperature 1)",
    "unscaled value": "the value of the unscaled softmax (temperature 1), the threshold tested "
    "on the scaled one",
}


def _mixed(logits: np.ndarray, temperature: float, threshold: float) -> dict[str, np.ndarray]:
    """What an answer that mixes the scaled and the unscaled softmax returns: the threshold
    tested on one, the value taken from the other (by the hint that names each)."""
    scaled, unscaled = (_reference(logits, t, 0.0) for t in (temperature, 1.0))
    return {
        "unscaled test": np.where(unscaled.astype(np.float32) >= threshold, scaled, 0.0),
        "unscaled value": np.where(scaled.astype(np.float32) >= threshold, unscaled, 0.0),
    }


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=RTOL, atol=ATOL))


def _logits(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Logits of a fresh shape, three rows with a logit of 300 to 400; the other rows."""
    batch, classes = int(rng.integers(40, 97)), int(rng.integers(3, 11))
    logits = rng.normal(size=(batch, classes)) * rng.uniform(1.0, 3.0)
    rows = rng.choice(batch, size=3, replace=False)
    logits[rows, rng.integers(classes, size=3)] += rng.uniform(300, 400, size=3)
    return logits.astype(np.float32), ~np.isin(np.arange(batch), rows)


def _draw_settings(rng: np.random.Generator, logits: np.ndarray, ordinary: np.ndarray) -> list:
    """CHANGES (temperature, threshold) pairs, each giving a clearly different answer
    from every one before it and from the defaults, ignoring either value showing; the
    last has threshold 1.0 and a temperature at which every ordinary row is below it."""
    settings, seen = [], [_reference(logits, *DEFAULTS)]  # (temperature, threshold), answers
    for _attempt in range(100_000):
        t = float(np.round(rng.uniform(0.3, 3.0), 3))
        if len(settings) == NEAR:
            t = float(np.round(settings[-1][0] * rng.choice([0.98, 1.02]), 4))
        elif any(abs(t - old) < 0.05 for old, _ in settings) or abs(t - 1.0) < 0.1:
            continue
        top, n = np.sort(_reference(logits, t, 0.0)[ordinary]), np.count_nonzero(ordinary)
        gaps = [k for k in range(n // 5, n * 4 // 5) if top[k + 1] - top[k] > 2 * MARGIN]
        k = int(rng.choice(gaps)) if gaps else 0
        threshold = float((top[k] + top[k + 1]) / 2)
        want = _reference(logits, t, threshold)
        ignored = _reference(logits, t, DEFAULTS[1]), _reference(logits, DEFAULTS[0], threshold)
        # new; changed by ignoring the threshold; ignoring the temperature is not both
        new = not any(_close(want, old) for old in (*seen, ignored[0]))
        if gaps and new and not _close(ignored[1], seen[0]):
            settings.append((t, threshold))
            seen.append(want)
        if len(settings) == CHANGES - 1:
            break
    else:
        raise RuntimeError("could not draw distinct settings for these logits (grader bug)")
    grid = [float(np.round(3.0 * 1.05**k, 3)) for k in range(15)]  # from 3 to 6
    last = next((t for t in grid if _reference(logits, t, 0)[ordinary].max() < 1 - MARGIN), 6.0)
    return [*settings, (last, 1.0)]


def _mistake(
    grading: Grading, fn: Any, index: int, logits: np.ndarray, settings: list, got: Any, own: Any
) -> dict:
    """The verdict when call ``index`` did not return the reference ({} when it did):
    the values its result is for, or else its first wrong row and the mistake it shows.
    ``own``: the learner's confidences at this temperature; a row within float32 rounding
    of the threshold is judged on its own (XLA may round a log-sum-exp below 1.0)."""
    now = settings[index]
    dtype = getattr(got, "dtype", None)  # as returned: float16, say
    got = np.full((), np.nan) if (numbers := as_numbers(got)) is None else numbers
    want = _reference(logits, *now)
    if own is not None and own.shape == want.shape:
        want = np.where(np.isclose(own, now[1], rtol=0, atol=1e-5) & (own < now[1]), 0.0, want)
    call = f"call {index + 1} (temperature={now[0]:g}, threshold={now[1]:.4f})"
    if _close(got, want):
        return {}
    sources = [("passed in", "passed in", now)]  # (temperature's, threshold's name, values)
    sources += [(f"call {j + 1}'s", f"call {j + 1}'s", settings[j]) for j in range(index)]
    namespace = getattr(getattr(fn, "__wrapped__", fn), "__globals__", {})
    module = namespace.get("TEMPERATURE"), namespace.get("THRESHOLD")
    for label, values in (("the module's", module), ("the exercise's default", DEFAULTS)):
        if all(isinstance(value, float | int) for value in values):
            named = f"{label} TEMPERATURE", f"{label} THRESHOLD"
            sources.append((*named, tuple(map(float, values))))
    for a, b in sorted(itertools.product(sources, repeat=2), key=lambda p: p[0] is not p[1]):
        t, thr = a[2][0], b[2][1]  # pairs from one source first (both the module's, call 2's)
        if (t, thr) != now and _close(got, _reference(logits, t, thr)):
            used = [f"temperature {t:g} ({a[0]}) instead of {now[0]:g}"] * (t != now[0])
            used += [f"threshold {thr:.4f} ({b[1]}) instead of {now[1]:.4f}"] * (thr != now[1])
            stale = ": a stale result, with no error" * any("call " in u for u in used)
            seen = f"call {index + 1} returned the result for {'; '.join(used)}{stale}"
            hint = HINTS["stale" if stale else "module"]
            return dict(expected=f"{call}: the result for these values", seen=seen, hint=hint)
    for kind, mixed in _mixed(logits, *now).items():  # recomputed: scaled and unscaled mixed
        if _close(got, mixed):
            seen = f"call {index + 1} returned the result with {MIXED[kind]}"
            expected = f"{call}: the result for these values"
            return dict(expected=expected, seen=seen, hint=HINTS[kind])
    hint = HINTS["formula"]
    if got.shape != want.shape:
        return dict(expected=f"{call}: shape {want.shape}", seen=f"shape {got.shape}", hint=hint)
    wrong = ~np.isclose(got, want, rtol=RTOL, atol=ATOL)
    row = int(np.argmax(wrong))
    huge = bool((logits[wrong].max(axis=-1) > 100).all())  # only the rows of a big logit
    at_threshold = np.allclose(want[wrong], now[1], rtol=0, atol=1e-6)
    expected = f"{call}: row {row} = {want[row]:.6g} (largest logit {logits[row].max():.4g})"
    underflow = not huge and _close(np.nan_to_num(got), _global_shift(logits, *now))
    if underflow and now[1] > 0:  # other mistakes zero the rows below a threshold too: a
        # global shift zeroes every far row at threshold 0 as well
        zero = as_numbers(grading.call_learner(RUNS, fn, logits, now[0], 0.0))
        same = zero is not None and zero.shape == want.shape
        underflow = same and _close(np.nan_to_num(zero), _global_shift(logits, now[0], 0.0))
    kind = ">=" if at_threshold else "overflow" if huge else "global max" if underflow else ""
    hint = HINTS[kind or "formula"]
    kept = want != 0.0  # the rows above the threshold: their value is the softmax's own
    only_kept = bool(kept[wrong].all())  # a row kept that should be 0 is no rounding
    if (
        not at_threshold
        and not huge
        and only_kept
        and lost_digits([got[kept]], [want[kept]], rtol=1e-2)
    ):
        hint = LOST_DIGITS  # a 16-bit softmax or output: right to two or three digits
    seen = f"row {row} = {got[row]:.6g}" + f" ({dtype})" * (dtype is not None)
    return dict(expected=expected, seen=seen, hint=hint)


def _require_below(
    grading: Grading, fn: Callable, logits: np.ndarray, t: float, own: Any, row: int
) -> None:
    """A threshold one float32 step above ``row``'s own confidence (``own``, at threshold
    0): the row is below it, so 0.0; a threshold nudged down by any margin keeps it."""
    above = float(np.nextafter(np.float32(own[row]), np.float32(np.inf)))
    got = as_numbers(grading.call_learner(RUNS, fn, logits, t, above))
    if got is None or got.shape != own.shape or got[row] != 0.0:
        seen = f"row {row} = {got[row]:.8g}" if got is not None and got.shape == own.shape else ""
        expected = f"row {row} ({own[row]:.8g}) = 0.0 at threshold {above:.8g}, one step above it"
        seen = seen or shorten(repr(got), 80)
        raise fail(USES_VALUES, expected=expected, seen=seen, hint=HINTS["nudge"])


def _require_cold(
    grading: Grading, confident_probs: Callable, logits: np.ndarray, row: int, rng
) -> None:
    """Temperatures of 1e-4 to 5e-3 and of 1e-7 to 1e-6, with ``row``'s top two logits 0
    and -2 temperatures (its answer 0.88): a temperature floored, clipped or given an eps
    "against division by 0" shows (an eps of 1e-8 or more moves the second by 1%)."""
    for low, high in ((1e-4, 5e-3), (1e-7, 1e-6)):
        t = float(np.float32(10 ** rng.uniform(np.log10(low), np.log10(high))))
        _require_cold_at(grading, confident_probs, logits, row, t)


def _require_cold_at(
    grading: Grading, confident_probs: Callable, logits: np.ndarray, row: int, t: float
) -> None:
    cold = logits.copy()
    first, second = np.argsort(cold[row])[::-1][:2]
    cold[row] -= cold[row, first]  # its top logit 0: logits / t carry no float32 rounding
    cold[row, second] = -2 * t
    want, got = (
        _reference(cold, t, 0.0),
        as_numbers(grading.call_learner(RUNS, confident_probs, cold, t, 0.0)),
    )
    if got is None or got.shape != want.shape or not _close(got[row], want[row]):  # rows
        # other than ``row`` are compared at the drawn temperatures (here float32's
        # rounding of logits / t, 3e4 or more, moves them)
        seen = (
            shorten(repr(got), 80) if got is None or got.shape != want.shape else f"{got[row]:.6g}"
        )
        expected = f"row {row} = {want[row]:.6g} at temperature {t:g} (threshold 0)"
        raise fail(USES_VALUES, expected=expected, seen=f"row {row} = {seen}", hint=HINTS["cold"])


@grader("closures_and_globals", checks=CHECKS, hints=HINTS)
def grade(grading: Grading, confident_probs: Callable[..., Any]) -> None:
    """Grade ``confident_probs(logits, temperature, threshold)`` of the exercise."""
    rng = grading.rng
    logits, ordinary = _logits(rng)
    settings = _draw_settings(rng, logits, ordinary)
    grading.call_learner(RUNS, confident_probs, logits, *settings[0])  # a stub says so first
    if is_jitted(confident_probs):
        confident_probs.clear_cache()  # count from empty: every compile is seen
    with count_compiles(confident_probs) as count:
        recorder = Recorder(confident_probs, lambda: count.compiles)
        outputs = [grading.call_learner(RUNS, recorder, logits, t, thr) for t, thr in settings]
    grading.passed(RUNS)
    t, big = settings[-1][0], int(np.flatnonzero(~ordinary)[0])  # the last call's: ties at 1.0
    own = as_numbers(grading.call_learner(RUNS, confident_probs, logits, t, 0.0))
    for index, got in enumerate(outputs):  # the values first: a stale global is the lesson
        mine = own if index == len(outputs) - 1 else None
        if mistake := _mistake(grading, confident_probs, index, logits, settings, got, mine):
            raise fail(USES_VALUES, **mistake)
    rows = (len(logits),)  # row big's own confidence as the threshold: >= keeps it
    tie = float(own[big]) if own is not None and own.shape == rows else float("nan")
    tied = as_numbers(grading.call_learner(RUNS, confident_probs, logits, t, tie))
    seen = f"row {big} = {tied[big]:.6g}" if tied is not None and tied.shape == rows else ""
    expected = f"row {big} kept ({tie:.8g}) with its own confidence as the threshold"
    if not seen or tied[big] != tie:
        seen = seen or f"threshold 0 gave {shorten(repr(own), 80)}, then {shorten(repr(tied), 80)}"
        raise fail(USES_VALUES, expected=expected, seen=seen, hint=HINTS[">="])
    _require_below(grading, confident_probs, logits, t, own, int(np.flatnonzero(ordinary)[0]))
    _require_cold(grading, confident_probs, logits, int(np.flatnonzero(ordinary)[0]), rng)
    grading.passed(USES_VALUES)
    grading.require_jitted(JITTED, confident_probs, hint=HINTS[JITTED])
    base, changed = (logits, 0.777, 0.4321), (np.ascontiguousarray(logits[::-1]), 0.888, 0.4567)
    names = ("logits", "temperature", "threshold")
    variants = {name: (*base[:i], changed[i], *base[i + 1 :]) for i, name in enumerate(names)}
    causes = recompiled_by(confident_probs, base, variants) if count.compiles > 1 else []
    what = " and ".join(causes) or "a value"
    extra = [f"a new {what} alone compiled again"] * bool(causes)
    extra += [f'JAX\'s own guess: "{shorten(count.last_reason, 160)}"'] * bool(count.explanations)
    hint = f"{what} changes on every call: keep temperature and threshold traced arguments; "
    hint += "a static float is part of the cache key, so each new value compiles a new program"
    counted = f"compilation(s) for {CHANGES} calls at one shape of logits"
    grading.require_compiles(
        ONCE, count, exactly=1, what=counted, hint=hint, seen_extra="; ".join(extra)
    )
    ran, seen = python_work(recorder.calls)
    if not ran:
        ran = host_callbacks(confident_probs, logits, *settings[0])
        seen = f"host callbacks: {', '.join(ran)}"
    grading.require(INSIDE, not ran, "the work in the compiled program", seen)
