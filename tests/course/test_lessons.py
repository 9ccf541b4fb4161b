"""The real course holds together: every lesson and exercise loads with complete front
matter, follows the house format, and no lesson spells its own number."""

from __future__ import annotations

import re

import pytest

from jitlab.course import load_course

COURSE = load_course()


def test_the_course_has_its_lessons_in_order():
    assert len(COURSE.lessons) >= 13
    assert [item.position for item in COURSE.lessons] == list(range(len(COURSE.lessons)))


@pytest.mark.parametrize("item", COURSE.lessons, ids=lambda item: item.slug)
def test_lesson_follows_the_house_format(item):
    text = item.path.read_text()
    assert "jitlab.intro()" in text, "the first code cell ends with jitlab.intro()"
    assert text.rstrip().endswith('# %% tags=["remove-input"]\njitlab.outro()'), (
        "the last code cell is jitlab.outro() alone, its code hidden as the intro's"
    )
    assert '<p class="admonition-title">Predict</p>' in text, "every lesson asks to predict"
    assert text.count("assert ") >= 3, "every behavioural claim is asserted"
    assert item.meta.minutes.teaching > 0 and item.meta.instructor_notes


@pytest.mark.parametrize("item", COURSE.lessons, ids=lambda item: item.slug)
def test_lesson_spells_its_number_only_in_its_title(item):
    text = item.path.read_text()
    mentions = re.findall(rf"(?<![\d.]){item.number}(?![\d.])", text)
    titles = re.findall(rf"^# # {item.number} · ", text, flags=re.M)
    assert len(titles) == 1, "the title cell reads '# NN · Title'"
    assert f'"{item.number}"' not in text, f"{item.path.name} passes its own number around"
    assert len(mentions) >= 1


@pytest.mark.parametrize("exercise", COURSE.exercises, ids=lambda e: e.slug)
def test_exercise_has_hints_a_grader_and_grader_tests(exercise):
    assert len(exercise.meta.hints) >= 2
    match = re.search(r"from jitlab\.graders import (\w+)", exercise.source.read_text())
    assert match, "the grader cell imports its grader module"
    tests = COURSE.root / "tests" / "graders" / f"test_{match.group(1)}.py"
    assert tests.exists(), f"{tests} writes down the wrong answers the grader rejects"


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line in a code cell of a percent-format file."""
    found, in_code, in_header = [], False, text.startswith("# ---")
    for number, line in enumerate(text.splitlines(), start=1):
        if in_header:
            in_header = not (number > 1 and line == "# ---")
            continue
        if line.startswith("# %%"):
            in_code = "[markdown]" not in line
            continue
        if in_code:
            found.append((number, line))
    return found


NOTEBOOK_SOURCES = [item.path for item in COURSE.lessons] + [e.source for e in COURSE.exercises]


@pytest.mark.parametrize("path", NOTEBOOK_SOURCES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_code_fits_the_page(path):
    """The site shows about 88 columns of code without scrolling; keep lines within it."""
    long = [
        f"{path.name}:{number} ({len(line)})"
        for number, line in _code_lines(path.read_text())
        if len(line) > 88
    ]
    assert not long, f"code lines over 88 characters: {long[:10]}"


@pytest.mark.parametrize("exercise", COURSE.exercises, ids=lambda e: e.slug)
def test_every_grader_cell_imports_its_own_grader(exercise):
    """Each grader cell reads on its own: it imports the grader it calls."""
    from jitlab.learner.check import code_cells

    graders = [c for c in code_cells(exercise.source.read_text()) if c.is_grader]
    assert graders
    for cell in graders:
        assert re.search(r"^from jitlab\.graders import \w+", cell.source, re.M), (
            f"{exercise.source.name}:{cell.line}: the grader cell must import its grader"
        )
