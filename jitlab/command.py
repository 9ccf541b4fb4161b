"""The ``jitlab`` command's entry point: ``jitlab doctor`` needs JAX alone, every other verb
needs the course.

A team installs the package into its own project for the doctor and the pytest plugin
(``pip install jitlab``: JAX is its only requirement). The learner's runner (``jitlab
check``, ``list``, ``watch``, ...) and the maintainers' ``jitlab dev`` read the course's
files and run notebooks, which needs the ``course`` extra (YAML, Jupytext, nbval, a
kernel). Without it, they say so in one line instead of a traceback.
"""

from __future__ import annotations

import sys

BAD_INPUT = 2
INSTALL_HINT = "pip install 'jitlab[course]' (or `make setup` in the course's folder)"


def missing_course_extra(verb: str, err: ModuleNotFoundError) -> str:
    """The one line a light install prints for a verb that needs the course extra."""
    return (
        f"jitlab {verb}: needs the course's extra (no module named {err.name!r}): "
        f"{INSTALL_HINT}; `jitlab doctor` works without it"
    )


def command() -> None:
    """``jitlab ...``: the doctor directly, everything else through the learner's runner."""
    argv = sys.argv[1:]
    if argv[:1] == ["doctor"]:
        from jitlab.doctor.cli import main

        raise SystemExit(main(argv[1:]))
    try:
        from jitlab.learner import cli
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] == "jitlab":
            raise
        verb = next((word for word in argv if not word.startswith("-")), "")
        print(missing_course_extra(verb or "(the runner)", err), file=sys.stderr)
        raise SystemExit(BAD_INPUT) from None
    cli.command()


if __name__ == "__main__":
    command()
