"""Grader for shapes. Part 1 (:func:`grade`): ``bucket_size``, the jitted ``padded_rms``
and the plain ``rms`` around it compile exactly once per bucket. Part 2
(:func:`grade_positions`): a fixed-size ``jnp.nonzero`` that compiles once per length.

Part 1 never rebinds the learner's names. It calls ``padded_rms`` itself (garbage past
``n``, and ``x`` padded with the learner's ``bucket_size``), then watches ``rms`` through
what its calls do: their outputs, the caller's ``x`` afterwards, and how many times
``padded_rms`` compiles at each call, from an emptied cache. The first four lengths are
placed so that every wrong padding shows in that pattern: a length that fills its bucket,
then one past it (two buckets: both calls compile), then two lengths of a third bucket
(the second compiles nothing). When the pattern is off, the grader calls the learner's
pieces again, in controlled ways, to name the cause.

===============================================  ======================================
what the drawing covers, every run               the wrong rule it breaks
===============================================  ======================================
every length 1..1,000 through bucket_size         a table or dict that misses a length
garbage past n: large, then +-inf and nan         no mask, a mask of <= n, a float 0/1
                                                  mask multiplied in (inf * 0 is nan)
a length that fills its bucket, then one past     padding assumed, off-by-one buckets,
it, each the first of its bucket: both compile    everything padded to one size (the
                                                  largest bucket, bucket_size(len(x)+1))
two lengths of one new bucket: the second         a static n, n passed in changing
compiles nothing                                  kinds, padding finer than the buckets
every bucket's shortest and longest length       padding finer than the buckets in any
                                                  one bucket (9..12 to 12, 13..16 to 16)
50 calls from an emptied cache: a compilation     a NumPy path, jit switched off, or
exactly at the first call of each bucket          padded_rms inside a jit of one's own
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
- loud_positions is compiled with jax.jit
- loud_positions computes inside its compiled program
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jitlab.grading import GradingFailure, Recorder, fail_unless, grader
from jitlab.grading import checks as c
from jitlab.grading import kernel as k
from jitlab.grading.calls import Changed, changed_arguments, copy_leaf
from jitlab.grading.checks import JIT_OFF_HINT, Grading
from jitlab.instruments.counting import count_compiles, miss_reason

MOST_BUCKETS, MAX_LENGTH, CALLS = 12, 1000, 50  # the exercise states "at most 12" sizes
RMS = k.KernelExercise("rms", "padded_rms", "padded_rms(padded, n)")
PADDING = "padded_rms ignores the padding"
NUMBERS = "rms matches the reference"
COMPILED = "rms runs padded_rms compiled"
PADS = "rms pads x to bucket_size(len(x))"
PER_BUCKET = "at most one compilation per bucket"
CLOSE = {"rtol": 1e-4, "atol": 1e-8}  # float32 sums against the float64 reference
CHECKS = (*RMS.names(k.JITTED, k.PLAIN), c.BUCKETS_HOLD, c.BUCKETS_FEW, RMS.name(k.NO_CALLBACKS))
CHECKS += (PADDING, NUMBERS, RMS.name(k.UNCHANGED), COMPILED, PADS, PER_BUCKET)
N_KINDS: dict[str, Callable[[int], Any]] = {  # how rms may pass n, as the grader tries it
    "a Python int": int,
    "np.int32": np.int32,
    "a Python float": float,
    "np.float32": np.float32,
}
STATIC_HINT = "keep n traced: not in static_argnums / static_argnames, not closed over"
KINDS_HINT = "pass n the same way on every call (always len(x), a Python int, say)"
PAD_HINT = "pad x to exactly bucket_size(len(x)), so that the lengths of one bucket share a shape"
CALL_HINT = (
    "rms must call padded_rms(padded, n) itself, with jit on, and return its result: not "
    "NumPy, not inside a jax.jit of your own (that inlines padded_rms into another program)"
)


def _reference_rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x.astype(np.float64)))))


def _lengths(rng: np.random.Generator, sizes: dict[int, int]) -> list[int]:
    """CALLS lengths. First a length that fills its bucket, one past it, then two lengths
    of a third bucket; then, shuffled, every bucket's shortest and longest length (1 and
    1,000 among them), two more full buckets and one past each, and lengths drawn at
    random."""
    full = [m for m, size in sizes.items() if size == m and 2 <= m < MAX_LENGTH]
    m = int(rng.choice(full)) if full else MAX_LENGTH // 2
    taken = (sizes[m], sizes[m + 1])
    shared = [[n for n in sizes if sizes[n] == size] for size in sorted(set(sizes.values()))]
    shared = [ns for ns in shared if len(ns) >= 2 and sizes[ns[0]] not in taken]
    pair = rng.choice(shared[rng.integers(len(shared))], size=2, replace=False)
    first, rest = [m, m + 1, *(int(n) for n in pair)], []
    for size in sorted(set(sizes.values())):  # every bucket's shortest and longest length:
        ns = [n for n in sizes if sizes[n] == size]  # a padding finer than the buckets
        rest += [min(ns), max(ns)]  # splits one of them, on every draw
    for more in rng.permutation(full)[:2]:
        rest += [int(more), int(more) + 1]
    rest += list(rng.integers(1, MAX_LENGTH + 1, size=CALLS - len(first) - len(rest)))
    return first + [int(n) for n in rng.permutation(rest)]


def _call_forms(kernel: Any) -> dict[str, Callable[[Any, Any], Any]]:
    """Each way rms may call the kernel: jit caches each form apart (a keyword is part
    of the cache key), so a consistent rms reaches one of them."""
    forms: dict[str, Callable[[Any, Any], Any]] = {"by position": lambda p, n: kernel(p, n)}
    try:
        names = list(inspect.signature(kernel).parameters)[:2]
    except (TypeError, ValueError):
        return forms
    if len(names) == 2:
        first, second = names
        forms["by keyword"] = lambda p, n: kernel(**{first: p, second: n})
        forms[f"{second}= by keyword"] = lambda p, n: kernel(p, **{second: n})
    return forms


def _cached(kernel: Any, size: int, n: int, *, first: bool = False) -> list[str]:
    """How ``kernel`` was called with an array of ``size`` since its cache was emptied:
    each kind of n and call form whose call compiles nothing now (only the first if
    ``first``). A miss adds its own entry, which the grader never asks about again."""
    hits = []
    padded = np.zeros(size, np.float32)
    for kind, make in N_KINDS.items():
        for form, call in _call_forms(kernel).items():
            try:
                with count_compiles(kernel, explain=False) as count:
                    call(padded, make(n))
            except Exception:  # a kind this kernel cannot take: not how rms called it
                continue
            if not count.compiles:
                hits.append(f"{kind} {form}")
                if first:
                    return hits
    return hits


def _compiles_alone(rms: Callable[..., Any], kernel: Any, x: np.ndarray) -> int:
    """padded_rms's compilations during one call of rms on a copy of ``x``, from the
    cache as it is (callers empty it first, or read what earlier calls left in it)."""
    with count_compiles(kernel, explain=False) as count:
        try:
            rms(x.copy())
        except Exception:  # it ran on this x before: a crash now is not the point
            pass
    return count.compiles


class Watched:
    """The calls of rms, one per array of ``data``, from an emptied cache of the kernel:
    outputs, what each changed of its x, the kernel's compilations and JAX's explanations
    during each call. Nothing of the learner's is rebound: the counter listens to JAX."""

    def __init__(
        self, grading: Grading, rms: Callable[..., Any], kernel: Any, data: list, sizes: dict
    ):
        self.sizes: dict[int, int] = sizes  # the learner's bucket_size of every length
        self.lengths = [len(x) for x in data]
        self.copies = [copy_leaf(x) for x in data]
        self.outputs: list[Any] = []
        self.compiled: list[int] = []
        self.heard: list[list[str]] = []
        kernel.clear_cache()  # count from a cold cache, whatever the notebook ran before
        with count_compiles(kernel) as self.count:
            for x in data:
                compiles, said = self.count.compiles, len(self.count.explanations)
                self.outputs.append(self._call(grading, rms, x))
                self.compiled.append(self.count.compiles - compiles)
                self.heard.append(self.count.explanations[said:])
        self.jit_off = bool(jax.config.jax_disable_jit)  # switched off inside rms, left off
        # compared after all calls: a later call may change an earlier call's x too
        self.changed: list[Changed] = [
            changed_arguments({"x": x}, {"x": copy})
            for x, copy in zip(data, self.copies, strict=True)
        ]

    def _call(self, grading: Grading, rms: Callable[..., Any], x: np.ndarray) -> Any:
        try:
            return grading.call_learner(NUMBERS, rms, x)
        except GradingFailure as failure:
            if failure.__cause__ is None:
                raise
            m, hint = len(x), "pad x to bucket_size(len(x)), not to a table of your own"
            expected = f"rms(x) to return for x of length {m} (bucket_size({m}) is "
            expected += f"{self.sizes[m]}; call {len(self.outputs) + 1})"
            raise c.learner_error(
                NUMBERS, failure.__cause__, expected=expected, hint=hint
            ) from None

    def first_off(self) -> tuple[int, int]:
        """The first call whose compilations differ from "one at the first call of each
        bucket, none after" and the first earlier call of its bucket (-1 if it is the
        first); (-1, -1) if every call compiled as it should."""
        first: dict[int, int] = {}
        for i, (n, compiled) in enumerate(zip(self.lengths, self.compiled, strict=True)):
            earlier = first.setdefault(self.sizes[n], i)
            if compiled != (earlier == i):
                return i, -1 if earlier == i else earlier
        return -1, -1

    def about(self, i: int) -> str:
        """Call ``i`` in words: "call 2 (x of length 65, bucket_size 128)"."""
        n = self.lengths[i]
        return f"call {i + 1} (x of length {n}, bucket_size {self.sizes[n]})"

    def jax_guess(self, i: int) -> str:
        """JAX's explanation of call ``i``'s last cache miss, as a second opinion."""
        said = self.heard[i]
        return (
            f'; JAX\'s closest-key guess: "{c.shorten(miss_reason(said[-1]), 160)}"' if said else ""
        )


