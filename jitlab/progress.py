"""What the learner has done: which exercises passed, how many hints were shown.

Kept in ``.jitlab/state.json`` at the course root (ignored by git; ``$JITLAB_STATE``
moves it, which the tests use to keep a learner's progress untouched). An exercise counts
as done while its file still has the content that passed: edit it and it is "not done"
until checked again, which keeps ``jitlab list`` instant.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from jitlab.course import ROOT

STATE = Path(os.environ.get("JITLAB_STATE", ROOT / ".jitlab" / "state.json"))


def _load() -> dict[str, Any]:
    if STATE.exists():
        try:
            return json.loads(STATE.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return {}
    return {}


def _save(state: dict[str, Any]) -> None:
    STATE.parent.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def mark_passed(path: Path) -> None:
    state = _load()
    state.setdefault("passed", {})[path.stem] = _digest(path)
    _save(state)


def is_done(path: Path) -> bool:
    return _load().get("passed", {}).get(path.stem) == _digest(path)


def hints_shown(path: Path) -> int:
    return int(_load().get("hints", {}).get(path.stem, 0))


def set_hints_shown(path: Path, count: int) -> None:
    state = _load()
    state.setdefault("hints", {})[path.stem] = count
    _save(state)


def forget(path: Path) -> None:
    """Drop the exercise's progress and hint count (after a reset)."""
    state = _load()
    for section in ("passed", "hints"):
        state.get(section, {}).pop(path.stem, None)
    _save(state)
