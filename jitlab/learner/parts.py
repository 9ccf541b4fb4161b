"""An exercise's parts, and which of its hints belong to which part.

An exercise with several grader cells has several parts (shapes: the bucketed RMS, then
the positions; control_flow: ``clip_by_norm``, then ``descend``). Its front matter keeps
one list of hints, mildest first, written part after part; this module reads the parts
out of it, so that a learner on part 2 is not made to read part 1's hints first, with
no change to the front matter's form:

- a part is a grader cell, named by the learner's functions its grader call receives;
- a hint belongs to part *k* when it says "Part k" or names a function of part *k* only;
- a hint that says neither belongs where the hint before it belongs (at the top of the
  list: to every part).
"""

from __future__ import annotations

import ast
import dataclasses
import re

from jitlab.course.manifest import Exercise


@dataclasses.dataclass(frozen=True)
class Part:
    """One grader cell of an exercise: its position (1-based) and the functions it grades."""

    number: int
    functions: tuple[str, ...]

    @property
    def label(self) -> str:
        return (
            f"part {self.number} ({', '.join(self.functions)})"
            if self.functions
            else (f"part {self.number}")
        )


def part_of(number: int, source: str) -> Part:
    """Part ``number``, graded by the grader cell ``source``: named by the learner's
    functions that its grader call receives."""
    names: list[str] = []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            names += [a.id for a in node.args if isinstance(a, ast.Name)]
    return Part(number, tuple(dict.fromkeys(names)))


def parts(exercise: Exercise) -> list[Part]:
    """The exercise's parts, one per grader cell of its source."""
    from jitlab.learner.check import code_cells

    cells = code_cells(exercise.source.read_text(encoding="utf-8"))
    graders = (c for c in cells if c.is_grader)
    return [part_of(number, cell.source) for number, cell in enumerate(graders, start=1)]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", text))


def hint_parts(hints: tuple[str, ...], found: list[Part]) -> list[frozenset[int]]:
    """For each hint, the numbers of the parts it belongs to (see the module's rules)."""
    everything = frozenset(p.number for p in found) or frozenset({1})
    owners: list[frozenset[int]] = []
    current = everything
    for hint in hints:
        said = {int(n) for n in re.findall(r"\bPart (\d+)\b", hint)} & everything
        named = {p.number for p in found if _words(hint) & set(p.functions)}
        if said:
            current = frozenset(said)
        elif len(named) == 1:
            current = frozenset(named)
        owners.append(current)
    return owners


def hints_for(exercise: Exercise, part: int) -> list[tuple[int, str]]:
    """The hints of ``part``, mildest first, each with its place in the whole list."""
    hints = exercise.meta.hints
    owners = hint_parts(hints, parts(exercise))
    return [
        (i, hint)
        for i, (hint, owner) in enumerate(zip(hints, owners, strict=True))
        if part in owner
    ]


def resolve_part(exercise: Exercise, name: str) -> Part | None:
    """The part a learner names: its number ("2") or one of its functions ("descend")."""
    for part in parts(exercise):
        if name == str(part.number) or name in part.functions:
            return part
    return None
