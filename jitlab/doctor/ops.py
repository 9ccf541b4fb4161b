"""Which of the user's lines put the most operations into a program that compiled slowly.

A program unrolled by a Python loop compiles slowly with no recompilation at all: its size
is the problem, and its size comes from lines of the user's code. JAX can write the count
of equations per source line to a file (``JAX_DUMP_IR_MODES=eqn_count_pprof``, a pprof
profile); the doctor counts the same thing in the process. JAX has no public hook on the
jaxpr a jit lowers, so while the doctor watches it wraps the private
``jax._src.jaxpr_util.maybe_dump_jaxpr_to_file``, which JAX calls with each jaxpr it
lowers, keeps the latest jaxpr of each watched function's name, and counts its equations
only when that compilation was slow (see :data:`SLOW_SECONDS`). Where a JAX release lacks
the function, the report has no such line and the rest works as before
(``tests/doctor/test_private_hooks.py``).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from typing import Any

SLOW_SECONDS = 1.0
"""A compilation at least this slow gets its busiest source lines in the report."""

UNAVAILABLE = ""
_saved: dict[str, Any] = {}
_latest: dict[str, Any] = {}  # function name -> the closed jaxpr it lowered last
_lock = threading.Lock()
WANTED: set[str] = set()  # the names of watched functions (others are not kept)


def install() -> None:
    global UNAVAILABLE
    try:
        from jax._src import jaxpr_util

        real = jaxpr_util.maybe_dump_jaxpr_to_file
    except (ImportError, AttributeError) as err:
        UNAVAILABLE = f"no jax._src.jaxpr_util.maybe_dump_jaxpr_to_file ({err})"
        return

    def maybe_dump_jaxpr_to_file(fun_name: str, jaxpr: Any, *args: Any, **kwargs: Any) -> Any:
        if fun_name in WANTED:
            with _lock:
                _latest[fun_name] = jaxpr
        return real(fun_name, jaxpr, *args, **kwargs)

    _saved.update(module=jaxpr_util, real=real)
    jaxpr_util.maybe_dump_jaxpr_to_file = maybe_dump_jaxpr_to_file


def uninstall() -> None:
    module = _saved.pop("module", None)
    if module is not None:
        module.maybe_dump_jaxpr_to_file = _saved.pop("real")
    with _lock:
        _latest.clear()


def take(name: str) -> Any:
    """The jaxpr ``name`` lowered last, forgotten here (it holds the program's constants)."""
    with _lock:
        return _latest.pop(name, None)


def _equations(jaxpr: Any, seen: set[int]) -> Any:
    from jax._src import core

    for eqn in jaxpr.eqns:
        yield eqn
        for sub in core.jaxprs_in_params(eqn.params):
            if id(sub) not in seen:
                seen.add(id(sub))
                yield from _equations(sub, seen)


def busiest_lines(closed_jaxpr: Any, most: int = 3) -> list[tuple[str, int]]:
    """(``file:line``, equations) for the user's lines that put the most equations into
    the program, most first; [] when it cannot be read."""
    try:
        from jax._src import source_info_util

        counts: Counter[str] = Counter()
        for eqn in _equations(getattr(closed_jaxpr, "jaxpr", closed_jaxpr), set()):
            frame = source_info_util.user_frame(eqn.source_info.traceback)
            if frame is None:
                continue
            path = frame.file_name
            try:
                rel = os.path.relpath(path)
                path = rel if not rel.startswith("..") else path
            except ValueError:
                pass
            counts[f"{path}:{frame.start_line}"] += 1
        return counts.most_common(most)
    except Exception:  # noqa: BLE001 - a line of the report, never the run
        return []
