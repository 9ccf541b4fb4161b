"""An exercise's cells, run as its learner runs them: the one loader the grader tests share.

Each code cell is compiled under the file's own name at its own line, so tracebacks and
``inspect.getsource`` point at the file, as they do in the learner's kernel.
"""

from __future__ import annotations

import functools
import symtable
import sys
import types
from pathlib import Path

from jitlab.course.exercise_source import generated_text
from jitlab.course.manifest import Exercise, load_course
from jitlab.learner.check import CodeCell, code_cells


@functools.cache
def exercise(slug: str) -> Exercise:
    found = load_course().lesson(slug).exercise
    assert found is not None, f"lesson {slug!r} has no exercise"
    return found


def _path(slug: str, learner_copy: bool) -> Path:
    return exercise(slug).learner_copy if learner_copy else exercise(slug).source


def cells(slug: str, *, learner_copy: bool = False) -> list[CodeCell]:
    """The solution's cells, or the learner's copy's as generated (never the working copy
    in exercises/, which a learner may be solving)."""
    if learner_copy:
        return code_cells(generated_text(exercise(slug)))
    return code_cells(_path(slug, learner_copy).read_text(encoding="utf-8"))


def run_cell(cell: CodeCell, namespace: dict, path: Path) -> None:
    exec(compile("\n" * cell.line + cell.source, str(path), "exec"), namespace)


def _names(source: str) -> tuple[set[str], set[str]]:
    """The names a cell binds at its top level, and the global names it (and every
    function in it) reads."""
    top = symtable.symtable(source, "<cell>", "exec")
    made = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    read = {s.get_name() for s in top.get_symbols() if s.is_referenced()}
    tables = list(top.get_children())
    while tables:
        table = tables.pop()
        tables += table.get_children()
        read |= {s.get_name() for s in table.get_symbols() if s.is_global()}
    return made, read


def _graders_need(all_cells: list[CodeCell]) -> list[CodeCell]:
    """The cells the grader cells need: those that define a name a grader cell reads, or
    one that such a cell reads (the lesson's demonstrations, often slow, are left out)."""
    needed = set().union(*(_names(c.source)[1] for c in all_cells if c.is_grader))
    kept = []
    for cell in reversed(all_cells):
        made, read = _names(cell.source)
        if not cell.is_grader and made & needed:
            kept.append(cell)
            needed |= read
    return kept[::-1]


def namespace(
    slug: str,
    *,
    learner_copy: bool = False,
    until: str = "",
    skip: str = "",
    graders_only: bool = False,
) -> dict:
    """The names that the exercise's code cells define, run in order without the grader
    cells: from the solution, or from the learner's copy. ``until``: stop before the
    first cell whose source contains it; ``skip``: leave out the cells that contain it;
    ``graders_only``: run only the cells the grader cells need. The names live in a
    module of their own, as a kernel's do in ``__main__`` (a dataclass looks its module
    up)."""
    module = types.ModuleType(f"exercise_{slug}")
    sys.modules[module.__name__] = module
    names = module.__dict__
    path = _path(slug, learner_copy)
    found = cells(slug, learner_copy=learner_copy)
    for cell in _graders_need(found) if graders_only else found:
        if until and until in cell.source:
            break
        if not cell.is_grader and not (skip and skip in cell.source):
            run_cell(cell, names, path)
    return names


def grader_cells(slug: str) -> list[CodeCell]:
    return [cell for cell in cells(slug) if cell.is_grader]
