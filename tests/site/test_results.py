"""The "Measured results" page: every results file names its lessons by slug or, in older
files, by number; both land in the same row, and a key that is no lesson stops the build
with the file and the key."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from jitlab.course import CourseError, load_course
from jitlab.course.results import read_results
from jitlab.site import pages

FIXTURES = Path(__file__).parent / "results"
COURSE = load_course()


def _row(page: str, experiment: str) -> str:
    (line,) = [line for line in page.splitlines() if line.startswith(f"| {experiment} |")]
    return line


def test_a_file_keyed_by_number_and_one_keyed_by_slug_share_each_row():
    page = pages.results(FIXTURES)
    assert page.count(f"### {COURSE.lesson('shapes').label}") == 1
    row = _row(page, "naive vs buckets").split(" | ")
    assert "ratio 7.2" in row[1] and "ratio 9.5" in row[2], row  # 0.10.2 (by number), 0.12.0.1
    first = _row(page, "first call vs cached call")
    assert "3,529.4" in first and "3,250.1" in first
    assert _row(page, "vmap, one program per batch size").split(" | ")[1] == "–"


def test_one_chart_per_lesson_holds_every_run():
    page = pages.results(FIXTURES)
    charts = re.findall(r'<div class="jitlab-chart">(.*?)</div>', page, re.DOTALL)
    assert len(charts) == 2  # what_jit_caches and shapes, each with both runs
    for chart in charts:
        assert "0.10.2" in chart and "0.12.0.1" in chart  # a legend entry per run


def test_older_files_read_by_course_position(tmp_path):
    read = read_results(FIXTURES / "by-number.json", COURSE)
    assert [r["lesson"] for r in read["records"]] == ["what_jit_caches", "shapes"]
    assert read["lessons"] == ["what_jit_caches", "shapes"]


@pytest.mark.parametrize("key", ["99", "shape", "", None])
def test_an_unknown_lesson_key_names_the_file_and_the_key(tmp_path, key):
    folder = tmp_path / "machines"
    shutil.copytree(FIXTURES, folder)
    path = folder / "by-slug.json"
    data = json.loads(path.read_text())
    data["records"][1]["lesson"] = key
    path.write_text(json.dumps(data))
    with pytest.raises(
        CourseError, match=re.escape(f"{path}: records[1]: unknown lesson key {key!r}")
    ):
        pages.results(folder)


def test_every_committed_results_file_reads_with_slugs():
    folder = COURSE.root / "results" / "machines"
    slugs = {item.slug for item in COURSE.lessons}
    for path in sorted(folder.glob("*.json")):
        raw = json.loads(path.read_text(encoding="utf-8"))
        assert {r["lesson"] for r in raw["records"]} <= slugs, f"{path.name}: not keyed by slug"
        read_results(path, COURSE)


def test_the_pages_name_the_commands_that_exist():
    text = (COURSE.root / "docs" / "results.md").read_text(encoding="utf-8")
    text += pages.results(FIXTURES / "none")
    assert "`jitlab bench`" not in text
    assert "jitlab dev bench" in text and "make bench" in text


def _machine(platform: str, kind: str, cells: dict, **extra) -> dict:
    env = {"platform": platform, "device_kind": kind, "cpu_model": "unknown", "cpu_cores": 13}
    return {
        "environment": {**env, "python": "3.11.7", "jax": "0.10.2", "jaxlib": "0.10.2"},
        "generated": "2026-12-06T07:30:00+00:00",
        "runner": "plain",
        "lessons": list(cells),
        "cells": cells,
        "records": [
            {"lesson": "what_jit_caches", "experiment": "cached call", "total_s": extra["t"]}
        ],
        "lesson_sources": extra.get("sources", {}),
        "skipped_lessons": {"processes": "Its processes need sockets."},
    }


@pytest.fixture
def tpu_beside_cpu(tmp_path):
    """A TPU file and its machine's CPU file: one cell fails on the TPU only (a timing),
    one on the CPU only (behaviour), one on both (the release's)."""
    folder = tmp_path / "machines"
    folder.mkdir()
    failed = {"status": "failed", "error": "AssertionError: assert single < 1 / 3, single"}
    tpu = [{"index": 0, "status": "passed"}, {"index": 1, **failed, "timing": True}]
    tpu.append({"index": 2, "status": "failed", "error": "AssertionError: same on both"})
    cpu = [{"index": 0, "status": "failed", "error": "AssertionError: assert n == 2"}]
    cpu += [{"index": 1, "status": "passed"}, dict(tpu[2])]
    sources = {"what_jit_caches": "0" * 12}  # not the lesson's digest: it changed since
    runs = {
        "tpu.json": _machine(
            "tpu", "TPU v5 lite", {"what_jit_caches": tpu}, t=7e-4, sources=sources
        ),
        "cpu.json": _machine("cpu", "cpu", {"what_jit_caches": cpu}, t=5e-5),
    }
    for name, data in runs.items():
        (folder / name).write_text(json.dumps(data))
    return folder


def test_the_results_page_puts_the_tpu_beside_the_cpu(tpu_beside_cpu):
    page = pages.results(tpu_beside_cpu)
    (tpu_row,) = [line for line in page.splitlines() if line.startswith("| **TPU")]
    assert "plain Python" in tpu_row and tpu_row.endswith("| 00 |")  # by number
    assert "skipped `processes`: Its processes need sockets." in page
    assert "### Why a ratio differs between machines" in page
    (lesson_row,) = [
        line for line in page.splitlines() if line.startswith(f"| {COURSE.lesson('00').label} |")
    ]
    assert "1 of 3 (1 timing, 1 behaviour)" in lesson_row and "1 of 3 |" in lesson_row
    cells = _row(page, "cached call").split(" | ")[1:]
    assert len(cells) == 2 and "–" not in " ".join(cells)  # both machines in one row


def test_the_releases_page_marks_timing_apart_from_behaviour(tpu_beside_cpu):
    from jitlab.site import releases

    runs = releases.machine_runs(tpu_beside_cpu)
    diffs = releases.machine_differences(runs)
    assert sorted(cell["index"] for _, _, _, cell, _ in diffs) == [0, 1]  # not cell 2
    lines = "\n".join(releases._machine_lines(tpu_beside_cpu))
    behaviour, timing = lines.split("### Timing that differs between machines")
    assert (
        "cell 0: `passed` (on cpu · cpu · 13 cores: `AssertionError: assert n == 2`)" in behaviour
    )
    assert "cell 1: `AssertionError: assert single < 1 / 3, single`" in timing
    assert "| `processes` | skipped (needs sockets) | skipped (needs sockets) |" in lines


def test_a_lesson_shows_the_other_machines_numbers_from_their_files(tpu_beside_cpu):
    from jitlab.course.results import measured_on_machines

    rows = measured_on_machines("cached call", "total_s", root=tpu_beside_cpu.parent.parent)
    assert rows == []  # results/machines under that root: none there
    root = tpu_beside_cpu.parent / "course"
    (root / "results").mkdir(parents=True)
    (root / "results" / "machines").symlink_to(tpu_beside_cpu)
    rows = measured_on_machines("cached call", "total_s", root=root)
    assert [(r["machine"], r["total_s"]) for r in rows] == [
        ("cpu · cpu · 13 cores", 5e-5),
        ("tpu · TPU v5 lite · 13 cores", 7e-4),
    ]


def test_the_accelerator_findings_come_from_the_files(tpu_beside_cpu):
    table = pages.accelerator_findings(tpu_beside_cpu)
    (row,) = [line for line in table.splitlines() if line.startswith("| a cached call of it |")]
    assert row.split(" | ")[1:] == ["700 µs", "50 µs |"]  # TPU first, then its release's CPU
    assert "No accelerator" in pages.accelerator_findings(FIXTURES)  # CPU runs only
    assert "accelerator-findings" in pages.RENDERERS


def test_changed_lessons_are_named_by_number_or_all(tmp_path):
    from jitlab.site.pages import _lessons_in_short

    every = [lesson.slug for lesson in COURSE.lessons]
    assert _lessons_in_short(every, COURSE) == "all"
    assert _lessons_in_short(every[:2], COURSE) == "00, 01"
    assert _lessons_in_short([], COURSE) == "none"
    assert _lessons_in_short(None, COURSE) == "not kept"
