"""Grader for shapes. Part 1 (:func:`grade`): ``bucket_size``, the jitted ``padded_rms``
and the plain ``rms`` around it compile at most once per bucket. Part 2
(:func:`grade_positions`): a fixed-size ``jnp.nonzero`` that compiles once per length.

===============================================  ======================================
what the drawing covers, every run               the wrong rule it breaks
===============================================  ======================================
every length 1..1,000 through bucket_size         a table or dict that misses a length
garbage past n: large, then +-inf and nan         no mask, a mask of <= n, a float 0/1
                                                  mask multiplied in (inf * 0 is nan)
a length that fills its bucket, and one past it   padding assumed, off-by-one buckets
two lengths in one bucket                         a static n
values equal to the threshold, one float32 step   >= for >, a nudged threshold
above it, a negative one, none and all above
the same data with a new threshold                a static threshold
300 to 600 values, all above the threshold        a count or rank in int8 or uint8 (wraps)
===============================================  ======================================

The checks named from :mod:`jitlab.grading.kernel`'s templates, as the learner sees them:
- padded_rms is compiled with jax.jit
- rms is a plain Python function
- padded_rms computes inside its compiled program
- rms leaves the caller's arguments unchanged
- rms calls padded_rms with jit on
- rms calls padded_rms at every call
- loud_positions is compiled with jax.jit
- loud_positions computes inside its compiled program
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from jitlab.grading import (
    GradingFailure,
    Recorder,
    fail_unless,
    grader,
    why,
)
from jitlab.grading import checks as c
from jitlab.grading import kernel as k
from jitlab.grading.checks import Grading
from jitlab.instruments import signature as sig
from jitlab.instruments.counting import count_compiles

MOST_BUCKETS, MAX_LENGTH, CALLS = 12, 1000, 50  # the exercise states "at most 12" sizes
RMS = k.KernelExercise("rms", "padded_rms", "padded_rms(padded, n)")
CALLS_KERNEL = k.CALLS_KERNEL
PADDING = "padded_rms ignores the padding"
NUMBERS = "rms matches the reference"
PER_BUCKET = "at most one compilation per bucket"
PADS = "rms pads x to bucket_size(len(x))"
CLOSE = {"rtol": 1e-4, "atol": 1e-8}  # float32 sums against the float64 reference
CHECKS = (*RMS.names(k.JITTED, k.PLAIN), c.BUCKETS_HOLD, c.BUCKETS_FEW, RMS.name(k.NO_CALLBACKS))
CHECKS += (PADDING, NUMBERS, *RMS.names(k.UNCHANGED, k.JIT_ON, k.CALLS_KERNEL), PADS, PER_BUCKET)
N_TYPES = "pass n the same way on every call (always len(x), a Python int, say)"
CAUSE_HINTS = dict.fromkeys((sig.WEAK_TYPE, sig.PYTHON_SCALAR, sig.DTYPE), N_TYPES) | {
    sig.STATIC: "keep n traced: not in static_argnums / static_argnames, not closed over"
}


def _reference_rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x.astype(np.float64)))))


def _lengths(rng: np.random.Generator, sizes: dict[int, int]) -> list[int]:
    """CALLS lengths: 1, 1,000, full buckets and one past them, two lengths of one bucket."""
    full = [m for m, size in sizes.items() if size == m]
    chosen = [1, MAX_LENGTH]
    for m in rng.permutation(full)[:3]:
        chosen += [m, m + 1] if m < MAX_LENGTH else [m]
    shared = [[m for m in sizes if sizes[m] == size] for size in sorted(set(sizes.values()))]
    shared = [ms for ms in shared if len(ms) >= 2]
    chosen += list(rng.choice(shared[rng.integers(len(shared))], size=2, replace=False))
    chosen += list(rng.integers(1, MAX_LENGTH + 1, size=CALLS - len(chosen)))
    return [int(m) for m in rng.permutation(chosen)]


def _padded_sizes(run: k.Run) -> list[int | None]:
    """The length of the array each call of rms handed padded_rms (its last call), None
    where it passed no array."""
    sizes = []
    for during in run.calls:
        padded = next(iter(during[-1].arguments.values()), None) if during else None
        sizes.append(np.shape(padded)[0] if np.ndim(padded) == 1 else None)
    return sizes


def require_padded(grading: Grading, sizes: dict[int, int], lengths: list[int], run: k.Run) -> None:
    """Every call of rms handed padded_rms x padded to exactly bucket_size(len(x))."""
    grading.require_padded(
        PADS,
        _padded_sizes(run),
        lengths,
        sizes.__getitem__,
        largest=max(sizes.values()),
        size=lambda size: f"an array of {size}",
        hint="pad x to bucket_size(len(x)), so that lengths in one bucket share a shape",
    )


def _cause(run: k.Run) -> tuple[str, str]:
    """(what rms passed padded_rms that explains the extra compilations, the hint)."""
    found = why(run.recorder)
    return found.text, found.hint_for(CAUSE_HINTS, "pad to bucket_size(len(x)) and keep n traced")


@grader("shapes", part="one compilation per bucket", checks=CHECKS)
def grade(
    grading: Grading, bucket_size: Callable[[int], int], padded_rms: Any, rms: Callable[..., Any]
) -> None:
    """Grade part 1 of the exercise: ``bucket_size``, ``padded_rms`` and ``rms``."""
    rng = grading.rng
    RMS.jitted(grading, padded_rms)
    RMS.plain(grading, rms, seen="rms is wrapped by jax.jit: it compiles once per input length")
    sizes = grading.require_buckets(bucket_size, up_to=MAX_LENGTH, most=MOST_BUCKETS)

    # Garbage past n must not change the answer; a full bucket has no padding at all.
    n = int(rng.choice([m for m in range(5, 60) if sizes[m] > m]))
    full = int(rng.choice([m for m in range(2, MAX_LENGTH + 1) if sizes[m] == m] or [n]))
    RMS.no_callbacks(grading, padded_rms, np.ones(sizes[n], np.float32), 1)
    non_finite = rng.choice(np.array([np.inf, -np.inf, np.nan], np.float32), size=sizes[n] - n)
    cases = [(n, rng.uniform(100, 1000, size=sizes[n] - n), "large values")]
    cases += [(n, non_finite, "inf and nan"), (full, np.zeros(0), "no padding")]
    got, want, about, padded = [], [], [], []
    for m, garbage, what in cases:
        x = rng.normal(size=m).astype(np.float32)
        padded.append(np.append(x, garbage).astype(np.float32))
        got.append(grading.call_learner(PADDING, padded_rms, padded[-1].copy(), m))
        want.append(_reference_rms(x))
        about.append(f"n={m} in a bucket of {sizes[m]}, {what} past n")
    hint = lambda wrong: _padding_hint(got[wrong[0]], padded[wrong[0]], cases[wrong[0]][0])  # noqa: E731
    grading.require_cases(PADDING, got, want, about=about.__getitem__, hint=hint, **CLOSE)

    lengths = _lengths(rng, sizes)
    buckets = {sizes[m] for m in lengths}
    data = [rng.normal(loc=rng.normal(), size=m).astype(np.float32) for m in lengths]
    given: list[int] = []  # the lengths rms was called with, for a crash's verdict

    def calls() -> Iterator[tuple[tuple, dict]]:
        for x in data:
            given.append(len(x))
            yield (x,), {}

    try:
        run = RMS.run(grading, rms, padded_rms, calls(), check=NUMBERS, callbacks=True)
    except GradingFailure as failure:
        if failure.check != NUMBERS or failure.__cause__ is None:
            raise
        m, hint = given[-1], "pad x to bucket_size(len(x)), not to a table of your own"
        expected = f"rms(x) to return for x of length {m} (bucket_size({m}) is {sizes[m]})"
        raise c.learner_error(NUMBERS, failure.__cause__, expected=expected, hint=hint) from None
    want = [_reference_rms(x) for (x,), _ in run.copies]
    about = [f"an array of length {m} (bucket {sizes[m]})" for m in lengths]
    hint = "rms returns one number: the RMS of the real values only"
    grading.require_cases(NUMBERS, run.outputs, want, about=about.__getitem__, hint=hint, **CLOSE)
    RMS.unchanged(grading, run, what=lambda i: f"the array of length {lengths[i]}")
    RMS.jit_on(grading, run.recorder)
    RMS.calls_kernel(grading, run, first=lambda i: f"length {lengths[i]}")
    require_padded(grading, sizes, lengths, run)
    cause, hint = _cause(run)
    what = f"compilations of padded_rms for {len(lengths)} calls ({len(set(lengths))} distinct "
    what += f"lengths in {len(buckets)} buckets)"
    RMS.compiles(
        grading, PER_BUCKET, run.count, at_most=len(buckets), what=what, hint=hint, cause=cause
    )


# ------------------------------------------------------------ part 2: loud_positions

POSITIONS = k.KernelExercise("", "loud_positions", "")
POSITIONS_OK = "loud_positions finds every position above the threshold"
POSITIONS_ONCE = "loud_positions compiles once for one length"
POSITIONS_CHECKS = (*POSITIONS.names(k.JITTED, k.NO_CALLBACKS), POSITIONS_OK, POSITIONS_ONCE)


def _positions_cases(rng: np.random.Generator, length: int) -> list[tuple[str, Any, float]]:
    """(what, x, threshold): cases 1 and 2 change only the data, then only the threshold."""
    noise = [rng.normal(size=length).astype(np.float32) for _ in range(6)]
    threshold = float(np.float32(rng.uniform(0.2, 0.8)))
    step_above = np.nextafter(np.float32(threshold), np.float32(np.inf))
    for x, value in ((noise[2], threshold), (noise[3], step_above)):
        x[rng.choice(length, size=max(2, length // 8), replace=False)] = np.float32(value)
    return [
        ("ordinary data", noise[0], threshold),
        ("other data, the same threshold", noise[1], threshold),
        ("the same data, a new threshold", noise[0], float(np.float32(threshold + 0.5))),
        ("no value above the threshold", noise[4], 100.0),
        ("every value above the threshold", noise[5], -100.0),
        ("values equal to the threshold (not above it)", noise[2], threshold),
        ("values one float32 step above the threshold", noise[3], threshold),
        ("a negative threshold", noise[5], float(np.float32(-rng.uniform(0.2, 1.0)))),
    ]


def _positions_hint(x: np.ndarray, threshold: float, got: np.ndarray, want: np.ndarray) -> str:
    """The likeliest cause of a wrong ``positions``, from what differs."""
    real, mine = set(want[want >= 0].tolist()), set(got[got >= 0].tolist())
    rest = got[len(real) :] if got.shape == want.shape else got[:0]
    if rest.size and np.array_equal(got[: len(real)], want[: len(real)]):
        if np.array_equal(rest[:-1], want[len(real) : -1]) and rest[-1] != -1:
            return (
                "only the last slot is wrong: a scatter to index -1 (.at[-1].set) wraps to the "
                "last slot; send the unwanted writes past the end (index len(x)) with "
                "mode='drop'"
            )
        if np.all(rest == rest[0]):
            return (
                f"the unused slots hold {rest[0]}, not -1: every slot past the count must say "
                "-1, and jnp.nonzero pads with 0 unless it is told otherwise (jitlab hint 01)"
            )
    if real == mine and got.shape == want.shape:
        return "list the positions in increasing order, as jnp.nonzero does"
    equal = set(np.flatnonzero(x == np.float32(threshold)).tolist())
    if equal and mine == real | equal:
        return "strictly greater: a value equal to the threshold is not above it (>, not >=)"
    return "positions are the indices i with x[i] > threshold, then -1 in the unused slots"


def _padding_hint(got: Any, padded: np.ndarray, n: int) -> str:
    """What a wrong ``padded_rms(padded, n)`` most likely did with the padding."""
    value = c.as_numbers(got)
    real = padded[:n].astype(np.float64)
    guesses = {  # what it would have returned, had it done that
        "one past": np.sqrt((np.sum(real**2) + float(padded[n]) ** 2) / n)
        if n < padded.size
        else None,
        "padded length": np.sqrt(np.sum(real**2) / padded.size),
    }
    if value is not None and value.shape == () and not np.isfinite(value):
        return (
            "the padding's inf or nan reached the result: select the real values (positions "
            "below n) before any arithmetic; nan times a 0/1 mask is still nan"
        )
    for kind, guess in guesses.items():
        if value is not None and guess is not None and np.allclose(value, guess, **CLOSE):
            return {
                "one past": "the mask lets in one value past n: jnp.arange(size) < n, not <=",
                "padded length": "divide by n, the real length, not by the padded length",
            }[kind]
    return (
        "only the first n values are real: leave out every position from n on, then divide "
        "the sum of squares by n (jitlab hint 01)"
    )


def _count_hint(got: np.ndarray, want: int) -> str:
    """The likeliest reason a count is wrong: it wrapped around in a narrow integer."""
    narrow = got.dtype.kind in "iu" and got.dtype.itemsize < 4
    whole = got.shape == () and bool(np.isfinite(got)) and float(got) == int(got)
    if whole and (narrow or (int(got) - want) % 256 == 0):
        return (
            (
                f"the count wrapped around ({got.dtype} holds at most {np.iinfo(got.dtype).max}"
                if narrow
                else "the count is off by a multiple of 256: it wrapped around in a narrow integer"
            )
            + ("); " if narrow else "; ")
            + "count in int32"
        )
    return "count is how many values are above the threshold, not the length of positions"


@grader("shapes", part="positions of any count", checks=POSITIONS_CHECKS)
def grade_positions(grading: Grading, loud_positions: Any) -> None:
    """Grade part 2 of the exercise: ``loud_positions(x, threshold)``."""
    rng = grading.rng
    length = int(rng.integers(300, 600))  # over 255 loud values when all are loud
    cases = _positions_cases(rng, length)
    POSITIONS.jitted(grading, loud_positions)
    POSITIONS.no_callbacks(grading, loud_positions, cases[0][1], cases[0][2])
    loud_positions.clear_cache()
    outputs, counts = [], []  # the compilations so far, after each call
    with count_compiles(loud_positions) as count:
        recorder = Recorder(loud_positions, lambda: count.compiles)
        for _, x, threshold in cases:
            outputs.append(grading.call_learner(POSITIONS_OK, recorder, x, threshold))
            counts.append(count.compiles)
    POSITIONS.callbacks_ran(grading, recorder.calls, passes=True)
    for (what, x, threshold), out in zip(cases, outputs, strict=True):
        found = np.flatnonzero(x > np.float32(threshold))
        want = np.concatenate([found, np.full(length - found.size, -1)])
        pair = isinstance(out, tuple | list) and len(out) == 2
        fail_unless(POSITIONS_OK, pair, expected="a pair (positions, count)",
                    seen=c.shorten(f"{type(out).__name__}: {out!r}", 120),
                    hint="return positions, count")  # fmt: skip
        got, got_count = np.asarray(out[0]), np.asarray(out[1])
        at = c.first_difference(got, want) if got.shape == want.shape else 0
        fail_unless(
            POSITIONS_OK,
            got.shape == want.shape and np.array_equal(got, want),
            expected=f"{c.excerpt(want, at, 12)} for {what} (threshold {threshold:g}, length "
            f"{length})",
            seen=f"{c.excerpt(got, at, 12)} (shape {got.shape})",
            hint=_positions_hint(x, threshold, got.reshape(-1), want),
        )
        fail_unless(POSITIONS_OK, got_count.shape == () and int(got_count) == found.size,
                    expected=f"count {found.size} for {what}",
                    seen=f"count {c.shorten(str(got_count.tolist()), 60)}"
                    + f" ({got_count.dtype})" * (got_count.dtype.kind in "iu"),
                    hint=_count_hint(got_count, found.size))  # fmt: skip
    grading.passed(POSITIONS_OK)
    hint = "positions' length must come from x's shape, not from the data, and threshold must "
    hint, cause = hint + "stay an ordinary (traced) argument (jitlab hint 01)", ""
    if count.compiles > 1 and counts[1] == counts[0] < counts[2]:  # a new threshold alone
        hint = "remove threshold from static_argnums / static_argnames: keep it traced"
        cause = "a new threshold compiled again, new data did not: threshold is static"
    what = f"compilations for {len(cases)} calls on arrays of length {length} with different "
    what += "data and thresholds"
    POSITIONS.compiles(grading, POSITIONS_ONCE, count, exactly=1, what=what, hint=hint, cause=cause)
