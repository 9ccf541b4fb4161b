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
