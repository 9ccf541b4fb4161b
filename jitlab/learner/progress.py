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
    return int(_load().get("hints", {}).get(exercise.slug, 0))


def set_hints_shown(exercise: Exercise, count: int) -> None:
    state = _load()
    state.setdefault("hints", {})[exercise.slug] = count
    _save(state)


def forget(exercise: Exercise) -> None:
    """Drop the exercise's progress and hint count (after a reset)."""
    state = _load()
    for section in ("passed", "hints"):
        state.get(section, {}).pop(exercise.slug, None)
    _save(state)
