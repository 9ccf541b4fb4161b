"""The capstone's two loops in the doctor's corpus (``tests/doctor/corpus/capstone_*.py``),
classified as their headers say: in a file of their own, because they compile as often
as the rest of the corpus together, so that pytest-xdist runs them beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_corpus import runner  # the corpus's runner, loaded once

CAPSTONE = [p for p in runner.programs() if runner.capstone(p)]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("capstone") / "out.json"
    return runner.run_in_a_subprocess(CAPSTONE, out)


@pytest.mark.parametrize("path", CAPSTONE, ids=[p.stem for p in CAPSTONE])
def test_classification(path: Path, results: dict[str, dict]) -> None:
    result = results[path.name]
    assert runner.problems(path, result) == [], result["report"]
