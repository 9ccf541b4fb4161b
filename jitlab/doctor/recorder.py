"""Per jitted function: its calls, traces and compilations, what each cost, and why each
miss happened.

A watched jitted call (see :mod:`jitlab.doctor.wrap`) that made JAX trace or compile hands
its arguments to :func:`observe`. That is the only place a signature is taken. Each
active :class:`Recorder` then compares the new signature with every earlier one of the
same function and names every part that differs from the closest.
"""

from __future__ import annotations

import dataclasses
import linecache
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax

from jitlab.doctor import classify, ops
from jitlab.doctor.captured import Captured
from jitlab.instruments import events
from jitlab.instruments import signature as sig

FIRST = "first"  # the first compilation of a function: a cold cache, not a recompilation
MISS = "miss"  # a recompilation (or, for a trace inside another jit, a retrace)
TRANSFORM = "transform"  # compiled for jax.grad / jax.vmap of it outside jit: not a miss
RETRACE = "retrace"  # traced again outside jit, and found the compiled program: no compile
LOWERED = "lowered"  # ``.lower(...)`` ahead of time, not (yet) compiled
AOT = "aot"  # compiled ahead of time by ``.lower(...).compile()``: asked for, not a miss
FAILED = "failed"  # tracing (or compiling) raised: the program's error, not a miss


@dataclasses.dataclass
class Miss:
    """One call that traced or compiled."""

    number: int  # 1-based, per function, in order
    kind: str
    call_site: str
    source: str
    traces: int
    lowerings: int
    compiles: int
    trace_seconds: float
    lower_seconds: float
    compile_seconds: float
    inside_jit: bool
    signature: sig.Signature
    compared_with: int | None = None
    differences: list[sig.Difference] = dataclasses.field(default_factory=list)
    causes: list[str] = dataclasses.field(default_factory=list)
    also_close: list[tuple[int, list[sig.Difference]]] = dataclasses.field(default_factory=list)
    jax_text: str | None = None
    aot: bool = False  # compiled ahead of time, by ``.lower(...).compile()``
    persistent: list[str] = dataclasses.field(default_factory=list)  # the disk cache's say
    key_parts: dict[str, str] = dataclasses.field(default_factory=dict)  # its key, by part
    module: str = ""  # the persistent cache's name for the program (jit_step)
    cache_dir: str = ""
    error: str = ""  # for FAILED: what the trace raised
    captured: list[Captured] = dataclasses.field(default_factory=list)  # baked-in arrays
    # for a slow compilation: the user's lines that put the most equations into it
    busiest: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    call_index: int = 0  # the function's direct calls so far, at this one

    @property
    def compiled(self) -> bool:
        """A compilation the function's count includes (the first or a recompilation,
        at a call or ahead of time); not a trace inside another jit."""
        return self.kind in (FIRST, MISS, AOT) and not self.inside_jit

    @property
    def seconds(self) -> float:
        return self.trace_seconds + self.lower_seconds + self.compile_seconds

    @property
    def lessons(self) -> list[str]:
        return classify.lessons_for(self.causes, self.signature.function.closure)

    @property
    def jax_causes(self) -> list[str]:
        causes = classify.jax_opinion(self.jax_text)
        if any(d.part == sig.PYTHON_SCALAR for d in self.differences):
            # JAX writes a Python int turned float as "now f32[] and before i32[]", a dtype
            # change; in the course's terms it is the Python-scalar cause (lesson 03)
            causes = [classify.WEAK_TYPE if c == classify.DTYPE else c for c in causes]
        return list(dict.fromkeys(causes))

    @property
    def jax_agrees(self) -> bool:
        return set(self.jax_causes) == set(self.causes)


