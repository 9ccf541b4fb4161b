"""Opening a lesson or an exercise in JupyterLab and saving it leaves it byte-identical:
no git noise, no merge conflicts for a learner who pulls the course's updates."""

from __future__ import annotations

import shutil

import pytest

from jitlab.course import load_course
from jitlab.course.exercise_source import generated_text
from jitlab.maintainer.canonical import save_as_jupyterlab_does

COURSE = load_course()
COPIES = {e.learner_copy: e for e in COURSE.exercises}
FILES = [item.path for item in COURSE.lessons] + [
    path for e in COURSE.exercises for path in (e.source, e.learner_copy)
]


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_open_then_save_in_jupyterlab_changes_nothing(path, tmp_path):
    relative = path.relative_to(COURSE.root)
    (tmp_path / relative).parent.mkdir(parents=True)
    if path in COPIES:  # as generated: a learner may be solving the one in exercises/
        (tmp_path / relative).write_text(generated_text(COPIES[path]), encoding="utf-8")
    else:
        shutil.copyfile(path, tmp_path / relative)
    shutil.copyfile(COURSE.root / "jupytext.toml", tmp_path / "jupytext.toml")
    changed = save_as_jupyterlab_does(tmp_path, relative.as_posix())
    assert not changed, (
        f"saving {relative} in JupyterLab rewrites it: run `jitlab dev canonical` "
        "(or `make format`) and commit"
    )
