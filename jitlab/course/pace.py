"""How long a lesson takes to teach, estimated from the lesson itself.

A lesson's ``minutes.teaching`` is a promise to an instructor who plans a day around it.
Promises drift as lessons grow (a 5,000-word lesson once sat in a 25-minute slot), so
the estimate is computed from what the room actually does, and a test keeps every
lesson's minutes within reach of it:

- read and explain the prose at about 130 words a minute;
- type or run the code at about 60 lines a minute (it is on screen, run cell by cell);
- and pause one minute at each *Predict* prompt, for the room to commit to an answer.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from jitlab.course.manifest import Course

WORDS_PER_MINUTE = 130
CODE_LINES_PER_MINUTE = 60
MINUTES_PER_PREDICT = 1
_WORD = re.compile(r"[A-Za-z0-9_']+")


def _body(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if lines and lines[0] == "# ---":  # skip the front matter
        lines = lines[lines.index("# ---", 1) + 1 :]
    return lines


def section_titles(path: Path) -> list[str]:
    """The lesson's ``##`` headings, as written (a half-day plan names them to skip)."""
    return [line[5:].strip() for line in _body(path) if line.startswith("# ## ")]


def _without_sections(lines: list[str], skip: tuple[str, ...]) -> list[str]:
    kept, skipping = [], False
    for line in lines:
        if line.startswith("# ## "):
            skipping = line[5:].strip() in skip
        if not skipping:
            kept.append(line)
    return kept


def estimated_teaching_minutes(path: Path, skip: tuple[str, ...] = ()) -> int:
    """The teaching time of the lesson at ``path`` without the sections named in
    ``skip``, rounded up to 5 minutes."""
    lines = _without_sections(_body(path), skip)
    prose = [line[2:] for line in lines if line.startswith("# ")]
    code = [line for line in lines if line.strip() and not line.startswith("#")]
    predicts = sum(1 for line in prose if 'admonition-title">Predict<' in line)
    minutes = (
        len(_WORD.findall(" ".join(prose))) / WORDS_PER_MINUTE
        + len(code) / CODE_LINES_PER_MINUTE
        + predicts * MINUTES_PER_PREDICT
    )
    return 5 * math.ceil(minutes / 5)


def _exercise_parts(path: Path) -> list[str]:
    """An exercise's ``##`` headings (``Part 1: ...``), the parts a plan can name."""
    return section_titles(path)


def half_day_problems(course: Course) -> list[str]:
    """What makes the half-day plan not hold together, one line per problem, naming the
    lesson: a prerequisite left out with nothing said about what to read before, an
    exercise in the plan whose prerequisites the plan does not teach (reading a Key
    points box is not enough to solve one), a shortened exercise that does not name the
    part to do, a skipped section that does not exist. Empty when the plan holds
    (``make test`` and the site require that; the schedule's own arithmetic, hands-on
    time and the morning's length, is checked where it is made, in ``jitlab.site.pages``)."""
    planned = [item for item in course.lessons if item.meta.half_day is not None]
    in_plan = {item.slug for item in planned}
    problems = []
    for item in planned:
        plan = item.meta.half_day
        assert plan is not None
        where = f"{item.path.name} (half_day)"
        sections = section_titles(item.path)
        for title in plan.skip:
            if title not in sections:
                problems.append(
                    f"{where}: skips {title!r}, but the lesson has no '## {title}' section "
                    f"(its ## sections: {'; '.join(sections)})"
                )
        left_out = [slug for slug in item.meta.prerequisites.lessons if slug not in in_plan]
        if left_out and plan.minutes.exercises:
            names = ", ".join(course.lesson(slug).label for slug in left_out)
            problems.append(
                f"{where}: its exercise is in the plan, but its prerequisites {names} are "
                "not taught in it; add them to the plan, or leave the exercise out"
            )
        elif left_out and not plan.read_before:
            names = ", ".join(course.lesson(slug).label for slug in left_out)
            problems.append(
                f"{where}: its prerequisites {names} are not in the half-day plan; add "
                "them to the plan, or say in half_day.read_before what to read before"
            )
        exercise = item.exercise
        full = item.meta.minutes.exercises
        if exercise is not None and 0 < plan.minutes.exercises < full:
            parts = _exercise_parts(exercise.source)
            if not plan.exercise:
                problems.append(
                    f"{where}: the exercise gets {plan.minutes.exercises} of {full} minutes, "
                    "but half_day.exercise does not name the part to do"
                )
            elif parts and not any(part in plan.exercise for part in parts):
                problems.append(
                    f"{where}: half_day.exercise {plan.exercise!r} names none of the "
                    f"exercise's parts ({'; '.join(parts)})"
                )
    return problems
