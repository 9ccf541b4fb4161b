"""``jitlab doctor [--max-compiles NAME=N ...] [--json FILE] [--html FILE] -- python train.py``

The program may also follow the options without ``--``, with or without ``python``:
``jitlab doctor train.py args``, ``jitlab doctor -m pkg.train args``.

Exit codes: the program's own when it fails (1 for an uncaught exception, its
``sys.exit`` code, 130 for Ctrl-C); otherwise 1 when a budget is exceeded or names a
function that never ran, 0 when all is well; 2 for bad input (no such script or module,
a malformed budget or ``[tool.jitlab.doctor]`` in pyproject.toml, an HTML report that
cannot be written).

Budgets also come from ``[tool.jitlab.doctor]`` in the project's ``pyproject.toml``
(:mod:`jitlab.doctor.config`); ``--max-compiles`` replaces the file's budget for a name.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from jitlab.doctor import budgets as budgets_mod
from jitlab.doctor import config as config_mod
from jitlab.doctor import processes
from jitlab.doctor import run as run_mod
from jitlab.doctor.session import watch

OK, FAIL, BAD_INPUT, INTERRUPTED = 0, 1, 2, 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jitlab doctor",
        usage=USAGE,
        allow_abbrev=False,  # _split must know every option word the parser accepts
        description=(
            "Run a JAX program and report which jitted functions traced and compiled, why "
            "each recompilation happened, where, what it cost, and the lesson that fixes it."
        ),
        epilog="example: jitlab doctor --max-compiles train_step=1 -- python train.py",
    )
    parser.add_argument(
        "--max-compiles",
        action="append",
        default=[],
        metavar="NAME=N",
        help="fail (exit 1) if a function named NAME compiles more than N times; NAME may be "
        "a pattern such as 'train_*' or '*'; repeatable",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="also write the report as one self-contained HTML page to FILE",
    )
    parser.add_argument(
        "--timelines",
        type=int,
        default=3,
        metavar="N",
        help="draw the cache-key timeline for the N worst functions (default 3)",
    )
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="the program: python script.py [args], or python -m module [args]",
    )
    return parser


USAGE = (
    "jitlab doctor [--max-compiles NAME=N ...] [--json FILE] [--html FILE] [--timelines N] "
    "[--] [python] script.py [args] | -m module [args]\n"
    "       jitlab doctor --merge REPORT.p0.json REPORT.p1.json ..."
)
_TAKES_VALUE = ("--max-compiles", "--json", "--html", "--timelines")


def _split(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """The doctor's options, and the program's words (None when there are none).

    The program starts at ``--``, at ``-m``, or at the first word that is not one of the
    doctor's options; a ``--`` after that belongs to the program. Any other word that
    starts with ``-`` stays with the options, for the parser to refuse."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in _TAKES_VALUE:
            i += 2
        elif word.split("=", 1)[0] in _TAKES_VALUE or word in ("-h", "--help"):
            i += 1
        elif word.startswith("-") and word not in ("--", "-m"):
            i += 1  # not ours: the parser says so
        else:
            break
    if i >= len(argv):
        return argv, None
    if argv[i] == "--":
        return argv[:i], argv[i + 1 :]
    return argv[:i], argv[i:]


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def merge_main(paths: Sequence[str]) -> int:
    """``jitlab doctor --merge report.p0.json report.p1.json ...``: 1 on a divergence."""
    from jitlab.doctor import merge

    try:
        reports = merge.load(list(paths))
    except merge.MergeError as err:
        _say(f"jitlab doctor: {err}")
        return BAD_INPUT
    print(merge.render(reports), flush=True)
    return FAIL if merge.divergences(reports) else OK


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--merge"]:
        return merge_main(argv[1:])
    options, command = _split(argv)
    parser = _parser()
    try:
        args = parser.parse_args(options)
    except SystemExit as done:  # --help, or an unknown option
        return OK if done.code == 0 else BAD_INPUT
    words = command if command is not None else args.command
    try:
        budgets = [budgets_mod.parse(text) for text in args.max_compiles]
        # [tool.jitlab.doctor] in the project's pyproject.toml; the command line wins
        pyproject = config_mod.find_pyproject()
        budgets = config_mod.merged(config_mod.load(pyproject), budgets)
        target = run_mod.parse_command(words)
    except ValueError as err:
        _say(f"jitlab doctor: {err}")
        return BAD_INPUT
    for kind, path in (("JSON", args.json), ("HTML", args.html)):
        if path and (Path(path).is_dir() or not Path(path).resolve().parent.is_dir()):
            what = "it is a folder" if Path(path).is_dir() else "its folder does not exist"
            _say(f"jitlab doctor: cannot write the {kind} report to {path}: {what}")
            return BAD_INPUT  # said before the program runs, not after
    # written where the command line meant, even if the program changes its folder
    args.json = str(Path(args.json).resolve()) if args.json else args.json
    args.html = str(Path(args.html).resolve()) if args.html else args.html

    with watch(budgets, command=target.words()) as doctor:
        doctor.project = pyproject.parent if pyproject is not None else None
        # --json: the report is kept up to date as the program runs (one file per process
        # under jax.distributed), so a process that dies leaves a partial one
        keeper = (
            processes.ProcessRecorder(args.json, target.words(), budgets) if args.json else None
        )
        if keeper is not None:
            keeper.start()
        try:
            outcome = run_mod.run(target)
        finally:
            if keeper is not None:
                keeper.stop()
    sys.stdout.flush()

    previous = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not eat the report
    except ValueError:  # not in the main thread
        previous = None
    try:
        report = doctor.report()
        report.interrupted = outcome.interrupted
        if outcome.error is not None and not outcome.interrupted:
            report.program_failed = f"{type(outcome.error).__name__}: {outcome.error}"
        code = outcome.exit_code
        if code == OK and not report.budgets_passed:
            code = FAIL
        report.exit_code = code
        _say("")
        _say(report.text(timelines=args.timelines))
        json_failed = keeper is not None and keeper.write(partial=False, report=report) is None
        if json_failed:
            _say(f"jitlab doctor: cannot write the JSON report to {keeper.write_errors[-1]}")
        html_failed = bool(args.html) and not _write_html(report, args.html)
        if html_failed or json_failed:
            code = BAD_INPUT
        if outcome.interrupted:
            _say("KeyboardInterrupt")
        elif outcome.error is not None:
            _say("")
            _say("The program failed:")
            run_mod.print_traceback(outcome.error)
        if code != OK:
            why = " (cannot write the HTML report)" if html_failed else _why(report, outcome)
            why = " (cannot write the JSON report)" if json_failed else why
            _say(f"jitlab doctor: exit code {code}{why}")
        return code
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _write_html(report, path: str) -> bool:
    from jitlab.doctor import html

    try:
        html.write(report.to_dict(), path)
    except OSError as err:
        _say(f"jitlab doctor: cannot write the HTML report to {path}: {err.strerror or err}")
        return False
    return True


def _why(report, outcome: run_mod.Outcome) -> str:
    if outcome.interrupted:
        return " (interrupted)"
    if outcome.error is not None:
        return " (the program raised an exception)"
    if outcome.exit_code:
        return " (the program's own exit code)"
    broken = [str(v.budget) for v in report.verdicts if not v.passed]
    return f" (budget: {', '.join(broken)})" if broken else ""
