"""Grader for exercise 10 (compiling less): executables built at start-up, none in the loop.

The learner writes ``warm_up(fn, bucket_sizes, dtype)``, returning ``{bucket: Compiled}``,
and ``serve(requests, compiled)``, which pads each request to its bucket and runs it on
the precompiled executable. The grader passes its own fresh copy of ``summarise`` (so its
compilations can be counted from zero), fresh bucket sizes and fresh random requests, in
two rounds: float32, then float16.

What it rejects, and how:
- an unsolved stub, or a crash: reported by ``call_learner``;
- lazy compilation (``jax.jit(fn)`` returned instead of compiled): the values must be
  ``jax.stages.Compiled`` and ``warm_up`` must compile once per bucket;
- a warm-up that ignores ``dtype``: each executable must take ``dtype[bucket]``, which
  fails on the float16 round;
- a request sent without padding, or padded in another dtype: the executable raises
  ``TypeError``, reported with a hint about padding;
- compilation in the serving loop (a jitted call, ``jnp.pad`` or ``jnp.zeros`` for the
  padding): ``serve`` runs under ``count_compiles(None)`` and must trace and compile
  nothing at all;
- answers computed another way, or on the wrong bucket: the executables handed to
  ``serve`` count their calls, and each request must go to the smallest bucket that
  holds it;
- wrong numbers (``n`` mixed up with the bucket length, say): compared with NumPy.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import monitoring

from jitlab.grading import all_passed, call_learner, fail, fresh_rng, require, require_close
from jitlab.instruments.counting import COMPILE_EVENT, TRACE_EVENT, count_compiles

ROUNDS = (np.float32, np.float16)
BUCKET_POOL = np.arange(8, 257, 8)
BUCKETS_PER_ROUND = 4
EXTRA_REQUESTS = 20

_serial = itertools.count()


def make_summarise(name: str = "summarise") -> Callable[[Any, Any], jax.Array]:
    """The exercise's ``summarise``, as a new function object called ``name``.

    ``[mean, standard deviation, maximum]`` of the first ``n`` values of ``padded``,
    computed in float32 whatever the input dtype.
    """

    def summarise(padded, n):
        valid = jnp.arange(padded.shape[0]) < n
        x = jnp.where(valid, padded.astype(jnp.float32), 0.0)
        count = jnp.asarray(n, jnp.float32)
        mean = jnp.sum(x) / count
        var = jnp.sum(jnp.where(valid, (x - mean) ** 2, 0.0)) / count
        peak = jnp.max(jnp.where(valid, x, -jnp.inf))
        return jnp.stack([mean, jnp.sqrt(var), peak])

    summarise.__name__ = summarise.__qualname__ = name
    return summarise


def reference(x: np.ndarray) -> np.ndarray:
    """What ``summarise`` returns for one unpadded request, in float64."""
    values = x.astype(np.float64)
    return np.array([values.mean(), values.std(), values.max()])


class _Watched:
    """A Compiled that counts its calls; every other attribute is the Compiled's."""

    def __init__(self, compiled: Any) -> None:
        self._compiled = compiled
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self._compiled(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compiled, name)


def _draw_buckets(rng: np.random.Generator) -> list[int]:
    return sorted(int(b) for b in rng.choice(BUCKET_POOL, size=BUCKETS_PER_ROUND, replace=False))


def _draw_lengths(rng: np.random.Generator, buckets: list[int]) -> list[int]:
    """At least one request per bucket, then more of any length, shuffled."""
    lengths = [
        int(rng.integers(low + 1, high + 1))
        for low, high in zip([0, *buckets[:-1]], buckets, strict=True)
    ]
    lengths += [int(n) for n in rng.integers(1, buckets[-1] + 1, size=EXTRA_REQUESTS)]
    rng.shuffle(lengths)
    return lengths


def _padded_arg(compiled: Any) -> Any:
    """The ArgInfo of ``padded``, passed by position or by name."""
    args, kwargs = compiled.args_info
    return args[0] if args else kwargs.get("padded")