@dataclasses.dataclass
class FunctionRecord:
    """Everything recorded about one jitted function (all objects made from one source
    location count as one function: a lambda re-made every step is one row).

    Its numbers agree by construction: ``compiles`` is the sum over ``compilations``
    (the first, then each recompilation); a retrace that found a compiled program, a
    trace inside another jit, a program for jax.grad of it and a failed trace are each
    kept apart, and none of them is a compilation of this function."""

    name: str
    qualname: str
    location: str
    calls: int = 0  # direct calls (not made while another watched jit was tracing)
    nested_calls: int = 0  # calls made while another watched jit was tracing
    misses: list[Miss] = dataclasses.field(default_factory=list)
    outside_compiles: int = 0  # compile events under its name outside any watched call
    outside_seconds: float = 0.0
    display: str = ""  # the name the report shows (qualified when two names clash)
    python_calls: int = 0  # warm direct calls that jit ran through Python, not its C++ path
    python_reasons: dict[str, int] = dataclasses.field(default_factory=dict)
    jax_name: str = ""  # the name in JAX's events: `loss` for the row `grad(loss)`
    library: bool = False  # a library's function the user jitted: shown by qualified name

    @property
    def event_name(self) -> str:
        """The name JAX's events give this function's programs."""
        return self.jax_name or self.name

    def persistent_cache(self) -> dict[str, int]:
        """What the persistent compilation cache said for its compilations: hits,
        misses, and each reason an executable was not written."""
        said: dict[str, int] = {}
        for m in self.compilations:
            for what in m.persistent:
                said[what] = said.get(what, 0) + 1
        return said

    @property
    def warm_calls(self) -> int:
        """Direct calls that neither traced nor compiled."""
        cold = [m for m in self.misses if not m.inside_jit and m.kind != LOWERED and not m.aot]
        return max(self.calls - len(cold), 0)

    @property
    def compilations(self) -> list[Miss]:
        return [m for m in self.misses if m.compiled]

    @property
    def inside(self) -> list[Miss]:
        """Traces inside other jits (their compilation is the outer function's)."""
        return [m for m in self.misses if m.inside_jit]

    @property
    def retraces(self) -> list[Miss]:
        return [m for m in self.misses if m.kind == RETRACE]

    @property
    def failures(self) -> list[Miss]:
        return [m for m in self.misses if m.kind == FAILED]

    @property
    def traces(self) -> int:
        return sum(m.traces for m in self.misses)

    @property
    def compiles(self) -> int:
        return sum(m.compiles for m in self.compilations)

    @property
    def aot_compiles(self) -> int:
        return sum(m.compiles for m in self.compilations if m.kind == AOT)

    @property
    def transformed_compiles(self) -> int:
        transformed = sum(m.compiles for m in self.misses if m.kind == TRANSFORM)
        return transformed + self.outside_compiles

    @property
    def columns(self) -> list[Miss]:
        """What the function's count is about: its compilations, or, for a function that
        only ever ran inside other jits, its traces there."""
        return self.compilations or [m for m in self.inside if m.kind in (FIRST, MISS)]

    @property
    def recompiles(self) -> list[Miss]:
        """The misses after the first of :attr:`columns`."""
        return [m for m in self.columns if m.kind == MISS]

    @property
    def builds(self) -> int:
        """What a budget counts: compilations, or traces for a function that only ever
        ran inside another jit (it is compiled as part of that one)."""
        return self.compiles if self.compilations else len(self.columns)

    @property
    def seconds(self) -> float:
        return sum(m.seconds for m in self.misses) + self.outside_seconds

    @property
    def captured_bytes(self) -> tuple[int, list[Captured]]:
        """Bytes of arrays baked into its compiled programs, all of them together (each
        program keeps its own copy of what its function object captured), and what the
        latest compiled object captured."""
        total = sum(sum(c.nbytes for c in m.captured) for m in self.compilations)
        latest = next((m.captured for m in reversed(self.compilations) if m.captured), [])
        return total, latest

    def cause_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for m in self.recompiles:
            for c in m.causes:
                counts[c] = counts.get(c, 0) + 1
        return {c: counts[c] for c in classify.CAUSES if c in counts}


@dataclasses.dataclass
class Unwatched:
    """Compilations of a function the doctor did not see being called: JAX's own helpers
    (``jnp.ones`` compiles ``broadcast_in_dim``), or jits made before the doctor started."""

    name: str
    traces: int = 0
    compiles: int = 0
    seconds: float = 0.0
    sites: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)


