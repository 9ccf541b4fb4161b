"""Grader for the compiling less exercise: executables built at start-up, none in the loop.

The learner writes ``warm_up(fn, bucket_sizes, dtype)``, returning ``{bucket: Compiled}``,
and ``serve(requests, compiled)``, which pads each request to its bucket and runs it on
the precompiled executable. The grader passes a kernel of its own with ``summarise``'s
signature (fresh each round, so its compilations count from zero; its output is
``summarise``'s, scaled and shifted by numbers drawn for the round, so only the
executables can produce it), fresh bucket sizes in an unsorted order, and fresh random
requests, in two rounds: float32, then float16.

What it rejects, and how:
- an unsolved stub, or a crash: reported by ``call_learner``;
- jit switched off (``jax.config.update("jax_disable_jit", True)`` or
  ``jax.disable_jit()``), in ``warm_up`` or in ``serve``: the ``@grader`` canaries, a
  check right after each of the learner's functions, and the executables' own refusal
  to run with jit off, each reported as jit being off;
- lazy compilation (``jax.jit(fn)`` returned instead of compiled): the values must be
  ``jax.stages.Compiled`` and ``warm_up`` must compile ``fn`` once per bucket;
- a warm-up that ignores ``dtype``: each executable must take ``dtype[bucket]``;
- a request sent without padding, or padded in another dtype: the executable raises
  ``TypeError``, reported with a hint about padding;
- compilation in the serving loop (a jitted call, ``jnp.pad`` or ``jnp.zeros`` for the
  padding): ``serve`` runs under ``count_compiles(None)`` and must trace and compile
  nothing at all;
- the caller's requests changed in place (padding by ``resize``, say): their contents
  are compared with copies taken before ``serve`` ran;
- the wrong bucket (not the smallest that holds the request): the executables handed to
  ``serve`` count their calls per bucket. The lengths include every bucket size itself
  and one more than it, and the bucket sizes arrive unsorted, so ``>`` for ``>=`` or
  "the first key that fits" cannot pass by luck;
- answers computed another way (NumPy, a jitted copy, the grader's reference), with or
  without a decoy call to the executables: every result must be exactly an output
  that one of the executables returned during ``serve``;
- wrong numbers from the right executable (``n`` mixed up with the bucket length, the
  request copied to the wrong place): compared with a float64 reference, and the hint
  says which mistake fits the numbers.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import monitoring

from jitlab.grading import call_learner, fail, fresh_rng, grader, passed, require, require_jit_on
from jitlab.grading.checks import JIT_ON, grader_changes, grader_owned, shorten
from jitlab.instruments.counting import COMPILE_EVENT, TRACE_EVENT, count_compiles

ROUNDS = (np.float32, np.float16)
BUCKET_POOL = np.arange(8, 257, 8)
BUCKETS_PER_ROUND = 4
EXTRA_REQUESTS = 12

WARM_UP_RUNS = "warm_up runs"
ONE_PER_BUCKET = "warm_up returns one entry per bucket"
COMPILED_VALUES = "warm_up returns compiled executables"
COMPILES_ONCE = "warm_up compiles fn once per bucket"
TAKES_DTYPE = "each executable takes a padded request of its bucket's size and dtype"
SERVE_RUNS = "serve runs"
RIGHT_TYPES = "serve calls each executable with the types it was compiled for"
NOTHING_COMPILED = "serve traces and compiles nothing"
REQUESTS_KEPT = "serve leaves the caller's requests as they were"
SMALLEST_BUCKET = "each request runs on the smallest bucket that holds it"
ONE_RESULT_EACH = "serve returns one result per request"
FROM_EXECUTABLES = "every result is what an executable returned"
NUMBERS = "serve's numbers match the reference"

CHECKS = (
    WARM_UP_RUNS,
    ONE_PER_BUCKET,
    COMPILED_VALUES,
    COMPILES_ONCE,
    TAKES_DTYPE,
    SERVE_RUNS,
    RIGHT_TYPES,
    NOTHING_COMPILED,
    REQUESTS_KEPT,
    SMALLEST_BUCKET,
    ONE_RESULT_EACH,
    FROM_EXECUTABLES,
    NUMBERS,
)

_serial = itertools.count()


def _make_kernel(name: str, scale: float, shift: float) -> Callable[[Any, Any], jax.Array]:
    """``summarise``'s computation as a new function called ``name``, its output
    multiplied by ``scale`` and shifted by ``shift`` (drawn by the grader each round)."""

    def kernel(padded, n):
        valid = jnp.arange(padded.shape[0]) < n
        x = jnp.where(valid, padded.astype(jnp.float32), 0.0)
        count = jnp.asarray(n, jnp.float32)
        mean = jnp.sum(x) / count
        var = jnp.sum(jnp.where(valid, (x - mean) ** 2, 0.0)) / count
        peak = jnp.max(jnp.where(valid, x, -jnp.inf))
        return jnp.stack([mean, jnp.sqrt(var), peak]) * scale + shift

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


def _reference(x: np.ndarray, scale: float, shift: float) -> np.ndarray:
    """What the round's kernel returns for one unpadded request, in float64."""
    values = x.astype(np.float64)
    return np.array([values.mean(), values.std(), values.max()]) * scale + shift


