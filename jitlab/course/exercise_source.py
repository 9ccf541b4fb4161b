"""One source per exercise: the solution, with the learner's stubs marked in place.

As in otter-grader's and nbgrader's master notebooks, ``solutions/NN_slug.py`` is the
only file an author edits. It runs as the solution, because the markers are comments;
the learner's ``exercises/NN_slug.py`` is generated from it:

- a region between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` becomes
  ``raise NotImplementedError`` at the indentation of the ``BEGIN`` line;
- a region opened with ``# BEGIN SOLUTION (no stub)`` disappears (a decorator or an
  import the learner should find for themselves);
- a line ``# STUB: text`` becomes ``text`` at the same indentation (the learner's
  version of a line, such as a docstring that asks instead of tells).

The learner's copy holds none of the hints: they stay in the source's front matter, where
``jitlab hint`` reads them one at a time, and the copy says, under its title, how to ask
for the next one. An editor that shows the header (VS Code, a plain text editor) shows
no answer, as JupyterLab does not.

The generated copies are committed, because learners edit them; a test fails when one
is out of date, and ``jitlab reset`` regenerates a learner's file from its source, so it
works in a downloaded archive as well as in a git clone.

A copy that differs from its generation is either stale (an author changed the source)
or being solved (a learner's edits): :func:`copy_state` tells them apart with git, as a
learner's edits are what differs from the committed copy. Nothing here writes over a
copy with edits unless asked to (``force``).
"""

from __future__ import annotations

import enum
import re
import subprocess
from pathlib import Path

from jitlab.course.manifest import Course, Exercise
from jitlab.course.metadata import CourseError

_BEGIN = re.compile(r"^(\s*)# BEGIN SOLUTION(?P<nostub> \(no stub\))?\s*$")
_END = re.compile(r"^\s*# END SOLUTION\s*$")
_STUB = re.compile(r"^(\s*)# STUB:(?: (.*))?$")
STUB_LINE = "raise NotImplementedError"


def learner_copy(source: str, where: str = "<source>") -> str:
    """The learner's version of an exercise source (see the module docstring)."""
    out: list[str] = []
    open_at: int | None = None
    for number, line in enumerate(source.splitlines(), start=1):
        begin, end, stub = _BEGIN.match(line), _END.match(line), _STUB.match(line)
        if begin:
            if open_at is not None:
                raise CourseError(
                    f"{where}:{number}: BEGIN SOLUTION inside the region opened at line {open_at}"
                )
            open_at = number
            if not begin.group("nostub"):
                out.append(begin.group(1) + STUB_LINE)
        elif end:
            if open_at is None:
                raise CourseError(f"{where}:{number}: END SOLUTION without a BEGIN SOLUTION")
            open_at = None
        elif open_at is not None:
            continue
        elif stub:
            out.append((stub.group(1) + (stub.group(2) or "")).rstrip())
        else:
            out.append(line)
    if open_at is not None:
        raise CourseError(f"{where}:{open_at}: BEGIN SOLUTION is never closed")
    if not any(line.strip() == STUB_LINE for line in out):
        raise CourseError(f"{where}: no BEGIN SOLUTION region: the learner would get the answer")
    text = "\n".join(out) + "\n"
    # A region dropped between two top-level definitions leaves their blank lines behind.
    return re.sub(r"\n{4,}", "\n\n\n", text)


_HEADER = re.compile(r"\A# ---\n((?:#.*\n)*?)# ---\n")
_KEY = re.compile(r"^#(?P<indent> *)(?P<key>[A-Za-z_]+):")
_TITLE = re.compile(r"^# # .*$", re.MULTILINE)


def without_hints(text: str, where: str = "<source>") -> str:
    """``text`` with the ``hints:`` entry of its front matter removed, whatever it holds
    (a list of strings, or anything nested under it): the lines indented under the key,
    and list items at the key's own indentation, as YAML allows."""
    header = _HEADER.match(text)
    if header is None:
        return text
    kept: list[str] = []
    inside: int | None = None  # the indentation of the hints key while skipping
    for line in header.group(1).splitlines():
        indent = len(line) - len(line.lstrip("# ")) if line.startswith("#") else 0
        if inside is not None:
            item_here = indent == inside and line[indent:].startswith("- ")
            if indent > inside or item_here or not line[1:].strip():
                continue
            inside = None
        key = _KEY.match(line)
        if key and key.group("key") == "hints":
            inside = len(key.group("indent")) + 1
            continue
        kept.append(line)
    remaining = "# ---\n" + "".join(f"{line}\n" for line in kept) + "# ---\n"
    if re.search(r"^#\s+hints:", remaining, re.MULTILINE):
        raise CourseError(f"{where}: the front matter's hints could not be left out")
    return remaining + text[header.end() :]


