"""``jitlab``: the learner's runner, in the manner of rustlings.

Exit codes: 0 pass, 1 fail, 2 bad input (an unknown exercise, a missing file).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jupytext

from jitlab import course, progress
from jitlab.runner import DEFAULT_CELL_TIMEOUT_S, format_verdict, grader_cells, run_notebook

PASS, FAIL, BAD_INPUT = 0, 1, 2


def _say(text: str = "") -> None:
    print(text, flush=True)


def _known_exercises() -> str:
    return "\n".join(f"  {p.stem}" for p in course.exercise_paths()) or "  (none)"


def _resolve(name: str) -> Path | None:
    found = course.find_exercise(name)
    if found is None:
        candidate = Path(name)
        if candidate.suffix == ".py" and candidate.exists():
            return candidate.resolve()
        _say(f"no exercise {name}. The exercises are:\n{_known_exercises()}")
    return found


def _progress_bar(done: int, total: int, width: int = 30) -> str:
    filled = round(width * done / total) if total else 0
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"


def cmd_list(_: argparse.Namespace) -> int:
    paths = course.exercise_paths()
    done = 0
    for path in paths:
        finished = progress.is_done(path)
        done += finished
        title = course.header_metadata(path).get("title", "")
        _say(f"  {'done    ' if finished else 'not done'}  {path.stem:<32} {title}")
    _say(f"\n{_progress_bar(done, len(paths))} exercises done")
    return PASS


def cmd_check(args: argparse.Namespace) -> int:
    path = _resolve(args.exercise)
    if path is None:
        return BAD_INPUT
    _say(f"checking {path.name} ...")
    verdict = run_notebook(path, cell_timeout_s=args.timeout)
    _say(format_verdict(verdict))
    if verdict.passed:
        if path.parent == course.EXERCISES:
            progress.mark_passed(path)
        return PASS
    if not verdict.syntax_error and verdict.failed_check is None:
        _say(f"(stuck? `jitlab hint {path.stem[:2]}`)")
    return FAIL


def cmd_hint(args: argparse.Namespace) -> int:
    path = _resolve(args.exercise)
    if path is None:
        return BAD_INPUT
    hints = course.header_metadata(path).get("hints", [])
    if not hints:
        _say(f"{path.stem} has no hints.")
        return PASS
    shown = progress.hints_shown(path)
    if shown >= len(hints):
        _say(f"That was the last hint for {path.stem} ({len(hints)} of {len(hints)}).")
        for number, hint in enumerate(hints, start=1):
            _say(f"  {number}. {hint}")
        return PASS
    _say(f"Hint {shown + 1} of {len(hints)} for {path.stem}:\n  {hints[shown]}")
    progress.set_hints_shown(path, shown + 1)
    return PASS


def _original_text(path: Path) -> str | None:
    relative = path.resolve().relative_to(course.ROOT).as_posix()
    for ref in ("origin/HEAD", "origin/main", "HEAD"):
        shown = subprocess.run(
            ["git", "show", f"{ref}:{relative}"],
            cwd=course.ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if shown.returncode == 0:
            return shown.stdout
    return None


def cmd_reset(args: argparse.Namespace) -> int:
    path = _resolve(args.exercise)
    if path is None:
        return BAD_INPUT
    if path.parent != course.EXERCISES:
        _say(f"only exercises can be reset, not {path}")
        return BAD_INPUT
    original = _original_text(path)
    if original is None:
        _say("cannot find the original exercise in git (is this a clone of the course?)")
        return BAD_INPUT
    if not args.yes:
        if not sys.stdin.isatty():
            _say("refusing to reset without a terminal to ask; pass --yes to confirm")
            return BAD_INPUT
        answer = input(f"Reset {path.name} to its original state? Your changes are lost. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            _say("not reset")
            return PASS
    path.write_text(original, encoding="utf-8")
    progress.forget(path)
    _say(f"{path.name} is back to its original state")
    return PASS


def _current_exercise() -> Path | None:
    return next((p for p in course.exercise_paths() if not progress.is_done(p)), None)


def cmd_watch(args: argparse.Namespace) -> int:
    from watchfiles import watch

    path = _resolve(args.exercise) if args.exercise else _current_exercise()
    if path is None:
        if args.exercise:
            return BAD_INPUT
        _say("every exercise is done")
        return PASS
    _say(f"watching {path.name}: save it to re-check (Ctrl-C to stop)")
    args.exercise = str(path)
    cmd_check(args)
    try:
        for _ in watch(path, rust_timeout=0):
            _say("\n" + "-" * 60)
            cmd_check(args)
    except KeyboardInterrupt:
        _say("\nstopped watching")
    return PASS


def _verify_pair(exercise: Path, timeout: int) -> list[str]:
    """Problems with one exercise/solution pair (empty when it is as it should be)."""
    problems = []
    solution = course.solution_for(exercise)
    if not solution.exists():
        return [f"{exercise.stem}: no solution file {solution}"]
    graders = grader_cells(exercise)
    if not graders:
        problems.append(f"{exercise.stem}: no cell tagged `grader`")
    ex_cells = [c.source for c in jupytext.read(exercise).cells if c.cell_type == "code"]
    so_cells = [c.source for c in jupytext.read(solution).cells if c.cell_type == "code"]
    if [ex_cells[i] for i in graders] != [so_cells[i] for i in graders if i < len(so_cells)]:
        problems.append(f"{exercise.stem}: grader cells differ between exercise and solution")
    solved = run_notebook(solution, cell_timeout_s=timeout)
    if not solved.passed:
        problems.append(f"{exercise.stem}: the solution fails\n{format_verdict(solved)}")
    unsolved = run_notebook(exercise, cell_timeout_s=timeout)
    if unsolved.passed:
        problems.append(f"{exercise.stem}: the unsolved exercise passes its graders")
    elif not (unsolved.failed_in_grader and unsolved.failed_check is not None):
        problems.append(
            f"{exercise.stem}: the unsolved exercise fails outside a grader check\n"
            f"{format_verdict(unsolved)}"
        )
    return problems


def cmd_verify(args: argparse.Namespace) -> int:
    exercises = course.exercise_paths()
    if args.exercise:
        chosen = [_resolve(name) for name in args.exercise]
        if None in chosen:
            return BAD_INPUT
        exercises = [p for p in chosen if p is not None]
    orphans = [
        p.name
        for p in course.SOLUTIONS.glob("[0-9][0-9]_*.py")
        if not (course.EXERCISES / p.name).exists()
    ]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda p: _verify_pair(p, args.timeout), exercises))
    problems = [f"solution without exercise: {name}" for name in orphans]
    for exercise, found in zip(exercises, results, strict=True):
        _say(f"  {'ok  ' if not found else 'FAIL'}  {exercise.stem}")
        problems += found
    if problems:
        _say("\n" + "\n\n".join(problems))
        _say(f"\nverify: {len(problems)} problem(s)")
        return FAIL
    _say(f"\nverify: {len(exercises)} solutions pass, {len(exercises)} exercises fail at a grader")
    return PASS


def cmd_env(_: argparse.Namespace) -> int:
    from jitlab.environment import print_environment

    print_environment()
    return PASS


def cmd_bench(args: argparse.Namespace) -> int:
    from jitlab.bench import run_bench

    return run_bench(lessons=args.lesson, out_dir=Path(args.out))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jitlab", description="Exercises on why jax.jit compiles again, with verdicts."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="every exercise, done or not, and your progress")

    def with_timeout(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--timeout",
            type=int,
            default=DEFAULT_CELL_TIMEOUT_S,
            help=f"seconds one cell may run (default {DEFAULT_CELL_TIMEOUT_S})",
        )

    check = sub.add_parser("check", help="run an exercise's graders and print a verdict")
    check.add_argument("exercise", help='"01", "01_shapes" or a path to a .py file')
    with_timeout(check)

    hint = sub.add_parser("hint", help="the next hint for an exercise")
    hint.add_argument("exercise")

    reset = sub.add_parser("reset", help="restore an exercise to its original state")
    reset.add_argument("exercise")
    reset.add_argument("--yes", action="store_true", help="do not ask")

    watch = sub.add_parser("watch", help="re-check an exercise every time it is saved")
    watch.add_argument("exercise", nargs="?", help="default: the first one not done")
    with_timeout(watch)

    verify = sub.add_parser(
        "verify", help="course check: every solution passes, every exercise fails at a grader"
    )
    verify.add_argument("exercise", nargs="*", help="default: all")
    verify.add_argument("--jobs", type=int, default=2, help="exercises checked at once")
    with_timeout(verify)

    sub.add_parser("env", help="the environment report")

    bench = sub.add_parser("bench", help="re-run every lesson's timed experiments")
    bench.add_argument("lesson", nargs="*", help="lesson numbers (default: all)")
    bench.add_argument("--out", default=str(course.ROOT / "results"), help="results folder")
    return parser


COMMANDS = {
    "list": cmd_list,
    "check": cmd_check,
    "hint": cmd_hint,
    "reset": cmd_reset,
    "watch": cmd_watch,
    "verify": cmd_verify,
    "env": cmd_env,
    "bench": cmd_bench,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        _say("\ninterrupted")
        return FAIL


if __name__ == "__main__":
    raise SystemExit(main())
