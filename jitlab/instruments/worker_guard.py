"""What keeps a worker's records the grader's own: a signing key and an audit hook.

A worker process runs the task's code and, in the processes exercise, the learner's cell
with it. Its records go to a file whose path is on its command line, so code of the
learner's could write a record of its own ("finished") and leave. Each record therefore
carries a MAC made with a key the parent hands the worker on its standard input, read
before any task code runs; the parent drops every record whose MAC does not match.

The key stays in the worker's memory, so the worker also installs an audit hook
(:func:`install`) before the task runs. While code from outside the installed files is
on the stack (the learner's cell, a lesson's task), it refuses what would reach the key
or the grader's frames: frames, trace and profile functions, the garbage collector's
object lists, ``ctypes`` memory access, the process's own memory file, and an audit hook
of its own. It also compares the course's and JAX's modules at every call into the
learner's code and at every decided check, so a grader function swapped in the worker
is seen. What it finds is kept in :data:`FOUND`; the worker reports it instead of
``finished``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Any

from jitlab.instruments.audit import CALL_EVENT, OWN_FRAME_USE

FOUND: list[str] = []
"""What the hook refused or found changed, in order (the worker reports the first)."""

_ANYWHERE = {  # refused while the learner's code is anywhere on the stack
    "sys._getframe": "a frame",
    "sys._getframemodulename": "a frame",
    "sys._current_frames": "a frame",
    "sys._current_exceptions": "a frame",
    "sys.settrace": "sys.settrace",
    "sys.setprofile": "sys.setprofile",
    "sys._settraceallthreads": "sys.settrace",
    "sys._setprofileallthreads": "sys.setprofile",
    "sys.monitoring.register_callback": "sys.monitoring",
    "gc.get_objects": "the garbage collector's lists",
    "gc.get_referrers": "the garbage collector's lists",
    "gc.get_referents": "the garbage collector's lists",
    "sys.addaudithook": "an audit hook of your own",
}
_FIRST = {  # refused when the first code outward is the learner's (libraries load ctypes)
    "ctypes.cdata": "ctypes",
    "ctypes.addressof": "ctypes",
    "ctypes.string_at": "ctypes",
    "ctypes.call_function": "ctypes",
}
_FRAME_ATTRIBUTES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"}
_WATCHED = ("jax", "jax.numpy", "jax.monitoring", "jax._src.monitoring", "numpy", "hmac")


def sign(key: bytes, body: str) -> str:
    """The MAC of one record's JSON text."""
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()[:32]


def verified(key: bytes, line: str) -> str | None:
    """The record's JSON text if ``line`` carries its MAC, else None."""
    mac, _, body = line.partition(" ")
    return body if hmac.compare_digest(mac.encode(), sign(key, body).encode()) else None


def _trusted_roots() -> tuple[str, ...]:
    """Where installed code lives, as written and resolved (a code object's file name is
    compared as it is: the hook calls no Python function the learner could replace)."""
    paths = sysconfig.get_paths()
    found = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    found.add(str(Path(__file__).resolve().parents[1]))  # the jitlab package
    found |= {os.path.realpath(p) for p in found}
    return (*(p.rstrip(os.sep) + os.sep for p in found), "<frozen ")


def _stock(
    modules: dict[str, Any], vars_: Any = vars, id_: Any = id, list_: Any = list, c: Any = callable
) -> dict[str, dict[str, int]]:
    """The functions and classes of the course's and JAX's modules (their state, a
    counter, may change), with builtins bound when the hook was made, so that none of
    the learner's runs in it."""
    names = [n for n in list_(modules) if n == "jitlab" or n.startswith("jitlab.")]
    return {
        name: {k: id_(v) for k, v in list_(vars_(modules[name]).items()) if c(v)}
        for name in [*names, *_WATCHED]
        if name in modules
    }


def _hands_back(code: Any, sep: str) -> bool:
    """Code that hands a frame back to its caller: the caller is the one asking."""
    base = code.co_filename.rpartition(sep)[2]
    return base in ("inspect.py", "traceback.py") or (
        code.co_name == "<lambda>" and code.co_filename.endswith(f"logging{sep}__init__.py")
    )


def install(outermost: Any = None) -> None:
    """Arm the worker's audit hook (it cannot be removed); call it before the task runs.
    ``outermost``: the code of the function that runs the task; the frames outside it
    (the interpreter's ``-c`` boot lines) are the launcher's, not the learner's."""
    roots, state, getframe = _trusted_roots(), threading.local(), sys._getframe
    take, modules, found, sep, hands_back = _stock, sys.modules, FOUND, os.sep, _hands_back
    # The hook's own copies: the module's tables could be edited in place by the task.
    anywhere_, first_, attributes = dict(_ANYWHERE), dict(_FIRST), frozenset(_FRAME_ATTRIBUTES)
    own_use = frozenset(OWN_FRAME_USE)
    stock, getattr_, type_ = take(modules), getattr, type

    def learners(frame: Any, anywhere: bool = True) -> str | None:
        """The learner's line: the first frame outward from ``frame`` not of installed
        code (with ``anywhere`` False, only if the first frame is not)."""
        while frame is not None and frame.f_code is not outermost:
            if not frame.f_code.co_filename.startswith(roots):
                return f"{frame.f_code.co_filename}:{frame.f_lineno}"
            if not anywhere:
                return None
            frame = frame.f_back
        return None

    def changed() -> list[str]:
        now = take(modules)
        return [
            f"{name}.{k} replaced in the worker"
            for name, seen in stock.items()
            for k, v in seen.items()
            if now.get(name, {}).get(k, v) != v
        ]

    def audit(event: str, args: tuple[Any, ...]) -> None:
        frame = getframe(2)  # audit <- hook <- the code that raised the event
        if event == CALL_EVENT:
            if args and type_(args[0]) is str and args[0] in ("leave", "check"):
                found.extend(x for x in changed() if x not in found)
            return
        what = anywhere_.get(event)
        if event == "object.__getattr__" and len(args) > 1 and type_(args[1]) is str:
            what = "a frame" if args[1] in attributes else None
        if event == "open" and args and type_(args[0]) in (str, bytes):
            path = args[0] if type_(args[0]) is str else args[0].decode("utf-8", "replace")
            if path.startswith("/proc/") and path.endswith(("/mem", "/environ")):
                what = "the process's own memory"
        if what == "a frame" and frame is not None:
            asker = frame
            while asker is not None and hands_back(asker.f_code, sep):
                asker = asker.f_back  # inspect, traceback, logging.currentframe: their caller asks
            if asker is not None:
                base = asker.f_code.co_filename.rpartition(sep)[2]
                if {(base, asker.f_code.co_name), (base, "*")} & own_use:
                    return
        line = learners(frame) if what else None
        if event in first_:
            what, line = first_[event], learners(frame, anywhere=False)
        if line:
            asker = f"{frame.f_code.co_filename.rpartition(sep)[2]}:{frame.f_code.co_name}"
            found.append(f"refused {what} ({event}, asked by {asker}) at {line}")
            raise PermissionError(f"jitlab worker: {what} is not allowed here")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "builtins.id" or getattr_(state, "busy", False):  # id(): JAX's, often
            return
        state.busy = True
        try:
            audit(event, args)
        finally:
            state.busy = False

    sys.addaudithook(hook)
