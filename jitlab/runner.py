"""Run one exercise (or solution) the way CI does, and boil the result down to a verdict.

The file is converted with Jupytext and executed under nbval (``--nbval-lax``: a cell
fails only by raising) in a pytest subprocess, so the learner's code runs in a fresh
kernel exactly as in CI. Graders append their checks to ``$JITLAB_REPORT``; pytest's
JUnit XML says which cell failed and how. From both we print a few lines: which checks
passed, which failed with expected / seen / hint, or which cell crashed or timed out.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import jupytext

from jitlab.course import BUILD, ROOT

DEFAULT_CELL_TIMEOUT_S = 60
_ANSI = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*m")  # JUnit XML spells ESC as "#x1B"
_EXCEPTION_LINE = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Failure|Interrupt|Exit)): ?(.*)$"
)


@dataclasses.dataclass
class Check:
    """One grader check, as the grader reported it."""

    name: str
    passed: bool
    expected: str = ""
    seen: str = ""
    hint: str = ""


@dataclasses.dataclass
class Verdict:
    """The outcome of running one exercise file."""

    path: Path
    passed: bool
    checks: list[Check]
    failed_cell: int | None = None  # index among code cells
    failed_cell_line: int | None = None  # line in the .py file where that cell starts
    failed_in_grader: bool = False
    error: str = ""  # one line: exception type and message, or what went wrong
    timed_out: bool = False
    syntax_error: bool = False

    @property
    def failed_check(self) -> Check | None:
        return next((c for c in self.checks if not c.passed), None)


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def syntax_error(path: Path) -> str | None:
    """The learner-facing message for a syntax error in ``path``, or None."""
    source = path.read_text(encoding="utf-8")
    try:
        ast.parse(source, filename=str(path))
    except SyntaxError as err:
        line = (err.text or "").rstrip("\n")
        pointer = " " * max((err.offset or 1) - 1, 0) + "^"
        return f"{_display(path)}:{err.lineno}: SyntaxError: {err.msg}\n    {line}\n    {pointer}"
    return None


def code_cell_lines(path: Path) -> list[int]:
    """The 1-based line where each code cell of a percent-format file starts."""
    lines = path.read_text(encoding="utf-8").splitlines()
    starts = []
    for number, line in enumerate(lines, start=1):
        if line.startswith("# %%") and "[markdown]" not in line and "[md]" not in line:
            starts.append(number)
    return starts


def grader_cells(path: Path) -> list[int]:
    """Indices (among code cells) of the cells tagged ``grader``."""
    notebook = jupytext.read(path)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    return [i for i, c in enumerate(code) if "grader" in c.metadata.get("tags", [])]


def _read_checks(report: Path) -> list[Check]:
    if not report.exists():
        return []
    checks = []
    for line in report.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        checks.append(
            Check(
                name=record["check"],
                passed=record["passed"],
                expected=record.get("expected", ""),
                seen=record.get("seen", ""),
                hint=record.get("hint", ""),
            )
        )
    return checks


def _first_failure(junit: Path) -> tuple[int | None, str, bool]:
    """(code cell index, one-line error, timed out) of the first failed cell."""
    if not junit.exists():
        return None, "", False
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is None:
            continue
        match = re.search(r"Cell (\d+)", case.get("name", ""))
        cell = int(match.group(1)) if match else None
        text = _ANSI.sub("", problem.text or problem.get("message", ""))
        timeout = re.search(r"Timeout of ([\d.]+) seconds exceeded", text)
        if timeout:
            return cell, f"the cell ran for more than {timeout.group(1)} s and was stopped", True
        found = [m for m in map(_EXCEPTION_LINE.match, text.splitlines()) if m]
        error = f"{found[-1].group(1)}: {found[-1].group(2)}" if found else text.strip()[-300:]
        return cell, error, False
    return None, "", False


def run_notebook(
    path: Path, *, cell_timeout_s: int = DEFAULT_CELL_TIMEOUT_S, quiet: bool = True
) -> Verdict:
    """Convert ``path`` with Jupytext, run it under nbval, and return the verdict."""
    path = Path(path).resolve()
    problem = syntax_error(path)
    if problem:
        return Verdict(path, passed=False, checks=[], error=problem, syntax_error=True)

    work = BUILD / "check"
    work.mkdir(parents=True, exist_ok=True)
    notebook = work / f"{path.parent.name}-{path.stem}.ipynb"
    jupytext.write(jupytext.read(path), notebook)

    with tempfile.TemporaryDirectory(prefix="jitlab-") as scratch:
        report = Path(scratch) / "report.jsonl"
        junit = Path(scratch) / "junit.xml"
        env = {**os.environ, "JITLAB_REPORT": str(report), "PYTHONDONTWRITEBYTECODE": "1"}
        command = [
            sys.executable,
            "-m",
            "pytest",
            str(notebook),
            "--nbval-lax",
            "--nbval-current-env",
            f"--nbval-cell-timeout={cell_timeout_s}",
            "-x",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(work),
            f"--junitxml={junit}",
        ]
        completed = subprocess.run(
            command, cwd=path.parent, env=env, capture_output=quiet, text=True, check=False
        )
        checks = _read_checks(report)
        cell, error, timed_out = _first_failure(junit)

    if completed.returncode == 0:
        return Verdict(path, passed=True, checks=checks)
    if cell is None and not error:
        tail = (completed.stdout or "")[-800:] + (completed.stderr or "")[-800:]
        error = f"pytest exited with code {completed.returncode}\n{tail.strip()}"
    starts = code_cell_lines(path)
    return Verdict(
        path,
        passed=False,
        checks=checks,
        failed_cell=cell,
        failed_cell_line=starts[cell] if cell is not None and cell < len(starts) else None,
        failed_in_grader=cell is not None and cell in grader_cells(path),
        error=error,
        timed_out=timed_out,
    )


def format_verdict(verdict: Verdict) -> str:
    """A few lines for the learner: what passed, what failed and what to try."""
    name = _display(verdict.path)
    lines = [f"✓ {c.name}" for c in verdict.checks if c.passed]
    if verdict.passed:
        lines.append(f"\nPASS  {name}")
        return "\n".join(lines)
    if verdict.syntax_error:
        return f"FAIL  {name} does not parse:\n{verdict.error}"
    failed = verdict.failed_check
    where = f"{name}:{verdict.failed_cell_line}" if verdict.failed_cell_line else name
    if failed is not None:
        lines += [
            f"✗ {failed.name}",
            f"  expected: {failed.expected}",
            f"  seen:     {failed.seen}",
        ]
        if failed.hint:
            lines.append(f"  hint:     {failed.hint}")
    elif verdict.timed_out:
        lines.append(
            f"✗ the cell starting at {where} {verdict.error}.\n"
            "  Look for a loop that never ends (a `while` whose condition never changes)."
        )
    else:
        lines.append(f"✗ the cell starting at {where} raised\n  {verdict.error}")
    lines.append(f"\nFAIL  {name}")
    return "\n".join(lines)
