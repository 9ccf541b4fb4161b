"""The course as one ordered list: ``course.yml`` names the lessons, the files follow.

A lesson is identified by its slug (``dtypes``); its number (``02``) is its position in
``course.yml``, never typed anywhere else. Its files are ``lessons/02_dtypes.py`` and,
when it has an exercise, ``solutions/02_dtypes.py`` (the exercise's one source) and
``exercises/02_dtypes.py`` (the learner's copy generated from it). The lesson–exercise
link is that shared name: stated once, by the file existing.

Everything that needs the course (the site, the runner, the schedules, the tests) loads
it through :func:`load_course`, which checks names, files and front matter and raises
``CourseError`` naming the file and the key when something is off.
"""

from __future__ import annotations

import dataclasses
import os
import re
from functools import cache
from pathlib import Path

import yaml

from jitlab.course.metadata import (
    CourseError,
    ExerciseMeta,
    LessonMeta,
    header_block,
    load_yaml,
    parse,
)

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
ROOT_ENV = "JITLAB_COURSE_ROOT"
"""Points the tools at another course folder (the tests use a small fixture course)."""

_SLUG = re.compile(r"^[a-z][a-z0-9_]*$")
_STEM = re.compile(r"^(\d\d)_([a-z][a-z0-9_]*)$")


def course_root() -> Path:
    """The folder holding ``course.yml``: ``$JITLAB_COURSE_ROOT``, else this checkout."""
    return Path(os.environ.get(ROOT_ENV) or PACKAGE_ROOT).resolve()


@dataclasses.dataclass(frozen=True)
class Exercise:
    """A graded exercise: its one source (the solution) and the learner's copy."""

    number: str
    slug: str
    source: Path
    learner_copy: Path
    meta: ExerciseMeta

    @property
    def stem(self) -> str:
        return f"{self.number}_{self.slug}"

    @property
    def title(self) -> str:
        return self.meta.title

    @property
    def label(self) -> str:
        """``Exercise 02 · Score batches ...``: the exercise's title line, as the site,
        its source and ``jitlab list`` name it (a test holds the source to it)."""
        return f"Exercise {self.number} · {self.title}"


@dataclasses.dataclass(frozen=True)
class Lesson:
    """A lesson: its place in the course, its file, its front matter, its exercise."""

    position: int
    slug: str
    path: Path
    meta: LessonMeta
    exercise: Exercise | None

    @property
    def number(self) -> str:
        return f"{self.position:02d}"

    @property
    def stem(self) -> str:
        return f"{self.number}_{self.slug}"

    @property
    def title(self) -> str:
        return self.meta.title

    @property
    def label(self) -> str:
        """``02 · Dtypes``: how pages and tables name the lesson."""
        return f"{self.number} · {self.title}"


@dataclasses.dataclass(frozen=True)
class Course:
    """Every lesson in order, and the folders they live in."""

    root: Path
    lessons: tuple[Lesson, ...]

    @property
    def lessons_dir(self) -> Path:
        return self.root / "lessons"

    @property
    def exercises_dir(self) -> Path:
        return self.root / "exercises"

    @property
    def solutions_dir(self) -> Path:
        return self.root / "solutions"

    @property
    def build_dir(self) -> Path:
        return self.root / "_build"

    @property
    def exercises(self) -> tuple[Exercise, ...]:
        return tuple(item.exercise for item in self.lessons if item.exercise is not None)

    def lesson(self, key: str | int) -> Lesson:
        """The lesson named by slug (``dtypes``), number (``02``, ``2``) or stem."""
        found = self._find(str(key))
        if found is None:
            known = ", ".join(item.slug for item in self.lessons)
            raise KeyError(f"no lesson {key!r} (the lessons are: {known})")
        return found

    def find_lesson(self, key: str) -> Lesson | None:
        return self._find(key)

    def find_exercise(self, key: str) -> Exercise | None:
        """The exercise named by slug, number, stem, or a path to either of its files."""
        lesson = self._find(key)
        return lesson.exercise if lesson is not None else None

    def lesson_for_path(self, path: Path) -> Lesson | None:
        """The lesson whose lesson, exercise or solution file has this name."""
        return self._find(Path(path).stem)

    def _find(self, key: str) -> Lesson | None:
        key = key.strip()
        if key.endswith((".py", ".ipynb")):
            key = Path(key).stem
        for item in self.lessons:
            if key in (item.slug, item.stem, item.number):
                return item
            if key.isdigit() and int(key) == item.position:
                return item
        return None


