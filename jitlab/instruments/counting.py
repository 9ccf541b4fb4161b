"""Count traces and compilations of one jitted function, using JAX's public hooks.

Why not count every compilation? Because ``jnp.ones(n)`` and friends compile tiny
programs of their own: a loop over three shapes compiles ``f`` three times *and*
``broadcast_in_dim`` three times. Counting everything would report six and teach the
wrong lesson. ``jax.monitoring`` duration events carry ``fun_name``, so we keep only
the events of the function under study.

Why keep the explanations? ``jax_explain_cache_misses`` makes JAX log *why* each
tracing-cache miss happened ("different input types: now f32[4] and before f32[3]").
That text is a learner's best clue, so the counter keeps it; it is JAX's guess at the
closest earlier key, though, not a verdict (lesson 09).

What the counter cannot see, because JAX's public events do not say it (each pinned by
a test in ``tests/instruments/test_counting.py``):

- **Inner jitted functions.** A jitted function called inside another is traced as part
  of the outer program, and tracing events fire only at top level: ``count_compiles(inner)``
  reports 0 traces and 0 compilations, yet it captures inner's cache-miss explanations.
- **Transforms of a jitted function.** ``jax.grad(f_jit)`` and ``jax.vmap(f_jit)`` compile
  programs that JAX also names ``jit(f)``: they count as compilations of ``f`` although
  no call of ``f`` missed its cache.
- **``jax.pmap``.** Its events carry an internal name, so ``count_compiles(f)`` does not
  see them (``count_compiles(None)`` does).
- **What ``traces`` counts.** Tracing-cache misses, not runs of the Python body: JAX
  can answer a miss from an inner cache without running your Python again.
- **Empty explanations.** A function whose source file lies inside JAX or the standard
  library never gets one (``jnp.sum``, ``jnp.ravel``, ``jax.nn.relu``): JAX explains
  misses only for code outside them. An application that silences the ``jax`` logger
  would get none either, so while it counts, the counter sets JAX's explanation
  loggers (children of ``jax``, never ``jax`` itself) to WARNING, for explanations only,
  and puts their levels back afterwards. It hears them through a logging filter, not a
  handler, so JAX's other warnings still print
  (:mod:`jitlab.instruments.explanations`).
- **Explanations for** ``<unknown>``. A function without a source file (``jnp.maximum``,
  a ``jnp.ufunc`` on JAX 0.12; a callable object) *is* explained, as ``<unknown>``. The
  counter keeps such an explanation only when JAX's explaining frame holds the very
  object it counts (the function ``jax.jit`` wraps), so it keeps every one JAX gives
  for that function and none of another ``<unknown>``'s; counting by a name (a string)
  keeps none of them.
- **Callable objects.** A jitted instance of a class with ``__call__`` is reported by
  JAX as ``<unnamed function>``; the counter matches that name, so it counts every
  unnamed callable together. Give such code a named function to count.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import jax

from jitlab.instruments import events
from jitlab.instruments.events import COMPILE_EVENT, LOWER_EVENT, TRACE_EVENT
from jitlab.instruments.explanations import (
    UNKNOWN,
    closest_key_difference,
    explained_callable,
    explained_function,
    hearing_explanations,
)
from jitlab.instruments.jax_frames import jax_local

ANY_FUNCTION = None
"""Pass as ``count_compiles(ANY_FUNCTION)`` to count every function JAX compiles."""


class CounterLost(RuntimeError):
    """The counter's listener was removed from JAX while it counted (its count is wrong)."""


