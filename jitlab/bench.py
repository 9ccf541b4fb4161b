"""``jitlab bench``: re-run every lesson's timed experiments on this machine.

Each lesson is executed top to bottom (its assertions included) with ``$JITLAB_RESULTS``
pointing at a scratch file; the ``jitlab.record`` calls in the lesson append their numbers
there. The records and the environment report are then written to
``results/<machine>.json``, one file per kind of machine, for the "Measured results" page.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path

import jupytext
import nbclient

from jitlab import course
from jitlab.environment import environment, machine_id
from jitlab.results import RESULTS_ENV

CELL_TIMEOUT_S = 300


def run_lesson(lesson: course.Lesson, results_file: Path) -> None:
    """Execute one lesson with results recording switched on."""
    notebook = jupytext.read(lesson.path)
    previous = os.environ.get(RESULTS_ENV)
    os.environ[RESULTS_ENV] = str(results_file)  # the kernel inherits this environment
    try:
        client = nbclient.NotebookClient(
            notebook,
            timeout=CELL_TIMEOUT_S,
            kernel_name="python3",
            resources={"metadata": {"path": str(lesson.path.parent)}},
        )
        client.execute()
    finally:
        if previous is None:
            os.environ.pop(RESULTS_ENV, None)
        else:
            os.environ[RESULTS_ENV] = previous


def run_bench(lessons: list[str] | None = None, out_dir: Path = course.ROOT / "results") -> int:
    chosen = [course.lesson(n) for n in lessons] if lessons else list(course.lessons())
    with tempfile.TemporaryDirectory(prefix="jitlab-bench-") as scratch:
        results_file = Path(scratch) / "records.jsonl"
        results_file.touch()
        for item in chosen:
            print(f"running {item.path.name} ...", flush=True)
            run_lesson(item, results_file)
        records = [json.loads(line) for line in results_file.read_text().splitlines() if line]
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{machine_id()}.json"
    payload = {
        "environment": environment(),
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "lessons": [item.number for item in chosen],
        "records": records,
    }
    target.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"{len(records)} records from {len(chosen)} lessons written to {target}")
    return 0