def _check_warm_up(warm_up: Callable[..., Any], buckets: list[int], dtype: type) -> dict:
    label = np.dtype(dtype).name
    kernel = make_summarise(f"summarise_{next(_serial)}")
    with count_compiles(kernel, explain=False) as at_start:
        compiled = call_learner("warm_up runs", warm_up, kernel, list(buckets), dtype)

    keys = sorted(compiled) if isinstance(compiled, dict) else None
    require(
        f"warm_up returns one entry per bucket ({label})",
        keys == buckets,
        expected=f"a dict with keys {buckets}",
        seen=f"keys {keys}" if keys is not None else type(compiled).__name__,
        hint="build {size: executable for size in bucket_sizes}",
    )
    kinds = sorted({type(v).__name__ for v in compiled.values()})
    require(
        f"warm_up returns compiled executables ({label})",
        all(isinstance(v, jax.stages.Compiled) for v in compiled.values()),
        expected="jax.stages.Compiled values, built before the first request",
        seen=", ".join(kinds),
        hint="jax.jit(fn) alone compiles lazily, on the first call; "
        "use jax.jit(fn).lower(...).compile()",
    )
    require(
        f"warm_up compiles every bucket once ({label})",
        at_start.compiles == len(buckets),
        expected=f"{len(buckets)} compilations of fn during warm_up",
        seen=str(at_start.compiles),
        hint="compile one executable per bucket size, with jax.ShapeDtypeStruct arguments",
    )
    takes = {}
    for size in buckets:
        arg = _padded_arg(compiled[size])
        takes[size] = "?" if arg is None else f"{np.dtype(arg.dtype).name}{list(arg.shape)}"
    wanted = {size: f"{label}[{size}]" for size in buckets}
    wrong = [size for size in buckets if takes[size] != wanted[size]]
    require(
        f"each executable takes a padded {label} request of its bucket's length",
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

    def attempt() -> Any:
        try:
            return serve(requests, watched)
        except TypeError as err:
            lines = str(err).strip().splitlines()
            raise fail(
                "serve calls each executable with the types it was compiled for",
                expected="each request padded to its bucket's length, in the request's dtype",
                seen=f"TypeError: {lines[-1] if lines else err}"[:300],
                hint="pad with NumPy to the bucket size, keeping the dtype: "
                "np.zeros(size, dtype=x.dtype), then copy x in",
            ) from err

    attempt.__name__ = "serve"
    monitoring.register_event_duration_secs_listener(on_duration)
    try:
        with count_compiles(None, explain=False) as serving:
            results = call_learner("serve runs", attempt)
    finally:
        monitoring.unregister_event_duration_listener(on_duration)
    return results, serving, sorted(set(traced))


def grade(warm_up: Callable[..., Any], serve: Callable[..., Any]) -> None:
    """Grade exercise 10's ``warm_up`` and ``serve`` on two rounds of fresh requests."""
    rng = fresh_rng()
    for dtype in ROUNDS:
        label = np.dtype(dtype).name
        buckets = _draw_buckets(rng)
        compiled = _check_warm_up(warm_up, buckets, dtype)

        lengths = _draw_lengths(rng, buckets)
        requests = [rng.normal(rng.normal(), 2.0, size=n).astype(dtype) for n in lengths]
        watched = {size: _Watched(executable) for size, executable in compiled.items()}
        results, serving, names = _run_serve(serve, requests, watched)

        require(
            f"serve traces and compiles nothing ({label})",
            serving.compiles == 0 and serving.traces == 0,
            expected=f"0 traces and 0 compilations for {len(requests)} requests",
            seen=f"{serving.traces} trace(s), {serving.compiles} compilation(s), "
            f"of: {', '.join(names)}",
            hint="call the executables from warm_up, and pad with NumPy: jnp.pad, "
            "jnp.zeros and jax.jit all compile when they see a new shape",
        )
        wanted_calls = {size: 0 for size in buckets}
        for n in lengths:
            wanted_calls[min(b for b in buckets if b >= n)] += 1
        seen_calls = {size: w.calls for size, w in watched.items()}
        require(
            f"each request runs on the smallest bucket that holds it ({label})",
            seen_calls == wanted_calls,
            expected=f"calls per bucket {wanted_calls}",
            seen=f"calls per bucket {seen_calls}",
            hint="pick min(b for b in compiled if b >= len(x)) and call compiled[b]; "
            "do not compute the answer any other way",
        )
        got = [np.asarray(r, dtype=np.float64) for r in results]
        require(
            f"serve returns one result per request ({label})",
            len(got) == len(requests),
            expected=f"a list of {len(requests)} results, in request order",
            seen=f"{len(got)} results",
        )
        shapes = sorted({str(g.shape) for g in got})
        require(
            f"each result is [mean, std, max] ({label})",
            shapes == ["(3,)"],
            expected="one array of shape (3,) per request",
            seen=f"shapes {', '.join(shapes)}",
            hint="return what the executable returns, one entry per request",
        )
        require_close(
            f"serve's numbers match the reference on {len(requests)} fresh requests ({label})",
            np.stack(got),
            np.stack([reference(x) for x in requests]),
            rtol=1e-4,
            atol=1e-4,
            hint="pass the request's real length as n, not the bucket size",
        )
    all_passed("10 compiling less")
