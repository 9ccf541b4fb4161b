"""``jitlab dev renumber``: rename the course's files to match their place in course.yml.

Inserting or moving a lesson is one line in ``course.yml``; this command then renames
``lessons/``, ``solutions/`` and ``exercises/`` files whose number no longer matches
(with ``git mv`` inside a git checkout, so history follows). Code names lessons by slug,
but prose names them by number: "lesson 09", "lessons 02 and 03", "Exercise 11", and
each title ("# 02 · Dtypes", "# Exercise 02 · Dtypes"). The same old-to-new map rewrites
those in the course's files and in ``docs/``, all at once, so swapping two lessons
swaps their mentions too.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from jitlab.course.manifest import read_slugs

_STEM = re.compile(r"^(\d\d)_([a-z][a-z0-9_]*)\.py$")
FOLDERS = ("lessons", "solutions", "exercises")
_MENTION = re.compile(
    r"\b(?P<word>[Ll]essons?|[Ee]xercises?) "
    r"(?P<numbers>\d\d(?:(?:, | and | or |, and |, or | to |-|–)\d\d)*)\b"
)
_TITLE = re.compile(r"^(# # )(\d\d)( · )", re.MULTILINE)
_NUMBER = re.compile(r"\d\d")


def planned_moves(root: Path) -> list[tuple[Path, Path]]:
    slugs = read_slugs(root / "course.yml")
    wanted = {slug: f"{position:02d}" for position, slug in enumerate(slugs)}
    moves = []
    for folder in FOLDERS:
        for path in sorted((root / folder).glob("*.py")):
            match = _STEM.match(path.name)
            if not match or match.group(2) not in wanted:
                continue
            number, slug = match.groups()
            if number != wanted[slug]:
                moves.append((path, path.with_name(f"{wanted[slug]}_{slug}.py")))
    return moves


def number_map(moves: list[tuple[Path, Path]]) -> dict[str, str]:
    """Old number to new number, for every lesson that moves."""
    return {source.name[:2]: target.name[:2] for source, target in moves}


def renumbered(text: str, numbers: dict[str, str]) -> str:
    """``text`` with every "lesson NN" / "Exercise NN" mention and "# NN · " title
    renumbered by ``numbers`` (old to new); other numbers are left alone."""

    def mapped(found: re.Match[str]) -> str:
        return numbers.get(found[0], found[0])

    def mention(found: re.Match[str]) -> str:
        return f"{found['word']} {_NUMBER.sub(mapped, found['numbers'])}"

    text = _MENTION.sub(mention, text)
    return _TITLE.sub(lambda found: found[1] + mapped(_NUMBER.match(found[2])) + found[3], text)


def _prose_files(root: Path) -> list[Path]:
    found = [path for folder in FOLDERS for path in sorted((root / folder).glob("*.py"))]
    return found + sorted((root / "docs").rglob("*.md"))


def renumber(root: Path, echo: Callable[[str], None] = print) -> int:
    moves = planned_moves(root)
    numbers = number_map(moves)
    rewritten = 0
    for path in _prose_files(root) if numbers else ():
        text = path.read_text(encoding="utf-8")
        new = renumbered(text, numbers)
        if new != text:
            path.write_text(new, encoding="utf-8")
            rewritten += 1
    in_git = (root / ".git").exists()
    # Two steps, through temporary names, so that swapping two lessons cannot collide.
    staged = []
    for source, target in moves:
        temporary = source.with_name(f"renumbering-{source.name}")
        _move(source, temporary, in_git, root)
        staged.append((temporary, target))
    for temporary, target in staged:
        _move(temporary, target, in_git, root)
        echo(f"  {temporary.name.removeprefix('renumbering-')} -> {target.name}")
    echo(f"{len(moves)} file(s) renamed" if moves else "every file already has its number")
    if rewritten:
        echo(f"{rewritten} file(s) had lesson numbers in their prose renumbered")
    return 0


def _move(source: Path, target: Path, in_git: bool, root: Path) -> None:
    if in_git:
        moved = subprocess.run(
            ["git", "mv", str(source), str(target)], cwd=root, capture_output=True, check=False
        )
        if moved.returncode == 0:
            return
    source.rename(target)