def _never_compiled(watched: Watched, at: int | None = None) -> str:
    """What the grader saw of an rms that ran no compiled padded_rms (at call ``at``, or
    at any call)."""
    outputs = watched.outputs if at is None else [watched.outputs[at]]
    plain = [type(out).__name__ for out in outputs if not isinstance(out, jax.Array)]
    if watched.jit_off:
        return (
            "jit is switched off (jax_disable_jit is True after rms ran): padded_rms ran op "
            "by op, never compiled"
        )
    if at is None and watched.count.explanations:
        return (
            f"JAX traced padded_rms {len(watched.count.explanations)} time(s) without "
            "compiling it: it ran inside another jitted function in rms (a jax.jit of your "
            "own), inlined into that program"
        )
    if plain:
        return (
            f"rms returned a {plain[0]}, not the jax.Array padded_rms returns: it computed "
            "the answer without padded_rms (in NumPy?)"
        )
    return (
        "rms returned jax.Arrays, yet padded_rms never compiled: jit switched off inside rms "
        "(jax.disable_jit), padded_rms inside a jax.jit of your own (one already compiled), "
        "or the answer computed without padded_rms"
    )


def _shared_with(watched: Watched, i: int, rms: Callable[..., Any], kernel: Any) -> int:
    """The earlier call whose x reaches the program that call ``i``'s x compiles alone,
    from an emptied cache: -1 if none does, -2 if call ``i``'s x compiles nothing even
    then (rms runs no compiled padded_rms for it)."""
    kernel.clear_cache()
    if not _compiles_alone(rms, kernel, watched.copies[i]):
        return -2
    for j in range(i):
        if watched.compiled[j] and not _compiles_alone(rms, kernel, watched.copies[j]):
            return j
    return -1


