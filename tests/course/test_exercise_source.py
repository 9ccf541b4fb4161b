"""One source per exercise: the learner's copy is generated from the marked solution,
and every committed copy is current."""

from __future__ import annotations

import pytest

from jitlab.course import CourseError, load_course
from jitlab.course.exercise_source import learner_copy, stale_copies

SOURCE = '''import jax


# BEGIN SOLUTION (no stub)
@jax.jit
# END SOLUTION
def f(x):
    """Double x."""
    # BEGIN SOLUTION
    y = x * 2
    return y
    # END SOLUTION


def g(x):
    # BEGIN SOLUTION (no stub)
    """Solved: add one."""
    # END SOLUTION
    # STUB: """Add one to x."""
    # STUB:     # (indented further)
    # BEGIN SOLUTION
    return x + 1
    # END SOLUTION
'''

EXPECTED = '''import jax


def f(x):
    """Double x."""
    raise NotImplementedError


def g(x):
    """Add one to x."""
        # (indented further)
    raise NotImplementedError
'''


def test_markers_become_stubs_vanish_or_turn_into_the_learners_lines():
    assert learner_copy(SOURCE) == EXPECTED


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# BEGIN SOLUTION\nx = 1\n", "never closed"),
        ("x = 1\n# END SOLUTION\n", "without a BEGIN"),
        ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n", "inside the region"),
        ("x = 1\n", "no BEGIN SOLUTION region"),
    ],
)
def test_broken_markers_are_reported_with_their_line(text, message):
    with pytest.raises(CourseError, match=message):
        learner_copy(text, "solutions/99_x.py")


def test_every_committed_learner_copy_is_current():
    stale = [e.learner_copy.name for e in stale_copies(load_course())]
    assert not stale, f"out of date with their sources (run `make exercises`): {stale}"


def test_a_stale_copy_is_detected(fixture_course):
    exercise = fixture_course.lesson("doubling").exercise
    exercise.source.write_text(
        exercise.source.read_text().replace("    return x * 2", "    return 2 * x")
    )
    assert stale_copies(fixture_course) == []  # the learner's copy has no solution in it
    exercise.source.write_text(
        exercise.source.read_text().replace("# %%\nimport jax", "# %%\nimport jax  # the setup")
    )
    assert stale_copies(fixture_course) == [exercise]