class Recorder:
    """Records every watched function while it is active. Several can be active at once
    (a pytest session and one test); each keeps its own history."""

    def __init__(self) -> None:
        self.functions: dict[tuple[str, int, str, str], FunctionRecord] = {}
        self._compiled: dict[tuple[str, int, str, str], list[Miss]] = {}
        self._traced: dict[tuple[str, int, str, str], list[Miss]] = {}
        self._start_mark = 0
        self._stop_mark: int | None = None
        self._calls_at_start: dict[tuple[str, int, str, str], tuple] = {}
        self.started = 0.0
        self.stopped: float | None = None
        self.internal_errors: list[str] = []

    # -- lifetime ---------------------------------------------------------------------

    def start(self) -> Recorder:
        events.start()
        self._start_mark = len(events.STREAM)
        self._calls_at_start = {
            k: (c.calls, c.nested, c.python, dict(c.reasons)) for k, c in COUNTERS.items()
        }
        self.started = time.perf_counter()
        with _lock:
            ACTIVE.append(self)
        return self

    def stop(self) -> None:
        if self.stopped is not None:
            return
        with _lock:
            if self in ACTIVE:
                ACTIVE.remove(self)
        self._stop_mark = len(events.STREAM)
        self.stopped = time.perf_counter()
        self._take_calls()
        events.stop()
        try:
            _compare_with_earlier_runs([m for r in self.functions.values() for m in r.misses])
        except Exception as err:  # never break the program for a note
            self.internal_errors.append(f"persistent-cache keys: {type(err).__name__}: {err}")

    @property
    def wall_seconds(self) -> float:
        end = self.stopped if self.stopped is not None else time.perf_counter()
        return end - self.started

    def _take_calls(self) -> None:
        for key, record in self.functions.items():
            counter = COUNTERS.get(key)
            if counter is not None:
                calls, nested, python, reasons = self._calls_at_start.get(key, (0, 0, 0, {}))
                record.calls = counter.calls - calls
                record.nested_calls = counter.nested - nested
                record.python_calls = counter.python - python
                record.python_reasons = {
                    r: n - reasons.get(r, 0)
                    for r, n in counter.reasons.items()
                    if n - reasons.get(r, 0) > 0
                }

    # -- recording ----------------------------------------------------------------------

    def add(self, miss_events: list[events.Event], info: Observed) -> Miss:
        key = info.function.key
        record = self.functions.get(key)
        if record is None:
            record = self.functions[key] = FunctionRecord(
                info.function.label,
                info.function.qualname,
                _short_location(info.function),
                jax_name=info.function.name,
            )
            record.library = sig.is_library_file(info.function.file)
        counts = {"trace": 0, "lower": 0, "compile": 0}
        seconds = {"trace": 0.0, "lower": 0.0, "compile": 0.0}
        text = None
        persistent = []
        key_parts: dict[str, str] = {}
        for e in miss_events:
            if e.kind == "explain":
                text = e.text
            elif e.kind == "pcache":
                persistent.append(e.text)
            elif e.kind == "pkey":
                key_parts[e.name] = e.text
            else:
                counts[e.kind] += 1
                seconds[e.kind] += e.seconds
        if not any(counts.values()) and text:
            counts["trace"] = 1  # an inner jit retraced inside another's trace (untimed)
        compiled = counts["compile"] > 0
        if info.error:
            kind = FAILED
        elif info.has_tracers and compiled:
            kind = TRANSFORM  # jax.grad / jax.vmap of it, outside jit
        elif info.stage == "lower":
            kind = LOWERED
        elif info.stage == "compile":
            kind = AOT
        elif compiled or info.has_tracers:
            kind = MISS  # FIRST or MISS once classified
        else:
            kind = RETRACE  # traced or lowered again, and the compiled program was found
        miss = Miss(
            number=0,
            kind=kind,
            call_site=info.call_site,
            source=info.source,
            traces=counts["trace"],
            lowerings=counts["lower"],
            compiles=counts["compile"],
            trace_seconds=seconds["trace"],
            lower_seconds=seconds["lower"],
            compile_seconds=seconds["compile"],
            inside_jit=info.has_tracers and not compiled and not info.error,
            signature=info.signature,
            jax_text=text,
            aot=info.stage == "compile",
            error=info.error,
            persistent=persistent,
            key_parts=key_parts,
            module=next((e.name for e in miss_events if e.kind == "pcache" and e.name), ""),
            cache_dir=_cache_dir() if key_parts else "",
        )
        miss.captured = CAPTURED.get(info.function.serial, [])
        jaxpr = ops.take(info.function.name) if counts["lower"] else None
        if jaxpr is not None and seconds["compile"] >= ops.SLOW_SECONDS:
            miss.busiest = ops.busiest_lines(jaxpr)
        counter = COUNTERS.get(key)
        miss.call_index = counter.calls if counter is not None else 0
        record.misses.append(miss)
        self._settle(key, record, miss)
        return miss

    def compiled_ahead(self, lowered: Miss, compile_events: list[events.Event]) -> None:
        """``.compile()`` of a ``.lower(...)`` this recorder saw: the lowering becomes a
        compilation, classified against the function's earlier compilations."""
        key = lowered.signature.function.key
        record = self.functions.get(key)
        if record is None or lowered not in record.misses:
            return
        for e in compile_events:
            if e.kind == "pcache":
                lowered.persistent.append(e.text)
                lowered.module = lowered.module or e.name
            elif e.kind == "pkey":
                lowered.key_parts[e.name] = e.text
                lowered.cache_dir = _cache_dir()
            if e.kind == "compile":
                lowered.compiles += 1
                lowered.compile_seconds += e.seconds
        if lowered.compiles:
            lowered.kind, lowered.aot = AOT, True
            self._settle(key, record, lowered)

    def _settle(self, key: tuple[str, int, str, str], record: FunctionRecord, miss: Miss) -> None:
        """Number and classify a miss: a compilation against the function's earlier
        compilations (at calls or ahead of time), a trace inside another jit or a retrace
        against every earlier trace of it."""
        compiled = self._compiled.setdefault(key, [])
        traced = self._traced.setdefault(key, [])
        if miss.kind == AOT:
            miss.number = len(compiled) + 1
            self._classify(miss, compiled)  # what it differs in, for the timeline only
            miss.causes = []
            compiled.append(miss)
            if miss.traces:
                traced.append(miss)
        elif miss.kind in (FIRST, MISS) and not miss.inside_jit:
            miss.number = len(compiled) + 1
            self._classify(miss, compiled)
            compiled.append(miss)
            if miss.traces:
                traced.append(miss)
        elif miss.inside_jit:
            miss.number = len(record.inside)
            self._classify(miss, traced)
            traced.append(miss)
        elif miss.kind == RETRACE:
            miss.number = len(record.retraces)
            self._classify(miss, compiled or traced)
            if miss.causes == [classify.UNKNOWN]:
                miss.causes = []
            traced.append(miss)

    def _classify(self, miss: Miss, history: list[Miss]) -> None:
        if not history:
            if miss.kind == MISS:
                miss.kind = FIRST
            return
        serial = miss.signature.function.serial
        own = [m for m in history if m.signature.function.serial == serial]
        candidates = own or history
        scored = [(m, sig.differences(miss.signature, m.signature)) for m in candidates]
        fewest = min(len(d) for _, d in scored)
        closest = [(m, d) for m, d in scored if len(d) == fewest]
        # Of equally close ones, keep those that differ in something no earlier compilation
        # had (a flag passed by keyword for the first time), not in a value another one
        # already had (the same flag's value, seen before under the other convention).
        novel = [(m, d) for m, d in closest if any(not _seen(x, scored) for x in d)]
        closest = novel or closest
        best, best_diffs = closest[-1]  # the most recent of the closest
        miss.compared_with = best.number
        if not best_diffs and miss.kind == MISS and not miss.traces and not miss.inside_jit:
            # Compiled (or lowered) again without a retrace: the types and the tree are
            # jit's tracing key, and they were found; what the lowering and compilation
            # add to the key is the arguments' shardings, devices and layouts.
            best_diffs = [
                sig.Difference(
                    sig.PLACEMENT,
                    "arguments",
                    "compiled again without a retrace (same types: a sharding, device "
                    "assignment or layout the doctor cannot read differs)",
                    f"compilation {best.number}",
                )
            ]
            closest = [(best, best_diffs)]
        miss.differences = [_name_objects(d, miss, best) for d in best_diffs]
        causes: set[str] = set()
        for _, d in closest:
            causes.update(classify.causes_of(d))
        if len(causes) > 1:
            causes.discard(classify.UNKNOWN)
        miss.causes = [c for c in classify.CAUSES if c in causes]
        miss.also_close = [(m.number, d) for m, d in closest[:-1]][-3:]

    # -- results ------------------------------------------------------------------------

    def unwatched(self) -> list[Unwatched]:
        """Events in this recorder's window that no watched call claimed, by name. Compile
        events under a watched function's name go to that function (jax.grad's backward
        pass, ``.lower().compile()``), when the name is not ambiguous."""
        stop = self._stop_mark if self._stop_mark is not None else len(events.STREAM)
        by_name: dict[str, list[FunctionRecord]] = {}
        for record in self.functions.values():
            by_name.setdefault(record.event_name, []).append(record)
        for record in self.functions.values():
            record.outside_compiles, record.outside_seconds = 0, 0.0
        others: dict[str, Unwatched] = {}
        for e in events.STREAM[self._start_mark : stop]:
            # JAX's explanations and the persistent cache's lines (its key's parts, a
            # hit) are about some compilation, not one of their own
            if e.owner is not None or e.kind not in ("trace", "lower", "compile"):
                continue
            name = e.name[4:-1] if e.name.startswith("jit(") and e.name.endswith(")") else e.name
            owners = by_name.get(name, [])
            if len(owners) == 1:
                if e.kind == "compile":
                    owners[0].outside_compiles += 1
                owners[0].outside_seconds += e.seconds
                continue
            other = others.setdefault(name, Unwatched(name))
            other.seconds += e.seconds
            if e.kind == "trace":
                other.traces += 1
            elif e.kind == "compile":
                other.compiles += 1
                if e.site is not None:
                    other.sites[e.site] = other.sites.get(e.site, 0) + 1
        return sorted(others.values(), key=lambda o: -o.seconds)

    def snapshot(self) -> list[FunctionRecord]:
        if self.stopped is None:
            self._take_calls()
        self.unwatched()  # settles outside_compiles
        for key, record in self.functions.items():
            _two_objects_in_use(record, COUNTERS.get(key))
        return sorted(self.functions.values(), key=lambda r: -r.seconds)


