"""The learner's side of the fixture course, for the runner's tests: a solved or edited
copy of the ``doubling`` exercise, a CLI call, a ``jitlab watch`` in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from jitlab.learner import cli

SOLVED = "    return x * 2\n"
GRADER = '# %% tags=["grader"]'


def run(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


def learner_copy(course):
    return course.lesson("doubling").exercise.learner_copy


def write_answer(course, body: str, *, before: str = "", after_import: str = "") -> str:
    """The learner's copy with ``double``'s stub replaced by ``body``; ``before`` goes
    just above the grader cell, ``after_import`` just after ``import jax``."""
    copy = learner_copy(course)
    text = copy.read_text().replace("    raise NotImplementedError\n", body)
    if after_import:
        text = text.replace("import jax\n", "import jax\n" + after_import, 1)
    if before:
        text = text.replace(GRADER, before + "\n" + GRADER, 1)
    copy.write_text(text)
    return text


def start_watch(*argv: str) -> subprocess.Popen:
    """``jitlab watch 01`` (or with ``argv``) in its own process, its output unbuffered
    on one pipe."""
    return subprocess.Popen(
        [sys.executable, "-m", "jitlab.learner.cli", "watch", *(argv or ("01",))],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=ctrl_c_as_usual,
    )


def ctrl_c_as_usual() -> None:
    """In a child: Ctrl-C's default action, even when the tests were started with it
    ignored (a shell's background job): Python then raises KeyboardInterrupt on it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
