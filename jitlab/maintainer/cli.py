"""``jitlab dev``: the course maintainers' commands, kept apart from the learner's verbs.

- ``verify``: every solution passes, every generated exercise fails at a grader;
- ``exercises``: regenerate the learners' copies from their sources, leaving a copy with
  a learner's edits alone (``--check``: fail when one is out of date; a copy being solved
  is named and skipped, unless ``--strict``, as the pre-commit hook runs it);
- ``notebooks``: convert lessons, exercises or solutions to ``.ipynb`` for nbval;
- ``renumber``: rename files after lessons moved in ``course.yml``;
- ``canonical``: write the notebook sources as JupyterLab saves them;
- ``bench``: re-run the lessons' timed experiments into ``results/machines/``;
- ``matrix``: run the lessons and solutions under several JAX releases;
- ``upstream``: the same against the newest JAX on the package index;
- ``runner-speed``: the runner's speed figures, as ratios measured in one run;
- ``serve``: serve the built site on localhost;
- ``lesson-stats``: how dense each lesson's code is, and where a Predict gives itself away.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from jitlab.course.exercise_source import CopyState, copy_state, write_learner_copies
from jitlab.course.manifest import Course, Exercise, course_root, load_course
from jitlab.course.metadata import CourseError


def _say(text: str = "") -> None:
    print(text, flush=True)


def cmd_verify(args: argparse.Namespace) -> int:
    from jitlab.maintainer.verify import run_verify

    return run_verify(
        load_course(),
        args.exercise,
        jobs=args.jobs,
        timeout=args.timeout,
        echo=_say,
    )


def cmd_exercises(args: argparse.Namespace) -> int:
    course = load_course()
    if args.check:
        return _check_learner_copies(course, {e: copy_state(e) for e in course.exercises}, args)
    written, kept = write_learner_copies(course, force=args.force)
    for path in written:
        _say(f"  wrote exercises/{path.name}")
    failed = 0
    for path in kept:
        exercise = next(e for e in course.exercises if e.learner_copy == path)
        state = copy_state(exercise)
        failed += state is not CopyState.EDITED
        why = {
            CopyState.EDITED: "it holds your edits, and the committed copy is current",
            CopyState.EDITED_STALE: "it is out of date, but it holds edits of its own",
        }.get(state, "it differs from its generation, and without git its edits cannot be told")
        _say(f"  left exercises/{path.name} alone: {why}")
    if kept:
        _say(
            "  `jitlab reset NN` restores one exercise (it asks first); "
            "`jitlab dev exercises --force` overwrites them all (the edits are lost)"
        )
    if written or kept:
        _say(f"{len(written)} learner copies regenerated, {len(kept)} left alone")
    else:
        _say("all learner copies current")
    return 1 if failed else 0


def _check_learner_copies(
    course: Course, states: dict[Exercise, CopyState], args: argparse.Namespace
) -> int:
    """``--check``: a stale copy fails; a copy holding a learner's edits is named and
    skipped (it fails with ``--strict``, which the pre-commit hook uses)."""

    failed = skipped = 0
    for exercise, state in states.items():
        name = f"exercises/{exercise.learner_copy.name}"
        source = f"solutions/{exercise.source.name}"
        if state is CopyState.CURRENT:
            continue
        if state is CopyState.STALE:
            _say(f"{name} is out of date with {source}")
        elif state is CopyState.EDITED_STALE:
            _say(f"{name} is out of date with {source}, and holds edits of its own")
        elif state is CopyState.EDITED and args.strict:
            _say(f"{name} differs from what {source} generates: it holds edits")
        elif state is CopyState.EDITED:
            _say(f"{name}: not checked, it holds your edits (the committed copy is current)")
        else:
            _say(
                f"{name}: not checked, it differs from what {source} generates, and with no "
                "git history here your edits cannot be told from a stale copy"
            )
        skip = state in (CopyState.EDITED, CopyState.UNKNOWN) and not args.strict
        skipped += skip
        failed += not skip
    if failed:
        _say(
            "run `jitlab dev exercises` (or `make exercises`) and commit the result; it leaves "
            "a copy with edits alone (`--force` overwrites it, `jitlab reset NN` asks first)"
        )
        return 1
    current = len(course.exercises) - skipped
    _say(f"{current} learner copies are current" + (f", {skipped} not checked" if skipped else ""))
    return 0


def cmd_notebooks(args: argparse.Namespace) -> int:
    from jitlab.notebooks.pipeline import convert

    course = load_course()
    for folder in args.folder:
        if folder == "lessons":
            sources = [item.path for item in course.lessons]
        elif folder == "solutions":
            sources = [e.source for e in course.exercises]
        elif folder == "exercises":
            sources = [e.learner_copy for e in course.exercises]
        else:
            _say(f"unknown folder {folder!r}: lessons, exercises or solutions")
            return 2
        target = course.build_dir / "notebooks" / folder
        written = convert(sources, target, course=course)
        _say(f"{len(written)} notebooks from {folder}/ in {target}")
    return 0


def cmd_canonical(args: argparse.Namespace) -> int:
    from jitlab.maintainer.canonical import canonicalize

    return canonicalize(load_course(), echo=_say)


def cmd_renumber(args: argparse.Namespace) -> int:
    from jitlab.maintainer.renumber import renumber

    return renumber(course_root(), echo=_say)


def cmd_bench(args: argparse.Namespace) -> int:
    from jitlab.maintainer.bench import run_bench

    course = load_course()
    out = Path(args.out) if args.out else course.root / "results" / "machines"
    python = None
    if args.release:
        from jitlab.maintainer.matrix import release_python

        python = release_python(args.release, course.build_dir, echo=_say)
    return run_bench(course, args.lesson, out, python=python, runner=args.runner)


def cmd_matrix(args: argparse.Namespace) -> int:
    from jitlab.maintainer.matrix import DEFAULT_RELEASES, run_matrix

    releases = args.release or list(DEFAULT_RELEASES)
    return run_matrix(load_course(), releases, echo=_say, lessons_only=args.lessons_only)


def cmd_upstream(args: argparse.Namespace) -> int:
    from jitlab.maintainer.upstream import run_upstream

    course = load_course()
    out = Path(args.out) if args.out else course.build_dir / "upstream" / "report.md"
    return run_upstream(course, out=out, echo=_say, release=args.release)


def cmd_runner_speed(args: argparse.Namespace) -> int:
    from jitlab.maintainer.runner_speed import run_runner_speed

    return run_runner_speed(load_course(), repeats=args.repeats, site=args.site, echo=_say)


def cmd_serve(args: argparse.Namespace) -> int:
    from jitlab.site.serve import serve

    return serve(port=args.port, directory=Path(args.directory))


def cmd_lesson_stats(args: argparse.Namespace) -> int:
    import json

    from jitlab.course.reading import cell_stats, predict_leaks
    from jitlab.instruments.timing import format_table

    lessons = load_course().lessons
    rows = [
        cell_stats(item.path).row()
        | {"predicts leaking": len({leak.predict for leak in predict_leaks(item.path)})}
        for item in lessons
    ]
    if args.json:
        _say(json.dumps(rows, indent=1))
    else:
        _say(format_table(rows))
        total = sum(r["code_lines"] for r in rows)
        _say(
            f"{len(rows)} lessons, {total} code lines ({total / len(rows):.0f} a lesson), "
            f"{sum(r['predicts leaking'] for r in rows)} of {sum(r['predicts'] for r in rows)} "
            "Predict prompts answered before their fold"
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jitlab dev", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")

    verify = sub.add_parser("verify", help="every solution passes, every exercise fails")
    verify.add_argument("exercise", nargs="*", help="default: all")
    verify.add_argument("--jobs", type=int, default=2, help="exercises checked at once")
    verify.add_argument("--timeout", type=int, default=120, help="seconds one cell may run")

    exercises = sub.add_parser("exercises", help="regenerate learner copies from sources")
    exercises.add_argument("--check", action="store_true", help="only report stale copies")
    exercises.add_argument(
        "--strict", action="store_true", help="with --check: a copy with edits fails too"
    )
    exercises.add_argument(
        "--force", action="store_true", help="overwrite copies that hold edits (they are lost)"
    )

    notebooks = sub.add_parser("notebooks", help="convert sources to .ipynb under _build/")
    notebooks.add_argument("folder", nargs="+", choices=["lessons", "exercises", "solutions"])

    sub.add_parser("renumber", help="rename files to match course.yml")
    sub.add_parser("canonical", help="write every notebook source as JupyterLab saves it")

    bench = sub.add_parser("bench", help="re-run every lesson's timed experiments")
    bench.add_argument("lesson", nargs="*", help="lesson slugs or numbers (default: all)")
    bench.add_argument("--out", default=None, help="folder (default results/machines)")
    bench.add_argument("--release", default=None, help="run under this JAX release instead")
    how = bench.add_mutually_exclusive_group()
    how.add_argument(
        "--plain",
        dest="runner",
        action="store_const",
        const="plain",
        default="auto",
        help="run the lessons as plain Python, cell by cell, without a Jupyter kernel "
        "(the default where no kernel can start, e.g. a machine without sockets)",
    )
    how.add_argument(
        "--kernel", dest="runner", action="store_const", const="kernel", help="under nbval"
    )

    matrix = sub.add_parser("matrix", help="run lessons and solutions under several JAX releases")
    matrix.add_argument("--release", action="append", help="a JAX release (repeatable)")
    matrix.add_argument("--lessons-only", action="store_true", help="skip the solutions")

    upstream = sub.add_parser("upstream", help="run the course against the newest JAX")
    upstream.add_argument("--release", default=None, help="a release instead of the newest")
    upstream.add_argument("--out", default=None, help="report (default _build/upstream/report.md)")

    speed = sub.add_parser("runner-speed", help="the runner's speed, as ratios")
    speed.add_argument("--repeats", type=int, default=5)
    speed.add_argument("--site", action="store_true", help="also time the site builds")

    stats = sub.add_parser("lesson-stats", help="code per cell and Predict leaks, per lesson")
    stats.add_argument("--json", action="store_true", help="one record per lesson, as JSON")

    serve = sub.add_parser("serve", help="serve the built site on localhost")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--directory", default="site")
    return parser


COMMANDS = {
    "verify": cmd_verify,
    "exercises": cmd_exercises,
    "notebooks": cmd_notebooks,
    "renumber": cmd_renumber,
    "canonical": cmd_canonical,
    "bench": cmd_bench,
    "matrix": cmd_matrix,
    "upstream": cmd_upstream,
    "runner-speed": cmd_runner_speed,
    "serve": cmd_serve,
    "lesson-stats": cmd_lesson_stats,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except CourseError as err:
        _say(f"the course's files do not load: {err}")
        return 2
    except KeyboardInterrupt:
        _say("\ninterrupted")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
