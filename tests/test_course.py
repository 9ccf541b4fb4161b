"""The course holds together: front matter, exercise/solution pairs, and `jitlab verify`."""

from __future__ import annotations

import re

import pytest

from jitlab import cli, course

REQUIRED = ("title", "fix", "questions", "objectives", "prerequisites", "minutes", "keypoints")
LESSONS = course.lessons()


def test_lessons_are_numbered_from_00_without_gaps():
    numbers = [int(item.number) for item in LESSONS]
    assert numbers == list(range(len(numbers))) and len(numbers) >= 2


@pytest.mark.parametrize("item", LESSONS, ids=lambda item: item.slug)
def test_lesson_front_matter_is_complete(item):
    missing = [key for key in REQUIRED if not item.meta.get(key)]
    assert not missing, f"{item.path.name} lacks {missing}"
    assert item.teaching_minutes > 0
    assert item.meta.get("instructor_notes"), "instructors need at least one note"


@pytest.mark.parametrize("item", LESSONS, ids=lambda item: item.slug)
def test_lesson_opens_with_intro_and_closes_with_outro(item):
    text = item.path.read_text()
    assert f'jitlab.intro("{item.number}")' in text
    assert text.rstrip().endswith(f'jitlab.outro("{item.number}")')
    assert '<p class="admonition-title">Predict</p>' in text, "every lesson asks to predict"
    assert text.count("assert ") >= 3, "every behavioural claim is asserted"


@pytest.mark.parametrize("item", LESSONS, ids=lambda item: item.slug)
def test_lesson_exercise_exists(item):
    if item.exercise is None:
        pytest.skip(f"{item.slug} has no exercise")
    assert (course.EXERCISES / f"{item.exercise}.py").exists()


@pytest.mark.parametrize("path", course.exercise_paths(), ids=lambda p: p.stem)
def test_exercise_has_solution_hints_grader_and_grader_tests(path):
    meta = course.header_metadata(path)
    assert course.solution_for(path).exists()
    assert len(meta.get("hints", [])) >= 2
    assert meta.get("lesson") in {item.number for item in LESSONS}
    match = re.search(r"from jitlab\.graders import (\w+)", path.read_text())
    assert match, "the grader cell imports its grader module"
    assert (course.ROOT / "tests" / "graders" / f"test_{match.group(1)}.py").exists()


def test_verify_every_solution_passes_and_every_exercise_fails_at_a_grader(capsys):
    code = cli.main(["verify"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"verify: {len(course.exercise_paths())} solutions pass" in out