def _name_objects(d: sig.Difference, miss: Miss, before: Miss) -> sig.Difference:
    """A new function object, named as the reader knows it: the how-manyth ``jax.jit``
    of this code it is, and the line that made it (the line to fix), not a serial number
    shared by every function of the program."""
    new_fun, old_fun = miss.signature.function, before.signature.function
    if d.part != sig.FUNCTION or new_fun.serial == old_fun.serial or d.where.startswith("jax."):
        return d
    now_n, before_n = object_number(new_fun), object_number(old_fun)
    if not now_n or not before_n:
        return d
    closure = " (a closure)" if new_fun.closure else ""
    site, source = JIT_SITES.get(new_fun.serial, ("?", ""))
    made = f"jax.jit made it again at {site.split(' in ')[0]}" if site != "?" else ""
    what = f"{made}: {source}" if made and source else made
    return sig.Difference(
        sig.FUNCTION,
        d.where,
        f"function object #{now_n} of this code{closure}",
        f"#{before_n}",
        what,
    )


def _two_objects_in_use(record: FunctionRecord, counter: CallCounter | None) -> None:
    """A compilation of a new function object of the same code is a recompilation when
    the new object replaced the old one (jit in a loop, a lambda per step). When the old
    object was called again afterwards, both are in use (a factory's two models): the
    new object's first compilation is not a recompilation of the old one's."""
    if counter is None:
        return
    compiled = {m.number: m for m in record.compilations}
    for miss in record.misses:
        if miss.kind != MISS or miss.inside_jit or classify.NEW_FUNCTION not in miss.causes:
            continue
        # A function made again and passed as a static argument (a lambda per call) is a
        # new key for one jitted object: a recompilation, however often it is called after.
        statics = miss.signature.statics
        if any(d.part == sig.FUNCTION and d.where in statics for d in miss.differences):
            continue
        earlier = compiled.get(miss.compared_with or 0)
        if earlier is None:
            continue
        then = counter.last.get(earlier.signature.function.serial, -1)
        if then > miss.call_index:  # the old object was called after the new one compiled
            miss.kind, miss.causes, miss.differences = FIRST, [], []
            miss.compared_with, miss.also_close = None, []


