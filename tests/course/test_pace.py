"""Every lesson's minutes are within reach of what its text and code take to teach, and
every half-day plan skips sections that exist (see jitlab.course.pace)."""

from __future__ import annotations

import pytest

from jitlab.course import load_course
from jitlab.course.pace import estimated_teaching_minutes, section_titles

COURSE = load_course()


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
    missing = [title for title in plan.skip if title not in section_titles(item.path)]
    assert not missing, f"{item.slug}: no section called {missing}"
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
