"""``jitlab dev renumber``: rename the course's files to match their place in course.yml.

Inserting or moving a lesson is one line in ``course.yml``; this command then renames
``lessons/``, ``solutions/`` and ``exercises/`` files whose number no longer matches
(with ``git mv`` inside a git checkout, so history follows). No file spells its own
number inside, so nothing else changes.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from jitlab.course.manifest import read_slugs

_STEM = re.compile(r"^(\d\d)_([a-z][a-z0-9_]*)\.py$")
FOLDERS = ("lessons", "solutions", "exercises")


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


def renumber(root: Path, echo: Callable[[str], None] = print) -> int:
    moves = planned_moves(root)
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
    return 0


def _move(source: Path, target: Path, in_git: bool, root: Path) -> None:
    if in_git:
        moved = subprocess.run(
            ["git", "mv", str(source), str(target)], cwd=root, capture_output=True, check=False
        )
        if moved.returncode == 0:
            return
    source.rename(target)
