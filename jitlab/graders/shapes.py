"""Grader for the shapes exercise.

Part 1, :func:`grade`: a variable-length RMS that compiles once per bucket. What it
rejects, and how:

- a hard-coded answer: every run draws new lengths and new data;
- a bucketing that is not one (a bucket too small, wasting half or more, or more than
  the 12 sizes the exercise states): every length from 1 to 1,000 is checked;
- padding that leaks into the result: ``padded_rms`` is fed garbage past ``n``, and
  also a length that fills its bucket exactly (no padding at all);
- work moved out of the compiled program: ``rms`` must be a plain function whose every
  answer is what the jitted ``padded_rms`` returned *during the grader's own call*. The
  grader watches ``padded_rms`` through :func:`jitlab.grading.recording` (a recording
  stand-in bound to the names ``rms`` reads), so a NumPy path with one decoy call, or an
  ``rms`` that never calls the kernel, fails; so does ``jax.disable_jit()`` inside
  ``rms``, named as such; a ``pure_callback`` to NumPy inside ``padded_rms`` is refused
  too;
- ``rms`` changing the caller's array in place (content is compared, not ``id``);
- one compilation per length: ``n`` made static, padding to the wrong size, or ``n``
  passed as different types. The verdict names which, from what the grader saw
  ``rms`` pass to ``padded_rms``, and quotes JAX's explanation only as a second opinion.
  The lengths drawn always put two lengths in one bucket, and include lengths that fill
  their bucket exactly and lengths one past them.

Part 2, :func:`grade_positions`: a fixed-size ``jnp.nonzero``. It draws, every run, a
threshold below every value, one above every value, one equal to some values (strictly
greater excludes them), values one float32 step above the threshold, and a negative
threshold; it checks the positions, the ``-1`` fill and the count, and that the function
compiles once for one length whatever the data and the threshold (a static threshold is
named as the cause).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from jitlab.grading import Call, Signature, call_learner, fail, fresh_rng, grader, passed
from jitlab.grading.checks import (
    BUCKETS_FEW,
    BUCKETS_HOLD,
    excerpt,
    first_difference,
    require_buckets,
    shorten,
)
from jitlab.grading.kernel import (
    FROM_KERNEL,
    JIT_ON,
    JITTED,
    NO_CALLBACKS,
    PLAIN,
    UNCHANGED,
    KernelExercise,
)
from jitlab.instruments.counting import count_compiles

SMALLEST_BUCKET_ALLOWED = 16
MOST_BUCKETS = 12  # stated in the exercise: "at most 12 distinct bucket sizes"
CALLS = 50
MAX_LENGTH = 1000

RMS = KernelExercise(
    wrapper="rms",
    kernel="padded_rms",
    call="padded_rms(padded, n)",
    hints={PLAIN.name: "remove @jax.jit from rms; only padded_rms is jitted"},
)
PADDING = "padded_rms ignores the padding"
NUMBERS = "rms matches the reference"
PER_BUCKET = "at most one compilation per bucket"
CHECKS = (
    *RMS.names(JITTED, PLAIN),
    BUCKETS_HOLD,
    BUCKETS_FEW,
    RMS.name(NO_CALLBACKS),
    PADDING,
    NUMBERS,
    *RMS.names(UNCHANGED, JIT_ON, FROM_KERNEL),
    PER_BUCKET,
)


def _reference_rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x.astype(np.float64)))))


def _lengths(rng: np.random.Generator, bucket_size: Callable[[int], int]) -> list[int]:
    """CALLS lengths: the edges drawn on purpose, the rest at random, shuffled."""
    sizes = {m: int(bucket_size(m)) for m in range(1, MAX_LENGTH + 1)}
    full = [m for m, size in sizes.items() if size == m]  # lengths that fill a bucket
    chosen = [1, MAX_LENGTH]
    for m in rng.permutation(full)[:3]:
        chosen += [int(m)] + ([int(m) + 1] if m < MAX_LENGTH else [])
    # Two different lengths in one bucket: a static n compiles twice there.
    by_bucket: dict[int, list[int]] = {}
    for m, size in sizes.items():
        by_bucket.setdefault(size, []).append(m)
    shared = [ms for ms in by_bucket.values() if len(ms) >= 2]
    pair = shared[int(rng.integers(len(shared)))]
    chosen += [int(m) for m in rng.choice(pair, size=2, replace=False)]
    chosen += [int(m) for m in rng.integers(1, MAX_LENGTH + 1, size=CALLS - len(chosen))]
    return [int(m) for m in rng.permutation(chosen)]


def _padding_cases(rng: np.random.Generator, bucket_size: Callable[[int], int]) -> list[int]:
    """Lengths to feed padded_rms directly: one with padding after it, one without."""
    with_padding = [m for m in range(5, 60) if int(bucket_size(m)) > m]
    cases = [int(rng.choice(with_padding))] if with_padding else []
    full = [m for m in range(2, MAX_LENGTH + 1) if int(bucket_size(m)) == m]
    if full:
        cases.append(int(rng.choice(full)))
    return cases


def _too_many_compiles(
    bucket_size: Callable[[int], int],
    lengths: list[int],
    calls: list[list[Call]],
    compiled: list[int],
) -> tuple[str, str]:
    """What the grader saw that explains extra compilations: (seen, hint)."""
    for m, during in zip(lengths, calls, strict=True):
        size = np.shape(during[-1].args[0])[0] if during and during[-1].args else None
        if size is not None and size != int(bucket_size(m)):
            return (
                f"rms passed padded_rms an array of {size} for x of length {m}, "
                f"but bucket_size({m}) is {bucket_size(m)}",
                "pad x to bucket_size(len(x)), so that lengths in one bucket share a shape",
            )
    per_signature: dict[Signature, int] = {}
    for during, new in zip(calls, compiled, strict=True):
        if during:
            key = during[-1].signature
            per_signature[key] = per_signature.get(key, 0) + new
    again = [sig for sig, n in per_signature.items() if n > 1]
    if again:
        return (
            f"padded_rms compiled {per_signature[again[0]]} times for arguments that "
            f"all looked like {again[0]}: only n changed between them, so n "
            "is part of the cache key (static)",
            "keep n a traced argument: remove it from static_argnums / static_argnames "
            "(and do not close over it); only the padded length should vary",
        )
    kinds = sorted({sig.leaves[1][1] for sig in per_signature if len(sig.leaves) > 1})
    if len(kinds) > 1:
        return (
            f"n reached padded_rms as {len(kinds)} different types: {', '.join(kinds)} "
            "('~' marks a weak type: a Python scalar)",
            "pass n the same way on every call (for instance always len(x), a Python int)",
        )
    return "", "pad to bucket_size(len(x)) and keep n traced"


@grader("shapes", part="one compilation per bucket", checks=CHECKS)
def grade(
    bucket_size: Callable[[int], int],
    padded_rms: Callable[..., Any],
    rms: Callable[[np.ndarray], Any],
) -> None:
    """Grade part 1 of the exercise: ``bucket_size``, ``padded_rms`` and ``rms``."""
    rng = fresh_rng()
    RMS.jitted(padded_rms)
    RMS.plain(rms, seen="rms is wrapped by jax.jit: it compiles once per input length")
    call_learner(BUCKETS_HOLD, bucket_size, 1)  # a stub says so first
    require_buckets(
        bucket_size,
        up_to=MAX_LENGTH,
        most=MOST_BUCKETS,
        smallest_allowed=SMALLEST_BUCKET_ALLOWED,
    )

    # Garbage past n must not change the answer; a full bucket has no padding at all.
    cases = _padding_cases(rng, bucket_size)
    RMS.no_callbacks(padded_rms, np.ones(int(bucket_size(cases[0])), np.float32), 1)
    for n in cases:
        size = int(bucket_size(n))
        x = rng.normal(size=n).astype(np.float32)
        garbage = rng.uniform(100, 1000, size=size - n).astype(np.float32)
        got = call_learner(PADDING, padded_rms, np.concatenate([x, garbage]), n)
        want = _reference_rms(x)
        if not np.allclose(np.asarray(got, np.float64), want, rtol=1e-4):
            raise fail(
                PADDING,
                expected=f"{want:.6g} for n={n} in a bucket of {size}",
                seen=f"{shorten(str(np.asarray(got)), 80)}"
                + (" (no padding in this call)" if size == n else ""),
                hint="mask the elements at positions >= n, and divide by n, "
                "not by the padded length",
            )
    passed(PADDING)

    lengths = _lengths(rng, bucket_size)
    buckets = {int(bucket_size(m)) for m in lengths}
    data = [rng.normal(loc=rng.normal(), size=m).astype(np.float32) for m in lengths]
    run = RMS.run(rms, padded_rms, [((x,), {}) for x in data], check=NUMBERS)
    for m, ((x,), _), got in zip(lengths, run.copies, run.outputs, strict=True):
        want = _reference_rms(x)
        try:
            value = np.asarray(got, np.float64)
        except (TypeError, ValueError):
            value = np.array(np.nan)
        if value.shape != () or not np.allclose(value, want, rtol=1e-4):
            raise fail(
                NUMBERS,
                expected=f"{want:.6g} for an array of length {m} (bucket {bucket_size(m)})",
                seen=shorten(repr(got), 120),
                hint="rms returns one number: the RMS of the real values only",
            )
    passed(NUMBERS)
    RMS.unchanged(run, what=lambda i: f"the array of length {lengths[i]}")
    RMS.jit_on(run.recorder)
    RMS.calls_kernel(run, first=lambda i: f"length {lengths[i]}")
    RMS.returns_kernel_output(run)
    cause, hint = "", "pad to bucket_size(len(x)) and keep n traced"
    if run.count.compiles > len(buckets):
        cause, hint = _too_many_compiles(bucket_size, lengths, run.calls, run.compiled)
    RMS.compiles(
        PER_BUCKET,
        run.count,
        at_most=len(buckets),
        what=f"compilations of padded_rms for {len(lengths)} calls ({len(set(lengths))} "
        f"distinct lengths in {len(buckets)} buckets)",
        hint=hint,
        cause=cause,
    )


# ------------------------------------------------------------ part 2: loud_positions

POSITIONS = KernelExercise(wrapper="", kernel="loud_positions", call="")
POSITIONS_CHECKS = (
    *POSITIONS.names(JITTED, NO_CALLBACKS),
    "loud_positions finds every position above the threshold",
    "loud_positions compiles once for one length",
)
POSITIONS_OK = "loud_positions finds every position above the threshold"


@dataclasses.dataclass(frozen=True)
class _Case:
    what: str
    x: np.ndarray
    threshold: float


def _positions_cases(rng: np.random.Generator, length: int) -> list[_Case]:
    """Every run: ordinary data twice (same threshold, then a new one), none above,
    all above, values equal to the threshold, values one float32 step above it, and a
    negative threshold."""

    def noise() -> np.ndarray:
        return rng.normal(size=length).astype(np.float32)

    ordinary = noise()
    threshold = float(np.float32(rng.uniform(0.2, 0.8)))
    equal = noise()
    at = rng.choice(length, size=max(2, length // 8), replace=False)
    equal[at] = np.float32(threshold)
    above = noise()
    near = rng.choice(length, size=max(2, length // 8), replace=False)
    above[near] = np.nextafter(np.float32(threshold), np.float32(np.inf))
    lowest = noise()
    return [
        _Case("ordinary data", ordinary, threshold),
        _Case("other data, the same threshold", noise(), threshold),
        _Case("the same data, a new threshold", ordinary, float(np.float32(threshold + 0.5))),
        _Case("no value above the threshold", noise(), 100.0),
        _Case("every value above the threshold", noise(), -100.0),
        _Case("values equal to the threshold (not above it)", equal, threshold),
        _Case("values one float32 step above the threshold", above, threshold),
        _Case("a negative threshold", lowest, float(np.float32(-rng.uniform(0.2, 1.0)))),
    ]


def _reference_positions(x: np.ndarray, threshold: float) -> tuple[np.ndarray, int]:
    found = np.flatnonzero(x > np.float32(threshold))
    positions = np.full(x.shape[0], -1, dtype=np.int64)
    positions[: found.size] = found
    return positions, int(found.size)


def _positions_hint(case: _Case, got: np.ndarray, want: np.ndarray) -> str:
    """The likeliest cause of a wrong ``positions``, from what differs."""
    real_count = int(np.sum(want >= 0))
    if got.shape == want.shape and np.array_equal(got[:real_count], want[:real_count]):
        return "the unused slots hold -1: pass fill_value=-1 to jnp.nonzero"
    real = set(want[want >= 0].tolist())
    mine = set(got[got >= 0].tolist())
    if real == mine and got.shape == want.shape:
        return "list the positions in increasing order, as jnp.nonzero does"
    equal = set(np.flatnonzero(case.x == np.float32(case.threshold)).tolist())
    if equal and mine == real | equal:
        return "strictly greater: a value equal to the threshold is not above it (>, not >=)"
    return "positions are the indices i with x[i] > threshold, then -1 in the unused slots"


@grader("shapes", part="positions of any count", checks=POSITIONS_CHECKS)
def grade_positions(loud_positions: Callable[..., Any]) -> None:
    """Grade part 2 of the exercise: ``loud_positions(x, threshold)``."""
    rng = fresh_rng()
    length = int(rng.integers(40, 97))
    cases = _positions_cases(rng, length)
    POSITIONS.jitted(loud_positions)
    POSITIONS.no_callbacks(loud_positions, cases[0].x, cases[0].threshold)

    loud_positions.clear_cache()
    outputs, compiled = [], []
    with count_compiles(loud_positions) as count:
        for case in cases:
            before = count.compiles
            outputs.append(call_learner(POSITIONS_OK, loud_positions, case.x, case.threshold))
            compiled.append(count.compiles - before)

    for case, out in zip(cases, outputs, strict=True):
        want, want_count = _reference_positions(case.x, case.threshold)
        if not (isinstance(out, tuple | list) and len(out) == 2):
            raise fail(
                POSITIONS_OK,
                expected="a pair (positions, count)",
                seen=shorten(f"{type(out).__name__}: {out!r}", 120),
                hint="return positions, count",
            )
        got = np.asarray(out[0])
        got_count = np.asarray(out[1])
        if got.shape != want.shape or not np.array_equal(got, want):
            at = first_difference(got, want) if got.shape == want.shape else 0
            raise fail(
                POSITIONS_OK,
                expected=f"{excerpt(want, at, 12)} for {case.what} "
                f"(threshold {case.threshold:g}, length {length})",
                seen=f"{excerpt(got, at, 12)} (shape {got.shape})",
                hint=_positions_hint(case, got.reshape(-1), want),
            )
        if got_count.shape != () or int(got_count) != want_count:
            raise fail(
                POSITIONS_OK,
                expected=f"count {want_count} for {case.what}",
                seen=f"count {shorten(str(got_count.tolist()), 60)}",
                hint="count is how many positions are real: jnp.sum(x > threshold)",
            )
    passed(POSITIONS_OK)

    hint = "use a fixed size (size=x.shape[0]) and keep threshold an ordinary argument"
    why = ""
    # Case 1 changes only the data, case 2 only the threshold (see _positions_cases).
    if count.compiles > 1 and compiled[1] == 0 and compiled[2] > 0:
        why = (
            "it compiled again when only the threshold changed, and not when only the "
            "data changed: threshold is static"
        )
        hint = "remove threshold from static_argnums / static_argnames: keep it traced"
    POSITIONS.compiles(
        "loud_positions compiles once for one length",
        count,
        exactly=1,
        what=f"compilations for {len(cases)} calls on arrays of length {length} "
        "with different data and thresholds",
        hint=hint,
        cause=why,
    )
