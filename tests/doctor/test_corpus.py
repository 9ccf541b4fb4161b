"""The doctor classifies every program of its corpus as the program's header says.

Each program in ``corpus/`` states what the doctor must find, in comment lines:

    # doctor-cause: shape                 (the cause the program is filed under)
    # doctor-expect: NAME MISS MISS ...   (one cause set per miss after the first, in order;
                                           a set is written a+b, a repeat as a*3)
    # doctor-expect: NAME causes=a,b compiles=N   (the union of causes, and the count)

A line with a name and nothing else expects no miss at all. All programs run in one
subprocess (``run_corpus.py``), each under its own watch with its own functions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jitlab.doctor import CAUSES

HERE = Path(__file__).parent
CORPUS = HERE / "corpus"
PROGRAMS = sorted(p for p in CORPUS.glob("*.py") if not p.name.startswith("_"))


def header(path: Path) -> tuple[str, list[list[str]]]:
    cause, expects = "", []
    for line in path.read_text().splitlines():
        if line.startswith("# doctor-cause:"):
            cause = line.split(":", 1)[1].strip()
        elif line.startswith("# doctor-expect:"):
            expects.append(line.split(":", 1)[1].split())
    return cause, expects


def expected_misses(tokens: list[str]) -> list[set[str]]:
    misses = []
    for token in tokens:
        spec, _, times = token.partition("*")
        misses += [set(spec.split("+"))] * (int(times) if times else 1)
    return misses


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("corpus") / "results.json"
    done = subprocess.run(
        [sys.executable, str(HERE / "run_corpus.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["program"]: r for r in json.loads(out.read_text())}


def test_every_cause_has_at_least_three_programs():
    filed: dict[str, int] = {}
    for path in PROGRAMS:
        cause, expects = header(path)
        assert cause and expects, f"{path.name}: no doctor-cause / doctor-expect header"
        filed[cause] = filed.get(cause, 0) + 1
    short = {c: filed.get(c, 0) for c in CAUSES if filed.get(c, 0) < 3}
    assert not short, f"causes with fewer than three corpus programs: {short}"


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_classification(path: Path, results: dict[str, dict]) -> None:
    result = results[path.name]
    assert result["error"] is None, result["error"]
    assert result["internal_errors"] == []
    for tokens in header(path)[1]:
        name, rest = tokens[0], tokens[1:]
        assert name in result["functions"], (name, sorted(result["functions"]), result["report"])
        seen = result["functions"][name]
        options = dict(t.split("=", 1) for t in rest if "=" in t)
        misses = [t for t in rest if "=" not in t]
        got = [set(m) for m in seen["misses"]]
        if "causes" in options:
            union = set().union(*got) if got else set()
            assert union == set(options["causes"].split(",")), (name, got)
        if "compiles" in options:
            assert seen["compiles"] == int(options["compiles"]), (name, seen["compiles"])
        if misses or not options:
            assert got == expected_misses(misses), (name, got, result["report"])