_LEAF_PARTS = (sig.SHAPE, sig.DTYPE, sig.WEAK_TYPE, sig.PYTHON_SCALAR, sig.PLACEMENT)


def _holds(signature: sig.Signature, d: sig.Difference) -> bool:
    """Whether ``signature`` has the part that ``d`` is about (an argument passed, a
    static given, a leaf at that path)."""
    if d.part == sig.KEYWORD:
        return d.where in signature.passing
    if d.part == sig.STATIC:
        return d.where in signature.statics
    if d.part in _LEAF_PARTS:
        return d.where in signature.leaves
    if d.part == sig.STRUCTURE:
        return d.where in signature.nodes
    return True


def _seen(d: sig.Difference, scored: list[tuple[Miss, list[sig.Difference]]]) -> bool:
    """An earlier compilation already had the new call's value of this part."""
    return any(
        _holds(m.signature, d) and not any((x.part, x.where) == (d.part, d.where) for x in diffs)
        for m, diffs in scored
    )


ACTIVE: list[Recorder] = []
_lock = threading.Lock()


class CallCounter:
    """Calls of one function: direct ones, and those made while another watched jit was
    tracing (the wrapper tells them apart by a depth it keeps per thread)."""

    __slots__ = ("calls", "nested", "python", "reasons", "last")

    def __init__(self) -> None:
        self.calls = 0
        self.nested = 0
        self.python = 0  # warm direct calls that went through jit's Python path
        self.reasons: dict[str, int] = {}  # why, per reason
        self.last: dict[int, int] = {}  # function object's serial -> its last direct call


