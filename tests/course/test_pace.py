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


def test_the_half_day_fits_a_morning_with_a_third_of_it_hands_on():
    """The schedule's own arithmetic (setup with its slack, breaks, reading in the slots):
    it ends by 13:00, and the exercises take at least a third of it."""
    page = pages.half_day()
    clocks = re.findall(r"^\| (\d+):(\d\d) \|", page, flags=re.M)
    end = int(clocks[-1][0]) * 60 + int(clocks[-1][1])
    exercises = sum(i.meta.half_day.minutes.exercises for i in COURSE.lessons if i.meta.half_day)
    assert end <= 13 * 60 and exercises * 3 >= end - 9 * 60, (end, exercises)
    assert pages.SETUP_SLOT.teaching >= 15 + 5  # preflight, and slack for a failed install


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


def test_an_exercise_needs_its_prerequisites_taught_not_read(tmp_path, monkeypatch):
    plan = (
        MINUTES + "#     half_day: {minutes: {teaching: 5, exercises: 5}, read_before: its "
        "Key points}\n"
    )
    root = _fixture_with(tmp_path, monkeypatch, plan)
    (problem,) = half_day_problems(load_course(root))
    assert "its exercise is in the plan, but its prerequisites 00 · Basics" in problem


def test_reading_before_a_lesson_has_minutes_in_its_slot(tmp_path, monkeypatch):
    plan = (
        MINUTES + "#     half_day: {minutes: {teaching: 5, exercises: 0}, read_before: its "
        "Key points}\n"
    )
    item = load_course(_fixture_with(tmp_path, monkeypatch, plan)).lesson("doubling")
    to_read = pages._to_read(item, planned={"doubling"}, read=set())
    slot = pages._lesson_slot(item, to_read=to_read)
    assert "read before, in the slot (2 min each): [00 · Basics]" in slot.title
    assert slot.teaching == 5 + pages.READ_MINUTES
    assert pages._to_read(item, planned={"doubling"}, read={"basics"}) == []  # read once


def _with_basics_planned(root: Path) -> None:
    basics = root / "lessons" / "00_basics.py"
    basics.write_text(
        basics.read_text().replace(
            "exercises: 0}\n",
            "exercises: 0}\n#     half_day: {minutes: {teaching: 5, exercises: 0}}\n",
        )
    )


def test_a_shortened_exercise_must_name_its_part(tmp_path, monkeypatch):
    plan = MINUTES + "#     half_day: {minutes: {teaching: 5, exercises: 2}}\n"
    root = _fixture_with(tmp_path, monkeypatch, plan)
    _with_basics_planned(root)
    (problem,) = half_day_problems(load_course(root))
    assert "the exercise gets 2 of 5 minutes" in problem and "half_day.exercise" in problem
    named = plan.replace("exercises: 2}", "exercises: 2}, exercise: the doubling")
    root = _fixture_with(tmp_path / "named", monkeypatch, named)
    _with_basics_planned(root)
    assert half_day_problems(load_course(root)) == []
    with pytest.raises(CourseError, match="less than 33% of the morning"):
        pages.half_day()  # 2 minutes of exercises in 32
    more = named.replace("exercises: 2}", "exercises: 20}")
    root = _fixture_with(tmp_path / "more", monkeypatch, more)
    _with_basics_planned(root)
    assert "exercise: the doubling" in pages.half_day()
