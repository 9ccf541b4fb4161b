"""Watching the calls: while the doctor runs a program, ``jax.jit`` is replaced by a thin
wrapper around the real ``jax.jit``.

This is the one place the doctor touches JAX, and it goes through public API only: the
wrapper calls the real ``jax.jit`` with the same arguments and returns an object that calls
the real jitted function. Why wrap at all? JAX's events say *that* ``train_step`` compiled,
not with which arguments; to name what changed, the doctor must see the arguments of the
call that compiled. The wrapper compares the length of the event stream before and after
each call (one ``len``), so a call that hits the cache costs about a microsecond more, and
the arguments are examined only when the call traced or compiled.

Functions jitted before :func:`install` (JAX's own helpers, a library imported earlier)
are not wrapped. Their compilations are still counted by name, without a cause.
"""

from __future__ import annotations

import functools
import threading
import types
from collections.abc import Callable
from typing import Any

import jax
from jax.extend import source_info_util

from jitlab.doctor import events, recorder
from jitlab.doctor import signature as sig

# JAX names the first frame outside itself as a miss's call site; make that the user's
# line, not this wrapper's.
source_info_util.register_exclusion(__file__)

_lock = threading.Lock()
_installed = 0
_original_jit: Callable[..., Any] | None = None


class Watched:
    """A jitted function that tells the doctor when a call traced or compiled. Everything
    else (``lower``, ``trace``, ``eval_shape``, ``clear_cache``...) is the real one's."""

    def __init__(self, jitted: Any, fun: Callable[..., Any], options: dict[str, Any]) -> None:
        self._jitted = jitted
        self._fun = fun
        self._options = options
        self._function = sig.identify(fun)
        self._counter = recorder.counter_for(self._function)
        self._static_spec: sig.StaticSpec | None = None
        functools.update_wrapper(self, fun, updated=())

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        self._counter.calls += 1
        mark = len(events.STREAM)
        out = self._jitted(*args, **kwargs)
        if len(events.STREAM) != mark:
            recorder.observe(self, args, kwargs, mark)
        return out

    def _spec(self) -> sig.StaticSpec:
        if self._static_spec is None:
            self._static_spec = sig.static_spec(self._fun, self._options)
        return self._static_spec

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        # A jitted function stored on a class becomes a method, as the real one does.
        return self if obj is None else types.MethodType(self, obj)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(self._jitted, name)

    def __repr__(self) -> str:
        return repr(self._jitted)


def watched_jit(fun: Any = None, /, **options: Any) -> Any:
    """``jax.jit`` while the doctor runs: the real ``jax.jit``, wrapped in :class:`Watched`."""
    real = _original_jit if _original_jit is not None else jax.jit
    if fun is None:  # the decorator-factory form: @jax.jit(static_argnums=...)
        return functools.partial(watched_jit, **options)
    return Watched(real(fun, **options), fun, options)


def install() -> None:
    """Replace ``jax.jit`` (reference-counted; :func:`uninstall` undoes one install).
    Only functions jitted after this are watched."""
    global _installed, _original_jit
    with _lock:
        if _installed == 0:
            _original_jit = jax.jit
            functools.update_wrapper(watched_jit, _original_jit, updated=())
            jax.jit = watched_jit
        _installed += 1


def uninstall() -> None:
    global _installed
    with _lock:
        if _installed == 0:
            return
        _installed -= 1
        if _installed == 0 and jax.jit is watched_jit and _original_jit is not None:
            jax.jit = _original_jit


def installed() -> bool:
    return _installed > 0
