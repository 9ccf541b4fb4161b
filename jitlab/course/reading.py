"""A lesson as its reader meets it: Predict prompts, what shows before their fold, and how
dense the code is.

A *Predict* box asks the learner to guess before the experiment runs. On the site, the
outputs of the code cells after it, and every cell tagged ``answer`` (code and output),
are folded until the reader opens them (``jitlab/site/hooks.py``); in JupyterLab an
``answer`` cell's code starts collapsed (``jupyter.source_hidden``). Whatever else sits
between the box and the next text cell is in plain view, so it must not state the
answer: no assert, no expected exception named in an ``except``, no comment giving the
count. A Predict box with no ``answer`` cell under it has no fold for its answer at
all: whatever a later cell prints or asserts, before the next Predict box, is the
answer in plain view (a table printed after the next text cell, say).
``predict_leaks`` finds the cells that do either; ``cell_stats`` measures what
``jitlab dev lesson-stats`` reports.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import statistics
from pathlib import Path
from typing import Any

PREDICT_MARK = '<p class="admonition-title">Predict</p>'
ANSWER_TAG = "answer"

# What gives an answer away in code the learner reads before predicting.
_GIVEAWAYS = (
    (re.compile(r"^\s*assert\b", re.M), "an assert"),
    (re.compile(r"\bassert_\w+\(|\.testing\.assert"), "a testing assert"),
    (re.compile(r"\braise AssertionError\b"), "a raise AssertionError"),
    (re.compile(r"\bpytest\.raises\b"), "a pytest.raises"),
    (re.compile(r"^\s*except\s+[\w.]*(Error|Exception)\b", re.M), "an except naming the error"),
    (
        re.compile(r"#.*\b(compil|trace|retrace)\w*\b.*\d|#.*\d.*\b(compil|trace)", re.I),
        "a comment with a count",
    ),
)


# Calls whose result a notebook prints (the last bare expression of a cell prints too).
_PRINTERS = frozenset({"print", "display", "print_table", "pprint"})
UNFOLDED = "a result in view: the Predict box has no answer cell under it, so nothing folds it"


@dataclasses.dataclass(frozen=True)
class Cell:
    kind: str  # "code" or "markdown"
    source: str
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    index: int

    @property
    def lines(self) -> list[str]:
        return [line for line in self.source.splitlines() if line.strip()]


def read_cells(path: Path) -> list[Cell]:
    """The lesson's cells, as Jupytext reads them (the front matter is not a cell)."""
    import jupytext

    notebook = jupytext.read(path)
    return [
        Cell(
            kind=cell.cell_type,
            source=cell.source,
            tags=tuple(cell.metadata.get("tags", ())),
            metadata=dict(cell.metadata),
            index=index,
        )
        for index, cell in enumerate(notebook.cells)
    ]


@dataclasses.dataclass(frozen=True)
class Leak:
    """A cell in view between a Predict box and its fold that states the answer."""

    lesson: str
    predict: int  # the index of the Predict box's cell
    cell: int
    line: int
    reason: str
    text: str

    def __str__(self) -> str:
        return (
            f"{self.lesson}: cell {self.cell} (line {self.line} of the cell), shown before "
            f"the fold of a Predict prompt, holds {self.reason}: {self.text.strip()!r}. "
            f'Move it to a cell tagged "{ANSWER_TAG}".'
        )


def predict_groups(cells: list[Cell]) -> dict[int, list[Cell]]:
    """For each Predict box (by its cell index), the code cells after it, up to the next
    text cell."""
    groups: dict[int, list[Cell]] = {}
    current: list[Cell] | None = None
    for cell in cells:
        if cell.kind == "markdown":
            current = [] if PREDICT_MARK in cell.source else None
            if current is not None:
                groups[cell.index] = current
        elif current is not None:
            current.append(cell)
    return groups


