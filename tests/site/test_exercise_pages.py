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


# Both builds in one process: mkdocs and its plugins are imported once (about 1.5 s).
BUILD_EACH = """
import sys
from mkdocs.commands.build import build
from mkdocs.config import load_config
for config_file, site_dir in zip(sys.argv[1::2], sys.argv[2::2]):
    build(load_config(config_file, site_dir=site_dir))
"""


def _build(root: Path, sites: dict[bool, Path]) -> None:
    """Build the fixture's site once per value of ``use_directory_urls``."""
    (root / "docs").mkdir(exist_ok=True)
    (root / "docs" / "index.md").write_text("# Fixture\n", encoding="utf-8")
    if not (root / "docs" / "exercises").exists():  # as the course's docs/ once had it
        (root / "docs" / "exercises").symlink_to("../exercises")
    argv = []
    for directory_urls, site in sites.items():
        config = root / f"mkdocs-{str(directory_urls).lower()}.yml"
        config.write_text(
            "site_name: fixture\n"
            f"use_directory_urls: {str(directory_urls).lower()}\n"
            f"hooks: [{HOOKS}]\n"
            "plugins:\n"
            "  - mkdocs-jupyter:\n"
            '      include: ["lessons/*.ipynb", "exercises/*.py"]\n'
            "      execute: false\n",
            encoding="utf-8",
        )
        argv += [str(config), str(site)]
    built = subprocess.run(
        [sys.executable, "-c", BUILD_EACH, *argv],
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
    pages = {True: "01_doubling/index.html", False: "01_doubling.html"}
    sites = {directory_urls: tmp_path / f"site-{directory_urls}" for directory_urls in pages}
    _build(fixture_course.root, sites)
    for directory_urls, page in pages.items():
        html = (sites[directory_urls] / "exercises" / page).read_text(encoding="utf-8")
        assert "the builder&#39;s own answer" not in html and "builder's own answer" not in html
        assert "NotImplementedError" in html, "the page does not show the original stub"
        download = (sites[directory_urls] / "exercises" / page).parent / "01_doubling.py"
        assert download.read_text(encoding="utf-8") == generated_text(exercise)
    assert exercise.learner_copy.read_text() == solved  # the builder's copy is left alone
