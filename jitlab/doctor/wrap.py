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
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.extend import source_info_util

from jitlab.doctor import ops, recorder
from jitlab.doctor.captured import captured_arrays
from jitlab.instruments import events
from jitlab.instruments import signature as sig

# JAX names the first frame outside itself as a miss's call site; make that the user's
# line, not this wrapper's.
source_info_util.register_exclusion(__file__)

_lock = threading.Lock()
_installed = 0
_original_jit: Callable[..., Any] | None = None


_DELEGATED = ("eval_shape", "clear_cache", "_cache_size", "_fun")


class _Depth(threading.local):
    """How many watched jitted calls are running in this thread: a call made while
    another is running is made while that one traces (a cache hit runs no Python)."""

    level = 0


DEPTH = _Depth()


def watch_jitted(jitted: Any, fun: Callable[..., Any], options: dict[str, Any]) -> Any:
    """A function that calls the real jitted function ``jitted`` and tells the doctor when a
    call traced or compiled. It carries the real one's ``lower`` (watched too: an
    ahead-of-time compilation is a compilation), ``trace``, ``eval_shape`` and
    ``clear_cache``; stored on a class it binds as a method, as the real one does. (A
    closure, not an object with ``__call__``: it costs less per call.)"""
    function = sig.identify(fun)
    counter, serial = recorder.counter_for(function), function.serial
    _register_fun(fun, counter)
    ops.WANTED.add(function.name)
    stream = events.STREAM  # the same list for the life of the process
    observe = recorder.observe
    captured_by = recorder.CAPTURED
    depth = DEPTH
    spec: list[sig.StaticSpec] = []

    def static_spec() -> sig.StaticSpec:
        if not spec:
            spec.append(sig.static_spec(fun, options))
        return spec[0]

    # `watched` must not refer to itself: a reference cycle would keep it, and with it
    # `fun` and the real jitted function, alive until the garbage collector runs, and
    # jit's caches (keyed on weak references to `fun`) would hit where they should miss.
    def watched(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # pytest: the user's frame, then JAX's
        level = depth.level
        if level:
            counter.nested += 1
        else:
            counter.calls += 1
            counter.last[serial] = counter.calls
        mark = len(stream)
        depth.level = level + 1
        try:
            out = jitted(*args, **kwargs)
        except BaseException as err:
            depth.level = level
            if len(stream) != mark:
                observe(function, static_spec, args, kwargs, mark, error=err)
            raise
        depth.level = level
        if len(stream) != mark:
            if serial not in captured_by:  # read once per object, at its first compile
                if len(captured_by) > 10_000:
                    captured_by.pop(next(iter(captured_by)))
                captured_by[serial] = captured_arrays(fun)
            observe(function, static_spec, args, kwargs, mark)
        return out

    def lower(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        mark = len(stream)
        lowered = jitted.lower(*args, **kwargs)
        seen = []
        if len(stream) != mark:
            seen = observe(function, static_spec, args, kwargs, mark, "lower")
        _watch_compile(lowered, function, static_spec, args, kwargs, seen)
        return lowered

    def trace(*args: Any, **kwargs: Any) -> Any:
        """``jitted.trace(...)``: its ``.lower()`` is recorded as ``lower`` is, with the
        trace's own events (``.trace(...).lower().compile()`` is the newer warm-up)."""
        __tracebackhide__ = True
        mark = len(stream)
        traced = jitted.trace(*args, **kwargs)
        real_lower = getattr(traced, "lower", None)
        if real_lower is None:
            return traced

        def lower_traced(*a: Any, **k: Any) -> Any:
            __tracebackhide__ = True
            lowered = real_lower(*a, **k)
            seen = []
            if len(stream) != mark:
                seen = observe(function, static_spec, args, kwargs, mark, "lower")
            _watch_compile(lowered, function, static_spec, args, kwargs, seen)
            return lowered

        functools.update_wrapper(lower_traced, real_lower, updated=())
        try:
            traced.lower = lower_traced
        except AttributeError:  # a Traced without a __dict__: counted by name only
            pass
        return traced

    functools.update_wrapper(watched, fun, updated=())
    watched.__name__ = function.name  # a partial has none: JAX's name for it
    for name in _DELEGATED:
        value = getattr(jitted, name, None)
        if value is not None:
            setattr(watched, name, value)
    if getattr(jitted, "lower", None) is not None:
        functools.update_wrapper(lower, jitted.lower, updated=())
        watched.lower = lower  # type: ignore[attr-defined]
    if getattr(jitted, "trace", None) is not None:
        functools.update_wrapper(trace, jitted.trace, updated=())
        watched.trace = trace  # type: ignore[attr-defined]
    watched._jitted = jitted  # type: ignore[attr-defined]
    watched._function = function  # type: ignore[attr-defined]
    return watched


def _watch_compile(
    lowered: Any,
    function: sig.FunctionInfo,
    static_spec: Callable[[], sig.StaticSpec],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    seen: list[Any],
) -> None:
    """Make ``lowered.compile()`` tell the doctor what it compiled (an instance attribute:
    ``jax.stages.Lowered`` keeps a ``__dict__``; where it does not, the compilation is
    counted by name only)."""
    real = getattr(lowered, "compile", None)
    if real is None:
        return
    stream = events.STREAM

    def compile(*a: Any, **k: Any) -> Any:
        __tracebackhide__ = True
        mark = len(stream)
        out = real(*a, **k)
        if len(stream) != mark:
            if seen:
                recorder.observe_compile(function, seen, mark)
            else:  # the lowering came from jit's caches: record the compilation now
                recorder.observe(function, static_spec, args, kwargs, mark, "compile")
        return out

    functools.update_wrapper(compile, real, updated=())
    try:
        lowered.compile = compile
    except AttributeError:
        pass


def watched_jit(fun: Any = None, /, **options: Any) -> Any:
    """``jax.jit`` while the doctor runs: the real ``jax.jit``, wrapped by :func:`watch_jitted`."""
    real = _original_jit if _original_jit is not None else jax.jit
    if fun is None:  # the decorator-factory form: @jax.jit(static_argnums=...)
        return functools.partial(watched_jit, **options)
    if sig.is_library_function(fun) and _jitted_by_a_library():
        # a library's own jitted helper, jitted by the library (optax's
        # tree_bias_correction): not the user's function; inside the user's jit its traces
        # are folded into the caller's. Whether a jit is the user's is decided by where
        # jax.jit was called: `jax.jit(exported.call)` in the user's code is theirs.
        return real(fun, **options)
    watched = watch_jitted(real(fun, **options), fun, options)
    recorder.jitted_at(watched._function, recorder.call_site(2))
    return watched


_OWN = (os.path.dirname(os.path.abspath(__file__)) + os.sep, os.sep + "functools.py")


def _jitted_by_a_library() -> bool:
    """Whether the code that called ``jax.jit`` (the first frame outside the doctor and
    ``functools``) is a library's: JAX's own, or one of :data:`sig.LIBRARIES`."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_OWN[0]):
        frame = frame.f_back
    while frame is not None and frame.f_code.co_filename.endswith(_OWN[1]):
        frame = frame.f_back
    return frame is not None and sig.is_library_file(frame.f_code.co_filename)


# ---------------------------------------------------------------------------------------
# The fast path. A warm call of a jitted function normally runs in jit's C++ dispatch; when
# that cannot serve it, C++ calls back into Python (``pjit``'s ``cache_miss``), which
# infers the parameters again and asks for fast-path data after running. JAX has no
# public hook for this, so the doctor wraps the two private functions that callback uses,
# ``jax._src.pjit._infer_params`` and ``_get_fastpath_data``, while it watches: each
# Python-path call of a watched function that neither traced nor compiled is counted,
# with why. Where a JAX release lacks them, FASTPATH_UNAVAILABLE says so and the rest of
# the doctor works as before.

FASTPATH_UNAVAILABLE = ""
_counters_by_fun: dict[int, tuple[Any, recorder.CallCounter]] = {}
_fast_saved: dict[str, Any] = {}


class _PythonPath(threading.local):
    counter: recorder.CallCounter | None = None
    mark = 0
    numpy = False


_PYTHON_PATH = _PythonPath()


def _register_fun(fun: Any, counter: recorder.CallCounter) -> None:
    import weakref

    try:
        ref: Any = weakref.ref(fun)
    except TypeError:
        ref = lambda: fun  # noqa: E731 - kept alive anyway
    _counters_by_fun[id(fun)] = (ref, counter)


def _install_fast_path_hook() -> None:
    global FASTPATH_UNAVAILABLE
    try:
        from jax._src import pjit as _pjit

        infer, fastpath = _pjit._infer_params, _pjit._get_fastpath_data
    except (ImportError, AttributeError) as err:
        FASTPATH_UNAVAILABLE = (
            "the fast-path share is not measured: this JAX has no "
            f"jax._src.pjit._infer_params/_get_fastpath_data ({err})"
        )
        return

    def infer_params(fun: Any, jit_info: Any, args: Any, kwargs: Any) -> Any:
        entry = _counters_by_fun.get(id(fun))
        state = _PYTHON_PATH
        if entry is not None and entry[0]() is fun and DEPTH.level == 1:
            state.counter, state.mark = entry[1], len(events.STREAM)
            state.numpy = any(isinstance(a, np.ndarray | np.generic) for a in args)
        else:
            state.counter = None
        return infer(fun, jit_info, args, kwargs)

    def get_fastpath_data(executable: Any, *rest: Any, **kw: Any) -> Any:
        out = fastpath(executable, *rest, **kw)
        state = _PYTHON_PATH
        counter, state.counter = state.counter, None
        if counter is not None and len(events.STREAM) == state.mark:
            counter.python += 1
            if out is None:
                call = getattr(executable, "unsafe_call", None)
                effect = getattr(call, "ordered_effects", None) or getattr(
                    call, "has_unordered_effects", False
                )
                reason = "an effect in the program" if effect else "no fast path for it"
            elif state.numpy:
                reason = "NumPy inputs"
            else:
                reason = "a new kind of input for the fast path"
            counter.reasons[reason] = counter.reasons.get(reason, 0) + 1
        return out

    _fast_saved.update(infer=infer, fastpath=fastpath, module=_pjit)
    _pjit._infer_params, _pjit._get_fastpath_data = infer_params, get_fastpath_data


def _uninstall_fast_path_hook() -> None:
    module = _fast_saved.pop("module", None)
    if module is not None:
        module._infer_params = _fast_saved.pop("infer")
        module._get_fastpath_data = _fast_saved.pop("fastpath")


def install() -> None:
    """Replace ``jax.jit`` (reference-counted; :func:`uninstall` undoes one install).
    Only functions jitted after this are watched."""
    global _installed, _original_jit
    with _lock:
        if _installed == 0:
            _original_jit = jax.jit
            functools.update_wrapper(watched_jit, _original_jit, updated=())
            jax.jit = watched_jit
            _install_fast_path_hook()
            ops.install()
        _installed += 1


def uninstall() -> None:
    global _installed
    with _lock:
        if _installed == 0:
            return
        _installed -= 1
        if _installed == 0 and jax.jit is watched_jit and _original_jit is not None:
            jax.jit = _original_jit
        if _installed == 0:
            _uninstall_fast_path_hook()
            ops.uninstall()


def installed() -> bool:
    return _installed > 0
