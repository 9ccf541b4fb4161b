"""`jitlab dev verify` on the real course: every solution passes its graders, every
generated exercise fails at a grader check on its unwritten stub."""

from __future__ import annotations

import pytest

from jitlab.course import load_course
from jitlab.maintainer.verify import run_verify, verify_exercise


@pytest.mark.slow
def test_every_solution_passes_and_every_exercise_fails_at_a_grader():
    said: list[str] = []
    code = run_verify(load_course(), [], jobs=2, timeout=180, echo=said.append)
    assert code == 0, "\n".join(said)


def test_verify_reports_a_solution_that_fails(fixture_course):
    exercise = fixture_course.lesson("doubling").exercise
    exercise.source.write_text(exercise.source.read_text().replace("return x * 2", "return x * 3"))
    problems = verify_exercise(exercise, timeout=60)
    assert len(problems) == 1 and "the solution fails" in problems[0]
