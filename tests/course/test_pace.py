"""Every lesson's minutes are within reach of what its text and code take to teach, and
the half-day plan holds together: it skips sections that exist, says what to read before
for each prerequisite it leaves out, names the part of a shortened exercise, and teaches
the doctor (see jitlab.course.pace)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from jitlab.course import CourseError, load_course
from jitlab.course.manifest import ROOT_ENV
from jitlab.course.pace import (
    _body,
    _without_sections,
    estimated_teaching_minutes,
    half_day_problems,
    section_titles,
)
from jitlab.site import pages

COURSE = load_course()
FIXTURE = Path(__file__).parents[1] / "fixture_course"


def _close(promised: int, estimate: int) -> bool:
    return abs(promised - estimate) <= max(5, estimate // 4)


@pytest.mark.parametrize("item", COURSE.lessons, ids=lambda item: item.slug)
def test_teaching_minutes_match_the_lesson(item):
    estimate = estimated_teaching_minutes(item.path)
    promised = item.meta.minutes.teaching
    assert _close(promised, estimate), (
        f"{item.slug}: {promised} teaching minutes promised, about {estimate} needed"
    )


@pytest.mark.parametrize(
    "item", [i for i in COURSE.lessons if i.meta.half_day], ids=lambda item: item.slug
)
def test_half_day_plans_skip_real_sections_and_say_what_is_left(item):
    plan = item.meta.half_day
    estimate = estimated_teaching_minutes(item.path, plan.skip)
    assert _close(plan.minutes.teaching, estimate), (item.slug, plan.minutes, estimate)
    assert plan.minutes.teaching < item.meta.minutes.teaching or not plan.skip


def test_the_half_day_reaches_the_capstone_in_a_morning():
    planned = [i for i in COURSE.lessons if i.meta.half_day]
    assert planned and planned[-1].slug == "capstone"
    minutes = sum(
        i.meta.half_day.minutes.teaching + i.meta.half_day.minutes.exercises for i in planned
    )
    assert minutes <= 4 * 60 - 30, f"{minutes} minutes of lessons do not fit a half day"


def test_the_estimate_counts_prose_code_and_predict_prompts(tmp_path):
    lesson = tmp_path / "lesson.py"
    prose = "# " + "word " * 200 + "\n"  # 1.5 minutes of prose
    code = "x = 1\n" * 120  # two minutes of code
    predict = '# <div class="admonition question"><p class="admonition-title">Predict</p>\n'
    lesson.write_text("# ---\n# a: 1\n# ---\n# ## One\n" + prose + code + "# ## Two\n" + predict)
    assert estimated_teaching_minutes(lesson) == 5  # 1.5 + 2 + 1 for the prompt, and a few words
    assert estimated_teaching_minutes(lesson, skip=("One",)) == 5  # 1, rounded up to 5
    assert section_titles(lesson) == ["One", "Two"]


def test_the_half_day_plan_holds_together():
    problems = half_day_problems(COURSE)
    assert not problems, "\n".join(problems)


def test_the_half_day_teaches_the_doctor():
    """The doctor is the tool learners take home: no section about it is skipped, and the
    sections the half day keeps run it."""
    kept, skipped = [], []
    for item in COURSE.lessons:
        if item.meta.half_day is not None:
            kept += _without_sections(_body(item.path), item.meta.half_day.skip)
            skipped += [f"{item.slug}: {t}" for t in item.meta.half_day.skip if "doctor" in t]
    assert not skipped, f"the half day skips the doctor's sections: {skipped}"
    code = [line for line in kept if not line.startswith("#")]
    assert any(re.search(r"jitlab\.doctor\.watch\(", line) for line in code)


def _fixture_with(tmp_path: Path, monkeypatch, half_day: str) -> Path:
    root = tmp_path / "course"
    shutil.copytree(FIXTURE, root)
    lesson = root / "lessons" / "01_doubling.py"
    lesson.write_text(
        lesson.read_text().replace("#     minutes: {teaching: 5, exercises: 5}\n", half_day)
    )
    monkeypatch.setenv(ROOT_ENV, str(root))
    return root


MINUTES = "#     minutes: {teaching: 5, exercises: 5}\n"


def test_a_prerequisite_left_out_fails_with_the_lesson_and_the_reason(tmp_path, monkeypatch):
    plan = MINUTES + "#     half_day: {minutes: {teaching: 5, exercises: 0}}\n"
    root = _fixture_with(tmp_path, monkeypatch, plan)
    (problem,) = half_day_problems(load_course(root))
    assert problem.startswith("01_doubling.py (half_day): its prerequisites 00 · Basics")
    assert "half_day.read_before" in problem
    with pytest.raises(CourseError, match=re.escape(problem)):
        pages.half_day()


def test_a_shortened_exercise_must_name_its_part(tmp_path, monkeypatch):
    plan = (
        MINUTES + "#     half_day: {minutes: {teaching: 5, exercises: 2}, read_before: its "
        "Key points}\n"
    )
    root = _fixture_with(tmp_path, monkeypatch, plan)
    (problem,) = half_day_problems(load_course(root))
    assert "the exercise gets 2 of 5 minutes" in problem and "half_day.exercise" in problem
    named = plan.replace("read_before", "exercise: the doubling, read_before")
    root = _fixture_with(tmp_path / "named", monkeypatch, named)
    assert half_day_problems(load_course(root)) == []
    assert "exercise: the doubling" in pages.half_day()
    assert "read before: [00 · Basics]" in pages.half_day()
