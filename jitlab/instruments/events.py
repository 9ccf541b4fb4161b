"""The course's ears: JAX's monitoring events and its cache-miss explanations.

One duration listener serves the whole package (:func:`subscribe`): ``count_compiles``, the
doctor's stream below, its guard and its process recorder all hear JAX through it, so that
every one of them sees the same events, and a listener removed from JAX under them is
noticed by each (:func:`unsubscribe`).

Both hooks are public. ``jax.monitoring`` reports a duration for each trace, lowering and
backend compilation, with the function's name in ``fun_name``. With
``jax_explain_cache_misses`` on, JAX logs a warning that starts ``TRACING CACHE MISS`` each
time jit's tracing cache misses.

Everything heard lands in one append-only list, :data:`STREAM`. A watched jitted call
compares the list's length before and after it runs: equal lengths (the common case, a
cache hit) cost one ``len``. Only a call that made the list grow is examined.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import Any

import jax
from jax import monitoring

from jitlab.instruments.explanations import (  # one reader of JAX's explanations
    EXPLANATION_LOGGERS,
    MISS_MARK,
    PERSISTENT_MISS_MARK,
    add_hearer,
    deliver,
    explained_function,
    reaches_a_handler,
    remove_hearer,
)

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_KIND_OF_EVENT = {TRACE_EVENT: "trace", LOWER_EVENT: "lower", COMPILE_EVENT: "compile"}

# JAX logs its explanations from the module that builds jaxprs (0.12: partial_eval). The
# doctor filters these loggers (a filter sees the record before any handler does) instead
# of adding a handler: a handler anywhere on the "jax" chain would silence Python's
# last-resort printing of every other JAX warning.
# The persistent compilation cache logs each miss, and why an executable was not written,
# from these two (at WARNING while jax_explain_cache_misses is on); a hit has only the
# duration event below, which carries no function name.
PERSISTENT_LOGGERS = ("jax._src.compiler", "jax._src.compilation_cache")
PERSISTENT_HIT_EVENT = "/jax/compilation_cache/cache_retrieval_time_sec"
# With DEBUG on, JAX's cache-key module logs the hash of each part of a persistent-cache
# key (computation, jax_lib version, XLA flags, compile_options, ...): the doctor turns it
# on for that one logger while it listens, keeps the lines, and passes none on.
KEY_LOGGER = "jax._src.cache_key"
_KEY_PART = re.compile(r"get_cache_key hash of serialized (.+?): ([0-9a-f]+)$")


Listener = Callable[..., None]
_lock = threading.RLock()  # reentrant: start() subscribes while it holds it
_subscribers: list[Listener] = []
_lost: list[Listener] = []  # subscribers that listened while JAX's listeners were removed
_PING = "/jitlab/listener_ping"
_pings_heard = 0


def _dispatch(event: str, seconds: float, **kwargs: Any) -> None:
    """The one listener registered with JAX: every subscriber hears every event. The first
    exception a subscriber raises goes on to JAX once all have heard the event (the guard
    fails the very call that compiled by raising)."""
    global _pings_heard
    if event == _PING:
        _pings_heard += 1
        return
    error: Exception | None = None
    for callback in tuple(_subscribers):
        try:
            callback(event, seconds, **kwargs)
        except Exception as raised:
            error = error or raised
    if error is not None:
        raise error


def _registered() -> bool:
    """Whether JAX still calls :func:`_dispatch`: a ping only it counts (public API only)."""
    before = _pings_heard
    monitoring.record_event_duration_secs(_PING, 0.0)
    return _pings_heard > before


def subscribe(callback: Listener) -> None:
    """Hear every duration event JAX reports (``callback(event, seconds, **kwargs)``)."""
    with _lock:
        _subscribers.append(callback)
        if not _registered():
            monitoring.register_event_duration_secs_listener(_dispatch)


def unsubscribe(callback: Listener) -> bool:
    """Stop hearing. False if JAX's listeners were removed while ``callback`` listened:
    what it heard is incomplete."""
    with _lock:
        kept = _registered()
        if not kept:  # every subscriber still listening missed the same events
            _lost.extend(s for s in _subscribers if s not in _lost)
        _subscribers.remove(callback)
        if kept and not _subscribers:
            monitoring.unregister_event_duration_listener(_dispatch)
        elif not kept and _subscribers:
            monitoring.register_event_duration_secs_listener(_dispatch)
        if callback in _lost:
            _lost.remove(callback)
            return False
        return True


class Event:
    """One thing JAX reported: a ``trace``, ``lower`` or ``compile`` duration, or an
    ``explain`` text. ``owner`` is set once a watched call claims it."""

    __slots__ = ("kind", "name", "seconds", "thread", "owner", "text", "site")

    def __init__(self, kind: str, name: str, seconds: float = 0.0, text: str = "") -> None:
        self.kind = kind
        self.name = name
        self.seconds = seconds
        self.thread = threading.get_ident()
        self.owner: Any = None
        self.text = text
        self.site: tuple[str, str] | None = None

    def __repr__(self) -> str:
        return f"Event({self.kind}, {self.name!r}, {self.seconds:.4f})"


STREAM: list[Event] = []
"""Every event heard while at least one recorder listens. Append-only while listening."""

_listeners = 0
_explain_before: bool | None = None
_filters: list[tuple[logging.Logger, logging.Filter]] = []


SITE: Any = None
"""Set by the recorder: the user's line that made the current call (file:line, source)."""


