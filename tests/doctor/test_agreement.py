"""Every number in the header, the table and the timeline agrees with the others, in the
text report and on the HTML page alike, and no table cell is cut to fit its column.

One program has all that makes the counts hard: compilations ahead of time, traces inside
another jit, a retrace that found the compiled program and recompilations; it is defined
in a file with a long name, so that its location is longer than the table's column.
"""

from __future__ import annotations

import os
import re
import runpy

import pytest

from jitlab.doctor import html, watch

PROGRAM = """
import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def a_step_function_with_a_name_longer_than_its_column(x):
    return x * 2


@jax.jit
def outer(x):
    return a_step_function_with_a_name_longer_than_its_column(x) + 1


step = a_step_function_with_a_name_longer_than_its_column
for n in (2, 3):
    step.lower(jax.ShapeDtypeStruct((n,), jnp.int32)).compile()  # compilations 1, 2
outer(jnp.ones(5, jnp.int32))  # step traced inside outer: not a compilation of step
step(jnp.ones(2, jnp.int32))  # found: compiled ahead of time
step(np.ones(3, np.uint8))  # compilation 3: dtype
for n in (4, 5, 6, 7, 8, 9, 10, 11, 12):
    step(jnp.ones(n, jnp.int32))  # compilations 4 to 12: shape
jax.jit(lambda v: v + 1)(1)


def bump(x):
    return x + 1


jax.jit(bump)(3)
jax.jit(bump)(jnp.asarray(3))  # a retrace that finds the compiled program
jax.grad(lambda v: step(v).sum())(jnp.ones(2))  # compiled for jax.grad of step
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("agreement")
    path = folder / "a_program_whose_file_name_is_longer_than_the_column.py"
    path.write_text(PROGRAM)
    here = os.getcwd()
    os.chdir(folder)  # the report names files relative to the working directory
    try:
        with watch() as doctor:
            runpy.run_path(path.name, run_name="__main__")
    finally:
        os.chdir(here)
    return doctor.report()


NAME = "a_step_function_with_a_name_longer_than_its_column"


def test_the_counts_agree_with_each_other(report):
    record = report.function(NAME)
    assert (record.compiles, record.aot_compiles, len(record.recompiles)) == (12, 2, 10)
    assert len(record.columns) == record.compiles
    assert [m.number for m in record.columns] == list(range(1, 13))


def _table_rows(lines: list[str]) -> list[list[str]]:
    """The numbers of each function's row: calls, traces, compiles, seconds."""
    start = next(i for i, line in enumerate(lines) if "function / defined at" in line)
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip() or line.startswith("Not watched"):
            break
        fields = line.split()
        if len(fields) >= 7 and all(re.fullmatch(r"[\d.]+", x) for x in fields[-7:]):
            rows.append(fields[-7:])
    return rows


def test_the_text_header_table_and_timeline_agree(report):
    text = report.text()
    lines = text.splitlines()
    rows = _table_rows(lines)
    assert len(rows) == len(report.functions) == 4
    compiles = sum(int(r[2]) for r in rows)
    recompiles = sum(len(f.recompiles) for f in report.functions)
    header = " ".join(" ".join(lines[1:3]).split())
    assert header.startswith(
        f"4 watched functions, {compiles} compilations (2 ahead of time), {recompiles} cache "
        "misses in all, not counting each function's first compilation, and 1 retrace that "
        "found a compiled program"
    ), header
    row = next(i for i, line in enumerate(lines) if line.startswith(" 1 "))
    assert lines[row].split() == ["1", NAME]  # whole, on its own line
    assert int(lines[row + 1].split()[2]) == 12
    timeline = next(i for i, line in enumerate(lines) if line.startswith("   timeline "))
    ruler, *marks = lines[timeline : timeline + 7]
    columns = [r[17:] for r in marks]
    assert {len(c.rstrip()) for c in columns} == {12}, columns  # one per compilation
    assert columns[0].startswith("aa")  # the two compiled ahead of time come first
    # each column number stands in its own column: "1" over the first, "10" from the tenth
    assert ruler[17:].rstrip() == "1        10"
    table = lines[row : next(i for i, x in enumerate(lines) if x.startswith("Not watched"))]
    assert "..." not in "\n".join(table)  # no cell cut to fit its column
    assert "1 call inside other jits" in " ".join(" ".join(table).split())


def test_the_location_is_whole_in_the_table(report):
    location = report.function(NAME).location
    assert len(location) > 34  # longer than the column
    assert any(line.strip() == location for line in report.text().splitlines())


def page_titles(page: str) -> list[str]:
    return re.findall(r"<summary>([^:<]+):", page)


def test_the_page_agrees_with_the_text(report):
    data = report.to_dict()
    f = next(f for f in data["functions"] if f["name"] == NAME)
    page = html.render(data)
    section = page[page.index(f'id="f{data["functions"].index(f) + 1}"') :]
    section = section[: section.index("</section>")]
    assert "cache-key timeline: 12 compilations" in section
    svg = section[section.index("<svg") : section.index("</svg>")]
    links = re.findall(r'<a href="#(f\d+-miss-\d+)">', svg)
    assert len(links) == 12 and len(set(links)) == 12
    labels = re.findall(r'text-anchor="middle" fill="#555">(\d+)</text>', svg)
    assert labels == ["1", "5", "10"]
    ids = re.findall(r'<details class="miss" id="([^"]+)"', section)
    assert len(ids) == len(set(ids)), ids  # every entry its own anchor
    assert set(links) <= set(ids)  # every column opens its compilation
    titles = page_titles(section)
    assert sorted(t for t in titles if t.startswith("compilation ")) == sorted(
        f"compilation {n}" for n in range(1, 13)
    )
    assert any(t.startswith("trace 1 inside another jit") for t in titles), titles
    assert any(t.startswith("retrace 1 (found the compiled program") for t in page_titles(page))
    location = report.function(NAME).location  # the table cell, whole (broken only at "/")
    assert f'<code class="path">{location.replace("/", "/<wbr>")}</code>' in page
    anchors = re.findall(r'id="([^"]+)"', page)
    assert len(anchors) == len(set(anchors)), "two entries share an anchor"
