"""jitlab: watch ``jax.jit`` trace and compile, and learn to stop it doing so again.

A lesson needs only ``import jitlab``: the instruments (counting, timing, the machine
report), the boxes at the top and bottom of a lesson, and ``record`` for the benchmark.
The names load on first use, so the command-line tools start without importing JAX.

The package's folders show its parts:

- ``instruments/``: measuring (compilations, time, the machine);
- ``course/``: the course's content model (``course.yml``, front matter, exercise sources);
- ``notebooks/``: the one pipeline that converts and executes notebooks;
- ``grading/`` and ``graders/``: checks, verdicts, and one grader per exercise;
- ``learner/``: the learner's runner (``jitlab list|check|hint|reset|watch``);
- ``maintainer/``: the course maintainers' commands (``jitlab dev ...``);
- ``site/``: the glue between the course and MkDocs;
- ``doctor/``: ``jitlab doctor``, for recompilations in the learner's own code.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ANY_FUNCTION": "jitlab.instruments.counting",
    "CompileCount": "jitlab.instruments.counting",
    "count_compiles": "jitlab.instruments.counting",
    "miss_reason": "jitlab.instruments.counting",
    "CallTimes": "jitlab.instruments.timing",
    "format_table": "jitlab.instruments.timing",
    "median_seconds": "jitlab.instruments.timing",
    "print_table": "jitlab.instruments.timing",
    "stopwatch": "jitlab.instruments.timing",
    "time_calls": "jitlab.instruments.timing",
    "time_once": "jitlab.instruments.timing",
    "environment": "jitlab.instruments.environment",
    "environment_report": "jitlab.instruments.environment",
    "print_environment": "jitlab.instruments.environment",
    "record": "jitlab.instruments.measurements",
    "measure": "jitlab.instruments.compare",
    "compare": "jitlab.instruments.compare",
    "Run": "jitlab.instruments.compare",
    "Comparison": "jitlab.instruments.compare",
    "attempt": "jitlab.instruments.attempt",
    "Attempt": "jitlab.instruments.attempt",
    "intro": "jitlab.course.boxes",
    "measured_on_machines": "jitlab.course.results",
    "show_measured_on_machines": "jitlab.course.results",
    "outro": "jitlab.course.boxes",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'jitlab' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jitlab``: the doctor's cell magic, for one cell of a notebook."""
    from jitlab.doctor.ipython import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from jitlab.doctor.ipython import unload_ipython_extension as unload

    unload(ipython)
