"""The boxes at the top and bottom of every lesson, drawn from its front matter.

Notebook pages do not get Material's Markdown extensions, so the boxes are plain HTML
using Material's admonition classes: they look native on the site and still read as
text in JupyterLab or VS Code.
"""

from __future__ import annotations

import html
from typing import Any

from jitlab.course import Lesson, lesson, lessons
from jitlab.environment import environment_report


def _inline(text: str) -> str:
    """Escape front-matter text, keeping `code` spans as code."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _items(values: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{_inline(v)}</li>" for v in values) + "</ul>"


def _box(kind: str, title: str, body: str) -> str:
    return (
        f'<div class="admonition {kind}"><p class="admonition-title">{html.escape(title)}</p>'
        f"{body}</div>"
    )


class _Html:
    """Shows as HTML in a notebook and as text in a terminal."""

    def __init__(self, markup: str, text: str) -> None:
        self._markup, self._text = markup, text

    def _repr_html_(self) -> str:
        return self._markup

    def __repr__(self) -> str:
        return self._text


def intro(number: str | int) -> _Html:
    """Questions, objectives, minutes and prerequisites of a lesson, then the machine.

    Also prints the environment report, so every timing below has its machine.
    """
    item = lesson(number)
    meta: dict[str, Any] = item.meta
    minutes = f"{item.teaching_minutes} min teaching · {item.exercise_minutes} min exercises"
    parts = [
        _box("question", "Questions", _items(meta.get("questions", []))),
        _box("abstract", "Objectives", _items(meta.get("objectives", []))),
        _box(
            "info",
            "Time and prerequisites",
            f"<p>{html.escape(minutes)}</p>" + _items(meta.get("prerequisites", [])),
        ),
    ]
    print(environment_report())
    text = f"{item.number} · {item.title} ({minutes})"
    return _Html("".join(parts), text)


def _next_lesson(item: Lesson) -> Lesson | None:
    ordered = list(lessons())
    index = ordered.index(item)
    return ordered[index + 1] if index + 1 < len(ordered) else None


def outro(number: str | int) -> _Html:
    """Key points, the exercise to do next, and a link to the next lesson."""
    item = lesson(number)
    parts = [_box("success", "Key points", _items(item.meta.get("keypoints", [])))]
    text = [f"Key points of {item.number}: " + "; ".join(item.meta.get("keypoints", []))]
    if item.exercise:
        parts.append(
            _box(
                "example",
                "Exercise",
                f'<p>Open <a href="../../exercises/{item.exercise}/"><code>exercises/'
                f"{item.exercise}.py</code></a>, solve it, then run "
                f"<code>jitlab check {item.exercise[:2]}</code> "
                f"(<code>jitlab hint {item.exercise[:2]}</code> when stuck).</p>",
            )
        )
        text.append(f"Exercise: exercises/{item.exercise}.py  (jitlab check {item.exercise[:2]})")
    following = _next_lesson(item)
    if following is not None:
        parts.append(
            f'<p><a href="../{following.slug}/">Next lesson: {following.number} · '
            f"{html.escape(following.title)} →</a></p>"
        )
        text.append(f"Next: lessons/{following.slug}.py")
    return _Html("".join(parts), "\n".join(text))