def read_slugs(manifest: Path) -> list[str]:
    """The lesson slugs of a ``course.yml``, in order, checked (a ``CourseError`` names
    what is wrong). Reads no lesson: cheap enough for a grader to call."""
    if not manifest.exists():
        raise CourseError(f"{manifest}: missing (it lists the course's lessons in order)")
    try:
        data = load_yaml(manifest.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise CourseError(f"{manifest}: not valid YAML: {err}") from None
    slugs = data.get("lessons") if isinstance(data, dict) else None
    if not isinstance(slugs, list) or not slugs:
        raise CourseError(f"{manifest}: expected 'lessons:' with a list of lesson slugs")
    unknown_keys = sorted(set(data) - {"lessons"})
    if unknown_keys:
        raise CourseError(f"{manifest}: unknown key {unknown_keys[0]!r} (known: lessons)")
    for slug in slugs:
        if not isinstance(slug, str) or not _SLUG.match(slug):
            raise CourseError(f"{manifest}: {slug!r} is not a slug (lowercase, digits, _)")
    duplicates = sorted({s for s in slugs if slugs.count(s) > 1})
    if duplicates:
        raise CourseError(f"{manifest}: {duplicates[0]!r} is listed twice")
    return slugs


def lesson_number(slug: str, root: Path | None = None) -> str:
    """The number (``02``) of the lesson ``slug``: its position in ``course.yml``."""
    return f"{read_slugs((root or course_root()) / 'course.yml').index(slug):02d}"


def pinned_jax(root: Path) -> str | None:
    """The JAX release the course pins in ``requirements.lock`` (what the lessons teach)."""
    lock = root / "requirements.lock"
    if lock.exists():
        for line in lock.read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("jax=="):
                return line.split("==", 1)[1].strip()
    return None


def _stray_files(folder: Path, expected: set[str]) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(
        p.name for p in folder.glob("*.py") if _STEM.match(p.stem) and p.stem not in expected
    )


def load_course(root: Path | None = None) -> Course:
    """Read and check ``course.yml``, every lesson's and every exercise's front matter."""
    return _load(Path(root).resolve() if root else course_root())


@cache
def _load(root: Path) -> Course:
    manifest = root / "course.yml"
    slugs = read_slugs(manifest)
    lessons = []
    for position, slug in enumerate(slugs):
        stem = f"{position:02d}_{slug}"
        path = root / "lessons" / f"{stem}.py"
        if not path.exists():
            raise CourseError(
                f"{manifest}: lesson {slug!r} is number {position:02d}, but {path} does not "
                f"exist (after moving lessons in course.yml, run `jitlab dev renumber`)"
            )
        meta = parse(LessonMeta, header_block(path), f"{path} (front matter)")
        exercise = None
        source = root / "solutions" / f"{stem}.py"
        if source.exists():
            exercise = Exercise(
                number=f"{position:02d}",
                slug=slug,
                source=source,
                learner_copy=root / "exercises" / f"{stem}.py",
                meta=parse(ExerciseMeta, header_block(source), f"{source} (front matter)"),
            )
        lessons.append(
            Lesson(position=position, slug=slug, path=path, meta=meta, exercise=exercise)
        )
    known = {item.stem for item in lessons}
    for folder in ("lessons", "solutions", "exercises"):
        stray = _stray_files(root / folder, known)
        if stray:
            raise CourseError(
                f"{root / folder}/{stray[0]}: not a lesson in course.yml (add its slug there, "
                "or run `jitlab dev renumber` after moving lessons)"
            )
    for item in lessons:
        for slug in item.meta.prerequisites.lessons:
            if slug not in slugs:
                raise CourseError(f"{item.path}: prerequisite {slug!r} is not a lesson slug")
            if slugs.index(slug) >= item.position:
                raise CourseError(f"{item.path}: prerequisite {slug!r} comes after this lesson")
    return Course(root=root, lessons=tuple(lessons))