def _one_size(watched: Watched, i: int, j: int, kernel: Any) -> str:
    """The size calls ``j`` and ``i`` padded to (read from the kernel's cache, which holds
    their one program), in words; "" if the grader cannot tell."""
    n, m, sizes = watched.lengths[i], watched.lengths[j], watched.sizes
    for size in dict.fromkeys([sizes[n], sizes[m], max(sizes.values())]):
        if _cached(kernel, size, n, first=True):
            return f"an array of {size}"
    return ""


def _require_one_path(
    grading: Grading, watched: Watched, rms: Any, kernel: Any, expected: str
) -> None:
    """A call of rms whose answer is no jax.Array where others are must compile
    padded_rms alone, from an emptied cache: the count cannot see a NumPy path for
    lengths that never come first in their bucket, its answer's type can."""
    arrays = [isinstance(out, jax.Array) for out in watched.outputs]
    if all(arrays) or not any(arrays):
        return
    i = arrays.index(False)
    kernel.clear_cache()
    if not _compiles_alone(rms, kernel, watched.copies[i]):
        seen = f"{watched.about(i)} compiled nothing, even alone from an emptied cache: "
        seen += _never_compiled(watched, i)
        grading.require(COMPILED, False, expected=expected, seen=seen, hint=CALL_HINT)


