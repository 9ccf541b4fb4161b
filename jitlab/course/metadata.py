"""The front matter of lessons and exercises, as typed records checked when read.

Each lesson keeps its front matter once, under ``jitlab:`` in its Jupytext header; each
exercise keeps its own in the header of its one source (``solutions/NN_slug.py``). The
site, the schedules, the boxes at the top and bottom of a lesson, and the runner all read
these records, so a misspelled or missing key must stop everything with a message that
names the file and the key, the way rustlings refuses a bad ``info.toml``. A plain dict
would let ``meta.get("keypoint", [])`` quietly render an empty box.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

# A TypeVar, not PEP 695's ``def parse[Record]``: the TPU machine has Python 3.11.
Record = typing.TypeVar("Record")


class CourseError(ValueError):
    """Something in the course's own files is wrong; the message names file and key."""


@dataclasses.dataclass(frozen=True)
class Minutes:
    """Honest minutes for a workshop: the teacher's part and the learners' exercise."""

    teaching: int
    exercises: int


@dataclasses.dataclass(frozen=True)
class Prerequisites:
    """What to know first: earlier lessons (by slug, checked) and anything else (text)."""

    lessons: tuple[str, ...] = ()
    other: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class HalfDay:
    """How the lesson fits a half-day workshop: shorter minutes, the sections to skip, the
    part of the exercise to do when it gets fewer minutes, and, for prerequisites the half
    day leaves out, one line saying what to read of them before (checked by
    ``jitlab.course.pace.half_day_problems``)."""

    minutes: Minutes
    skip: tuple[str, ...] = ()
    exercise: str | None = None
    read_before: str | None = None


@dataclasses.dataclass(frozen=True)
class LessonMeta:
    """A lesson's front matter (Carpentries style: questions, objectives, key points)."""

    title: str
    fix: str
    questions: tuple[str, ...]
    objectives: tuple[str, ...]
    prerequisites: Prerequisites
    minutes: Minutes
    keypoints: tuple[str, ...]
    instructor_notes: tuple[str, ...]
    half_day: HalfDay | None = None
    # One line: why the lesson needs sockets (lesson 14's processes talk over TCP). On a
    # machine that refuses them the bench skips the lesson with this line.
    needs_sockets: str | None = None


@dataclasses.dataclass(frozen=True)
class ExerciseMeta:
    """An exercise's front matter: its title and hints, mildest first."""

    title: str
    hints: tuple[str, ...]


# libyaml's loader when PyYAML has it (its wheels do): every ``jitlab`` command reads the
# front matter of every lesson and exercise, and the pure-Python loader takes 0.1 s.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """YAML text as Python data, with the safe loader (tags never build objects)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 (a safe loader)


_HEADER = re.compile(r"\A# ---\n((?:#.*\n)*?)# ---\n")


def header_block(path: Path) -> dict[str, Any]:
    """The ``jitlab:`` mapping of a Jupytext percent-format file's YAML header."""
    text = path.read_text(encoding="utf-8")
    match = _HEADER.match(text)
    if not match:
        raise CourseError(f"{path}: no Jupytext header (a '# ---' block at the top)")
    yaml_text = "\n".join(line[2:] for line in match.group(1).splitlines())
    try:
        header = load_yaml(yaml_text) or {}
    except yaml.YAMLError as err:
        raise CourseError(f"{path}: the front matter is not valid YAML: {err}") from None
    block = (header.get("jupyter") or {}).get("jitlab")
    if not isinstance(block, dict):
        raise CourseError(f"{path}: the header has no 'jitlab:' block under 'jupyter:'")
    return block


def parse(kind: type[Record], data: Any, where: str) -> Record:
    """Build the dataclass ``kind`` from YAML data, or raise ``CourseError`` saying where.

    Unknown keys are errors (a typo must not vanish), missing keys without a default
    are errors, and every value is checked against the field's type.
    """
    if not isinstance(data, dict):
        raise CourseError(f"{where}: expected a mapping, found {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise CourseError(f"{where}: unknown key {unknown[0]!r} (known keys: {', '.join(fields)})")
    hints = typing.get_type_hints(kind)
    values = {}
    for name, field in fields.items():
        if name not in data:
            required = (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            )
            if required:
                raise CourseError(f"{where}: missing key {name!r}")
            continue
        values[name] = _value(hints[name], data[name], f"{where}: {name}")
    return kind(**values)


def _value(annotation: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if value is None:
            return None
        return _value(options[0], value, where)
    if origin is tuple:
        (item,) = {a for a in typing.get_args(annotation) if a is not Ellipsis}
        if not isinstance(value, list):
            raise CourseError(f"{where}: expected a list, found {value!r}")
        return tuple(_value(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(annotation):
        return parse(annotation, value, where)
    if annotation is int:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise CourseError(f"{where}: expected a whole number of minutes, found {value!r}")
        return value
    if annotation is str:
        if not isinstance(value, str) or not value.strip():
            raise CourseError(f"{where}: expected text, found {value!r}")
        return value
    raise TypeError(f"no parser for {annotation!r}")  # a bug in this module, not the course
