"""The ``jitlab`` command: the learner's verbs, and ``jitlab dev`` for maintainers.

The entry point sits above both command lines so that neither imports the other: the
learner's runner (:mod:`jitlab.learner.cli`) knows nothing of the maintainer's tools,
and ``jitlab dev ...`` goes, untouched, to :mod:`jitlab.maintainer.cli`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

MAINTAINERS = "dev"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``jitlab`` with ``argv`` (default: the command line) and return its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [MAINTAINERS]:
        from jitlab.maintainer.cli import main as dev_main

        return dev_main(argv[1:])
    from jitlab.learner.cli import main as learner_main

    return learner_main(argv)


def command() -> None:
    """The console script: maintainers' commands, or the learner's ``command`` (which
    ends the process its own, faster, way after a check)."""
    if sys.argv[1:2] == [MAINTAINERS]:
        raise SystemExit(main())
    from jitlab.learner.cli import command as learner_command

    learner_command()


if __name__ == "__main__":
    command()
