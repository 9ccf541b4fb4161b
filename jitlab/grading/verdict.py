"""A verdict: what the graders found, how it travels from the kernel, how it is printed.

A grader reports each :class:`Check`, and its completion, as a display output of its
own cell (MIME type :data:`MIME`, a JSON record): nbval keeps every cell's outputs and
:mod:`jitlab.notebooks.recorder` writes them down with the cell's outcome, so the runner
reads one record per cell and needs no channel of its own. A notebook shows the record's
text line (the ✓ or ✗ a learner reads), a terminal that line alone. A grader cell that
never reported itself complete fails whatever pytest says: a grader that was skipped or
interrupted cannot pass. :func:`format_verdict` is the one place a verdict becomes text.
"""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

MIME = "application/vnd.jitlab.report+json"  # a grader's record in its cell's outputs


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


def _publish(record: dict[str, Any], text: str) -> None:
    """Show ``text``, with ``record`` beside it where a kernel keeps outputs."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:  # a grader called outside a kernel (tests, a script): text only
        print(text)
        return
    from IPython.display import display

    display({MIME: record, "text/plain": text}, raw=True)


def send_check(check: Check) -> None:
    text = f"{'✓' if check.passed else '✗'} {check.name}"
    _publish({"kind": "check", **dataclasses.asdict(check)}, text)


def send_complete(grader: str, declared: tuple[str, ...]) -> None:
    record = {"kind": "complete", "grader": grader, "declared": list(declared)}
    _publish(record, f"\nAll checks passed: {grader}")


def grader_run(cell: int, records: Iterable[Mapping[str, Any]]) -> GraderRun:
    """What one grader cell reported: its records, as :func:`send_check` and
    :func:`send_complete` made them, in order."""
    run = GraderRun(cell=cell)
    fields = {f.name for f in dataclasses.fields(Check)}
    for record in records:
        if record.get("kind") == "check":
            check = Check(**{k: v for k, v in record.items() if k in fields})
            run = dataclasses.replace(run, checks=(*run.checks, check))
        elif record.get("kind") == "complete":
            declared = tuple(record.get("declared", ()))
            run = dataclasses.replace(run, completed=True, declared=declared)
    return run


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of checking one exercise file."""

    path: str
    passed: bool
    checks: tuple[Check, ...] = ()
    problem: str = ""  # why it failed, when no grader check says so
    where: str = ""  # "exercises/NN_shapes.py:52": the line to look at
    kind: str = ""  # check, syntax, timeout, crash, incomplete, died
    next_step: str = ""  # after a pass: what to do next
    note: str = ""  # what the runner did first (grader cells put back), in one line
    parts: tuple[tuple[str, str], ...] = ()  # (part, outcome) for an exercise in parts

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
    lines: list[str] = _wrapped("note: ", verdict.note, width) if verdict.note else []
    # Each check once (every part checks that jit is on), and one made once per round
    # (fit 2, fit 3, ...) that fails in a later round shown failed: never a ✓ and a ✗.
    failing = failed.name if failed else None
    passed = dict.fromkeys(c.name for c in verdict.checks if c.passed and c.name != failing)
    lines += [f"{green}✓{reset} {name}" for name in passed]
    if verdict.parts:
        marks = {"passed": f"{green}✓{reset}", "failed": f"{red}✗{reset}"}
        lines.append("")
        lines += [f"{marks.get(state, '·')} {part}: {state}" for part, state in verdict.parts]
    if verdict.passed:
        lines.append(f"\n{green}PASS{reset}  {verdict.path}")
        if verdict.next_step:
            lines += _wrapped("      ", verdict.next_step, width)
        return "\n".join(lines)
    if verdict.parts:
        lines.append("")
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
