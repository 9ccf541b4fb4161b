"""`jitlab dev matrix` runs every lesson and every solution under a release, including a
lesson and a solution that share a name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from jitlab.maintainer import matrix
from jitlab.notebooks.pipeline import CellRun, NotebookRun, convert


@pytest.mark.slow  # runs a lesson and a solution under nbval
def test_a_lesson_and_its_solution_are_both_recorded(fixture_course, monkeypatch):
    monkeypatch.setattr(matrix, "release_python", lambda *args, **kwargs: sys.executable)
    result = matrix.run_release(fixture_course, "9.9.9", echo=lambda line: None)
    notebooks = result["notebooks"]
    assert set(notebooks) == {"lessons/00_basics", "lessons/01_doubling", "solutions/01_doubling"}
    assert all("cells" in notebook for notebook in notebooks.values()), notebooks
    assert all(c["status"] == "passed" for c in notebooks["solutions/01_doubling"]["cells"])


def test_sources_with_one_name_are_refused_rather_than_overwritten(fixture_course, tmp_path):
    lesson = fixture_course.lesson("doubling")
    solution = fixture_course.exercises[0].source
    with pytest.raises(ValueError, match="01_doubling"):
        convert([lesson.path, solution], tmp_path, course=fixture_course)


def test_the_private_hook_tests_are_recorded_per_test(tmp_path):
    hooks = tmp_path / matrix.PRIVATE_HOOKS
    hooks.parent.mkdir(parents=True)
    hooks.write_text(
        "def test_hook_here():\n    pass\n\n"
        "def test_hook_gone():\n    assert False, 'private hook jax._src.x.y is gone'\n"
    )
    said = matrix.run_private_hooks(tmp_path, sys.executable)
    assert said["test_hook_here"] == "passed"
    assert "jax._src.x.y is gone" in said["test_hook_gone"]
    assert matrix.run_private_hooks(tmp_path / "elsewhere", sys.executable) == {}


def _cell(index: int, status: str, line: str = "") -> CellRun:
    frame = f'  File "<cell {index}>", line 2, in <module>\n    {line}\n' if line else ""
    return CellRun(index=index, status=status, ename="AssertionError", traceback=frame)


def _run(*cells: CellRun) -> NotebookRun:
    return NotebookRun(source=Path("x.py"), key=None, cells=cells, executed=Path("x.ipynb"))


def test_a_timing_that_passes_when_run_again_is_no_difference():
    first = _run(
        _cell(0, "passed"),
        _cell(1, "failed", "assert paths.speedup > 3, paths.rows()"),
        _cell(2, "failed", "assert single < 1 / 3, single"),
        _cell(3, "failed", 'assert "explanation unavailable" in said'),
    )
    again = _run(
        _cell(0, "passed"),
        _cell(1, "passed"),
        _cell(2, "failed", "assert single < 1 / 3, single"),
        _cell(3, "failed", 'assert "explanation unavailable" in said'),
    )
    assert matrix.timing_failures(first) and not matrix.timing_failures(_run(first.cells[3]))
    rows = matrix.cell_rows(first, again)
    assert rows[1]["status"] == "passed" and "passed when run again" in rows[1]["rerun"]
    assert rows[2]["status"] == "failed" and rows[2]["timing"] is True
    assert rows[2]["rerun"] == "failed again when run again"
    assert rows[3]["status"] == "failed" and "timing" not in rows[3]  # behaviour
    assert "timing" not in matrix.cell_rows(first)[3] and "rerun" not in matrix.cell_rows(first)[2]