@dataclasses.dataclass
class CompileCount:
    """What JAX did for one function while the ``count_compiles`` block ran.

    ``traces``: jit's tracing cache missed (a *miss*, not a run of your Python: JAX may
    answer it from an inner cache, so a ``print`` inside the function can stay silent
    while ``traces`` goes up). Top-level calls only: see the module's list of limits.
    ``lowerings``: a jaxpr was lowered to StableHLO.
    ``compiles``: JAX asked the backend for an executable (the expensive step). With
    the persistent compilation cache on, a disk-cache hit is counted here too: JAX
    reports it with the same event (lesson 10 tells the two apart).
    ``explanations``: JAX's own text for each tracing-cache miss (and, with the
    persistent cache on, each "PERSISTENT COMPILATION CACHE MISS" it logs).
    The ``*_seconds`` fields add up the time JAX reported for each stage.
    """

    name: str | None
    traces: int = 0
    lowerings: int = 0
    compiles: int = 0
    trace_seconds: float = 0.0
    lower_seconds: float = 0.0
    compile_seconds: float = 0.0
    explanations: list[str] = dataclasses.field(default_factory=list)
    compiled: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """How many times each function was compiled, by the name JAX reports (``jit(f)``):
    with ``count_compiles(None)``, which functions the compilations were."""
    target: Any = dataclasses.field(default=None, repr=False, compare=False)
    """The function JAX traces for the counted one (None for a name): a trace of it under
    another name (``__name__`` changed for the call) is still its trace."""
    aliases: set[str] = dataclasses.field(default_factory=set, repr=False, compare=False)

    @property
    def last_reason(self) -> str:
        """What differed at the last tracing-cache miss, in one line ("-" if none)."""
        return miss_reason(self.explanations[-1]) if self.explanations else "-"

    @property
    def total_seconds(self) -> float:
        """Time spent tracing, lowering and compiling, as JAX reported it."""
        return self.trace_seconds + self.lower_seconds + self.compile_seconds

    def __str__(self) -> str:
        who = self.name if self.name is not None else "all functions"
        return (
            f"{who}: {self.traces} trace(s), {self.compiles} compilation(s), "
            f"{1e3 * self.total_seconds:.1f} ms in trace+lower+compile"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _renamed(self, fun_name: str) -> bool:
        """Whether the trace JAX reported under ``fun_name`` was of the counted function,
        renamed for the call: then its lowering and compilation carry that name too."""
        if self.target is None or _traced_function() is not self.target:
            return False
        self.aliases.add(fun_name)
        return True

    def _hear(self, event: str, seconds: float, **kwargs: Any) -> None:
        """Count one of JAX's duration events, if it is this function's."""
        fun_name = kwargs.get("fun_name")
        if self.name is not None and (
            fun_name is None
            or (event == TRACE_EVENT and fun_name != self.name and not self._renamed(fun_name))
            or (
                event != TRACE_EVENT
                and not any(_lowered_name_matches(fun_name, n) for n in (self.name, *self.aliases))
            )
        ):
            return
        if event == TRACE_EVENT:
            self.traces += 1
            self.trace_seconds += seconds
        elif event == LOWER_EVENT:
            self.lowerings += 1
            self.lower_seconds += seconds
        elif event == COMPILE_EVENT:
            self.compiles += 1
            self.compile_seconds += seconds
            self.compiled[str(fun_name or "?")] += 1


def miss_reason(explanation: str) -> str:
    """The part of one cache-miss explanation that says what differed, on one line.

    Graders quote it in their verdicts, so it drops JAX's preamble and doc links.
    """
    if "never seen function" in explanation:
        return "never seen function (a new function object)"
    reason = closest_key_difference(explanation) or explanation
    reason = " ".join(reason.split("https://")[0].split())
    return reason[:300] if reason else explanation.strip().splitlines()[-1]


UNNAMED = "<unnamed function>"
"""What JAX reports for a callable without ``__name__`` (an object with ``__call__``)."""


def _jitted_function(fn: Any) -> Any:
    """The function a ``jax.jit`` object traces, as JAX holds it (the closure of its cache
    miss, read through the C++ type's read-only property), or None for anything else.
    Not ``__wrapped__``, which anyone may set to another function than JAX traces."""
    miss = getattr(type(fn), "_cache_miss", None)
    if type(miss) is not property:
        return None
    try:
        miss = miss.__get__(fn)
        for _ in range(8):  # api_boundary wraps the cache miss; JAX's own closure holds both
            cells = dict(zip(miss.__code__.co_freevars, miss.__closure__ or (), strict=True))
            if "fun" not in cells:
                return None
            if "jit_info" in cells:
                return cells["fun"].cell_contents
            miss = cells["fun"].cell_contents
    except (AttributeError, TypeError, ValueError):  # another JAX release's layout
        return None
    return None


def _traced_function() -> Any:
    """The function jit is tracing now, read from JAX's tracing frame (0.12's
    ``pjit._trace_for_jit(fun, ...)``) while JAX reports the trace's duration; None if
    no such frame is found (another JAX release's layout)."""
    return jax_local("_trace_for_jit", "pjit.py", "fun", depth=12)


def jit_target(fn: Any) -> Any:
    """What JAX traces for ``fn``: a jitted object's own function, or ``fn`` itself."""
    if fn is None or isinstance(fn, str):
        return None
    while isinstance(fn, functools.partial):
        fn = fn.func
    return _jitted_function(fn) or fn


def function_name(fn: Callable[..., Any] | str | None) -> str | None:
    """The name JAX reports in its events for ``fn`` (a jitted or plain function, a
    ``functools.partial``, a callable object, or already a name)."""
    if fn is None or isinstance(fn, str):
        return fn
    while isinstance(fn, functools.partial):
        fn = fn.func
    inner = _jitted_function(fn) or getattr(fn, "__wrapped__", fn)
    while isinstance(inner, functools.partial):
        inner = inner.func
    name = getattr(inner, "__name__", None)
    if isinstance(name, str):
        return name
    if callable(inner):
        return UNNAMED
    raise TypeError(f"cannot tell which function to count from {fn!r}: it is not callable")


def _lowered_name_matches(event_name: str, name: str) -> bool:
    # Lowering and compile events name the function "jit(f)"; tracing names it "f".
    return event_name == name or event_name == f"jit({name})"


@contextmanager
def count_compiles(
    fn: Callable[..., Any] | str | None, *, explain: bool = True
) -> Iterator[CompileCount]:
    """Count traces and compilations of ``fn`` alone while the block runs.

    >>> with count_compiles(f) as n:
    ...     f(jnp.ones(3)); f(jnp.ones(4))
    >>> n.compiles
    2

    ``fn`` is matched by the name JAX reports, so give the functions you study
    distinct names. ``count_compiles(None)`` counts every function. With
    ``explain=True`` (the default) JAX's cache-miss explanations are switched on for
    the block only and kept in ``n.explanations``; switching them on does not change
    the cache key, so it does not itself cause a retrace.
    """
    count = CompileCount(name=function_name(fn), target=jit_target(fn))

    def heard(text: str) -> None:
        # runs while JAX logs the explanation, so explained_callable() is its function
        named = explained_function(text)
        unknown_is_ours = (
            named == UNKNOWN and count.target is not None and explained_callable() is count.target
        )
        if count.name is None or named == count.name or unknown_is_ours:
            count.explanations.append(text)

    events.subscribe(count._hear)  # the package's one listener (events.py)
    try:
        if explain:
            asked = bool(jax.config.jax_explain_cache_misses)
            with (
                hearing_explanations(heard, show=asked),
                jax.explain_cache_misses(True),
            ):
                yield count
        else:
            yield count
    finally:
        if not events.unsubscribe(count._hear):
            raise CounterLost(
                "JAX's monitoring listeners were removed while compilations were being "
                "counted, so the count is incomplete"
            )
