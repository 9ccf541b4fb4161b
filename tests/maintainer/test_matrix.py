"""`jitlab dev matrix` runs every lesson and every solution under a release, including a
lesson and a solution that share a name."""

from __future__ import annotations

import sys

import pytest

from jitlab.maintainer import matrix
from jitlab.notebooks.pipeline import convert


@pytest.mark.slow  # runs a lesson and a solution under nbval
def test_a_lesson_and_its_solution_are_both_recorded(fixture_course, monkeypatch):
    monkeypatch.setattr(matrix, "release_python", lambda *args, **kwargs: sys.executable)
    result = matrix.run_release(fixture_course, "9.9.9", echo=lambda line: None)
    notebooks = result["notebooks"]
    assert set(notebooks) == {"lessons/00_basics", "lessons/01_doubling", "solutions/01_doubling"}
    assert all("cells" in notebook for notebook in notebooks.values()), notebooks
    assert all(c["status"] == "passed" for c in notebooks["solutions/01_doubling"]["cells"])


def test_sources_with_one_name_are_refused_rather_than_overwritten(fixture_course, tmp_path):
    lesson = fixture_course.lesson("doubling")
    solution = fixture_course.exercises[0].source
    with pytest.raises(ValueError, match="01_doubling"):
        convert([lesson.path, solution], tmp_path, course=fixture_course)


def test_the_private_hook_tests_are_recorded_per_test(tmp_path):
    hooks = tmp_path / matrix.PRIVATE_HOOKS
    hooks.parent.mkdir(parents=True)
    hooks.write_text(
        "def test_hook_here():\n    pass\n\n"
        "def test_hook_gone():\n    assert False, 'private hook jax._src.x.y is gone'\n"
    )
    said = matrix.run_private_hooks(tmp_path, sys.executable)
    assert said["test_hook_here"] == "passed"
    assert "jax._src.x.y is gone" in said["test_hook_gone"]
    assert matrix.run_private_hooks(tmp_path / "elsewhere", sys.executable) == {}
