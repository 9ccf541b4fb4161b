"""``jitlab dev bench``: re-run every lesson's timed experiments on this machine.

Each lesson runs top to bottom through the notebook pipeline with
``$JITLAB_MEASUREMENTS`` pointing at a scratch file; the ``jitlab.record`` calls append
their numbers there. The records, the environment report (device, CPU, JAX release) and
which cells failed are written to ``results/machines/<machine>-jax-<release>.json``, one
file per machine and release, for the "Measured results" page. A cell whose assertion
fails on another release does not stop the bench: the lesson runs on, its failures are
listed in the file, and the numbers it did record are kept.

Every record names its lesson by slug (``"lesson": "shapes"``). Files written before
that named lessons by number (``"lesson": "01"``); :mod:`jitlab.course.results` reads
both, so two machines' rows meet on the results page.

Where no Jupyter kernel can start (the TPU machine refuses every internet socket, so
nbval cannot run there), the lessons run as plain Python cell by cell
(:mod:`jitlab.notebooks.plain`): by itself when :func:`~jitlab.notebooks.plain.kernel_unavailable`
gives a reason, or with ``--plain``; the bench says which, and the file records it
(``"runner"``). A lesson whose front matter says it needs sockets (``needs_sockets``,
lesson 14) is skipped on such a machine with that line, named in the file.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from jitlab.course.manifest import Course
from jitlab.course.results import source_digest
from jitlab.instruments.measurements import MEASUREMENTS_ENV
from jitlab.maintainer.matrix import cell_rows, timing_failures
from jitlab.notebooks.pipeline import execute
from jitlab.notebooks.plain import execute_plain, kernel_unavailable, sockets_refused

CELL_TIMEOUT_S = 300


def measured_environment(python: str) -> tuple[dict[str, Any], str]:
    """The machine report and the results file's name, as the interpreter that runs the
    lessons sees them (its JAX release, its devices)."""
    probe = (
        "import json; from jitlab.instruments.environment import environment, machine_id; "
        "print(json.dumps({'environment': environment(), 'machine': machine_id()}))"
    )
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    release = str(found["environment"]["jax"]).replace(".", "_")
    return found["environment"], f"{found['machine']}-jax-{release}"


def _named(course: Course, row: dict[str, Any]) -> dict[str, Any]:
    """A record with its notebook's file name replaced by the lesson's slug."""
    notebook = str(row.pop("notebook", ""))
    found = course.lesson_for_path(Path(notebook)) if notebook else None
    return {"lesson": found.slug if found else notebook or "?", **row}


def choose_runner(runner: str) -> tuple[str, str]:
    """``("kernel" | "plain", why)`` for ``runner`` = ``auto``, ``kernel`` or ``plain``."""
    if runner == "plain":
        return "plain", "asked for with --plain"
    reason = kernel_unavailable()
    if runner == "kernel":
        return "kernel", "asked for with --kernel" + (f" (though {reason})" if reason else "")
    if reason:
        return "plain", reason
    return "kernel", "a Jupyter kernel can start here"


def _outcomes(cells: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, int]]:
    """Each lesson's cells counted by status (``{"passed": 12, "failed": 1}``)."""
    counted = {slug: collections.Counter(r["status"] for r in rows) for slug, rows in cells.items()}
    return {slug: dict(counts) for slug, counts in counted.items()}


def _execute(how: str, paths: list[Path], scratch: Path, measurements: Path, **common: Any):
    """The lessons run once, under nbval or as plain Python, numbers to ``measurements``."""
    env = {MEASUREMENTS_ENV: str(measurements)}
    if how == "plain":
        return execute_plain(paths, record=scratch / "record", env=env, **common)
    return execute(paths, work=scratch / "notebooks", record=scratch / "record", env=env, **common)


def run_bench(
    course: Course,
    keys: list[str],
    out_dir: Path,
    *,
    python: str | None = None,
    runner: str = "auto",
) -> int:
    """Run the lessons (with ``python``, e.g. a release environment of ``make matrix``),
    under nbval or, where no kernel can start, as plain Python (``runner``). A lesson
    whose timing cell failed runs a second time; its cells are recorded as the matrix
    records them (:func:`~jitlab.maintainer.matrix.cell_rows`), its numbers from the
    first run."""
    python = python or sys.executable
    env_report, name = measured_environment(python)
    chosen = [course.lesson(key) for key in keys] if keys else list(course.lessons)
    how, why = choose_runner(runner)
    skipped: dict[str, str] = {}
    if how == "plain":
        print(f"running the lessons as plain Python, cell by cell: {why}", flush=True)
        for item in chosen:
            if item.meta.needs_sockets and sockets_refused():
                skipped[item.slug] = item.meta.needs_sockets
                print(f"  skipping {item.stem}: {item.meta.needs_sockets}", flush=True)
        chosen = [item for item in chosen if item.slug not in skipped]
    else:
        print(f"running the lessons under nbval: {why}", flush=True)
    common = {"course": course, "cell_timeout_s": CELL_TIMEOUT_S, "python": python}
    with tempfile.TemporaryDirectory(prefix="jitlab-bench-") as scratch:
        measurements = Path(scratch) / "measurements.jsonl"
        measurements.touch()
        print(f"running {len(chosen)} lesson(s) ...", flush=True)
        done = _execute(how, [i.path for i in chosen], Path(scratch), measurements, **common)
        records = [
            _named(course, json.loads(line))
            for line in measurements.read_text().splitlines()
            if line
        ]
        again = [i.path for i in chosen if timing_failures(done.runs.get(i.path))]
        redone = None
        if again:
            print(f"a timing failed in {len(again)} lesson(s): running them again", flush=True)
            other = Path(scratch) / "again"
            other.mkdir()
            redone = _execute(how, again, other, other / "measurements.jsonl", **common)
    cells = {
        item.slug: cell_rows(run, redone.runs.get(item.path) if redone else None)
        for item in chosen
        if (run := done.runs.get(item.path)) is not None
    }
    failures = {
        slug: [f"cell {row['index']}: {row['error']}" for row in rows if "error" in row]
        for slug, rows in cells.items()
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{name}.json"
    payload = {
        "environment": env_report,
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "runner": how,
        "lessons": [item.slug for item in chosen],
        "lesson_sources": {item.slug: source_digest(item.path) for item in chosen},
        "skipped_lessons": skipped,
        "outcomes": _outcomes(cells),
        "failed_cells": {slug: rows for slug, rows in failures.items() if rows},
        "cells": cells,
        "records": records,
    }
    target.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    failed = sum(len(rows) for rows in failures.values())
    print(f"{len(records)} records from {len(chosen)} lessons written to {target}")
    if failed:
        print(f"{failed} cell(s) failed on this release; they are listed in the file")
    return 0
