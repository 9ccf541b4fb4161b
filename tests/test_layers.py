"""Imports run downhill: a package of ``jitlab`` imports only packages below it.

The order is written once, here, lowest first. A module may import its own package and
any package listed before it, at the top of the file or inside a function alike; an
import of a package listed after it fails this test, naming the file and the line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import jitlab
import jitlab.cli

LAYERS = (
    "instruments",  # counting, timing, the machine, the listener: needs nothing else
    "doctor",  # finds recompilations in any program; stands alone (a team installs it)
    "course",  # course.yml, the lessons' front matter, the boxes; registers its lessons
    "grading",  # checks, verdicts, the kernel frame
    "graders",  # one per exercise
    "notebooks",  # the notebook pipeline
    "site",  # the pages
    "learner",  # the learner's runner: check, hint, watch
    "maintainer",  # jitlab dev
    "cli",  # the entry point: the learner's verbs and jitlab dev
)
FACADE = "__init__"  # `import jitlab`, what a lesson sees: may import any package
PACKAGE = Path(jitlab.__file__).parent


def _layer(path: Path, package: Path) -> str:
    parts = path.relative_to(package).parts
    return parts[0] if len(parts) > 1 else path.stem


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, package of jitlab) for every import of jitlab in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "jitlab":
                names = [f"jitlab.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "jitlab" and len(parts) > 1:
                found.append((node.lineno, parts[1]))
    return found


def uphill_imports(package: Path = PACKAGE) -> list[str]:
    """Every import from a package to one above it in :data:`LAYERS`."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    found = []
    for path in sorted(package.rglob("*.py")):
        source = _layer(path, package)
        if source == FACADE:
            continue
        assert source in rank, f"{path}: package {source!r} is not in LAYERS"
        for line, target in _imports(path):
            if target in rank and rank[target] > rank[source]:
                found.append(f"{path.relative_to(package)}:{line} imports jitlab.{target}")
    return found


def test_every_import_runs_downhill():
    assert uphill_imports() == []


# What a team's install runs: the doctor, the guard and the pytest plugin. They import
# nothing of the course (the course registers its lessons with the doctor instead).
STANDALONE = ("instruments", "doctor")


def test_the_doctor_imports_nothing_of_the_course():
    found = []
    for name in STANDALONE:
        for path in sorted((PACKAGE / name).rglob("*.py")):
            for line, target in _imports(path):
                if target not in STANDALONE:
                    found.append(f"{path.relative_to(PACKAGE)}:{line} imports jitlab.{target}")
    assert found == []


def test_an_uphill_import_is_caught(tmp_path):
    (tmp_path / "instruments").mkdir()
    (tmp_path / "instruments" / "timing.py").write_text(
        "def f():\n    from jitlab.course.manifest import load_course\n"
    )
    assert uphill_imports(tmp_path) == ["instruments/timing.py:2 imports jitlab.course"]


def test_dev_is_dispatched_by_the_entry_point(capsys):
    with pytest.raises(SystemExit) as done:
        jitlab.cli.main(["dev", "--help"])
    assert done.value.code == 0
    assert "renumber" in capsys.readouterr().out
