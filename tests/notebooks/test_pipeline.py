"""The notebook pipeline: one execution under nbval records every cell and keeps the
executed notebook, which the site reuses instead of running the lesson again."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from jitlab.instruments.measurements import MEASUREMENTS_ENV
from jitlab.notebooks.pipeline import (
    CellRun,
    execute,
    executed_dir,
    executed_lessons,
    execution_key,
)


def test_execute_records_cells_outputs_and_measurements(fixture_course, tmp_path):
    lesson = fixture_course.lesson("basics")
    measurements = tmp_path / "measurements.jsonl"
    done = execute(
        [lesson.path],
        work=tmp_path / "nb",
        record=tmp_path / "record",
        course=fixture_course,
        env={MEASUREMENTS_ENV: str(measurements)},
    )
    run = done.runs[lesson.path]
    assert run.passed, done.output
    assert run.key == execution_key(lesson.path, fixture_course)
    assert [c.status for c in run.cells] == ["passed"] * 3
    assert run.cells[1].explanations == ("TRACING CACHE MISS printed by the lesson\n  second line",)
    executed = nbformat.read(str(run.executed), as_version=4)
    code = [c for c in executed.cells if c.cell_type == "code"]
    assert "Key points" in json.dumps(code[-1].outputs)  # jitlab.outro() found its lesson
    row = json.loads(measurements.read_text().splitlines()[0])
    assert row == {**row, "experiment": "two shapes", "compiles": 2}
    assert fixture_course.lesson_for_path(Path(row["notebook"])).slug == "basics"


def test_a_failing_cell_is_recorded_and_later_cells_still_run(fixture_course, tmp_path):
    lesson = fixture_course.lesson("basics")
    lesson.path.write_text(
        lesson.path.read_text().replace("assert n.compiles == 2", "assert n.compiles == 3, 'no'")
    )
    done = execute(
        [lesson.path], work=tmp_path / "nb", record=tmp_path / "record", course=fixture_course
    )
    run = done.runs[lesson.path]
    assert [c.status for c in run.cells] == ["passed", "failed", "passed"]
    assert run.cells[1].one_line == "AssertionError: no"


def test_executed_lessons_reuses_what_is_current_and_runs_what_is_stale(fixture_course):
    first = executed_lessons(fixture_course, echo=lambda _: None)
    assert all(run.passed for run in first)
    said: list[str] = []
    again = executed_lessons(fixture_course, echo=said.append)
    assert said == [] and [r.key for r in again] == [r.key for r in first]
    lesson = fixture_course.lesson("doubling")
    lesson.path.write_text(lesson.path.read_text() + "\n# a change\n")
    executed_lessons(fixture_course, echo=said.append)
    assert said[0] == "executing 1 lesson(s): 01_doubling"
    assert re.fullmatch(r"  \[1/1\] 01_doubling  \d+ s", said[1]), said  # name, time, count
    assert (executed_dir(fixture_course) / "lessons" / "01_doubling.ipynb").exists()


@pytest.mark.parametrize("arrow", ["----> 3", "---> 16"])  # IPython aligns the numbers
def test_a_bare_assert_is_reported_by_its_line(arrow):
    traceback = (
        f"Cell In[4], line 3\n      1 x = 1\n{arrow} assert n.compiles == 2\n\nAssertionError: "
    )
    cell = CellRun(0, "failed", ename="AssertionError", evalue="", traceback=traceback)
    assert cell.one_line == "AssertionError: assert n.compiles == 2"
