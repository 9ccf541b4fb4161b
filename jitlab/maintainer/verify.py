"""``jitlab dev verify``: the course holds to rustlings' ``dev check`` and nbgrader's
``validate --invert``. Every solution passes its graders; every generated exercise is
current and, unsolved, fails at a grader check with a ``NotImplementedError`` (for the
intended reason, not a crash in the setup cells or a timeout).

The unsolved exercise checked is the one its source generates (written under
``_build/``), never the copy in ``exercises/``, which a learner may be solving."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from jitlab.course.exercise_source import CopyState, copy_state, generated_text
from jitlab.course.manifest import Course, Exercise
from jitlab.grading.verdict import format_verdict
from jitlab.learner.check import check_file


def generated_copy(exercise: Exercise) -> Path:
    """The learner's copy as generated, in ``_build/generated-exercises/`` (named as in
    ``exercises/``, which is how the runner finds its exercise)."""
    path = exercise.learner_copy.parents[1] / "_build" / "generated-exercises"
    path.mkdir(parents=True, exist_ok=True)
    path /= exercise.learner_copy.name
    path.write_text(generated_text(exercise), encoding="utf-8")
    return path


def verify_exercise(exercise: Exercise, timeout: int) -> list[str]:
    """Problems with one exercise (empty when it is as it should be)."""
    problems = []
    solved = check_file(exercise.source, cell_timeout_s=timeout)
    if not solved.passed:
        problems.append(f"{exercise.stem}: the solution fails\n{format_verdict(solved)}")
    unsolved = check_file(generated_copy(exercise), cell_timeout_s=timeout)
    failed = unsolved.failed_check
    if unsolved.passed:
        problems.append(f"{exercise.stem}: the unsolved exercise passes its graders")
    elif failed is None or not failed.not_started:
        problems.append(
            f"{exercise.stem}: the unsolved exercise does not fail at a grader check on its "
            f"unwritten stub\n{format_verdict(unsolved)}"
        )
    return problems


def run_verify(
    course: Course,
    keys: list[str],
    *,
    jobs: int,
    timeout: int,
    echo: Callable[[str], None],
) -> int:
    unknown = [k for k in keys if course.find_exercise(k) is None]
    if unknown:
        known = ", ".join(f"{e.number} {e.slug}" for e in course.exercises)
        echo(f"no exercise {unknown[0]!r}. The exercises are: {known}")
        return 2
    chosen = [course.find_exercise(k) for k in keys] if keys else list(course.exercises)
    exercises = [e for e in chosen if e is not None]
    problems = [
        f"{e.stem}: exercises/{e.learner_copy.name} is out of date with its source; "
        "run `jitlab dev exercises`"
        for e in exercises
        if copy_state(e) in (CopyState.STALE, CopyState.EDITED_STALE)
    ]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda e: verify_exercise(e, timeout), exercises))
    for exercise, found in zip(exercises, results, strict=True):
        echo(f"  {'ok  ' if not found else 'FAIL'}  {exercise.stem}")
        problems += found
    if problems:
        echo("\n" + "\n\n".join(problems))
        echo(f"\nverify: {len(problems)} problem(s)")
        return 1
    echo(f"\nverify: {len(exercises)} solutions pass, {len(exercises)} exercises fail at a grader")
    return 0
