"""Shared fixtures: keep the tests away from a learner's progress file."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("JITLAB_STATE", str(tmp_path / "state.json"))
    import jitlab.progress

    monkeypatch.setattr(jitlab.progress, "STATE", tmp_path / "state.json")