class _Watched:
    """A Compiled that counts its calls and keeps what it returned; every other
    attribute is the Compiled's own."""

    def __init__(self, compiled: Any) -> None:
        self._compiled = compiled
        self.calls = 0
        self.outputs: list[np.ndarray] = []
        grader_owned(self, self.outputs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with grader_changes(self):
            self.calls += 1
        out = self._compiled(*args, **kwargs)
        kept = np.asarray(out)
        with grader_changes(self.outputs):
            self.outputs.append(kept)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compiled, name)


def _draw_buckets(rng: np.random.Generator) -> list[int]:
    """Bucket sizes in an order that is never sorted, so the learner must sort them."""
    sizes = [int(b) for b in rng.choice(BUCKET_POOL, size=BUCKETS_PER_ROUND, replace=False)]
    while sizes == sorted(sizes):
        rng.shuffle(sizes)
    return sizes


def _draw_lengths(rng: np.random.Generator, buckets: list[int]) -> list[int]:
    """Every bucket size itself and one more (the edges of ``>=``), length 1, one length
    strictly inside each bucket, then more of any length, shuffled."""
    ordered = sorted(buckets)
    lengths = [1, *ordered, *(b + 1 for b in ordered[:-1])]
    lengths += [
        int(rng.integers(low + 1, high))
        for low, high in zip([0, *ordered[:-1]], ordered, strict=True)
    ]
    lengths += [int(n) for n in rng.integers(1, ordered[-1] + 1, size=EXTRA_REQUESTS)]
    rng.shuffle(lengths)
    return lengths


def _padded_arg(compiled: Any) -> Any:
    """The ArgInfo of ``padded``, passed by position or by name."""
    args, kwargs = compiled.args_info
    return args[0] if args else kwargs.get("padded")


def _jit_switched_off(err: BaseException) -> bool:
    return "Disable jit is not supported" in str(err)


def _fail_jit_off(where: str, err: BaseException) -> None:
    raise fail(
        JIT_ON,
        expected=f"jit switched on while {where} runs",
        seen=shorten(f"{type(err).__name__}: {err}", 200),
        hint="remove jax.disable_jit() and jax.config.update('jax_disable_jit', True) "
        "from your code: a Compiled refuses to run with jit off",
    ) from err