COUNTERS: dict[tuple[str, int, str, str], CallCounter] = {}


# The arrays each function object captures (closure, globals, a partial's arguments),
# by its serial: read by the wrapper at the object's first compile (see captured.py).
CAPTURED: dict[int, list[Captured]] = {}

# Where each jitted object was made (the user's line that called jax.jit), by the
# function object's serial; and per function, its objects in the order they were made.
JIT_SITES: dict[int, tuple[str, str]] = {}
OBJECTS: dict[tuple[str, int, str, str], list[int]] = {}


def jitted_at(function: sig.FunctionInfo, site: tuple[str, str]) -> None:
    """Remember where ``jax.jit`` made this object (kept small: the last 10,000)."""
    if len(JIT_SITES) > 10_000:
        JIT_SITES.pop(next(iter(JIT_SITES)))
    JIT_SITES[function.serial] = site
    made = OBJECTS.setdefault(function.key, [])
    if function.serial not in made:
        made.append(function.serial)
        del made[:-1000]


def object_number(function: sig.FunctionInfo) -> int:
    """The how-manyth object of this function it is (1 for the first ``jax.jit`` of it)."""
    made = OBJECTS.get(function.key, [])
    return made.index(function.serial) + 1 if function.serial in made else 0


def jitted_names() -> set[str]:
    """The names and qualified names of every function jitted while the doctor watched,
    called or not (a budget that names one of them is no typo)."""
    names = set()
    for _, _, qualname, _ in COUNTERS:
        names.update((qualname, qualname.rsplit(".", 1)[-1]))
    return names


def counter_for(function: sig.FunctionInfo) -> CallCounter:
    counter = COUNTERS.get(function.key)
    if counter is None:
        counter = COUNTERS[function.key] = CallCounter()
    return counter


