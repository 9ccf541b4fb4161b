"""Where the course's files are, and what each lesson says about itself.

Each lesson keeps its front matter (title, questions, objectives, minutes, key points,
instructor notes) once, in its Jupytext header under ``jitlab:``. The lesson page, the
instructor's schedule and the runner all read it from there.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
LESSONS = ROOT / "lessons"
EXERCISES = ROOT / "exercises"
SOLUTIONS = ROOT / "solutions"
BUILD = ROOT / "_build"

_NUMBERED = re.compile(r"^(\d\d)_[a-z0-9_]+\.py$")
_HEADER = re.compile(r"\A# ---\n((?:#.*\n)*?)# ---\n")


@dataclasses.dataclass(frozen=True)
class Lesson:
    """A lesson file and its front matter."""

    number: str
    path: Path
    meta: dict[str, Any]

    @property
    def slug(self) -> str:
        return self.path.stem

    @property
    def title(self) -> str:
        return str(self.meta.get("title", self.slug))

    @property
    def teaching_minutes(self) -> int:
        return int(self.meta.get("minutes", {}).get("teaching", 0))

    @property
    def exercise_minutes(self) -> int:
        return int(self.meta.get("minutes", {}).get("exercises", 0))

    @property
    def exercise(self) -> str | None:
        """Slug of this lesson's exercise (``exercises/<slug>.py``), if it has one."""
        return self.meta.get("exercise")


def header_metadata(path: Path) -> dict[str, Any]:
    """The ``jitlab:`` block of a Jupytext percent-format file's YAML header."""
    match = _HEADER.match(path.read_text(encoding="utf-8"))
    if not match:
        return {}
    yaml_text = "\n".join(line[2:] for line in match.group(1).splitlines())
    try:
        header = yaml.safe_load(yaml_text) or {}
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: the front matter is not valid YAML: {err}") from None
    return (header.get("jupyter") or {}).get("jitlab") or {}


def _numbered(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.py") if _NUMBERED.match(p.name))


@cache
def lessons() -> tuple[Lesson, ...]:
    """Every lesson, in course order."""
    return tuple(
        Lesson(number=p.name[:2], path=p, meta=header_metadata(p)) for p in _numbered(LESSONS)
    )


def lesson(number: str | int) -> Lesson:
    """The lesson with this number ("01" or 1)."""
    wanted = f"{int(number):02d}"
    for item in lessons():
        if item.number == wanted:
            return item
    raise KeyError(f"no lesson {wanted}")


def exercise_paths() -> list[Path]:
    """Every exercise file, in course order."""
    return _numbered(EXERCISES)


def solution_for(exercise: Path) -> Path:
    return SOLUTIONS / exercise.name


def find_exercise(name: str) -> Path | None:
    """Resolve "01", "1", "01_shapes" or a path to an exercise file."""
    candidate = Path(name)
    if candidate.suffix == ".py" and candidate.exists():
        return candidate.resolve()
    stem = candidate.stem
    for path in exercise_paths():
        number = path.name[:2]
        if stem in (path.stem, number) or (stem.isdigit() and int(stem) == int(number)):
            return path
    return None