def with_hint_note(text: str, number: str, where: str = "<source>") -> str:
    """``text`` with a line under its title saying how to get the hints."""
    title = _TITLE.search(text)
    if title is None:
        raise CourseError(f"{where}: no title line ('# # Exercise ...') to put the hint note under")
    note = (
        f"\n#\n# Stuck? Run `jitlab hint {number}` in a terminal for the next hint, mildest "
        "first;\n# the hints are not in this file."
    )
    return text[: title.end()] + note + text[title.end() :]


def generated_from(source: str, number: str, where: str = "<source>") -> str:
    """The learner's copy that the exercise source text ``source`` generates."""
    copy = learner_copy(source, where)
    return with_hint_note(without_hints(copy, where), number, where)


def generated_text(exercise: Exercise) -> str:
    """What ``exercises/NN_slug.py`` must contain, generated from its source."""
    source = exercise.source.read_text(encoding="utf-8")
    return generated_from(source, exercise.number, str(exercise.source))


class CopyState(enum.Enum):
    """Where a learner's copy stands against its source (see :func:`copy_state`)."""

    CURRENT = "current"  # what the source generates
    STALE = "stale"  # unedited since it was committed or generated, but out of date
    EDITED = "edited"  # a learner's edits; the committed copy is current
    EDITED_STALE = "edited and stale"  # edits, and the committed copy is out of date
    UNKNOWN = "unknown"  # differs, and there is no git history to tell edits from age


def committed_text(path: Path) -> str | None:
    """``path`` as git's HEAD holds it; None outside a git checkout, without git, or for
    a file HEAD does not hold."""
    try:
        shown = subprocess.run(
            ["git", "show", f"HEAD:./{path.name}"],
            cwd=path.parent,
            capture_output=True,
            text=True,
            encoding="utf-8",
            check=False,
        )
    except OSError:
        return None
    return shown.stdout if shown.returncode == 0 else None


def _in_git(folder: Path) -> bool:
    try:
        inside = subprocess.run(
            ["git", "rev-parse", "--is-inside-work-tree"],
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return False
    return inside.returncode == 0 and inside.stdout.strip() == "true"


def copy_state(exercise: Exercise) -> CopyState:
    """Whether ``exercises/NN_slug.py`` is current, stale, or holds a learner's edits.

    A copy is unedited when it equals the committed copy or what the committed source
    generated (the old generation); a copy that differs from both holds edits. In a
    checkout where HEAD holds neither file (an exercise being written), the copy is the
    author's own generation, so it counts as unedited."""
    path = exercise.learner_copy
    if not path.exists():
        return CopyState.STALE
    mine = path.read_text(encoding="utf-8")
    wanted = generated_text(exercise)
    if mine == wanted:
        return CopyState.CURRENT
    if not _in_git(path.parent):
        return CopyState.UNKNOWN
    committed = committed_text(path)
    committed_source = committed_text(exercise.source)
    old = {committed}
    if committed_source is not None:
        try:
            old.add(generated_from(committed_source, exercise.number))
        except CourseError:
            pass  # the committed source was broken: only the committed copy counts
    if mine in old or (committed is None and committed_source is None):
        return CopyState.STALE
    return CopyState.EDITED if committed == wanted else CopyState.EDITED_STALE


def stale_copies(course: Course) -> list[Exercise]:
    """Exercises whose learner copy on disk differs from what the source generates."""
    stale = []
    for exercise in course.exercises:
        current = exercise.learner_copy
        if not current.exists() or current.read_text(encoding="utf-8") != generated_text(exercise):
            stale.append(exercise)
    return stale


def write_learner_copies(course: Course, *, force: bool = False) -> tuple[list[Path], list[Path]]:
    """Regenerate every learner copy that is out of date and holds no edits (any that is
    out of date, with ``force``); return the files written and those left alone because
    they hold edits (a learner's work) or could not be told apart from them."""
    written, kept = [], []
    for exercise in stale_copies(course):
        state = copy_state(exercise)
        if not force and state in (CopyState.EDITED, CopyState.EDITED_STALE, CopyState.UNKNOWN):
            kept.append(exercise.learner_copy)
            continue
        exercise.learner_copy.parent.mkdir(parents=True, exist_ok=True)
        exercise.learner_copy.write_text(generated_text(exercise), encoding="utf-8")
        written.append(exercise.learner_copy)
    return written, kept