def _short_location(function: sig.FunctionInfo) -> str:
    path = function.file
    site = JIT_SITES.get(function.serial)
    if sig.is_library_file(path) and site is not None and site[0] != "?":
        # a library's function that the user jitted (jax.jit(exported.call)): the line
        # that called jax.jit is the user's, and the one to find
        return site[0].split(" in ", 1)[0] + " (jax.jit of a library function)"
    try:
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            path = rel
    except ValueError:
        pass
    return f"{path}:{function.line}"


# ---------------------------------------------------------------------------------------
# The observation of one call


@dataclasses.dataclass
class Observed:
    function: sig.FunctionInfo
    signature: sig.Signature
    call_site: str
    source: str
    has_tracers: bool
    stage: str = ""  # "lower" for ``.lower(...)``, "compile" for its ``.compile()``
    error: str = ""  # what the call raised, if it did


_SKIP_DIRS = tuple(
    os.path.dirname(m.__file__) + os.sep
    for m in (jax, sys.modules[__name__.rsplit(".", 1)[0]])
    if getattr(m, "__file__", None)
)
_SKIP_PARTS = (
    os.sep + "jaxlib" + os.sep,
    os.sep + "equinox" + os.sep,
    os.sep + "flax" + os.sep,
    os.sep + "optax" + os.sep,
    os.sep + "functools.py",
    os.sep + "contextlib.py",
)


def _is_library(filename: str) -> bool:
    return filename.startswith(_SKIP_DIRS) or any(p in filename for p in _SKIP_PARTS)


def call_site(depth: int = 3) -> tuple[str, str]:
    """Where the user's code made the call: the first frame outside JAX and the doctor."""
    frame = sys._getframe(depth)
    while frame is not None and _is_library(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "?", ""
    filename = frame.f_code.co_filename
    source = linecache.getline(filename, frame.f_lineno).strip()
    try:
        rel = os.path.relpath(filename)
        if not rel.startswith(".."):
            filename = rel
    except ValueError:
        pass
    return f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}", source


# ---------------------------------------------------------------------------------------
# The persistent cache across runs: which part of the key differed

KEYS_FILE = "jitlab-doctor-keys.json"
"""Beside the executables in the cache folder: per program name, the hash of each part of
the keys earlier runs computed, so that a later run's miss can say which part differs."""


# The keys file as this process first read it. Every recorder of the run (the doctor's,
# a per-process report's) compares with what earlier *runs* wrote, not with each other.
_EARLIER_RUNS: dict[str, dict[str, Any]] = {}


def _cache_dir() -> str:
    try:
        return str(jax.config.jax_compilation_cache_dir or "")
    except Exception:
        return ""


def _compare_with_earlier_runs(misses: list[Miss]) -> None:
    import json

    by_dir: dict[str, list[Miss]] = {}
    for m in misses:
        if m.key_parts and m.module and m.cache_dir:
            by_dir.setdefault(m.cache_dir, []).append(m)
    for folder, found in by_dir.items():
        path = os.path.join(folder, KEYS_FILE)
        if path not in _EARLIER_RUNS:  # read once: later recorders of this run compare alike
            try:
                with open(path) as f:
                    _EARLIER_RUNS[path] = json.load(f)
            except (OSError, ValueError):
                _EARLIER_RUNS[path] = {}
        earlier = _EARLIER_RUNS[path]
        for m in found:
            if "miss" not in m.persistent:
                continue
            before = earlier.get(m.module, [])
            if not before:
                continue
            closest = min(
                before,
                key=lambda parts: sum(parts.get(k) != v for k, v in m.key_parts.items()),
            )
            differ = [k for k, v in m.key_parts.items() if closest.get(k) != v]
            note = "key differs from an earlier run's in: " + ", ".join(differ)
            if differ and note not in m.persistent:
                m.persistent.append(note)
        merged = {module: list(parts) for module, parts in earlier.items()}
        for m in found:
            kept = merged.setdefault(m.module, [])
            if m.key_parts not in kept:
                kept.append(m.key_parts)
            del kept[:-8]
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(merged, f)
            os.replace(tmp, path)
        except OSError:
            pass