def _require_compiles(grading: Grading, watched: Watched, rms: Any, kernel: Any) -> None:
    """padded_rms compiles exactly at the first call of each bucket and at no other: the
    verdict names the first call that differs, and the cause that the grader's own calls
    of the learner's pieces show (JAX's explanation second)."""
    sizes = watched.sizes
    buckets = {sizes[n] for n in watched.lengths}
    what = f"{len(watched.lengths)} calls of rms, on lengths in {len(buckets)} buckets"
    expected = "one compilation of padded_rms at the first call of each bucket, none after"
    if watched.jit_off or not watched.count.compiles:
        seen = f"0 compilations of padded_rms in {what}: {_never_compiled(watched)}"
        hint = JIT_OFF_HINT if watched.jit_off else CALL_HINT
        grading.require(COMPILED, False, expected=expected, seen=seen, hint=hint)
    i, earlier = watched.first_off()
    if i < 0:
        _require_one_path(grading, watched, rms, kernel, expected)
        for check in (COMPILED, PADS, PER_BUCKET):
            grading.passed(check)
        return
    n, size, call = watched.lengths[i], sizes[watched.lengths[i]], watched.about(i)
    if not watched.compiled[i]:  # the first call of its bucket compiled nothing
        j = _shared_with(watched, i, rms, kernel)
        if j == -2:  # not even alone: rms runs no compiled padded_rms for this x
            seen = f"{call}, the first of its bucket, compiled nothing, nor did rms(x) alone "
            seen += f"from an emptied cache: {_never_compiled(watched, i)}"
            grading.require(COMPILED, False, expected=expected, seen=seen, hint=CALL_HINT)
        grading.passed(COMPILED)
        seen = f"{call}, the first of its bucket, compiled nothing"
        hint = PAD_HINT
        if j >= 0:
            m, to = watched.lengths[j], _one_size(watched, i, j, kernel)
            seen += f": rms hands padded_rms one shape for it and for length {m} (bucket_size "
            seen += f"{sizes[m]}, call {j + 1})" + (f": {to}" if to else "")
            largest = max(sizes.values())
            if to == f"an array of {largest}" and watched.count.compiles == 1:
                hint = f"every x was padded to an array of {largest}, the largest bucket: that "
                hint += f"compiles once, but every short x pays for the longest; {PAD_HINT}"
            elif to == f"an array of {sizes.get(m + 1)}" and sizes[m] != sizes.get(m + 1):
                hint = f"x of length {m} was padded to bucket_size({m + 1}): {PAD_HINT}"
        expected = f"x of length {n} padded to bucket_size({n}), {size}: a new shape, compiled"
        grading.require(PADS, False, expected=expected, seen=seen, hint=hint)
    grading.passed(COMPILED)
    guess, seen = watched.jax_guess(i), f"{watched.compiled[i]} compilation(s) at {call}"
    if earlier >= 0:
        seen += f", though call {earlier + 1} (length {watched.lengths[earlier]}) had compiled it"
        expected = f"no compilation for length {n}: its bucket, {size}, was compiled at call "
        expected += f"{earlier + 1}"
    kinds = _cached(kernel, size, n)  # before the grader's own calls add to the cache
    # two n that no call has used, on one padded array: a static n compiles for each
    unused = [m for m in range(1, 2 * MAX_LENGTH) if m not in set(watched.lengths)][:2]
    zeros = np.zeros(size, np.float32)
    if k.recompiled_by(kernel, (zeros, unused[0]), {"n": (zeros, unused[1])}):
        seen += f"; padded_rms compiled again when the grader called it with n={unused[1]} "
        seen += f"after n={unused[0]} on one padded array: n is static{guess}"
        grading.require(PER_BUCKET, False, expected=expected, seen=seen, hint=STATIC_HINT)
    if len(kinds) >= 2:
        seen += f"; padded_rms has compiled arrays of {size} for n passed as {', '.join(kinds)}: "
        seen += f"rms passes n in changing kinds{guess}"
        grading.require(PER_BUCKET, False, expected=expected, seen=seen, hint=KINDS_HINT)
    seen += f": rms pads x of length {n} to a size other than bucket_size({n}) = {size}{guess}"
    grading.require(PADS, False, expected=expected, seen=seen, hint=PAD_HINT)


