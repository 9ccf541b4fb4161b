"""``jitlab``: the learner's runner, in the manner of rustlings.

Learner verbs: ``list``, ``check``, ``hint``, ``reset``, ``watch``, ``env``,
``preflight`` and ``doctor``. Course maintainers' commands live under ``jitlab dev``.

Exit codes: 0 pass, 1 fail, 2 bad input (an unknown exercise, a file that is not an
exercise, a course file that does not load).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jitlab.course.manifest import Course, Exercise, load_course
from jitlab.course.metadata import CourseError
from jitlab.learner import DEFAULT_CELL_TIMEOUT_S, progress

if TYPE_CHECKING:
    from jitlab.notebooks.spare_kernel import SpareKernel

PASS, FAIL, BAD_INPUT = 0, 1, 2


def _say(text: str = "") -> None:
    print(text, flush=True)


def _color() -> bool:
    return (
        sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    )


def _width() -> int:
    return max(60, min(shutil.get_terminal_size((80, 24)).columns, 100))


def _known(course: Course) -> str:
    return "\n".join(f"  {e.number}  {e.slug}" for e in course.exercises) or "  (none)"


def _resolve(course: Course, name: str, verb: str = "check") -> Exercise | None:
    """The exercise a learner means: "01", "1", "shapes", "01_shapes" or a file path;
    for a name that is none of them, the one it is closest to is suggested."""
    candidate = Path(name)
    if candidate.suffix and candidate.suffix != ".py":
        _say(
            f"{name}: jitlab checks the exercises' .py files (Jupytext keeps the notebook "
            f"and the .py in step). Run `jitlab check {candidate.stem}` instead."
        )
        return None
    found = course.find_exercise(candidate.stem if candidate.suffix else name)
    if found is None:
        close = difflib.get_close_matches(
            candidate.stem if candidate.suffix else name,
            [key for e in course.exercises for key in (e.slug, e.stem)],
            n=1,
            cutoff=0.6,
        )
        guess = ""
        if close:
            slug = close[0].split("_", 1)[-1] if close[0][:2].isdigit() else close[0]
            guess = f" Did you mean `jitlab {verb} {slug}`?"
        _say(f"no exercise {name!r}.{guess} The exercises are:\n{_known(course)}")
    return found


def _target_path(exercise: Exercise, name: str) -> Path:
    candidate = Path(name)
    if candidate.suffix == ".py":
        if not candidate.exists():
            raise FileNotFoundError(name)
        return candidate.resolve()
    return exercise.learner_copy


def _fit(line: str, width: int) -> str:
    """``line`` cut at a word boundary with "…" when it is wider than the terminal."""
    if len(line) <= width:
        return line
    return line[: width - 2].rsplit(" ", 1)[0] + " …"


# ---------------------------------------------------------------------- verbs


def cmd_list(args: argparse.Namespace, course: Course) -> int:
    rows = []
    for exercise in course.exercises:
        state = progress.status(exercise)
        rows.append(
            {
                "number": exercise.number,
                "slug": exercise.slug,
                "title": exercise.title,
                "status": state.value,
                "hints_shown": progress.hints_shown(exercise),
            }
        )
    done = sum(row["status"] == progress.Status.DONE.value for row in rows)
    if args.json:
        _say(json.dumps({"done": done, "total": len(rows), "exercises": rows}, indent=1))
        return PASS
    # A title is cut only to fit a terminal's own width (never at the verdicts' 100
    # columns), and never in a pipe or a file.
    width = shutil.get_terminal_size((80, 24)).columns if sys.stdout.isatty() else None
    for row in rows:
        mark = {"done": "done", "not done": "    "}.get(row["status"], "edit")
        line = f"  [{mark}] {row['number']} {row['slug']:<24} {row['title']}"
        _say(_fit(line, width) if width else line)
        if row["status"] == progress.Status.CHANGED.value:
            _say(f"         changed since it passed: `jitlab check {row['number']}` again")
    filled = round(30 * done / len(rows)) if rows else 0
    _say(f"\n[{'#' * filled}{'.' * (30 - filled)}] {done}/{len(rows)} exercises done")
    return PASS


def _next_step(course: Course, exercise: Exercise) -> str:
    position = course.lesson(exercise.slug).position
    if position + 1 < len(course.lessons):
        following = course.lessons[position + 1]
        step = f"Next: lesson {following.label} (lessons/{following.stem}.py)"
        if following.exercise is not None:
            step += f", then `jitlab check {following.number}`"
        return step + "."
    return "That was the last exercise of the course. Well done."


# Imported by a pytest process (the course's tests call ``main`` directly): a check then
# runs pytest in a subprocess. Decided once, at import, since the runner itself imports
# pytest for its first in-process check and ``watch`` goes on checking after it.
_UNDER_PYTEST = "pytest" in sys.modules


def cmd_check(args: argparse.Namespace, course: Course) -> int:
    exercise = _resolve(course, args.exercise)
    if exercise is None:
        return BAD_INPUT
    try:
        path = _target_path(exercise, args.exercise)
    except FileNotFoundError:
        _say(f"no file {args.exercise}")
        return BAD_INPUT
    return _check(course, exercise, path, args.timeout)


def _early_kernel(path: Path) -> SpareKernel | None:
    """A kernel for ``path`` started now, to be adopted by its check (see
    :mod:`jitlab.notebooks.spare_kernel`); None inside a pytest process of our own, where
    the check runs pytest in a subprocess (a nested pytest would share plugins)."""
    from jitlab.notebooks import spare_kernel

    if _UNDER_PYTEST or not spare_kernel.available():
        return None
    return spare_kernel.start(path.resolve())


def _check(
    course: Course, exercise: Exercise, path: Path, timeout: int, ready: SpareKernel | None = None
) -> int:
    """Check ``path`` (``exercise``'s copy, or a file named on the command line), print
    the verdict, and record a pass of the learner's copy. ``ready``: a kernel `watch`
    started for the next check while the learner edited, used if it is for ``path``."""
    _say(f"checking {path.name} ...")
    # The kernel starts first, while this process imports and reads the file (side by
    # side on two cores); it is stopped here whether or not nbval adopted it.
    kernel = ready
    if kernel is None or kernel.notebook != str(path.resolve()):
        if kernel is not None:
            kernel.stop()
        kernel = _early_kernel(path)
    try:
        from jitlab.grading.verdict import format_verdict
        from jitlab.learner.check import check_file

        mine = path.resolve() == exercise.learner_copy.resolve()
        on_part = (lambda part: progress.set_current_part(exercise, part)) if mine else None
        verdict = check_file(
            path,
            course=course,
            cell_timeout_s=timeout,
            in_process=not _UNDER_PYTEST,
            kernel=kernel,
            on_part=on_part,
        )
    finally:
        if kernel is not None:
            kernel.stop()
    if verdict.passed:
        verdict = dataclasses.replace(verdict, next_step=_next_step(course, exercise))
    _say(format_verdict(verdict, width=_width(), color=_color()))
    if verdict.passed:
        if mine:
            progress.mark_passed(exercise)
        return PASS
    if verdict.kind in ("crash", "timeout", "incomplete", "died"):
        _say(f"(stuck? `jitlab hint {exercise.number}`)")
    return FAIL


def cmd_hint(args: argparse.Namespace, course: Course) -> int:
    from jitlab.learner import parts

    exercise = _resolve(course, args.exercise, verb="hint")
    if exercise is None:
        return BAD_INPUT
    found = parts.parts(exercise)
    if args.part is not None:
        part = parts.resolve_part(exercise, args.part)
        if part is None:
            names = ", ".join(p.label for p in found) or "part 1"
            _say(f"{exercise.stem} has no part {args.part!r}; its parts: {names}")
            return BAD_INPUT
    else:
        on = min(progress.current_part(exercise), max(len(found), 1))
        part = found[on - 1] if found else parts.Part(1, ())
    hints = [hint for _, hint in parts.hints_for(exercise, part.number)]
    for_what = exercise.stem + (f", {part.label}" if len(found) > 1 else "")
    shown = progress.hints_shown_in(exercise, part.number)
    width = _width()
    if shown >= len(hints):
        _say(f"That was the last hint for {for_what} ({len(hints)} of {len(hints)}):")
        for number, hint in enumerate(hints, start=1):
            _say(
                textwrap.fill(
                    hint, width, initial_indent=f"  {number}. ", subsequent_indent="     "
                )
            )
    else:
        _say(f"Hint {shown + 1} of {len(hints)} for {for_what}:")
        _say(textwrap.fill(hints[shown], width, initial_indent="  ", subsequent_indent="  "))
        progress.set_hints_shown(exercise, shown + 1, part.number)
    others = [p for p in found if p.number != part.number]
    if others:
        _say(
            "(for another part: "
            + ", ".join(f"`jitlab hint {exercise.number} {p.number}`" for p in others)
            + ")"
        )
    return PASS


def cmd_reset(args: argparse.Namespace, course: Course) -> int:
    from jitlab.course.exercise_source import generated_text

    exercise = _resolve(course, args.exercise, verb="reset")
    if exercise is None:
        return BAD_INPUT
    if args.grader_cells:
        from jitlab.learner.check import restore_grader_cells

        copy = exercise.learner_copy
        mine = copy.read_text(encoding="utf-8") if copy.exists() else ""
        restored = restore_grader_cells(mine, generated_text(exercise))
        if restored == mine:
            _say(f"exercises/{copy.name}: the grader cells are already as they were")
            return PASS
        copy.write_text(restored, encoding="utf-8")
        _say(
            f"exercises/{copy.name}: the grader cells are back as they were; your code above "
            "them is kept (cells you had added below them now stand above them)"
        )
        return PASS
    if not args.yes:
        if not sys.stdin.isatty():
            _say("refusing to reset without a terminal to ask; pass --yes to confirm")
            return BAD_INPUT
        answer = input(
            f"Reset {exercise.learner_copy.name} to its original state? "
            "Your changes are lost. [y/N] "
        )
        if answer.strip().lower() not in ("y", "yes"):
            _say("not reset")
            return PASS
    exercise.learner_copy.write_text(generated_text(exercise), encoding="utf-8")
    progress.forget(exercise)
    _say(f"exercises/{exercise.learner_copy.name} is back to its original state")
    return PASS


def _first_not_done(course: Course) -> Exercise | None:
    return next(
        (e for e in course.exercises if progress.status(e) is not progress.Status.DONE), None
    )


def cmd_watch(args: argparse.Namespace, course: Course) -> int:
    """Check the exercise the learner is on, then every exercise file they save: after a
    pass, the next one not done becomes the one they are on. A file named on the command
    line outside ``exercises/`` is the only one watched."""
    from watchfiles import watch

    if args.exercise:
        exercise = _resolve(course, args.exercise, verb="watch")
        if exercise is None:
            return BAD_INPUT
        try:
            path = _target_path(exercise, args.exercise).resolve()
        except FileNotFoundError:
            _say(f"no file {args.exercise}")
            return BAD_INPUT
    else:
        exercise = _first_not_done(course)
        if exercise is None:
            _say("every exercise is done")
            return PASS
        path = exercise.learner_copy.resolve()
    copies = {e.learner_copy.resolve(): e for e in course.exercises}
    watched = copies if path in copies else {path: exercise}
    folders = sorted({p.parent for p in watched})

    def content(p: Path) -> bytes:
        return p.read_bytes() if p.exists() else b""

    seen = {p: content(p) for p in watched}
    where = "exercises/" if path in copies else path.name
    _say(f"watching {where}: save an exercise to check it (Ctrl-C to stop)")
    checking, checks, ready = False, 0, None
    try:
        # A change is noticed by its content, looked at after every file event and every
        # half second, so a save made while a check was running is never missed.
        for _ in watch(*folders, rust_timeout=500, yield_on_timeout=True):
            changed = [p for p in watched if content(p) != seen[p]] if checks else [path]
            for saved in changed:
                seen[saved] = content(saved)
                if checks:
                    _say("\n" + "-" * 60)
                checking, checks = True, checks + 1
                code = _check(course, watched[saved], saved, args.timeout, ready)
                checking, following = False, saved
                if code == PASS and saved in copies:
                    upcoming = _first_not_done(course)
                    _say(
                        "\nevery exercise is done"
                        if upcoming is None
                        else f"\nwatching on: save exercises/{upcoming.learner_copy.name} next"
                    )
                    following = upcoming.learner_copy.resolve() if upcoming else saved
                # The next check's kernel starts now, while the learner reads and edits: a
                # fresh one each time, so every check runs in a new kernel.
                ready = _early_kernel(following)
    except KeyboardInterrupt:
        if checking:  # the check did not finish: no verdict, and nothing was recorded
            _say("\ninterrupted: your files and progress are as they were")
        _say("\nstopped watching")
    finally:
        if ready is not None:
            ready.stop()
    return PASS


def cmd_env(args: argparse.Namespace, course: Course) -> int:
    from jitlab.instruments.environment import print_environment

    print_environment()
    return PASS


def cmd_preflight(args: argparse.Namespace, course: Course) -> int:
    from jitlab.learner.preflight import run_preflight

    return run_preflight(course, echo=_say)


def cmd_doctor(rest: Sequence[str]) -> int:
    """``jitlab doctor ...``: the doctor's own command line, unchanged. It runs the
    learner's own program, anywhere, so it does not need the course's files to load."""
    from jitlab.doctor import main as doctor_main

    return doctor_main(list(rest))


# ---------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jitlab",
        description="Exercises on why jax.jit compiles again, with verdicts.",
        epilog="Course maintainers: `jitlab dev --help` (verify, bench, matrix, ...).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")

    listing = sub.add_parser("list", help="every exercise, done or not, and your progress")
    listing.add_argument("--json", action="store_true", help="for instructors collecting it")

    def with_timeout(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--timeout",
            type=int,
            default=DEFAULT_CELL_TIMEOUT_S,
            help=f"seconds one cell may run (default {DEFAULT_CELL_TIMEOUT_S})",
        )

    check = sub.add_parser("check", help="run an exercise's graders and print a verdict")
    check.add_argument("exercise", help='"01", "shapes", "01_shapes" or a path to a .py file')
    with_timeout(check)

    hint = sub.add_parser("hint", help="the next hint for an exercise")
    hint.add_argument("exercise")
    hint.add_argument(
        "part",
        nargs="?",
        help="for an exercise in parts: the part's number or function "
        "(default: the part your last check stopped at)",
    )

    reset = sub.add_parser("reset", help="restore an exercise to its original state")
    reset.add_argument("exercise")
    reset.add_argument("--yes", action="store_true", help="do not ask")
    reset.add_argument(
        "--grader-cells",
        action="store_true",
        help="put back only the grader cells (and what follows them); keep your code",
    )

    watch = sub.add_parser("watch", help="re-check an exercise every time it is saved")
    watch.add_argument("exercise", nargs="?", help="default: the first one not done")
    with_timeout(watch)

    sub.add_parser("env", help="the environment report")
    sub.add_parser("preflight", help="is this machine ready for the course? (under a minute)")

    # Both hand the rest of the command line to a parser of their own (see PASS_THROUGH):
    # listed here for `jitlab --help` only.
    sub.add_parser(
        "doctor",
        help="find and explain recompilations in your own program "
        "(jitlab doctor -- python train.py)",
        add_help=False,
    )
    sub.add_parser("dev", help="course maintainers' commands", add_help=False)
    return parser


COMMANDS = {
    "list": cmd_list,
    "check": cmd_check,
    "hint": cmd_hint,
    "reset": cmd_reset,
    "watch": cmd_watch,
    "env": cmd_env,
    "preflight": cmd_preflight,
}

# Commands whose arguments go, untouched, to a parser of their own. argparse cannot pass
# them through: a REMAINDER positional drops an option that comes first (`jitlab doctor
# --help` and `jitlab doctor --max-compiles f=1 -- ...` were "unrecognized arguments").
PASS_THROUGH = ("doctor",)  # and "dev", which jitlab/cli.py sends on before this


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["doctor"]:
        return cmd_doctor(argv[1:])
    if argv[:1] and argv[0] in PASS_THROUGH:
        args = argparse.Namespace(command=argv[0], rest=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    try:
        course = load_course()
        return COMMANDS[args.command](args, course)
    except CourseError as err:
        _say(f"the course's files do not load: {err}")
        return BAD_INPUT
    except KeyboardInterrupt:
        _say("\ninterrupted: nothing was checked, and your files and progress are as they were")
        return FAIL
    except BrokenPipeError:
        # `jitlab list | head`: the reader left; end quietly instead of with a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return PASS


def command() -> None:
    """The ``jitlab`` command: :func:`main`, then, once a check ran pytest in this
    process, an exit that skips Python's teardown of every module. Its signal handlers
    go back to the default there, so a second Ctrl-C that stops `watch` would end it by
    SIGINT (-2; seen). By then the verdict is printed and the kernel stopped; the output
    streams are flushed here."""
    code = main()
    if "pytest" in sys.modules:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    command()