def _same_module(module: str, name: str) -> bool:
    """Whether a persistent-cache module name (``jit_step``; "" for a hit, which names
    nothing) is this function's."""
    if not module:
        return True
    return "".join(c for c in module if c.isalnum()) == "jit" + "".join(
        c for c in name if c.isalnum()
    )


def _site_of_event() -> tuple[str, str]:
    return call_site(4)  # _site_of_event <- events._on_duration <- JAX's monitoring


events.SITE = _site_of_event


def _has_tracers(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    for leaf in jax.tree_util.tree_leaves((args, kwargs)):
        if isinstance(leaf, jax.core.Tracer):
            return True
    return False


def observe(
    function: sig.FunctionInfo,
    static_spec: Callable[[], sig.StaticSpec],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    mark: int,
    stage: str = "",
    error: BaseException | None = None,
) -> list[tuple[Recorder, Miss]]:
    """Called by a watched jitted function after a call (or a ``.lower``) during which
    the event stream grew. Claims the events that are this function's and records the
    call in every active recorder; returns what each recorded."""
    if not ACTIVE:
        return []
    try:
        name = function.name
        lowered = f"jit({name})"
        thread = threading.get_ident()
        mine = []
        explanations = []
        for e in events.STREAM[mark:]:
            if e.owner is not None or e.thread != thread:
                continue
            if e.kind == "trace" and e.name == name:
                mine.append(e)
            elif e.kind in ("lower", "compile") and e.name == lowered:
                mine.append(e)
            elif e.kind == "pcache" and _same_module(e.name, name):
                mine.append(e)
            elif e.kind == "pkey":
                mine.append(e)
            elif e.kind == "explain":
                explanations.append(e)
        about = [e for e in explanations if e.name == name]
        tracers = _has_tracers(args, kwargs)
        if not any(e.kind not in ("pcache", "pkey") for e in mine):
            mine = []
        if not mine:
            # Inside another jit's trace, JAX 0.12 reports no duration for an inner jit's
            # trace, but it does explain the inner tracing-cache miss: count that.
            if not (about and tracers):
                return []
        about = about or explanations[-1:]
        claimed = mine + about[-1:]
        for e in claimed:
            e.owner = function  # not the jitted function: keep no closure alive
        if any(e.kind == "trace" for e in mine):
            # traces of jits nobody watches (a library's helpers) made while this one
            # traced: part of its trace, already in its trace time
            for e in events.STREAM[mark:]:
                if e.owner is None and e.thread == thread and e.kind == "trace":
                    e.owner = function
        site, source = call_site(3)
        info = Observed(
            function=function,
            signature=sig.take(function, static_spec(), args, kwargs),
            call_site=site,
            source=source,
            has_tracers=tracers,
            stage=stage,
            error=f"{type(error).__name__}: {error}".splitlines()[0][:200] if error else "",
        )
        return [(recorder, recorder.add(claimed, info)) for recorder in list(ACTIVE)]
    except Exception as err:  # the doctor must never break the program it watches
        for recorder in list(ACTIVE):
            recorder.internal_errors.append(f"{type(err).__name__}: {err}")
        return []


def observe_compile(
    function: sig.FunctionInfo, lowered: list[tuple[Recorder, Miss]], mark: int
) -> None:
    """Called after ``.compile()`` of a watched ``.lower(...)`` made the stream grow."""
    try:
        name = f"jit({function.name})"
        thread = threading.get_ident()
        mine = [
            e
            for e in events.STREAM[mark:]
            if e.owner is None
            and e.thread == thread
            and (
                (e.kind == "compile" and e.name == name)
                or (e.kind == "pcache" and _same_module(e.name, function.name))
                or e.kind == "pkey"
            )
        ]
        for e in mine:
            e.owner = function
        for recorder, miss in lowered:
            if recorder in ACTIVE:
                recorder.compiled_ahead(miss, mine)
    except Exception as err:  # the doctor must never break the program it watches
        for recorder in list(ACTIVE):
            recorder.internal_errors.append(f"{type(err).__name__}: {err}")
