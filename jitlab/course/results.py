"""Results files as the course reads them: every lesson named by its slug.

``jitlab dev bench`` writes one results file per machine and release; the results page
reads them. Every record names its lesson by slug (``"lesson": "shapes"``). Files written
before that named lessons by number (``"lesson": "01"``, the position in ``course.yml``);
:func:`read_results` reads both, so two machines' rows meet on the results page, and
stops at a key that is no lesson, naming the file and the key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jitlab.course.manifest import Course
from jitlab.course.metadata import CourseError


def lesson_slug(course: Course, key: Any, where: str) -> str:
    """The slug of the lesson a results file names by slug or, in older files, by
    number (its position in ``course.yml``); ``CourseError`` for any other key."""
    found = course.find_lesson(str(key)) if isinstance(key, str) and key else None
    if found is None or str(key) not in (found.slug, found.number):
        known = ", ".join(item.slug for item in course.lessons)
        raise CourseError(f"{where}: unknown lesson key {key!r} (the lessons are: {known})")
    return found.slug


def read_results(path: Path, course: Course) -> dict[str, Any]:
    """A results file with every lesson named by its slug, whichever way it was written."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise CourseError(f"{path}: not valid JSON: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise CourseError(f"{path}: expected a results file with a 'records' list")
    records = []
    for index, row in enumerate(data["records"]):
        where = f"{path}: records[{index}]"
        if not isinstance(row, dict) or "experiment" not in row:
            raise CourseError(f"{where}: expected a record with 'lesson' and 'experiment'")
        records.append({**row, "lesson": lesson_slug(course, row.get("lesson"), where)})
    lessons = [lesson_slug(course, key, f"{path}: lessons") for key in data.get("lessons", [])]
    failed = {
        lesson_slug(course, key, f"{path}: failed_cells"): cells
        for key, cells in (data.get("failed_cells") or {}).items()
    }
    return {**data, "lessons": lessons, "failed_cells": failed, "records": records}
