"""Grader for compiling_less: ``warm_up`` builds one executable per bucket at start-up,
``serve`` pads each request with NumPy and runs it on the smallest bucket, compiling
nothing. The grader's kernel is ``summarise`` scaled and shifted by numbers drawn each
round, so only the executables can produce its answers (each result must be exactly one
an executable returned during that ``serve``). The draw, every run:

- bucket sizes never sorted: "the first key that fits" in dict order;
- every bucket size itself and one more, and length 1: ``>`` for ``>=``, an off-by-one;
- float32, then float16: a warm-up that ignores ``dtype``, float64 padding;
- the same request arrays refilled and served again: results kept by ``id(x)``;
- a last round with a new fn, in float32 again, on the first round's sizes and requests (the
  same contents, in new arrays): executables kept by size and dtype, results kept by the
  request's bytes;
- the caller's list checked after each serve: a request popped from it or the list sorted.
"""

from __future__ import annotations

import inspect
import itertools
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jitlab.grading import Recorder, fail, grader
from jitlab.grading.checks import JIT_ON, Grading, Hints, learner_line, shorten
from jitlab.instruments.counting import count_compiles

BUCKET_POOL = np.arange(8, 257, 8)

CHECKS = {  # every check once: its name, then its default hint
    (WARM_UP_RUNS := "warm_up runs"): "",
    (ONE_PER_BUCKET := "warm_up returns one entry per bucket"): """build {size: executable for size
        in bucket_sizes}""",
    (COMPILED_VALUES := "warm_up returns compiled executables"): """jax.jit(fn) alone compiles
        lazily, on the first call; use jax.jit(fn).lower(...).compile()""",
    (COMPILES_ONCE := "warm_up compiles fn once per bucket"): """compile the fn you are given, once
        per bucket size, from jax.ShapeDtypeStruct arguments""",
    (TAKES_DTYPE := "each executable takes its bucket's padded request and n, typed as asked"): (
        """build each jax.ShapeDtypeStruct from the bucket size and the dtype argument, and
        n's from jnp.int32"""
    ),
    (SERVE_RUNS := "serve runs"): "run the exercise cell on its own to see the full traceback",
    (RIGHT_TYPES := "serve calls each executable with the types it was compiled for"): """pad with
        NumPy in the request's own dtype (np.zeros alone makes float64), then copy x in""",
    (NOTHING_COMPILED := "serve traces and compiles nothing"): """call the executables from warm_up,
        and pad with NumPy: jnp.pad, jnp.zeros and jax.jit all compile when they see a new shape""",
    (REQUESTS_KEPT := "serve leaves the caller's requests as they were"): """pad a new array:
        x.resize, or writing into x, changes the caller's data""",
    (SMALLEST_BUCKET := "each request runs on the smallest bucket that holds it"): """take the
        smallest bucket size that holds len(x), for every request: the sizes do not arrive
        sorted, and a request as long as a bucket fits in it (jitlab hint 10)""",
    (ONE_RESULT_EACH := "serve returns one result per request"): """append what the executable
        returns for each request""",
    (FROM_EXECUTABLES := "every result is what an executable returned"): """return
        what the executable returned, unchanged: the grader's fn is not summarise, nothing else
        matches""",
    (NUMBERS := "serve's numbers match the reference"): """copy the request into the front of the
        padded array, and pass its real length as n, not the bucket size""",
}
_MISTAKES = {  # the mistakes a verdict names when the grader sees them
    JIT_ON: """remove jax.disable_jit() and jax.config.update('jax_disable_jit', True) from
    your code: a Compiled refuses to run with jit off""",
    "length": """n reached an executable as another type than it was compiled for: n is an
    int32 scalar, in warm_up's ShapeDtypeStruct and in what serve passes alike""",
    "compiled n": "compile for n as an int32 scalar: a ShapeDtypeStruct of shape (), no data",
    "kept": """a result or a padded copy kept from an earlier serve (by id(x), or by the
    request's contents) is stale once the arrays are refilled or warm_up compiles a new fn: pad
    and run every request again, every time""",
    "skipped": """serve called the executables fewer times than it was given requests: run every
    request through its bucket's executable, on every call. A result kept from an earlier serve
    (by id(x), or by the request's contents) is stale once the arrays are refilled or warm_up
    compiles a new fn""",
    "lazy": """serve returned a generator, which runs nothing until it is read: build and
    return a list, one result per request""",
    "reused": """warm_up returned executables kept from an earlier call (by bucket size and
    dtype, say): they run that call's fn. Compile the fn you are given, on every call""",
    "list": """leave the caller's list as it was: loop over it (for x in requests), and sort or
    group a copy (sorted(requests, key=len)), never requests.sort() or requests.pop()""",
    "convert": """jnp.int32(n), jnp.asarray(..., dtype) and .astype on a JAX array compile a
    conversion for every new type and shape: make n with np.int32(len(x)), and pad in NumPy""",
    "lookup": "the buckets are the keys of `compiled`, whatever their sizes: "
    + CHECKS[SMALLEST_BUCKET],
    "whole": """the numbers are those of the whole padded bucket: pass the request's real
    length len(x) as n, not the bucket size""",
    "arrays": """return each executable's output as it is (or np.asarray of it), not a Python
    list or number: .tolist() and float() make host copies the caller did not ask for""",
    "order": """every result is right for some request, but not for the one at its place:
    return the results in the order of the requests, one per request""",
}
HINTS = Hints(_MISTAKES, CHECKS)
_serial = itertools.count()


