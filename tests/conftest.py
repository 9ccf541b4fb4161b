"""Shared fixtures: keep the tests away from a learner's progress file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jitlab import course

SITE = course.BUILD / "site"


@pytest.fixture(autouse=True)
def isolated_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("JITLAB_STATE", str(tmp_path / "state.json"))
    import jitlab.progress

    monkeypatch.setattr(jitlab.progress, "STATE", tmp_path / "state.json")


@pytest.fixture(scope="session")
def site() -> Path:
    """The site, built once per test session with every lesson executed."""
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(SITE)],
        cwd=course.ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-5000:]
    return SITE