def _on_duration(event: str, seconds: float, **kwargs: Any) -> None:
    if event == PERSISTENT_HIT_EVENT:
        STREAM.append(Event("pcache", "", seconds, text="hit"))
        return
    kind = _KIND_OF_EVENT.get(event)
    if kind is not None:
        e = Event(kind, str(kwargs.get("fun_name", "?")), seconds)
        if kind == "compile" and SITE is not None:
            # a compilation costs milliseconds; the walk to the user's frame, microseconds.
            # Kept for compilations nobody watches (jnp.ones(n) compiles broadcast_in_dim)
            try:
                e.site = SITE()
            except Exception:
                pass
        STREAM.append(e)


_PERSISTENT = (
    (re.compile(r"PERSISTENT COMPILATION CACHE MISS for '(.*?)'"), "miss"),
    (re.compile(r"Writing (\S+) to persistent compilation cache"), "written"),
    (
        re.compile(
            r"Not writing persistent cache entry for '(.*?)' because it took < ([\d.]+) "
            r"seconds to compile \(([\d.]+)s\)"
        ),
        "not written: compiled in {2} s, under jax_persistent_cache_min_compile_time_secs ({1} s)",
    ),
    (
        re.compile(
            r"Not writing persistent cache entry with key '(.*?)' since its size \((\d+)"
            r" bytes\) is less than threshold \((\d+) bytes\)"
        ),
        "not written: {1} bytes, under jax_persistent_cache_min_entry_size_bytes ({2})",
    ),
    (
        re.compile(r"Not writing persistent cache entry ()since process_id != 0"),
        "not written: not process 0 (only process 0 writes)",
    ),
)


def persistent_event(text: str) -> Event | None:
    """A persistent-cache log line as an event (name: the module, e.g. ``jit_step``)."""
    for pattern, what in _PERSISTENT:
        found = pattern.search(text)
        if found:
            name = (
                found.group(1)
                if not found.group(1).startswith("jit_") or "-" not in (found.group(1))
                else found.group(1).split("-", 1)[0]
            )
            return Event("pcache", name, text=what.format(*found.groups()))
    return None


class _KeyFilter(logging.Filter):
    def __init__(self, passing: bool) -> None:
        super().__init__()
        self._passing = passing  # the program had turned DEBUG on itself

    def filter(self, record: logging.LogRecord) -> bool:
        found = _KEY_PART.search(record.getMessage())
        if found:
            STREAM.append(Event("pkey", found.group(1), text=found.group(2)))
        return self._passing


_key_level: int | None = None


class _ExplanationFilter(logging.Filter):
    """Keeps a copy of each explanation. Passes it on only where someone listens:
    a program that collects JAX's log (lesson 09 does) still sees it; a plain program
    does not get its stderr filled with explanations it never asked for."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self._logger = logger

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text.startswith(MISS_MARK):
            # a tracing-cache miss, whatever its text quotes (a file named persistent_*.py)
            deliver(record)  # to the doctor (_hear) and any count_compiles block alike
            return bool(_explain_before) or reaches_a_handler(self._logger)
        if "ersistent" in text or "PERSISTENT" in text:
            found = persistent_event(text)
            if found is None:
                return True
            if PERSISTENT_MISS_MARK in text:
                # through _hear, as every hearer gets it: a count_compiles block whose
                # filter saw it first has delivered it already, and drops it
                deliver(record)
            else:
                STREAM.append(found)
            return bool(_explain_before) or reaches_a_handler(self._logger)
        if MISS_MARK not in text:
            return True
        deliver(record)  # to the doctor (_hear) and any count_compiles block alike
        return bool(_explain_before) or reaches_a_handler(self._logger)


def _hear(text: str) -> None:
    if PERSISTENT_MISS_MARK in text:  # the other persistent-cache texts: by the filter
        found = persistent_event(text)
        if found is not None:
            STREAM.append(found)
        return
    if MISS_MARK not in text:
        return
    STREAM.append(Event("explain", explained_function(text), text=text))


def listening() -> bool:
    return _listeners > 0


def start() -> None:
    """Start listening (reference-counted: every ``start`` needs one ``stop``)."""
    global _listeners, _explain_before
    with _lock:
        _listeners += 1
        if _listeners > 1:
            return
        subscribe(_on_duration)
        _explain_before = bool(jax.config.jax_explain_cache_misses)
        jax.config.update("jax_explain_cache_misses", True)
        add_hearer(_hear)
        for name in EXPLANATION_LOGGERS + PERSISTENT_LOGGERS:
            logger = logging.getLogger(name)
            flt = _ExplanationFilter(logger)
            logger.addFilter(flt)
            _filters.append((logger, flt))
        global _key_level
        key_logger = logging.getLogger(KEY_LOGGER)
        _key_level = key_logger.level
        key_flt = _KeyFilter(passing=key_logger.isEnabledFor(logging.DEBUG))
        key_logger.addFilter(key_flt)
        _filters.append((key_logger, key_flt))
        key_logger.setLevel(logging.DEBUG)


def stop() -> None:
    global _listeners
    with _lock:
        if _listeners == 0:
            return
        _listeners -= 1
        if _listeners > 0:
            return
        unsubscribe(_on_duration)
        jax.config.update("jax_explain_cache_misses", bool(_explain_before))
        remove_hearer(_hear)
        for logger, flt in _filters:
            logger.removeFilter(flt)
        _filters.clear()
        if _key_level is not None:
            logging.getLogger(KEY_LOGGER).setLevel(_key_level)
