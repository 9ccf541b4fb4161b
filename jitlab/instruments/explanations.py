"""JAX's cache-miss explanations: hearing them without silencing JAX, and reading one.

With ``jax_explain_cache_misses`` on, JAX logs a warning starting ``TRACING CACHE MISS``
each time jit's tracing cache misses, from the loggers in :data:`EXPLANATION_LOGGERS`
(JAX 0.12 logs from ``partial_eval``). :func:`hearing_explanations` hears them with a
logging *filter* on those loggers, never a handler: a handler anywhere on the ``jax``
chain stops Python's last-resort printing of every other warning JAX logs, so a
learner would no longer see them. Other records pass the filter untouched.

:func:`closest_key_difference` is the one place that reads the explanation's text: what
JAX says differs from "the closest previous key" (its guess, not a verdict).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from jitlab.instruments.jax_frames import jax_local

EXPLANATION_LOGGERS = ("jax._src.interpreters.partial_eval", "jax._src.pjit")
MISS_MARK = "TRACING CACHE MISS"
# The persistent compilation cache logs its misses (at WARNING while explanations are
# on) from these loggers; count_compiles keeps those texts beside the tracing misses.
PERSISTENT_LOGGERS = ("jax._src.compiler", "jax._src.compilation_cache")
PERSISTENT_MISS_MARK = "PERSISTENT COMPILATION CACHE MISS"
MISS_MARKS = (MISS_MARK, PERSISTENT_MISS_MARK)
CLOSEST_KEY = "For the closest previous key:"
UNKNOWN = "<unknown>"
"""The name an explanation gives a function JAX finds no source for (``jnp.maximum``, a
``jnp.ufunc`` on 0.12; an object with ``__call__``)."""

_NEVER_SEEN = re.compile(r"never seen function:\s*\n\s*(.*?) id=\d+")
_FOR = re.compile(r"^\s*for (.*?)(?: defined at .*)?$", re.MULTILINE)


def closest_key_difference(explanation: str) -> str:
    """What JAX says differs from the closest earlier cache key (the text after "For the
    closest previous key:"), or "" when the explanation names none (a new function)."""
    _, found, body = explanation.partition(CLOSEST_KEY)
    return body.strip() if found else ""


def explained_function(explanation: str) -> str:
    """The name of the function an explanation is about ("" if it does not say)."""
    found = _NEVER_SEEN.search(explanation) or _FOR.search(explanation)
    return found.group(1).strip() if found else ""


def explained_callable() -> Any:
    """The function whose cache miss JAX is explaining, when called while JAX logs the
    explanation (a hearer runs then): the ``fun`` of JAX 0.12's explaining frame,
    ``partial_eval.explain(keys, fun, ...)``. None outside one, or on a JAX release that
    explains elsewhere (then an :data:`UNKNOWN` explanation stays unattributed)."""
    # the hearer, deliver, the filters and logging's own frames lie between
    return jax_local("explain", "partial_eval.py", "fun", depth=24)


def _listens(handler: logging.Handler) -> bool:
    # pytest's log capture hears everything; it is not the program asking for the text
    return not type(handler).__module__.startswith("_pytest")


def reaches_a_handler(logger: logging.Logger) -> bool:
    """True when a record logged to ``logger`` reaches a handler someone installed."""
    node: logging.Logger | None = logger
    while node is not None:
        if any(_listens(h) for h in node.handlers):
            return True
        if not node.propagate:
            return False
        node = node.parent
    return False


# Everyone in the process who hears explanations (count_compiles blocks, the doctor).
# Filters on one logger run in turn and the first that drops a record ends the turn, so
# whichever filter sees an explanation first hands it to every hearer, once.
_HEARERS: list[Callable[[str], None]] = []


def add_hearer(heard: Callable[[str], None]) -> None:
    _HEARERS.append(heard)


def remove_hearer(heard: Callable[[str], None]) -> None:
    if heard in _HEARERS:
        _HEARERS.remove(heard)


def deliver(record: logging.LogRecord) -> None:
    """Hand one explanation record to every hearer, once however many filters see it."""
    if getattr(record, "_jitlab_heard", False):
        return
    record._jitlab_heard = True
    text = record.getMessage().strip()
    for heard in list(_HEARERS):
        heard(text)


class _Hear(logging.Filter):
    """Hands each explanation to ``heard``; passes it on only where it was asked for
    (``show``, or a handler listens), and every other record as it is, at or above
    ``level`` (the level the application had set)."""

    def __init__(self, heard: Callable[[str], None], show: bool, level: int) -> None:
        super().__init__()
        self._heard, self._show, self._level = heard, show, level

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if not any(mark in text for mark in MISS_MARKS):
            return record.levelno >= self._level
        deliver(record)
        logger = logging.getLogger(record.name)
        return self._show or reaches_a_handler(logger)


@contextmanager
def hearing_explanations(heard: Callable[[str], None], *, show: bool) -> Iterator[None]:
    """Call ``heard(text)`` for every cache-miss explanation JAX logs in the block.

    ``show``: the program had asked for explanations itself, so they print as before.
    A logger the application silenced below WARNING is opened for the block to that
    level only for explanations; its other records stay as silent as they were.
    """
    installed = []
    add_hearer(heard)
    for name in EXPLANATION_LOGGERS + PERSISTENT_LOGGERS:
        logger = logging.getLogger(name)
        level = logger.getEffectiveLevel()
        hear = _Hear(heard, show, level)
        installed.append((logger, hear, logger.level))
        logger.addFilter(hear)
        if level > logging.WARNING:
            logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        remove_hearer(heard)
        for logger, hear, level in installed:
            logger.removeFilter(hear)
            logger.setLevel(level)