def _check_warm_up(warm_up: Callable[..., Any], buckets: list[int], dtype: type, kernel) -> dict:
    label = np.dtype(dtype).name
    with count_compiles(kernel, explain=False) as at_start:
        compiled = call_learner(WARM_UP_RUNS, warm_up, kernel, list(buckets), dtype)
    passed(WARM_UP_RUNS)
    require_jit_on("after your warm_up ran")

    want = sorted(buckets)
    keys = sorted(compiled) if isinstance(compiled, dict) else None
    require(
        ONE_PER_BUCKET,
        keys == want,
        expected=f"a dict with keys {want} (the bucket sizes passed in)",
        seen=f"keys {keys}" if keys is not None else type(compiled).__name__,
        hint="build {size: executable for size in bucket_sizes}",
    )
    kinds = sorted({type(v).__name__ for v in compiled.values()})
    require(
        COMPILED_VALUES,
        all(isinstance(v, jax.stages.Compiled) for v in compiled.values()),
        expected="jax.stages.Compiled values, built before the first request",
        seen=", ".join(kinds),
        hint="jax.jit(fn) alone compiles lazily, on the first call; "
        "use jax.jit(fn).lower(...).compile()",
    )
    require(
        COMPILES_ONCE,
        at_start.compiles == len(buckets),
        expected=f"{len(buckets)} compilations of fn during warm_up ({label} round)",
        seen=f"{at_start.compiles} compilation(s) of the fn passed in",
        hint="compile the fn you are given, once per bucket size, from "
        "jax.ShapeDtypeStruct arguments",
    )
    takes = {}
    for size in want:
        arg = _padded_arg(compiled[size])
        takes[size] = "?" if arg is None else f"{np.dtype(arg.dtype).name}{list(arg.shape)}"
    wanted = {size: f"{label}[{size}]" for size in want}
    wrong = [size for size in want if takes[size] != wanted[size]]
    require(
        TAKES_DTYPE,
        not wrong,
        expected=", ".join(f"{size}: {wanted[size]}" for size in wrong),
        seen=", ".join(f"{size}: {takes[size]}" for size in wrong),
        hint="build each jax.ShapeDtypeStruct from the bucket size and the dtype argument",
    )
    return compiled


def _run_serve(
    serve: Callable[..., Any], requests: list[np.ndarray], watched: dict
) -> tuple[Any, Any, list[str]]:
    traced: list[str] = []

    def on_duration(event: str, seconds: float, **kwargs: Any) -> None:
        if event in (TRACE_EVENT, COMPILE_EVENT):
            name = str(kwargs.get("fun_name", "?"))
            traced.append(name[4:-1] if name.startswith("jit(") else name)

    def serve_checked() -> Any:
        try:
            return serve(requests, watched)
        except TypeError as err:
            lines = str(err).strip().splitlines()
            raise fail(
                RIGHT_TYPES,
                expected="each request padded to its bucket's length, in the request's dtype",
                seen=shorten(f"TypeError: {lines[-1] if lines else err}", 300),
                hint="pad with NumPy to the bucket size, keeping the dtype: "
                "np.zeros(size, dtype=x.dtype), then copy x in",
            ) from err
        except Exception as err:
            if _jit_switched_off(err):
                _fail_jit_off("serve", err)
            raise

    serve_checked.__name__ = "serve"
    monitoring.register_event_duration_secs_listener(on_duration)
    try:
        with count_compiles(None, explain=False) as serving:
            results = call_learner(SERVE_RUNS, serve_checked)
    finally:
        monitoring.unregister_event_duration_listener(on_duration)
    passed(SERVE_RUNS)
    passed(RIGHT_TYPES)
    require_jit_on("after your serve ran")
    return results, serving, sorted(set(traced))


def _check_results(
    results: Any,
    requests: list[np.ndarray],
    lengths: list[int],
    buckets: list[int],
    watched: dict,
    scale: float,
    shift: float,
    label: str,
) -> None:
    got = list(results) if isinstance(results, list | tuple) else None
    require(
        ONE_RESULT_EACH,
        got is not None and len(got) == len(requests),
        expected=f"a list of {len(requests)} results, in request order",
        seen=type(results).__name__ if got is None else f"{len(got)} results",
        hint="append what the executable returns for each request",
    )
    returned = {out.astype(np.float32).tobytes() for w in watched.values() for out in w.outputs}
    foreign = []
    for i, result in enumerate(got):
        try:
            as_array = np.asarray(result, dtype=np.float32)
        except (TypeError, ValueError):
            as_array = None
        if as_array is None or as_array.shape != (3,) or as_array.tobytes() not in returned:
            foreign.append(i)
    require(
        FROM_EXECUTABLES,
        not foreign,
        expected="each result exactly as one of the executables returned it",
        seen=f"{len(foreign)} of {len(got)} results came from somewhere else "
        f"(the first: request {foreign[0] if foreign else '-'}, "
        f"{shorten(repr(got[foreign[0]]), 80) if foreign else '-'})",
        hint="return compiled[size](padded, n) for every request; the grader's fn is not "
        "summarise, so computing the answer another way cannot match",
    )
    got_np = np.stack([np.asarray(r, dtype=np.float64) for r in got])
    want = np.stack([_reference(x, scale, shift) for x in requests])
    if np.allclose(got_np, want, rtol=1e-3, atol=1e-3):
        passed(NUMBERS)
        return
    wrong = [i for i in range(len(got)) if not np.allclose(got_np[i], want[i], 1e-3, 1e-3)]
    first = wrong[0]
    bucket = min(b for b in buckets if b >= lengths[first])
    padded = np.zeros(bucket, requests[first].dtype)
    padded[: lengths[first]] = requests[first]
    as_bucket_n = _reference(padded, scale, shift)
    if np.allclose(got_np[first], as_bucket_n, rtol=1e-3, atol=1e-3):
        hint = "the numbers are those of the whole padded bucket: pass the request's real "
        hint += "length len(x) as n, not the bucket size"
    else:
        hint = "copy the request into the front of the padded array, padded[:len(x)] = x, "
        hint += "and pass len(x) as n"
    raise fail(
        NUMBERS,
        expected=f"{np.array2string(want[first], precision=4)} for request {first} "
        f"(length {lengths[first]}, {label})",
        seen=f"{np.array2string(got_np[first], precision=4)}; {len(wrong)} of "
        f"{len(got)} results differ",
        hint=hint,
    )


