"""One source per exercise: the learner's copy is generated from the marked solution,
and every committed copy is current."""

from __future__ import annotations

import re
import subprocess

import pytest

from jitlab.course import CourseError, load_course
from jitlab.course.exercise_source import (
    CopyState,
    copy_state,
    generated_text,
    learner_copy,
    stale_copies,
    with_hint_note,
    without_hints,
    write_learner_copies,
)

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
    """The committed copies, not a learner's work in progress: a copy that holds edits
    counts as current when the copy git holds is (``copy_state``)."""
    stale = [
        e.learner_copy.name
        for e in load_course().exercises
        if copy_state(e) in (CopyState.STALE, CopyState.EDITED_STALE)
    ]
    assert not stale, f"out of date with their sources (run `make exercises`): {stale}"


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def course_in_git(fixture_course):
    """The fixture course committed to a git repository of its own, as a clone is."""
    root = fixture_course.root
    _git(root, "init", "--quiet")
    _git(root, "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "course")
    return fixture_course


def test_a_learners_edits_are_told_from_a_stale_copy_and_never_overwritten(course_in_git):
    exercise = course_in_git.lesson("doubling").exercise
    copy, source = exercise.learner_copy, exercise.source
    solved = copy.read_text().replace("raise NotImplementedError", "return x * 2", 1)
    copy.write_text(solved)
    assert copy_state(exercise) is CopyState.EDITED
    assert write_learner_copies(course_in_git) == ([], [copy])
    assert copy.read_text() == solved
    source.write_text(source.read_text().replace("# %%\nimport jax", "# %%\nimport jax  # new"))
    assert copy_state(exercise) is CopyState.EDITED_STALE
    assert write_learner_copies(course_in_git) == ([], [copy])
    assert copy.read_text() == solved
    assert write_learner_copies(course_in_git, force=True) == ([copy], [])
    assert "import jax  # new" in copy.read_text() and "return x * 2" not in copy.read_text()


def test_an_unedited_stale_copy_is_regenerated(course_in_git):
    exercise = course_in_git.lesson("doubling").exercise
    exercise.source.write_text(
        exercise.source.read_text().replace("# %%\nimport jax", "# %%\nimport jax  # new")
    )
    assert copy_state(exercise) is CopyState.STALE
    assert write_learner_copies(course_in_git) == ([exercise.learner_copy], [])
    assert copy_state(exercise) is CopyState.CURRENT


def test_without_git_a_changed_copy_is_left_alone(fixture_course, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(fixture_course.root.parent))
    exercise = fixture_course.lesson("doubling").exercise
    exercise.learner_copy.write_text(exercise.learner_copy.read_text() + "# mine\n")
    assert copy_state(exercise) is CopyState.UNKNOWN
    assert write_learner_copies(fixture_course) == ([], [exercise.learner_copy])


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


def _chunks(text: str) -> set[str]:
    """Every run of ten words of a hint: a part of it shown is caught, not only all of it
    (six words already meet the task's own wording, "on every process and at every")."""
    words = text.split()
    return {" ".join(words[i : i + 10]) for i in range(max(1, len(words) - 9))}


@pytest.mark.parametrize("exercise", load_course().exercises, ids=lambda e: e.slug)
def test_the_learners_copy_holds_no_hint_and_says_how_to_get_them(exercise):
    copy = generated_text(exercise)  # as generated: a learner may be solving exercises/'s
    flat = " ".join(" ".join(line.lstrip("#").split()) for line in copy.splitlines())
    assert exercise.meta.hints, f"{exercise.slug}: no hints to hide"
    for number, hint in enumerate(exercise.meta.hints, start=1):
        shown = [chunk for chunk in _chunks(hint) if chunk in flat]
        assert not shown, f"{exercise.learner_copy.name} shows hint {number}: {shown[0]!r}"
    assert f"`jitlab hint {exercise.number}`" in copy


def test_hints_nested_any_way_are_left_out_and_the_note_goes_under_the_title():
    source = (
        "# ---\n# jupyter:\n#   jitlab:\n#     hints:\n#     - one\n#     - two,\n"
        "#       continued\n#     other:\n#       part_1: [a]\n#     title: T\n# ---\n\n"
        "# %% [markdown]\n# # Exercise 07 · T\n#\n# Body.\n"
    )
    copy = with_hint_note(without_hints(source), "07")
    assert "one" not in copy and "continued" not in copy
    assert "#     other:\n#       part_1: [a]\n#     title: T\n# ---\n" in copy
    assert copy.index("# # Exercise 07 · T") < copy.index("`jitlab hint 07`") < copy.index("Body.")


def test_jitlab_hint_still_reads_the_hints_from_the_source(fixture_course):
    exercise = fixture_course.lesson("doubling").exercise
    assert exercise.meta.hints == (
        "Multiply by two.",
        "Return x * 2 from inside the jitted function.",
    )
    assert "Multiply by two" not in exercise.learner_copy.read_text()


@pytest.mark.parametrize("exercise", load_course().exercises, ids=lambda e: e.slug)
def test_an_exercise_has_one_title_for_its_page_its_file_and_jitlab_list(exercise):
    """The title cell reads ``Exercise NN · <title>``, the front matter's title, which the
    site's navigation and ``jitlab list`` show too."""
    titles = re.findall(r"^# # Exercise .*$", exercise.source.read_text("utf-8"), re.M)
    assert titles[:1] == [f"# # {exercise.label}"], f"{exercise.source.name}: {titles[:1]}"
