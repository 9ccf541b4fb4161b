"""jitlab: the course's instruments for watching ``jax.jit`` trace and compile.

The names a lesson needs are here; each lives in a small module with one job.
"""

from jitlab.counting import ANY_FUNCTION, CompileCount, count_compiles
from jitlab.environment import environment, environment_report, print_environment
from jitlab.lesson import intro, outro
from jitlab.results import record
from jitlab.timing import (
    CallTimes,
    format_table,
    median_seconds,
    print_table,
    stopwatch,
    time_calls,
    time_once,
)

__all__ = [
    "ANY_FUNCTION",
    "CallTimes",
    "CompileCount",
    "count_compiles",
    "environment",
    "environment_report",
    "format_table",
    "intro",
    "median_seconds",
    "outro",
    "print_environment",
    "print_table",
    "record",
    "stopwatch",
    "time_calls",
    "time_once",
]


def load_ipython_extension(ipython):  # noqa: ANN001 - IPython's hook
    """``%load_ext jitlab``: the doctor's cell magic ``%%jitlab_doctor`` (see jitlab.doctor)."""
    from jitlab.doctor.ipython import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython):  # noqa: ANN001 - IPython's hook
    from jitlab.doctor.ipython import unload_ipython_extension as unload

    unload(ipython)