def _make_kernel(name: str, scale: float, shift: float) -> Callable[[Any, Any], jax.Array]:
    """``summarise`` as a new function called ``name``, its output scaled and shifted."""

    def kernel(padded, n):
        valid = jnp.arange(padded.shape[0]) < n
        x = jnp.where(valid, padded.astype(jnp.float32), 0.0)
        mean = jnp.sum(x) / n
        std = jnp.sqrt(jnp.sum(jnp.where(valid, (x - mean) ** 2, 0.0)) / n)
        return jnp.stack([mean, std, jnp.max(jnp.where(valid, x, -jnp.inf))]) * scale + shift

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


def _reference(x: np.ndarray, scale: float, shift: float) -> np.ndarray:
    values = x.astype(np.float64)
    return np.array([values.mean(), values.std(), values.max()]) * scale + shift


def _bytes(result: Any) -> bytes:
    """A result as the bytes of its three float32 numbers (b"" for anything else)."""
    try:
        return np.asarray(result, np.float32).reshape(3).tobytes()
    except (TypeError, ValueError):
        return b""


class _Watched(Recorder):
    """An executable whose calls and outputs are recorded."""


def _draw(rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """Unsorted sizes; lengths 1, each size, one more, one inside each bucket, any, shuffled."""
    sizes = [int(b) for b in rng.choice(BUCKET_POOL, size=4, replace=False)]
    while sizes == sorted(sizes):
        rng.shuffle(sizes)
    ordered = sorted(sizes)
    lengths = [1, *ordered, *(b + 1 for b in ordered[:-1])]
    lengths += [int(rng.integers(lo + 1, hi)) for lo, hi in itertools.pairwise([0, *ordered])]
    lengths += [int(n) for n in rng.integers(1, ordered[-1] + 1, size=12)]
    rng.shuffle(lengths)
    return sizes, lengths


def _warm_up(
    grading: Grading, warm_up: Callable[..., Any], buckets: list[int], dtype: type, kernel, earlier
) -> dict:
    """Check one ``warm_up``; ``earlier``: every executable an earlier one returned."""
    label, want = np.dtype(dtype).name, sorted(buckets)
    with count_compiles(kernel, explain=False) as at_start:
        compiled = grading.call_learner(WARM_UP_RUNS, warm_up, kernel, list(buckets), dtype)
    grading.passed(WARM_UP_RUNS)
    grading.require_jit_on("after your warm_up ran")
    keys: Any = type(compiled).__name__
    if isinstance(compiled, dict):
        try:
            keys = sorted(compiled)
        except TypeError:  # keys of several kinds (an int and a str): not the sizes
            keys = list(compiled)
    expected = f"a dict with keys {want} (the sizes passed in)"
    grading.require(ONE_PER_BUCKET, keys == want, expected, str(keys))
    kinds = ", ".join(sorted({type(v).__name__ for v in compiled.values()}))
    ok = all(isinstance(v, jax.stages.Compiled) for v in compiled.values())
    grading.require(
        COMPILED_VALUES, ok, "jax.stages.Compiled values, built before the first request", kinds
    )
    expected = f"{len(buckets)} compilations of fn during warm_up ({label} round)"
    seen = f"{at_start.compiles} compilation(s) of the fn passed in"
    reused = HINTS["reused"] * any(v is e for v in compiled.values() for e in earlier)
    grading.require(COMPILES_ONCE, at_start.compiles == len(buckets), expected, seen, reused)
    takes, order = {}, list(inspect.signature(kernel).parameters)  # padded, then n
    for size in want:
        args, kwargs = compiled[size].args_info  # JAX sorts keyword arguments by name
        given = [*args, *(kwargs[k] for k in order[len(args) :] if k in kwargs)][:2]
        avals = [f"{np.dtype(a.dtype).name}{list(a.shape)}" for a in given if hasattr(a, "dtype")]
        takes[size] = ", ".join(avals) or "?"
    wrong = [size for size in want if takes[size] != f"{label}[{size}], int32[]"]
    expected = ", ".join(f"{size}: {label}[{size}], int32[]" for size in wrong)
    seen = ", ".join(f"{s}: {takes[s]}" for s in wrong)
    n_wrong = any(takes[s].startswith(f"{label}[{s}]") for s in wrong)  # the padded one right
    grading.require(TAKES_DTYPE, not wrong, expected, seen, HINTS["compiled n"] * n_wrong)
    return compiled


def _serve_failure(err: Exception, requests: list, watched: dict) -> Exception:
    """The verdict for an exception from ``serve``: what it most likely means here."""
    lines, at = str(err).strip().splitlines(), learner_line(err)
    seen = shorten(f"{type(err).__name__}: {lines[-1] if lines else ''}", 200)
    seen += f", at {at}" if at else ""
    done = sum(len(w.calls) for w in watched.values())
    n = len(requests[min(done, len(requests) - 1)])
    bucket = f"request {done} (length {n}) to run on bucket "
    bucket += f"{min(b for b in watched if b >= n)} of {sorted(watched)}"
    check, expected, hint = SERVE_RUNS, "serve to finish", SERVE_RUNS
    if "Disable jit is not supported" in str(err):
        check, expected, hint = JIT_ON, "jit on while serve runs", JIT_ON
    elif isinstance(err, TypeError):
        expected = "each request padded to its bucket's length, in the request's dtype"
        check, hint = RIGHT_TYPES, RIGHT_TYPES
        if re.search(r"compiled with \w+\[\] and called with", str(err)):  # the length
            expected, hint = "n compiled and passed as an int32 scalar", "length"
    elif isinstance(err, LookupError | StopIteration | ValueError):
        check, expected, hint = SMALLEST_BUCKET, bucket, "lookup"
    return fail(check, expected=expected, seen=seen, hint=HINTS[hint])


def _serve_round(grading: Grading, serve, requests, watched, draw, before) -> list[bytes]:
    """Check one ``serve``; return its results' bytes, the refilled round's ``before``."""
    (scale, shift, label), lengths = draw, [len(x) for x in requests]
    originals, given = [x.copy() for x in requests], list(requests)

    def serve_checked() -> Any:
        try:
            return serve(requests, dict(watched))  # its own dict: the grader reads this one
        except (NotImplementedError, AssertionError):
            raise
        except Exception as err:
            raise _serve_failure(err, given, watched) from err

    serve_checked.__name__ = "serve"
    with count_compiles(None, explain=False) as serving:
        results = grading.call_learner(SERVE_RUNS, serve_checked)
    grading.passed(SERVE_RUNS)
    grading.passed(RIGHT_TYPES)
    grading.require_jit_on("after your serve ran")
    names = ", ".join(name.removeprefix("jit(").removesuffix(")") for name in serving.compiled)
    ok = serving.compiles == serving.traces == 0
    seen = f"{serving.traces} trace(s), {serving.compiles} compilation(s), of: {names or '-'}"
    hint = HINTS["convert"] * ("convert_element_type" in names)
    expected = f"0 traces and 0 compilations for {len(given)} requests"
    grading.require(NOTHING_COMPILED, ok, expected, seen, hint)
    same = len(requests) == len(given) and all(x is y for x, y in zip(requests, given, strict=True))
    reordered = sorted(map(id, requests)) == sorted(map(id, given))
    seen = "the same requests in another order" if reordered else f"{len(requests)} left in it"
    expected = f"the caller's list of {len(given)} requests as it was, in its order"
    grading.require(REQUESTS_KEPT, same, expected, f"serve changed the list: {seen}", HINTS["list"])
    changed = [i for i, x in enumerate(requests) if not np.array_equal(x, originals[i])]
    now = [len(requests[i]) for i in changed[:1]]
    seen = f"{len(changed)} changed, the first: request {changed[:1]}, length now {now}"
    grading.require(REQUESTS_KEPT, not changed, "every request array unchanged after serve", seen)

    bucket = [min(b for b in watched if b >= n) for n in lengths]
    wanted = {size: bucket.count(size) for size in sorted(watched)}
    calls = {size: len(watched[size].calls) for size in sorted(watched)}
    skipped = sum(calls.values()) < len(requests)
    order = f"bucket sizes passed as {list(watched)}" + ", arrays refilled" * (before is not None)
    expected = f"calls per bucket {wanted} ({label} round, {order})"
    seen = f"calls per bucket {calls}"
    lazy = inspect.isgenerator(results)  # nothing ran yet
    hint = HINTS["lazy" if lazy else "skipped"] * skipped
    grading.require(SMALLEST_BUCKET, calls == wanted, expected, seen, hint)

    got = list(results) if isinstance(results, list | tuple) else None
    seen = type(results).__name__ if got is None else f"{len(got)} results"
    ok = got is not None and len(got) == len(requests)
    grading.require(
        ONE_RESULT_EACH, ok, f"a list of {len(requests)} results, in request order", seen
    )
    kinds = sorted({type(r).__name__ for r in got if not isinstance(r, np.ndarray | jax.Array)})
    seen = f"results of type {', '.join(kinds)}"
    expected = "each result an array, as the executable returned it or as a NumPy array"
    grading.require(ONE_RESULT_EACH, not kinds, expected, seen, HINTS["arrays"])
    returned = {_bytes(c.out) for w in watched.values() for c in w.calls if not c.raised}
    as_bytes = list(map(_bytes, got))
    foreign = [i for i, b in enumerate(as_bytes) if b not in returned]
    stale = {i for i, b in enumerate(as_bytes) if before and b == before[i]}  # kept by id(x)
    first = f"request {foreign[0]}: {shorten(repr(got[foreign[0]]), 80)}" if foreign else ""
    seen = f"{len(foreign)} of {len(got)} results came from somewhere else ({first})"
    expected = "each result exactly as one of the executables returned it during this serve"
    hint = HINTS["kept"] * bool(stale.intersection(foreign))
    grading.require(FROM_EXECUTABLES, not foreign, expected, seen, hint)

    got_np = [np.asarray(r, np.float64) for r in got]
    want = [_reference(x, scale, shift) for x in requests]
    wrong = [i for i, g in enumerate(got_np) if not np.allclose(g, want[i], 1e-3, 1e-3)]
    i = wrong[0] if wrong else 0
    whole = _reference(np.pad(requests[i], (0, bucket[i] - lengths[i])), scale, shift)
    whole = np.allclose(got_np[i], whole, 1e-3, 1e-3)  # the bucket's size passed as n
    expected = f"{np.array2string(want[i], precision=4)} for request {i} (length {lengths[i]}, "
    seen = f"{np.array2string(got_np[i], precision=4)}; {len(wrong)} of {len(got)} results differ"
    hint = HINTS["kept"] if stale.intersection(wrong) else HINTS["whole"] * whole
    shuffled = all(any(np.allclose(g, w, 1e-3, 1e-3) for w in want) for g in got_np)
    hint = hint or HINTS["order"] * shuffled  # every result is some request's: out of order
    grading.require(NUMBERS, not wrong, expected + f"{label})", seen, hint)
    return as_bytes


@grader("compiling_less", checks=tuple(CHECKS), hints=HINTS)
def grade(grading: Grading, warm_up: Callable[..., Any], serve: Callable[..., Any]) -> None:
    """Grade ``warm_up`` and ``serve`` on three rounds, each served twice from the same
    arrays (refilled in place, as a loader reuses its buffers): float32, float16, then
    float32 again with a new fn on the first round's sizes and first requests."""
    rng, earlier, answered = grading.rng, [], None  # answered: the first serve's results
    # JAX compiles an eager op (jnp.int32(n)'s conversion) once per process: from emptied
    # caches, what serve compiles depends on this grading run alone, not on what ran
    # before it in the notebook (or in the tests)
    jax.clear_caches()
    buckets, lengths = _draw(rng)
    first = [rng.normal(rng.normal(), 2.0, size=n) for n in lengths]
    again = (np.float32, buckets, lengths, first)
    for dtype, buckets, lengths, contents in (again, (np.float16, *_draw(rng), None), again):
        scale, shift = float(rng.uniform(0.5, 2.0)), float(rng.uniform(-3.0, 3.0))
        kernel = _make_kernel(f"summarise_{next(_serial)}", scale, shift)
        draw = (scale, shift, np.dtype(dtype).name)
        compiled = _warm_up(grading, warm_up, buckets, dtype, kernel, earlier)
        earlier += compiled.values()
        requests = [np.empty(n, dtype) for n in lengths]
        before = answered if contents else None  # the last round: what the first answered
        for serving in range(2):
            fresh = [rng.normal(rng.normal(), 2.0, size=n) for n in lengths]
            fills = contents if contents and not serving else fresh
            for x, fill in zip(requests, fills, strict=True):
                x[:] = fill
            watched = {size: _Watched(compiled[size]) for size in buckets}
            before = _serve_round(grading, serve, requests, watched, draw, before)
            answered = answered or before
