"""A guard that fails at the first recompilation and says why:

>>> with jitlab.doctor.no_recompiles(train_step):
...     for batch in loader:
...         state = train_step(state, batch)
Recompiled: train_step (train.py:12) compiled again inside no_recompiles (compilation 2):
   shape: 1 miss. Lesson 01 shapes: pad to a few bucket sizes and mask
      at train.py:30 in <module> (1x):
          state = train_step(state, batch)
      e.g. compilation 2, against 1:
          batch['x']: f32[4,3] now, f32[32,3] before
          ...

or as a decorator, ``@jitlab.doctor.no_recompiles(train_step)`` on the function that runs
the loop (a test, an epoch). With no function named, every watched function is guarded.

The first compilation inside the block is allowed, unless the function had compiled
before the block: then it is a recompilation too. The cause line is the doctor's (the
argument path, what it is now and what it was before) for a function the doctor watches
(jitted while ``jax.jit`` was watched: under ``jitlab doctor``, ``pytest --jitlab``, or
after :func:`jitlab.doctor.install`). For a function jitted before that, the guard still
fails at the recompilation, with JAX's own explanation and a note saying how to get the
doctor's.

:class:`Recompiled` derives from ``BaseException``, as pytest's own test failures do: a
program's ``except Exception`` (a retry loop, say) must not swallow the guard, and neither
does the doctor's recorder, which never lets an ``Exception`` of its own reach the
program it watches.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

from jitlab.doctor import classify
from jitlab.doctor.recorder import ACTIVE, FIRST, MISS, TRANSFORM, FunctionRecord, Miss, Recorder
from jitlab.doctor.report import cause_lines
from jitlab.instruments import events
from jitlab.instruments import signature as sig


class Recompiled(BaseException):
    """A guarded function compiled again inside :func:`no_recompiles`. ``function`` is its
    name, ``differences`` what the doctor saw change (empty when it could not see)."""

    def __init__(self, message: str, function: str, differences: list[sig.Difference]) -> None:
        super().__init__(message)
        self.function = function
        self.differences = differences


@dataclasses.dataclass
class _Guarded:
    name: str
    key: tuple[str, int, str, str]
    serial: int  # the object: two jits of one source line are two functions to guard
    watched: bool
    compiled_before: bool
    compiles_seen: int = 0


def _guarded(fn: Callable[..., Any]) -> _Guarded:
    function: sig.FunctionInfo | None = getattr(fn, "_function", None)  # the doctor's wrapper
    watched = function is not None
    if function is None:
        if not callable(fn):
            raise TypeError(f"no_recompiles: {fn!r} is not a jitted function")
        function = sig.identify(fn)
    size = getattr(fn, "_cache_size", None)
    try:
        compiled_before = bool(size()) if size is not None else False
    except Exception:  # a wrapper that is not jit's: nothing to go on
        compiled_before = False
    return _Guarded(function.name, function.key, function.serial, watched, compiled_before)


class _GuardRecorder(Recorder):
    """A recorder that raises :class:`Recompiled` when a guarded function misses."""

    def __init__(self, guard: no_recompiles) -> None:
        super().__init__()
        self.guard = guard

    def add(self, miss_events: list[events.Event], info: Any) -> None:
        super().add(miss_events, info)
        guarded = self.guard.find(info.function)
        if guarded is None:
            return
        record = self.functions[info.function.key]
        miss = record.misses[-1]
        serial = info.function.serial
        seen = _SEEN.setdefault(info.function.key, [])
        earlier = [m for m in seen if m.signature.function.serial == serial]
        if miss.kind != TRANSFORM:
            seen.append(miss)
            del seen[:-_KEEP]
        if miss.kind == TRANSFORM or not (miss.compiles or miss.inside_jit):
            return
        if miss.kind == FIRST and not guarded.compiled_before:
            return
        if miss.kind == FIRST:  # compiled before the block: compare with what others saw
            miss = _against_earlier(miss, info.function.key, earlier)
            if miss is None:
                text = record.misses[-1].jax_text
                raise Recompiled(_unseen(guarded.name, text, "began"), record.name, [])
        raise Recompiled(_message(record, miss), record.name, list(miss.differences))


def _unseen(name: str, jax_text: str | None, why: str) -> str:
    """The message when the doctor never saw the compilation this one repeats."""
    note = {
        "began": "its earlier compilation came before the guard, unwatched. Wrap the "
        "warm-up in jitlab.doctor.watch(), or run under `jitlab doctor`",
        "unwatched": f"{name} was jitted before jax.jit was watched. Run under `jitlab "
        "doctor` or `pytest --jitlab`, or call jitlab.doctor.install() before jitting it",
    }[why]
    return (
        f"{name} compiled again inside no_recompiles. JAX says: "
        f"{classify.jax_summary(jax_text)}\n"
        f"   (the doctor cannot name the argument that changed: {note}.)"
    )


# What earlier guards saw of each guarded function (signatures are descriptions, never
# arrays): a second guard over a warm function can still name what changed.
_SEEN: dict[tuple[str, int, str, str], list[Miss]] = {}
_KEEP = 64  # per function: enough to find the closest, never a growing list


def _against_earlier(
    miss: Miss, key: tuple[str, int, str, str], earlier: list[Miss]
) -> Miss | None:
    """The miss as a recompilation, compared with the closest compilation that an
    earlier guard or an enclosing watch recorded before this guard began (the choice the
    recorder makes: fewest differences, the most recent of those). Only compilations of
    the same function object count: another object from the same line is another entry."""
    serial = miss.signature.function.serial
    for recorder in ACTIVE:
        record = recorder.functions.get(key) if not isinstance(recorder, _GuardRecorder) else None
        if record is not None:
            found = [m for m in record.misses if m.kind != TRANSFORM and m.signature is not None]
            found = [m for m in found if m.signature is not miss.signature]
            found = [m for m in found if m.signature.function.serial == serial]
            if len(found) > len(earlier):
                earlier = found
    if not earlier:
        return None
    scored = [(m, sig.differences(miss.signature, m.signature)) for m in earlier]
    fewest = min(len(d) for _, d in scored)
    best, diffs = [(m, d) for m, d in scored if len(d) == fewest][-1]
    return dataclasses.replace(
        miss,
        kind=MISS,
        number=len(earlier) + 1,
        compared_with=best.number,
        differences=diffs,
        causes=classify.causes_of(diffs),
    )


def _message(record: FunctionRecord, miss: Miss) -> str:
    alone = FunctionRecord(record.name, record.qualname, record.location, misses=[miss])
    shown = record.qualname if record.name == sig.UNNAMED else record.name  # Loss.__call__
    head = (
        f"{shown} ({record.location}) compiled again inside no_recompiles "
        f"(compilation {miss.number}):"
    )
    return "\n".join([head, *cause_lines(alone)])


class no_recompiles(contextlib.ContextDecorator):  # noqa: N801 (used as a function)
    """Raise :class:`Recompiled` at the first recompilation of ``functions`` inside the
    block (of any watched function when none is named). A context manager, or a
    decorator for the function that runs the block."""

    def __init__(self, *functions: Callable[..., Any]) -> None:
        self.functions = functions
        self._guarded: list[_Guarded] = []
        self._recorder: _GuardRecorder | None = None

    def find(self, function: sig.FunctionInfo) -> _Guarded | None:
        if not self.functions:  # every watched function
            return _Guarded(function.name, function.key, function.serial, True, False)
        return next(
            (
                g
                for g in self._guarded
                if g.watched and (g.key, g.serial) == (function.key, function.serial)
            ),
            None,
        )

    def __enter__(self) -> no_recompiles:
        self._guarded = [_guarded(fn) for fn in self.functions]
        self._recorder = _GuardRecorder(self).start()  # starts events (and explanations)
        if any(not g.watched for g in self._guarded):
            events.subscribe(self._on_duration)
        return self

    def __exit__(self, *exc: object) -> None:
        if any(not g.watched for g in self._guarded):
            events.unsubscribe(self._on_duration)
        if self._recorder is not None:
            self._recorder.stop()
            self._recorder = None

    def _on_duration(self, event: str, seconds: float, **kwargs: Any) -> None:
        """A function the doctor does not watch: its compile events, by name. Raising
        here fails the very call that compiled (JAX lets a listener's exception through)."""
        if event != events.COMPILE_EVENT:
            return
        name = str(kwargs.get("fun_name", ""))
        for g in self._guarded:
            if g.watched or name != f"jit({g.name})":
                continue
            g.compiles_seen += 1
            if g.compiles_seen == 1 and not g.compiled_before:
                return
            said = next(
                (
                    e.text
                    for e in reversed(events.STREAM)
                    if e.kind == "explain" and e.name == g.name
                ),
                None,
            )
            raise Recompiled(_unseen(g.name, said, "unwatched"), g.name, [])
