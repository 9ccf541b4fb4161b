"""Results files as the course reads them: every lesson named by its slug.

``jitlab dev bench`` writes one results file per machine and release; the results page
reads them. Every record names its lesson by slug (``"lesson": "shapes"``). Files written
before that named lessons by number (``"lesson": "01"``, the position in ``course.yml``);
:func:`read_results` reads both, so two machines' rows meet on the results page, and
stops at a key that is no lesson, naming the file and the key.
"""

from __future__ import annotations

import hashlib
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


def source_digest(path: Path) -> str:
    """A lesson's source, digested: ``jitlab dev bench`` keeps each lesson's in the file,
    and the results page says which lessons changed since a machine's file was recorded."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def changed_since(data: dict[str, Any], course: Course) -> list[str] | None:
    """The lessons whose source changed since ``data`` (a results file) was recorded, or
    None for a file that did not keep its lessons' digests."""
    kept = data.get("lesson_sources")
    if not isinstance(kept, dict):
        return None
    return [
        item.slug
        for item in course.lessons
        if item.slug in kept and kept[item.slug] != source_digest(item.path)
    ]


def machine_label(environment: dict[str, Any]) -> str:
    """A results file's machine in a few words: ``tpu · TPU v5 lite · 13 cores``."""
    platform = str(environment.get("platform", "?"))
    kind = str(environment.get("device_kind", "?"))
    cores = environment.get("cpu_cores", "?")
    cpu = str(environment.get("cpu_model", "") or "")
    model = "" if platform != "cpu" or cpu in ("", "unknown") else f" · {cpu}"
    return f"{platform} · {kind}{model} · {cores} cores"


def results_files(root: Path) -> list[Path]:
    """The committed results files, one per machine and JAX release."""
    return sorted((root / "results" / "machines").glob("*.json"))


def measured_on_machines(
    experiment: str, *fields: str, root: Path | None = None
) -> list[dict[str, Any]]:
    """One row per committed results file that recorded ``experiment``: the machine, its
    JAX release, the day it was recorded and the ``fields`` asked for (``"speedup"``,
    ``"steady_us"``...). A lesson shows with it what "the other machine" measured for
    the experiment it has just run here, read from the files, never typed into prose."""
    if root is None:
        from jitlab.course.manifest import load_course

        root = load_course().root
    rows = []
    for path in results_files(root):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise CourseError(f"{path}: not valid JSON: {err}") from None
        found = next(
            (r for r in data.get("records", []) if r.get("experiment") == experiment), None
        )
        if found is None:
            continue
        env = data.get("environment", {})
        row = {
            "machine": machine_label(env),
            "jax": env.get("jax", "?"),
            "recorded": str(data.get("generated", "?"))[:10],
        }
        rows.append({**row, **{field: found.get(field) for field in fields}})
    return rows


def show_measured_on_machines(experiment: str, *fields: str) -> list[dict[str, Any]]:
    """Print :func:`measured_on_machines` as a table (and return its rows)."""
    from jitlab.instruments.timing import print_table

    rows = measured_on_machines(experiment, *fields)
    print_table(rows)
    return rows
