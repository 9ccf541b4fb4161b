"""``jitlab preflight``: is this machine ready for the course? The first slot of a
workshop: each learner runs it, and it says pass or fail with the reason, in under a
minute, before anyone waits on a broken install in the middle of lesson 01."""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable

from jitlab.course.manifest import Course

Echo = Callable[[str], None]


def _python() -> str:
    version = sys.version_info[:2]
    if not (3, 12) <= version < (3, 14):  # the lock is made for 3.12 and 3.13
        raise RuntimeError(f"Python {platform.python_version()}: the course needs 3.12 or 3.13")
    return f"Python {platform.python_version()}"


def _jax(course: Course) -> Callable[[], str]:
    def check() -> str:
        import jax

        from jitlab.course.boxes import pinned_jax

        pinned = pinned_jax(course.root)
        if pinned and jax.__version__ != pinned:
            raise RuntimeError(
                f"jax {jax.__version__} is installed, the course pins {pinned}: "
                "run `make setup` again (or reinstall requirements.lock)"
            )
        return f"jax {jax.__version__} on {jax.devices()[0].platform}"

    return check


def _compile_and_count() -> str:
    import jax
    import jax.numpy as jnp

    from jitlab.instruments.counting import count_compiles

    @jax.jit
    def preflight_probe(x):
        return x * 2

    with count_compiles(preflight_probe) as n:
        preflight_probe(jnp.ones(3))
        preflight_probe(jnp.ones(4))
    if n.compiles != 2:
        raise RuntimeError(f"expected 2 compilations of a probe, counted {n.compiles}")
    return "jit compiles, and the counter hears it"


def _course_files(course: Course) -> str:
    from jitlab.course.exercise_source import generated_text

    for exercise in course.exercises:
        generated_text(exercise)
    return f"{len(course.lessons)} lessons and {len(course.exercises)} exercises load"


def _kernel(course: Course) -> Callable[[], str]:
    def check() -> str:
        from jitlab.learner.check import check_file

        first = course.exercises[0]
        verdict = check_file(first.source, course=course, cell_timeout_s=50)
        if not verdict.passed:
            raise RuntimeError(
                f"the solution of exercise {first.number} fails: {verdict.problem or verdict.kind}"
            )
        return f"a notebook kernel runs exercise {first.number}'s solution and it passes"

    return check


def run_preflight(course: Course, echo: Echo = print) -> int:
    """Run each check in turn; 0 when all pass, 1 at the first that fails."""
    steps: list[tuple[str, Callable[[], str]]] = [
        ("Python", _python),
        ("course files", lambda: _course_files(course)),
        ("JAX", _jax(course)),
        ("compiling", _compile_and_count),
        ("notebooks", _kernel(course)),
    ]
    start = time.perf_counter()
    for name, step in steps:
        try:
            detail = step()
        except Exception as err:  # each failure is reported as the learner's next step
            echo(f"  FAIL  {name}: {err}")
            echo("\npreflight failed: show this to your instructor, or see the Setup page")
            return 1
        echo(f"  ok    {name}: {detail}")
    echo(f"\npreflight passed in {time.perf_counter() - start:.0f} s: this machine is ready")
    return 0
