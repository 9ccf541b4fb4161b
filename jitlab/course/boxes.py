"""The boxes at the top and bottom of every lesson, drawn from its front matter.

Notebook pages do not get Material's Markdown extensions, so the boxes are plain HTML
using Material's admonition classes: they look native on the site and still read as
text in JupyterLab, VS Code or a terminal. The machine report sits in a folded box at
the top, so the page opens with the lesson's questions rather than a wall of versions,
while every timing below still names the machine it came from.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from jitlab.course.current import running_lesson
from jitlab.course.manifest import Lesson, load_course, pinned_jax


def code_spans(text: str) -> str:
    """Escape front-matter text, rendering `backticked` spans and API names as code."""
    parts = html.escape(text).split("`")
    out = []
    for index, part in enumerate(parts):
        if index % 2:
            out.append(f"<code>{part}</code>")
        else:
            out.append(_API_NAME.sub(r"<code>\g<0></code>", part))
    return "".join(out)


# Dotted API names (jax.jit, lax.scan, jnp.where, eqx.filter_jit) read as code even when
# the front matter forgot the backticks.
_API_NAME = re.compile(r"\b(?:jax|jnp|lax|np|eqx|nnx|optax|chex)\.[A-Za-z_][\w.]*(?:\(\))?")


def _items(values: tuple[str, ...]) -> str:
    return "<ul>" + "".join(f"<li>{code_spans(v)}</li>" for v in values) + "</ul>"


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


def _machine_box() -> tuple[str, str]:
    from jitlab.instruments.environment import environment, environment_report

    env = environment()
    summary = (
        f"Measured on: {env['platform']} · {env['cpu_model']} · {env['cpu_cores']} cores · "
        f"jax {env['jax']}"
    )
    markup = (
        f'<details class="note"><summary>{html.escape(summary)}</summary>'
        f"<pre>{html.escape(environment_report())}</pre></details>"
    )
    return markup, environment_report()


def _release_line(root: Path) -> tuple[str, str]:
    import jax

    pinned = pinned_jax(root)
    running = jax.__version__
    if pinned is None or pinned == running:
        text = f"This lesson teaches JAX {running}; every claim below is asserted on it."
        return f"<p>{html.escape(text)}</p>", text
    text = (
        f"This lesson teaches JAX {pinned} (the course's pin), but this kernel runs JAX "
        f"{running}: some assertions may fail. The 'JAX releases' page lists what differs."
    )
    return _box("warning", "Another JAX release", f"<p>{html.escape(text)}</p>"), text


def _prerequisites(item: Lesson) -> str:
    course = load_course()
    links = [
        f'<li><a href="../{course.lesson(slug).stem}/">'
        f"{html.escape(course.lesson(slug).label)}</a></li>"
        for slug in item.meta.prerequisites.lessons
    ]
    others = [f"<li>{code_spans(text)}</li>" for text in item.meta.prerequisites.other]
    return "<ul>" + "".join(links + others) + "</ul>"


def plots_as_svg() -> None:
    """Plots in a notebook as SVG with real text (not PNG, not glyph outlines): sharp at
    any zoom, and the site can keep a plot wide enough for its smallest text to stay 9 px
    high on a phone (``jitlab/site/hooks.py``), scrolling in its own box. Outside IPython
    (a script, a terminal) nothing changes."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if get_ipython() is None:
        return
    import matplotlib
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    matplotlib.rcParams["svg.fonttype"] = "none"  # <text> elements, searchable and sized
    matplotlib.rcParams["svg.hashsalt"] = "jitlab"  # the same ids on every run
    set_matplotlib_formats("svg")


def intro(slug: str | None = None) -> _Html:
    """Questions, objectives, time and prerequisites of the running lesson, then a folded
    report of the machine and the JAX release, so every timing below has its source.
    Plots from here on render as SVG (:func:`plots_as_svg`)."""
    plots_as_svg()
    item = running_lesson(slug)
    meta = item.meta
    minutes = f"{meta.minutes.teaching} min teaching · {meta.minutes.exercises} min exercises"
    needs = f"<p>{code_spans(meta.needs_sockets)}</p>" if meta.needs_sockets else ""
    machine_markup, machine_text = _machine_box()
    release_markup, release_text = _release_line(load_course().root)
    parts = [
        _box("question", "Questions", _items(meta.questions)),
        _box("abstract", "Objectives", _items(meta.objectives)),
        _box(
            "info",
            "Time and prerequisites",
            f"<p>{html.escape(minutes)}</p>" + needs + _prerequisites(item),
        ),
        release_markup,
        machine_markup,
    ]
    text = f"{item.label} ({minutes})\n{release_text}\n{machine_text}"
    if meta.needs_sockets:
        text += f"\n{meta.needs_sockets}"
    return _Html("".join(parts), text)


def _next_lesson(item: Lesson) -> Lesson | None:
    ordered = load_course().lessons
    return ordered[item.position + 1] if item.position + 1 < len(ordered) else None


def outro(slug: str | None = None) -> _Html:
    """Key points, the exercise to do next, and a link to the next lesson."""
    item = running_lesson(slug)
    parts = [_box("success", "Key points", _items(item.meta.keypoints))]
    text = [f"Key points of {item.label}: " + "; ".join(item.meta.keypoints)]
    if item.exercise is not None:
        stem = item.exercise.stem
        parts.append(
            _box(
                "example",
                "Exercise",
                f'<p>Open <a href="../../exercises/{stem}/"><code>exercises/{stem}.py</code>'
                f"</a>, solve it, then run <code>jitlab check {item.number}</code> "
                f"(<code>jitlab hint {item.number}</code> when stuck).</p>",
            )
        )
        text.append(f"Exercise: exercises/{stem}.py  (jitlab check {item.number})")
    following = _next_lesson(item)
    if following is not None:
        parts.append(
            f'<p><a href="../{following.stem}/">Next lesson: '
            f"{html.escape(following.label)} →</a></p>"
        )
        text.append(f"Next: lessons/{following.stem}.py")
    return _Html("".join(parts), "\n".join(text))
