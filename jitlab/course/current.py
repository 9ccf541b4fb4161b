"""Which lesson is running: so that no lesson has to spell its own number.

``jitlab.intro()``, ``jitlab.outro()`` and ``jitlab.record(...)`` are called from inside
a lesson's kernel, which does not know the file it came from. Each place that runs a
lesson says so in its own way, and this module asks them in turn:

1. ``$JITLAB_NOTEBOOK``: set by the course's notebook pipeline (tests, site, bench,
   runner) for each kernel it starts;
2. ``$JPY_SESSION_NAME``: set by Jupyter Server (JupyterLab, Notebook) for a kernel
   started for a notebook;
3. ``__vsc_ipynb_file__``: set by VS Code's Jupyter extension in the kernel's namespace;
4. the ``__main__`` module's file, when a lesson runs as a plain script.

The first answer that names a lesson of the course wins, and ``intro()`` remembers it
for the rest of the kernel's life.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jitlab.course.manifest import Lesson, load_course
from jitlab.instruments.measurements import NOTEBOOK_ENV

_current: Lesson | None = None


def _candidates() -> list[str]:
    found = [os.environ.get(NOTEBOOK_ENV, ""), os.environ.get("JPY_SESSION_NAME", "")]
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:  # a plain Python process
        shell = None
    if shell is not None:
        found.append(str(shell.user_ns.get("__vsc_ipynb_file__", "")))
    found.append(str(getattr(sys.modules.get("__main__"), "__file__", "") or ""))
    return [name for name in found if name]


def running_lesson(slug: str | None = None) -> Lesson:
    """The lesson this code runs in (or the one named by ``slug``)."""
    global _current
    course = load_course()
    if slug is not None:
        _current = course.lesson(slug)
        return _current
    if _current is not None:
        return _current
    for name in _candidates():
        found = course.lesson_for_path(Path(name))
        if found is not None:
            _current = found
            return found
    raise LookupError(
        "cannot tell which lesson this is (the notebook's file name is not a lesson's); "
        "name it: jitlab.intro('shapes')"
    )
