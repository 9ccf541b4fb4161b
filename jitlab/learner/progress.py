"""What the learner has done: which exercises passed, how many hints were shown.

Kept in ``.jitlab/state.json`` at the course root (ignored by git; ``$JITLAB_STATE``
moves it, which the tests use to keep a learner's progress untouched). An exercise is
*done* while its file still has the content that passed; once edited it is *changed
since it passed* until checked again; one that never passed is *not done*. Comparing a
digest keeps ``jitlab list`` instant.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from jitlab.course.manifest import Exercise, course_root

STATE_ENV = "JITLAB_STATE"


class Status(enum.Enum):
    DONE = "done"
    CHANGED = "changed since it passed: check again"
    NOT_DONE = "not done"


def state_file() -> Path:
    return Path(os.environ.get(STATE_ENV) or course_root() / ".jitlab" / "state.json")


def _load() -> dict[str, Any]:
    path = state_file()
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        except json.JSONDecodeError:
            return {}
    return {}


def _save(state: dict[str, Any]) -> None:
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""


def mark_passed(exercise: Exercise) -> None:
    state = _load()
    state.setdefault("passed", {})[exercise.slug] = _digest(exercise.learner_copy)
    _save(state)


def status(exercise: Exercise) -> Status:
    passed = _load().get("passed", {}).get(exercise.slug)
    if passed is None:
        return Status.NOT_DONE
    return Status.DONE if passed == _digest(exercise.learner_copy) else Status.CHANGED


def hints_shown(exercise: Exercise) -> int:
    """How many hints were shown for the exercise, over all its parts."""
    shown = _load().get("hints", {}).get(exercise.slug, 0)
    return sum(map(int, shown.values())) if isinstance(shown, dict) else int(shown)


def hints_shown_in(exercise: Exercise, part: int) -> int:
    """How many of ``part``'s hints were shown. An older state file kept one count per
    exercise (all of its hints in one row): that count is read as part 1's."""
    shown = _load().get("hints", {}).get(exercise.slug, 0)
    if isinstance(shown, dict):
        return int(shown.get(str(part), 0))
    return int(shown) if part == 1 else 0


def set_hints_shown(exercise: Exercise, count: int, part: int = 1) -> None:
    state = _load()
    hints = state.setdefault("hints", {})
    shown = hints.get(exercise.slug, 0)
    if not isinstance(shown, dict):
        shown = {"1": int(shown)} if shown else {}
    shown[str(part)] = count
    hints[exercise.slug] = shown
    _save(state)


def current_part(exercise: Exercise) -> int:
    """The part the learner is on: the first one the last check did not pass (1 before
    any check)."""
    return int(_load().get("part", {}).get(exercise.slug, 1))


def set_current_part(exercise: Exercise, part: int) -> None:
    state = _load()
    state.setdefault("part", {})[exercise.slug] = part
    _save(state)


def forget(exercise: Exercise) -> None:
    """Drop the exercise's progress and hint count (after a reset)."""
    state = _load()
    for section in ("passed", "hints", "part"):
        state.get(section, {}).pop(exercise.slug, None)
    _save(state)
