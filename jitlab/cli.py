"""The ``jitlab`` command: the doctor, the learner's verbs, and ``jitlab dev``.

The entry point sits above every command line so that none imports another: ``jitlab
doctor`` goes to :mod:`jitlab.doctor.cli` and needs JAX alone (a team installs the package
into its own project for the doctor and the pytest plugin); the learner's runner
(:mod:`jitlab.learner.cli`) and ``jitlab dev`` (:mod:`jitlab.maintainer.cli`) read the
course's files and run notebooks, which needs the ``course`` extra. Without it, they say
so in one line instead of a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

MAINTAINERS = "dev"
DOCTOR = "doctor"
BAD_INPUT = 2
INSTALL_HINT = "pip install 'jitlab[course]' (or `make setup` in the course's folder)"


def missing_course_extra(verb: str, err: ModuleNotFoundError) -> str:
    """The one line a light install prints for a verb that needs the course extra."""
    return (
        f"jitlab {verb}: needs the course's extra (no module named {err.name!r}): "
        f"{INSTALL_HINT}; `jitlab doctor` works without it"
    )


def _load(argv: Sequence[str], load: Callable[[], Any]) -> Any:
    """Import a command line that needs the course extra, or say in one line it is missing."""
    try:
        return load()
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] == "jitlab":
            raise
        verb = next((word for word in argv if not word.startswith("-")), "")
        print(missing_course_extra(verb or "(the runner)", err), file=sys.stderr)
        raise SystemExit(BAD_INPUT) from None


def _maintainer() -> Any:
    from jitlab.maintainer import cli

    return cli


def _learner() -> Any:
    from jitlab.learner import cli

    return cli


HELP = ("-h", "--help", "help")


def light_help(err: ModuleNotFoundError) -> str:
    """``jitlab --help`` where the course's extra is missing: what this install can do."""
    return (
        "usage: jitlab doctor [options] -- python PROGRAM [ARGS ...]\n\n"
        "What this install can do (the doctor needs JAX alone):\n"
        "  jitlab doctor -- python train.py   find and explain every recompilation of your\n"
        "                                     jitted functions (jitlab doctor --help)\n"
        "  pytest --jitlab                    the same for a test session, with budgets:\n"
        "                                     @pytest.mark.max_compiles(train_step=1)\n"
        "  import jitlab.doctor               watch(), no_recompiles(), record_process()\n"
        "  %load_ext jitlab                   the %%jitlab_doctor cell magic in a notebook\n\n"
        "The course's own commands (list, check, hint, reset, watch, env, preflight, dev)\n"
        f"need its extra (no module named {err.name!r} here): {INSTALL_HINT}.\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``jitlab`` with ``argv`` (default: the command line) and return its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [DOCTOR]:
        from jitlab.doctor.cli import main as doctor_main

        return doctor_main(argv[1:])
    if not argv or argv[:1] in ([h] for h in HELP):
        try:
            _learner()
        except ModuleNotFoundError as err:
            if (err.name or "").split(".")[0] == "jitlab":
                raise
            print(light_help(err), end="")
            return 0 if argv else BAD_INPUT
        argv = argv if argv[:1] != ["help"] else ["--help"]
    if argv[:1] == [MAINTAINERS]:
        return _load(argv, _maintainer).main(argv[1:])
    return _load(argv, _learner).main(argv)


def command() -> None:
    """The console script. The learner's verbs end through the learner's ``command``,
    which ends the process its own, faster, way after a check."""
    argv = sys.argv[1:]
    if argv[:1] in ([DOCTOR], [MAINTAINERS]) or not argv or argv[0] in HELP:
        raise SystemExit(main(argv))
    _load(argv, _learner).command()


if __name__ == "__main__":
    command()
