"""A verdict: what the graders found, how it travels from the kernel, how it is printed.

The runner opens a *channel* for every grader cell: a file and a random token that only
the runner and that cell's (runner-written) first lines know, never the learner's cells,
which run before it. Each :class:`Check` is one JSON line there carrying the token, and a
grader that reaches its end writes a ``complete`` line listing its declared checks. A
grader cell without that line fails whatever pytest says: a grader that was skipped,
interrupted or replaced cannot pass. In strict mode the audit hook keeps a copy of each
record from this module's writer alone, and the runner reads that copy.
:func:`format_verdict` is the one place a verdict becomes text for the learner.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

from jitlab.instruments.audit import VERDICT_EVENT


@dataclasses.dataclass(frozen=True)
class Check:
    """One grader check: its name, and for a failure what was expected and seen."""

    name: str
    passed: bool
    expected: str = ""
    seen: str = ""
    hint: str = ""
    grader: str = ""

    @property
    def not_started(self) -> bool:
        """The learner has not written this function yet (the stub still raises)."""
        return "NotImplementedError" in self.seen


@dataclasses.dataclass(frozen=True)
class GraderRun:
    """What one grader cell reported through its channel."""

    cell: int
    checks: tuple[Check, ...] = ()
    completed: bool = False
    declared: tuple[str, ...] = ()


_channel: tuple[str, str, int] | None = None  # path, token, cell


def open_channel(path: str, token: str, cell: int) -> None:
    """Called by the runner's first lines in a grader cell, before the grader runs."""
    global _channel
    _channel = (path, token, cell)


def _write(record: dict[str, Any]) -> None:
    sys.audit(VERDICT_EVENT, record)  # strict mode's copy, which its runner reads instead
    if _channel is None:
        return  # a grader called outside the runner (tests, a notebook): print only
    path, token, cell = _channel
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({**record, "token": token, "cell": cell}) + "\n")


def send_check(check: Check) -> None:
    _write({"kind": "check", **dataclasses.asdict(check)})


def send_complete(grader: str, declared: tuple[str, ...]) -> None:
    _write({"kind": "complete", "grader": grader, "declared": list(declared)})


def new_token() -> str:
    return os.urandom(16).hex()


def read_channel(path: Path, token: str) -> dict[int, GraderRun]:
    """The grader runs reported in ``path``, keeping only lines that carry ``token``."""
    runs: dict[int, GraderRun] = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict) or record.get("token") != token:
            continue
        cell = int(record.get("cell", -1))
        run = runs.get(cell, GraderRun(cell=cell))
        if record.get("kind") == "check":
            fields = {f.name for f in dataclasses.fields(Check)}
            check = Check(**{k: v for k, v in record.items() if k in fields})
            run = dataclasses.replace(run, checks=(*run.checks, check))
        elif record.get("kind") == "complete":
            declared = tuple(record.get("declared", ()))
            run = dataclasses.replace(run, completed=True, declared=declared)
        runs[cell] = run
    return runs


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of checking one exercise file."""

    path: str
    passed: bool
    checks: tuple[Check, ...] = ()
    problem: str = ""  # why it failed, when no grader check says so
    where: str = ""  # "exercises/NN_shapes.py:52": the line to look at
    kind: str = ""  # check, tampered, syntax, timeout, crash, incomplete, died, strict
    next_step: str = ""  # after a pass: what to do next

    @property
    def failed_check(self) -> Check | None:
        return next((c for c in self.checks if not c.passed), None)


WIDTH = 80


def _wrapped(label: str, text: str, width: int) -> list[str]:
    """``label`` then ``text`` wrapped at word boundaries, continued under the text."""
    indent, unbroken = " " * len(label), {"break_long_words": False, "break_on_hyphens": False}
    lines = textwrap.wrap(text, width, initial_indent=label, subsequent_indent=indent, **unbroken)
    return lines or [label.rstrip()]


def format_verdict(verdict: Verdict, *, width: int = WIDTH, color: bool = False) -> str:
    """A few lines for the learner: what passed, what failed, and what to try."""
    green, red, reset = ("\x1b[32m", "\x1b[31m", "\x1b[0m") if color else ("",) * 3
    failed = verdict.failed_check
    lines: list[str] = []
    started = not (failed is not None and failed.not_started)
    if started:  # an untouched stub gets no green ticks for the checks around it
        # a check made once per round (fit 2, fit 3, ...) that fails in a later round is
        # shown once, failed: never a ✓ and a ✗ for one name
        failing = failed.name if failed else None
        lines += [
            f"{green}✓{reset} {c.name}" for c in verdict.checks if c.passed and c.name != failing
        ]
    if verdict.passed:
        lines.append(f"\n{green}PASS{reset}  {verdict.path}")
        if verdict.next_step:
            lines += _wrapped("      ", verdict.next_step, width)
        return "\n".join(lines)
    if failed is not None:
        lines.append(f"{red}✗{reset} {failed.name}")
        for label, text in (("expected", failed.expected), ("seen", failed.seen)):
            lines += _wrapped(f"  {label + ':':<10}", text, width)
        if failed.hint:
            lines += _wrapped("  hint:     ", failed.hint, width)
    if verdict.problem:
        first, *rest = verdict.problem.splitlines()
        lines += _wrapped(f"{red}✗{reset} ", first, width)
        lines += ["  " + line for line in rest]
    lines.append(f"\n{red}FAIL{reset}  {verdict.path}")
    return "\n".join(lines)
