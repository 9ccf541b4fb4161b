"""The kernel-less runner: a percent-format lesson's code cells run in order in one
namespace, each outcome recorded as the recorder records nbval's, a failing cell not
stopping the next, and ``jitlab.record`` writing where ``$JITLAB_MEASUREMENTS`` says.
The bench's choice between nbval and plain Python, and lesson 14's skip line."""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from jitlab.course import load_course
from jitlab.instruments.measurements import MEASUREMENTS_ENV
from jitlab.maintainer import bench
from jitlab.notebooks import plain

COURSE = load_course()

LESSON = """\
# %%
import jitlab
names = ["first"]

# %%
names.append("second")
assert len(names) == 3, "a failing cell"

# %%
names.append("third")  # the failure above did not stop this cell
jitlab.record("plain run", compiles=len(names))
{"names": names}

# %% tags=["raises-exception"]
raise ValueError("expected, and tagged so")

# %%
assert undefined_name

# %%
import time
time.sleep(30)

# %%
import os
os._exit(3)

# %%
print("never")
"""


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plain")
    source = folder / "lessons" / "99_plain.py"
    source.parent.mkdir()
    source.write_text(LESSON, encoding="utf-8")
    measurements = folder / "measurements.jsonl"
    measurements.touch()
    done = plain.execute_plain(
        [source],
        record=folder / "record",
        course=COURSE,
        cell_timeout_s=3,
        env={MEASUREMENTS_ENV: str(measurements)},
    )
    record = json.loads((folder / "record" / "lessons" / "99_plain.json").read_text())
    return done.runs[source], record, measurements, source


def test_each_cell_is_recorded_and_a_failure_does_not_stop_the_next(ran):
    run, _, _, _ = ran
    statuses = [cell.status for cell in run.cells]
    assert statuses == [
        "passed",
        "failed",
        "passed",
        "passed",
        "failed",
        "timeout",
        "died",
        "not run",
    ]
    second = run.cells[1]
    assert (second.ename, second.evalue) == ("AssertionError", "a failing cell")
    assert run.cells[4].ename == "NameError"
    assert second.failing_line == 'assert len(names) == 3, "a failing cell"'


def test_one_namespace_and_the_last_expression_shown(ran):
    _, record, _, _ = ran
    assert "{'names': ['first', 'second', 'third']}" in record["cells"][2]["output"]
    assert record["runner"] == "plain"


def test_measurements_go_where_the_bench_says_named_by_notebook(ran):
    _, _, measurements, source = ran
    (row,) = [json.loads(line) for line in measurements.read_text().splitlines()]
    assert row["experiment"] == "plain run" and row["compiles"] == 3
    assert row["notebook"] == str(source.resolve())


def test_a_bare_assert_names_its_line():
    with pytest.raises(AssertionError) as caught:
        plain._run_one("x = 1\nassert x == 2\n", "<cell 5>", {})
    assert plain._failing_line(caught.value) == "assert x == 2"


@pytest.mark.parametrize(
    ("asked", "unavailable", "expected"),
    [
        ("auto", None, "kernel"),
        ("auto", "this machine refuses a socket on 127.0.0.1", "plain"),
        ("plain", None, "plain"),
        ("kernel", "nbval is not installed here", "kernel"),
    ],
)
def test_the_bench_runs_plain_where_no_kernel_starts_and_says_why(
    monkeypatch, asked, unavailable, expected
):
    monkeypatch.setattr(bench, "kernel_unavailable", lambda: unavailable)
    how, why = bench.choose_runner(asked)
    assert how == expected
    assert (unavailable or "") in why


def test_lesson_14_says_in_one_line_why_it_needs_sockets():
    needs = COURSE.lesson("processes").meta.needs_sockets
    assert needs and "\n" not in needs and "sockets" in needs and "CPU" in needs
    assert [item.slug for item in COURSE.lessons if item.meta.needs_sockets] == ["processes"]


def test_the_runner_reads_a_lesson_as_jupytext_does(tmp_path):
    source = tmp_path / "one.py"
    source.write_text(textwrap.dedent("# %% [markdown]\n# prose\n\n# %%\nvalue = 6 * 7\nvalue\n"))
    out = tmp_path / "one.json"
    before = sys.modules["__main__"], sys.stdout, sys.stderr, signal.getsignal(signal.SIGALRM)
    assert plain.run_cells(source, out, cell_timeout_s=5) == 0
    (cell,) = json.loads(out.read_text())["cells"]
    assert cell["status"] == "passed" and cell["output"].strip() == "42"
    after = sys.modules["__main__"], sys.stdout, sys.stderr, signal.getsignal(signal.SIGALRM)
    assert after == before  # this process's __main__, streams and alarm handler, put back


def test_sockets_refused_reads_the_machine(monkeypatch):
    class Refusing:
        def __init__(self, *args: object) -> None:
            raise OSError(97, "Address family not supported by protocol")

    monkeypatch.setattr(plain.socket, "socket", Refusing)
    assert "refuses a socket on 127.0.0.1" in (plain.sockets_refused() or "")
    assert "no Jupyter kernel can start" in (plain.kernel_unavailable() or "")


def test_the_committed_tpu_file_was_run_without_a_kernel():
    found = sorted(Path(COURSE.root, "results", "machines").glob("tpu-*.json"))
    assert found, "the TPU machine's results file is committed"
    data = json.loads(found[-1].read_text())
    assert data["runner"] == "plain" and "processes" in data["skipped_lessons"]
