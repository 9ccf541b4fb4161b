"""How long a lesson takes to teach, estimated from the lesson itself.

A lesson's ``minutes.teaching`` is a promise to an instructor who plans a day around it.
Promises drift as lessons grow (a 5,000-word lesson once sat in a 25-minute slot), so
the estimate is computed from what the room actually does, and a test keeps every
lesson's minutes within reach of it:

- read and explain the prose at about 130 words a minute;
- type or run the code at about 60 lines a minute (it is on screen, run cell by cell);
- and pause one minute at each *Predict* prompt, for the room to commit to an answer.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

WORDS_PER_MINUTE = 130
CODE_LINES_PER_MINUTE = 60
MINUTES_PER_PREDICT = 1
_WORD = re.compile(r"[A-Za-z0-9_']+")


def _body(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if lines and lines[0] == "# ---":  # skip the front matter
        lines = lines[lines.index("# ---", 1) + 1 :]
    return lines


def section_titles(path: Path) -> list[str]:
    """The lesson's ``##`` headings, as written (a half-day plan names them to skip)."""
    return [line[5:].strip() for line in _body(path) if line.startswith("# ## ")]


def _without_sections(lines: list[str], skip: tuple[str, ...]) -> list[str]:
    kept, skipping = [], False
    for line in lines:
        if line.startswith("# ## "):
            skipping = line[5:].strip() in skip
        if not skipping:
            kept.append(line)
    return kept


def estimated_teaching_minutes(path: Path, skip: tuple[str, ...] = ()) -> int:
    """The teaching time of the lesson at ``path`` without the sections named in
    ``skip``, rounded up to 5 minutes."""
    lines = _without_sections(_body(path), skip)
    prose = [line[2:] for line in lines if line.startswith("# ")]
    code = [line for line in lines if line.strip() and not line.startswith("#")]
    predicts = sum(1 for line in prose if 'admonition-title">Predict<' in line)
    minutes = (
        len(_WORD.findall(" ".join(prose))) / WORDS_PER_MINUTE
        + len(code) / CODE_LINES_PER_MINUTE
        + predicts * MINUTES_PER_PREDICT
    )
    return 5 * math.ceil(minutes / 5)