@grader("compiling_less", checks=CHECKS)
def grade(warm_up: Callable[..., Any], serve: Callable[..., Any]) -> None:
    """Grade the exercise's ``warm_up`` and ``serve`` on two rounds of fresh requests."""
    rng = fresh_rng()
    for dtype in ROUNDS:
        label = np.dtype(dtype).name
        scale, shift = float(rng.uniform(0.5, 2.0)), float(rng.uniform(-3.0, 3.0))
        kernel = _make_kernel(f"summarise_{next(_serial)}", scale, shift)
        buckets = _draw_buckets(rng)
        compiled = _check_warm_up(warm_up, buckets, dtype, kernel)

        lengths = _draw_lengths(rng, buckets)
        requests = [rng.normal(rng.normal(), 2.0, size=n).astype(dtype) for n in lengths]
        originals = [x.copy() for x in requests]
        watched = {size: _Watched(executable) for size, executable in compiled.items()}
        grader_owned(watched)
        results, serving, names = _run_serve(serve, requests, watched)

        require(
            NOTHING_COMPILED,
            serving.compiles == 0 and serving.traces == 0,
            expected=f"0 traces and 0 compilations for {len(requests)} requests",
            seen=f"{serving.traces} trace(s), {serving.compiles} compilation(s), "
            f"of: {', '.join(names)}",
            hint="call the executables from warm_up, and pad with NumPy: jnp.pad, "
            "jnp.zeros and jax.jit all compile when they see a new shape",
        )
        changed = [
            i
            for i, (now, before) in enumerate(zip(requests, originals, strict=True))
            if now.shape != before.shape or not np.array_equal(now, before)
        ]
        require(
            REQUESTS_KEPT,
            not changed,
            expected="every request array unchanged after serve",
            seen=f"{len(changed)} request(s) changed, the first: request {changed[0]} "
            f"(length {len(originals[changed[0]])}, now shape {requests[changed[0]].shape})"
            if changed
            else "-",
            hint="pad a new array (np.zeros(size, dtype=x.dtype), then copy x in); "
            "x.resize or writing into x changes the caller's data",
        )
        wanted_calls = {size: 0 for size in sorted(buckets)}
        for n in lengths:
            wanted_calls[min(b for b in buckets if b >= n)] += 1
        seen_calls = {size: watched[size].calls for size in sorted(buckets)}
        require(
            SMALLEST_BUCKET,
            seen_calls == wanted_calls,
            expected=f"calls per bucket {wanted_calls} ({label} round, bucket sizes "
            f"passed as {buckets})",
            seen=f"calls per bucket {seen_calls}",
            hint="pick min(b for b in compiled if b >= len(x)) and call compiled[b] once "
            "per request; the sizes do not arrive sorted, and a request as long as a "
            "bucket fits in it",
        )
        _check_results(results, requests, lengths, buckets, watched, scale, shift, label)