def shown_lines(source: str) -> list[int]:
    """The lines (from 1) of a code cell that put a result in view when it runs: a print
    or display call, an assert, or the cell's last statement when it is a bare
    expression (a notebook prints its value)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # not Python (a magic): judge it by its asserts alone
        return [n for n, line in enumerate(source.splitlines(), 1) if _ASSERT.search(line)]
    shown = {node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = node.func
            name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
            if name in _PRINTERS:
                shown.add(node.lineno)
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Expr) and not isinstance(last.value, ast.Call | ast.Constant):
        shown.add(last.lineno)
    return sorted(shown)


def _unfolded_answers(path: Path, cells: list[Cell], predict: int, group: list[Cell]) -> list[Leak]:
    """For a Predict box with no answer cell under it: the code cells past its group (the
    next text cell ends it), up to the next Predict box, that print or assert: in view,
    as nothing folds them. The box itself when no cell does."""
    if any(ANSWER_TAG in cell.tags for cell in group):
        return []
    leaks = []
    past_the_group = predict + 1 + len(group)  # the site folds the group's outputs
    for cell in cells[past_the_group:]:
        if cell.kind == "markdown" and PREDICT_MARK in cell.source:
            break
        if cell.kind != "code":
            continue
        lines = cell.source.splitlines()
        for number in shown_lines(cell.source):
            leaks.append(Leak(path.name, predict, cell.index, number, UNFOLDED, lines[number - 1]))
    if not leaks:
        leaks.append(Leak(path.name, predict, predict, 1, UNFOLDED, "the Predict box"))
    return leaks


def predict_leaks(path: Path) -> list[Leak]:
    """Every visible giveaway after every Predict box of the lesson at ``path``: in the
    code in view before its fold, or printed where no fold hides it."""
    leaks = []
    cells = read_cells(path)
    for predict, group in predict_groups(cells).items():
        leaks += _unfolded_answers(path, cells, predict, group)
        for cell in group:
            if ANSWER_TAG in cell.tags:
                continue
            for number, line in enumerate(cell.source.splitlines(), start=1):
                for pattern, reason in _GIVEAWAYS:
                    if pattern.search(line):
                        leaks.append(Leak(path.name, predict, cell.index, number, reason, line))
                        break
    return leaks


def misplaced_answers(path: Path) -> list[str]:
    """``answer`` cells that no Predict box folds, or whose code JupyterLab would show."""
    cells = read_cells(path)
    folded = {cell.index for group in predict_groups(cells).values() for cell in group}
    problems = []
    for cell in cells:
        if ANSWER_TAG not in cell.tags:
            continue
        if cell.index not in folded:
            problems.append(
                f"{path.name}: cell {cell.index} is tagged answer but no Predict box precedes it"
            )
        if not cell.metadata.get("jupyter", {}).get("source_hidden"):
            problems.append(
                f'{path.name}: answer cell {cell.index} lacks jupyter={{"source_hidden": true}}, '
                "so JupyterLab shows its code before the learner predicts"
            )
    return problems


@dataclasses.dataclass(frozen=True)
class LessonStats:
    lesson: str
    predicts: int
    code_cells: int
    median_cell: float
    longest_cell: int
    code_lines: int
    asserts: int
    cells_over_30: int

    def row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_ASSERT = re.compile(r"^\s*assert\b|\bassert_\w+\(|\.testing\.assert|raise AssertionError", re.M)


def cell_stats(path: Path) -> LessonStats:
    """Non-blank code lines per cell, per lesson, and how many asserts stand in them."""
    cells = read_cells(path)
    code = [cell for cell in cells if cell.kind == "code"]
    sizes = [len(cell.lines) for cell in code] or [0]
    return LessonStats(
        lesson=path.stem,
        predicts=len(predict_groups(cells)),
        code_cells=len(code),
        median_cell=float(statistics.median(sizes)),
        longest_cell=max(sizes),
        code_lines=sum(sizes),
        asserts=sum(len(_ASSERT.findall(cell.source)) for cell in code),
        cells_over_30=sum(size > 30 for size in sizes),
    )
