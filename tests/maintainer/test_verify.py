"""`jitlab dev verify` on the real course: every solution passes its graders, and every
generated exercise fails at a grader check on its unwritten stub."""

from __future__ import annotations

import pytest

from jitlab.course import load_course
from jitlab.maintainer.verify import run_verify, verify_exercise

COURSE = load_course()


@pytest.mark.slow
@pytest.mark.parametrize("exercise", COURSE.exercises, ids=lambda e: e.stem)
def test_the_solution_passes_and_the_exercise_fails_at_a_grader(exercise):
    # One exercise per test, spread over pytest-xdist's workers (tests/conftest.py);
    # `jitlab dev verify` runs the same function over all of them.
    problems = verify_exercise(exercise, timeout=180)
    assert not problems, "\n\n".join(problems)


def test_verify_says_which_exercise_failed(fixture_course):
    exercise = fixture_course.lesson("doubling").exercise
    exercise.source.write_text(exercise.source.read_text().replace("return x * 2", "return x * 3"))
    said: list[str] = []
    code = run_verify(fixture_course, [], jobs=1, timeout=60, echo=said.append)
    assert code == 1
    assert any("FAIL" in line and "01_doubling" in line for line in said), said
    assert "01_doubling: the solution fails" in "\n".join(said)
