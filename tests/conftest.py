"""Shared fixtures.

- Every test gets its own progress file: a learner's ``.jitlab/`` is never touched.
- ``fixture_course`` copies the two-lesson course in ``tests/fixture_course`` to a
  temporary folder and points the tools at it, so the runner's tests never run (or
  write to) the real exercises.
- ``site`` builds the real site once per session, reusing the lessons that the same
  ``make test`` run executed under nbval.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jitlab.course.manifest import ROOT_ENV, Course, load_course
from jitlab.learner.progress import STATE_ENV

FIXTURE = Path(__file__).parent / "fixture_course"


@pytest.fixture(autouse=True)
def isolated_progress(tmp_path, monkeypatch):
    monkeypatch.setenv(STATE_ENV, str(tmp_path / "state.json"))


@pytest.fixture
def fixture_course(tmp_path, monkeypatch) -> Course:
    """A private copy of the fixture course, with the tools pointed at it."""
    root = tmp_path / "course"
    shutil.copytree(FIXTURE, root)
    monkeypatch.setenv(ROOT_ENV, str(root))
    graders = str(root / "graders")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [graders, os.environ.get("PYTHONPATH")]))
    )
    return load_course(root)


@pytest.fixture(scope="session")
def site() -> Path:
    """The real site, built once per test session."""
    course = load_course()
    target = course.build_dir / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=course.root,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-5000:]
    return target
