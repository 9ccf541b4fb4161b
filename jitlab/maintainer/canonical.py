"""``jitlab dev canonical``: write every lesson and exercise source the way JupyterLab
saves it, so that opening one in JupyterLab and saving it changes nothing.

Jupytext writes a notebook's YAML header in its own form (sorted keys, its line
breaks) and stamps the kernel JupyterLab ran. A file in any other form would be
rewritten on the learner's first save: git noise, and merge conflicts when they pull.
This command saves each source once through Jupytext's contents manager, with the
repository's ``jupytext.toml`` and the kernel a fresh ``make setup`` gives, which is
exactly what a learner's save does; ``tests/course/test_jupyter_roundtrip.py`` checks
that a second save is byte-identical.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from jitlab.course.manifest import Course

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {"name": "python"}


def save_as_jupyterlab_does(root: Path, relative: str) -> bool:
    """Open ``relative`` (under ``root``) and save it through Jupytext's contents manager
    with the course's kernel; True if the file changed."""
    from jupytext import TextFileContentsManager

    manager = TextFileContentsManager(root_dir=str(root))
    before = (root / relative).read_bytes()
    model = manager.get(relative, content=True, type="notebook")
    notebook = model["content"]
    notebook.metadata["kernelspec"] = dict(KERNELSPEC)
    notebook.metadata["language_info"] = dict(LANGUAGE_INFO)
    manager.save({"type": "notebook", "format": "json", "content": notebook}, relative)
    return (root / relative).read_bytes() != before


def notebook_sources(course: Course) -> list[Path]:
    sources = [item.path for item in course.lessons]
    return sources + [e.source for e in course.exercises]


def canonicalize(course: Course, echo: Callable[[str], None] = print) -> int:
    from jitlab.course.exercise_source import write_learner_copies

    changed = 0
    for path in notebook_sources(course):
        relative = path.relative_to(course.root).as_posix()
        if save_as_jupyterlab_does(course.root, relative):
            changed += 1
            echo(f"  rewrote {relative}")
    written, kept = write_learner_copies(course)
    for path in kept:
        echo(f"  left exercises/{path.name} alone: it holds edits (`jitlab dev exercises`)")
    echo(f"{changed} source(s) rewritten, {len(written)} learner copies regenerated")
    return 0