def _require_unchanged(grading: Grading, watched: Watched) -> None:
    """rms left every caller's x as it was (the first change named)."""
    changed = [i for i, change in enumerate(watched.changed) if change.seen]
    seen = changed and (
        f"rms changed the caller's arguments in {len(changed)} of {len(watched.changed)} calls "
        f"(the first: for the array of length {watched.lengths[changed[0]]}, "
        f"{watched.changed[changed[0]].seen})"
    )
    hint = k.DONATED if changed and watched.changed[changed[0]].donated else ""
    RMS.require(grading, k.UNCHANGED, not changed, seen=seen or "", hint=hint)


def _require_kernel(
    grading: Grading, padded_rms: Any, sizes: dict[int, int], lengths: list[int]
) -> None:
    """The grader's own calls of padded_rms: no host callback, garbage past n (large, then
    inf and nan) ignored, a full bucket, and two of the drawn lengths padded with zeros to
    the learner's bucket_size."""
    rng = grading.rng
    n = int(rng.choice([m for m in range(5, 60) if sizes[m] > m]))
    full = int(rng.choice([m for m in range(2, MAX_LENGTH + 1) if sizes[m] == m] or [n]))
    RMS.no_callbacks(grading, padded_rms, np.ones(sizes[n], np.float32), 1)
    grading.passed(RMS.name(k.NO_CALLBACKS))
    non_finite = rng.choice(np.array([np.inf, -np.inf, np.nan], np.float32), size=sizes[n] - n)
    cases = [(n, rng.uniform(100, 1000, size=sizes[n] - n), "large values")]
    cases += [(n, non_finite, "inf and nan"), (full, np.zeros(0), "no padding")]
    cases += [(m, np.zeros(sizes[m] - m), "zeros") for m in lengths[1:4:2]]
    got, want, about, padded = [], [], [], []
    for m, garbage, what in cases:
        x = rng.normal(size=m).astype(np.float32)
        padded.append(np.append(x, garbage).astype(np.float32))
        got.append(grading.call_learner(PADDING, padded_rms, padded[-1].copy(), m))
        want.append(_reference_rms(x))
        about.append(f"n={m} in a bucket of {sizes[m]}, {what} past n")
    hint = lambda wrong: _padding_hint(got[wrong[0]], padded[wrong[0]], cases[wrong[0]][0])  # noqa: E731
    grading.require_cases(PADDING, got, want, about=about.__getitem__, hint=hint, **CLOSE)


@grader("shapes", part="one compilation per bucket", checks=CHECKS)
def grade(
    grading: Grading, bucket_size: Callable[[int], int], padded_rms: Any, rms: Callable[..., Any]
) -> None:
    """Grade part 1 of the exercise: ``bucket_size``, ``padded_rms`` and ``rms``."""
    rng = grading.rng
    RMS.jitted(grading, padded_rms)
    RMS.plain(grading, rms, seen="rms is wrapped by jax.jit: it compiles once per input length")
    sizes = grading.require_buckets(bucket_size, up_to=MAX_LENGTH, most=MOST_BUCKETS)
    lengths = _lengths(rng, sizes)
    _require_kernel(grading, padded_rms, sizes, lengths)

    data = [rng.normal(loc=rng.normal(), size=m).astype(np.float32) for m in lengths]
    watched = Watched(grading, rms, padded_rms, data, sizes)
    want = [_reference_rms(x) for x in watched.copies]
    about = [f"an array of length {m} (bucket {sizes[m]})" for m in lengths]
    hint = "rms returns one number: the RMS of the real values only"
    grading.require_cases(
        NUMBERS, watched.outputs, want, about=about.__getitem__, hint=hint, **CLOSE
    )
    _require_unchanged(grading, watched)
    _require_compiles(grading, watched, rms, padded_rms)


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
