"""The doctor classifies every program of its corpus as the program's header says (the
header format is described in ``run_corpus.py``). All programs but the capstone's run in
one subprocess, each under its own watch with its own functions; the capstone's two are
in ``test_corpus_capstone.py``.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from jitlab.doctor import CAUSES

HERE = Path(__file__).parent
CORPUS = HERE / "corpus"
PROGRAMS = sorted(p for p in CORPUS.glob("*.py") if not p.name.startswith("_"))


def _load_runner():
    spec = importlib.util.spec_from_file_location("doctor_run_corpus", HERE / "run_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


runner = _load_runner()


OTHERS = [p for p in PROGRAMS if not runner.capstone(p)]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    return runner.run_in_a_subprocess(OTHERS, tmp_path_factory.mktemp("corpus") / "out.json")


def test_every_cause_has_at_least_three_programs():
    filed: dict[str, int] = {}
    for path in PROGRAMS:
        cause, expects = runner.header(path)
        assert cause and expects, f"{path.name}: no doctor-cause / doctor-expect header"
        filed[cause] = filed.get(cause, 0) + 1
    short = {c: filed.get(c, 0) for c in CAUSES if filed.get(c, 0) < 3}
    assert not short, f"causes with fewer than three corpus programs: {short}"


@pytest.mark.parametrize("path", OTHERS, ids=[p.stem for p in OTHERS])
def test_classification(path: Path, results: dict[str, dict]) -> None:
    result = results[path.name]
    assert runner.problems(path, result) == [], result["report"]


DOCS = HERE.parents[1] / "docs" / "doctor.md"
_QUOTE = re.compile(r"`tests/doctor/corpus/(\w+\.py)`[^`]*?:\n\n((?:```text\n.*?```\n\n?)+)", re.S)
_SECONDS = re.compile(r"\d+\.\d+|\d+%")
_RANK = re.compile(r"^ *\d+ (?=[A-Za-z_])", re.M)  # a table row's place: worst first, by time


def _words(text: str) -> str:
    """The text with its seconds (any decimal number), shares of time (a percentage) and
    table ranks (measured cost decides them) as '#', and spaces as one."""
    return " ".join(_SECONDS.sub("#", _RANK.sub("# ", text)).split())


def test_the_lines_quoted_on_the_doctor_page_are_what_it_prints(results):
    quoted = _QUOTE.findall(DOCS.read_text())
    assert len(quoted) >= 7, "docs/doctor.md quotes fewer corpus reports than it did"
    for program, blocks in quoted:
        printed = _words(results[program]["report"])
        for block in re.findall(r"```text\n(.*?)```", blocks, re.S):
            for line in block.strip().splitlines():  # wrapped anywhere: each line is whole
                assert _words(line) in printed, f"{program}: the page quotes {line!r}"
