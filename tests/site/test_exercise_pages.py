"""The site's exercise pages, online and offline, show the learner's copy as generated
from its source, never the builder's working copy in exercises/ (which may hold their
answers): a small site is built from the fixture course after solving its exercise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jitlab.course.exercise_source import generated_text

# Builds a (small) site: with the site's tests, out of `make test-fast`.
pytestmark = [pytest.mark.slow, pytest.mark.site]

HOOKS = Path(__file__).resolve().parents[2] / "jitlab" / "site" / "hooks.py"
ANSWER = "return x * 2  # the builder's own answer"


def _build(root: Path, site: Path, *, directory_urls: bool) -> None:
    (root / "docs").mkdir(exist_ok=True)
    (root / "docs" / "index.md").write_text("# Fixture\n", encoding="utf-8")
    if not (root / "docs" / "exercises").exists():  # as the course's docs/ once had it
        (root / "docs" / "exercises").symlink_to("../exercises")
    (root / "mkdocs.yml").write_text(
        "site_name: fixture\n"
        f"use_directory_urls: {str(directory_urls).lower()}\n"
        f"hooks: [{HOOKS}]\n"
        "plugins:\n"
        "  - mkdocs-jupyter:\n"
        '      include: ["lessons/*.ipynb", "exercises/*.py"]\n'
        "      execute: false\n",
        encoding="utf-8",
    )
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--site-dir", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr[-3000:]


def test_a_solved_working_copy_never_reaches_the_site(fixture_course, tmp_path):
    exercise = fixture_course.lesson("doubling").exercise
    solved = exercise.learner_copy.read_text().replace("raise NotImplementedError", ANSWER)
    assert ANSWER in solved
    exercise.learner_copy.write_text(solved)
    for directory_urls, page in ((True, "01_doubling/index.html"), (False, "01_doubling.html")):
        site = tmp_path / f"site-{directory_urls}"
        _build(fixture_course.root, site, directory_urls=directory_urls)
        html = (site / "exercises" / page).read_text(encoding="utf-8")
        assert "the builder&#39;s own answer" not in html and "builder's own answer" not in html
        assert "NotImplementedError" in html, "the page does not show the original stub"
        download = (site / "exercises" / page).parent / "01_doubling.py"
        assert download.read_text(encoding="utf-8") == generated_text(exercise)
    assert exercise.learner_copy.read_text() == solved  # the builder's copy is left alone
