"""The release matrix's comparison and the upstream report, on recorded results."""

from __future__ import annotations

import os
import subprocess
import sys

from jitlab.maintainer.upstream import report_markdown
from jitlab.site.releases import difference_lines, differences, releases_page

PINNED = {
    "release": "0.12.0.1",
    "notebooks": {
        "lessons/06_static_arguments": {
            "cells": [
                {"index": 0, "status": "passed"},
                {
                    "index": 1,
                    "status": "passed",
                    "explanations": [
                        "TRACING CACHE MISS at /a/b.py:3 (f):\n  cache miss explanation unavailable"
                    ],
                },
            ]
        }
    },
}
OLDER = {
    "release": "0.10.2",
    "notebooks": {
        "lessons/06_static_arguments": {
            "cells": [
                {"index": 0, "status": "passed"},
                {
                    "index": 1,
                    "status": "failed",
                    "error": "AssertionError: expected the explanation to be unavailable",
                    "explanations": [
                        "TRACING CACHE MISS at /x/y.py:9 (f):\n"
                        "  different input pytree: Static(val=3)"
                    ],
                },
            ]
        }
    },
}


def test_a_recorded_difference_is_found_with_its_text():
    found = differences([OLDER, PINNED], "0.12.0.1")
    kinds = {(d.kind, d.release, d.notebook, d.cell) for d in found}
    assert kinds == {
        ("assertion", "0.10.2", "lessons/06_static_arguments", 1),
        ("explanation", "0.10.2", "lessons/06_static_arguments", 1),
    }
    lines = difference_lines([OLDER, PINNED], "0.12.0.1")
    assert any("AssertionError: expected the explanation" in line for line in lines)


def test_file_paths_and_ids_alone_are_not_a_difference():
    moved = {
        "release": "0.11.2",
        "notebooks": {
            name: {
                "cells": [
                    {
                        **cell,
                        "explanations": [
                            e.replace("/a/b.py", "/c/d.py") for e in cell.get("explanations", [])
                        ],
                    }
                    for cell in notebook["cells"]
                ]
            }
            for name, notebook in PINNED["notebooks"].items()
        },
    }
    assert differences([moved, PINNED], "0.12.0.1") == []


def test_the_report_names_the_release_the_claim_and_the_new_wording():
    diffs = differences([PINNED, OLDER], "0.12.0.1")
    report = report_markdown("0.10.2", "0.12.0.1", OLDER, diffs)
    assert report.startswith("# The course against JAX 0.10.2")
    assert "expected the explanation to be unavailable" in report
    assert "Static(val=3)" in report and "cache miss explanation unavailable" in report


def test_a_release_that_does_not_import_is_reported():
    broken = {"release": "9.9.9", "unavailable": "jax 9.9.9 does not import: ImportError"}
    report = report_markdown("9.9.9", "0.12.0.1", broken, [])
    assert "could not be used" in report and "ImportError" in report


def test_the_releases_page_renders_a_table_and_each_difference(tmp_path):
    import json

    for result in (PINNED, OLDER):
        (tmp_path / f"jax-{result['release']}.json").write_text(json.dumps(result))
    page = releases_page(tmp_path)
    assert "| `lessons/06_static_arguments` |" in page
    assert "**1 fail**" in page and "all hold" in page
    assert "Static(val=3)" in page


def test_the_releases_page_names_each_private_hook_that_broke(tmp_path):
    import json

    hooks = {"test_hook_a": "passed", "test_hook_b": "AttributeError: no _cache_size"}
    hooks["test_hook_c"] = "skipped"
    for result in (PINNED, {**OLDER, "private_hooks": hooks}):
        (tmp_path / f"jax-{result['release']}.json").write_text(json.dumps(result))
    page = releases_page(tmp_path)
    assert "**jax 0.10.2**: 1 of 3 hold, 1 skipped" in page
    assert "`test_hook_b`: AttributeError: no _cache_size" in page
    assert "test_hook_a`" not in page


def test_an_unreachable_index_is_one_clear_line_and_exit_2(tmp_path):
    env = {
        **os.environ,
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_FIND_LINKS": "",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "2",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jitlab.maintainer.cli",
            "upstream",
            "--out",
            str(tmp_path / "r.md"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot be reached" in done.stdout and "Traceback" not in done.stdout + done.stderr


def test_the_pinned_release_as_newest_says_nothing_newer_was_run():
    recording = {"release": "1.0", "seconds": 5.0, "notebooks": {"lessons/00_a": {"cells": []}}}
    report = report_markdown("1.0", "1.0", recording, [])
    assert "nothing newer to run" in report and "behaves on" not in report
