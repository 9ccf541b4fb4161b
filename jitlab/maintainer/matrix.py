"""``jitlab dev matrix``: the course's claims, re-run under several JAX releases.

The lessons teach one release (the pin). Behaviour changes between releases, and a
reader on an older JAX should know what to expect, so this runs every lesson and every
solution under each release and records, per release and per notebook, which cells'
assertions hold and which fail (with the failing assertion), and the cache-miss
explanations JAX printed (their wording changes between releases).

Each release's notebooks run on every core (pytest-xdist). Environments stay cheap:
each release gets a small virtualenv under ``_build/matrix/`` holding only ``jax`` and
``jaxlib`` of that release; everything else (nbval, numpy, the course package) comes
from the course's own ``.venv`` through a ``.pth`` line, so a release costs one
download the first time and nothing after. The pinned release reuses the lessons that
``make test`` just executed.

Each release also runs the doctor's private-hook tests (:data:`PRIVATE_HOOKS`, one test
per private JAX attribute or logger the doctor reads), so that a release that moves one
fails a named test here instead of quietly thinning the doctor's report.

A cell whose failing line compares timings (a ratio, seconds: a busy machine can miss a
margin) makes its notebook run a second time; the cell is recorded as failing only if
it fails again, and marked ``"timing"`` either way, so the page shows it apart from
differences in behaviour.

Results go to ``results/releases/jax-<release>.json``; the "JAX releases" page renders
them as a lesson × release table, with each difference and the text that differs.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from jitlab.course.manifest import Course, pinned_jax
from jitlab.notebooks.pipeline import (
    Execution,
    NotebookRun,
    execute,
    executed_dir,
    execution_key,
    read_run,
)
from jitlab.site.releases import difference_lines, load_releases

DEFAULT_RELEASES = ("0.10.2", "0.11.2", "0.12.0.1")
CELL_TIMEOUT_S = 180
PRIVATE_HOOKS = Path("tests") / "doctor" / "test_private_hooks.py"
Echo = Callable[[str], None]


# ----------------------------------------------------------------- environments


class ReleaseUnavailable(RuntimeError):
    """A release could not be installed or imported; the matrix says so and goes on."""


def release_python(release: str, build: Path, *, echo: Echo = print) -> str:
    """The interpreter of a small environment whose ``jax`` is ``release`` (made once)."""
    pinned_python = sys.executable
    if pinned_jax(build.parent) == release:
        return pinned_python
    env = build / "matrix" / f"jax-{release}"
    python = env / "bin" / "python"
    stamp = env / ".installed"
    if not stamp.exists():
        echo(f"  making an environment for jax {release} in {env}")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
        site = Path(
            subprocess.run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        installed = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--target",
                str(site),
                f"jax=={release}",
                f"jaxlib=={release}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if installed.returncode != 0:
            lines = [line for line in installed.stderr.splitlines() if "WARNING" not in line]
            raise ReleaseUnavailable(
                f"pip could not install jax {release}: " + " ".join(lines)[-400:]
            )
        # The course's own packages, after this release's jax in the search path.
        main_site = sysconfig.get_paths()["purelib"]
        (site / "zz_course_packages.pth").write_text(
            f"import site; site.addsitedir({main_site!r})\n", encoding="utf-8"
        )
        stamp.touch()
    probe = subprocess.run(
        [str(python), "-c", "import jax, jaxlib; print(jax.__version__, jaxlib.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0 or probe.stdout.split()[:1] != [release]:
        raise ReleaseUnavailable(
            f"jax {release} does not import: " + (probe.stderr.strip().splitlines() or ["?"])[-1]
        )
    return str(python)


# ---------------------------------------------------------------------- running


HOOKS_TIMEOUT_S = 300  # the hook tests take about 5 s on the pinned release


def run_private_hooks(root: Path, python: str) -> dict[str, str]:
    """The doctor's private-hook tests under ``python``: test name -> "passed", "skipped"
    or the failure's first line ({} where the course has no such tests)."""
    tests = root / PRIVATE_HOOKS
    if not tests.exists():
        return {}
    with tempfile.TemporaryDirectory(prefix="jitlab-hooks-") as scratch:
        junit = Path(scratch) / "hooks.xml"
        try:
            done = subprocess.run(
                [python, "-m", "pytest", "-q", "-p", "no:xdist", str(tests), f"--junitxml={junit}"],
                cwd=root,
                capture_output=True,
                text=True,
                timeout=HOOKS_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:  # a hang under this release: the matrix goes on
            return {str(PRIVATE_HOOKS): f"did not run: timed out after {HOOKS_TIMEOUT_S} s"}
        if not junit.exists():
            return {str(PRIVATE_HOOKS): "did not run: " + (done.stderr or done.stdout)[-400:]}
        said = {}
        for case in ElementTree.parse(junit).iter("testcase"):
            outcome = next(iter(case), None)
            if outcome is None or outcome.tag in ("system-out", "system-err"):
                said[case.get("name", "?")] = "passed"
            elif outcome.tag == "skipped":
                said[case.get("name", "?")] = "skipped"
            else:
                text = (outcome.get("message") or outcome.text or "").strip() or outcome.tag
                said[case.get("name", "?")] = text.splitlines()[0][:400]
    return said


def cell_rows(run: NotebookRun, again: NotebookRun | None = None) -> list[dict[str, Any]]:
    """Each cell's outcome for a results file. A failed cell whose failing line compares
    timings is marked ``"timing"``; with ``again`` (the notebook run a second time), one
    that passed then is recorded as passing, with what it said the first time, since a
    timing that fails once on a busy machine is noise, not a difference."""
    rows = []
    for cell in run.cells:
        row: dict[str, Any] = {"index": cell.index, "status": cell.status}
        second = again.cells[cell.index] if again and cell.index < len(again.cells) else None
        if cell.failed and cell.timing and second is not None and not second.failed:
            row["status"] = second.status
            row["rerun"] = f"failed once ({cell.one_line[:200]}), passed when run again"
        elif cell.failed:
            row["error"] = cell.one_line[:400]
            if cell.timing:
                row["timing"] = True
                if second is not None:
                    row["rerun"] = "failed again when run again"
        if cell.explanations:
            row["explanations"] = list(cell.explanations)
        rows.append(row)
    return rows


def timing_failures(run: NotebookRun | None) -> bool:
    """Whether a notebook has a failed timing cell, to run it a second time."""
    return run is not None and any(cell.timing for cell in run.cells)


def run_release(
    course: Course, release: str, *, echo: Echo = print, lessons_only: bool = False
) -> dict[str, Any]:
    """Run every lesson and solution under ``release``; the record for its results file."""
    started = dt.datetime.now(dt.UTC)
    record: dict[str, Any] = {
        "release": release,
        "generated": started.isoformat(timespec="seconds"),
    }
    try:
        python = release_python(release, course.build_dir, echo=echo)
    except (ReleaseUnavailable, subprocess.CalledProcessError) as err:
        echo(f"  jax {release}: {err}")
        return {**record, "unavailable": str(err)}
    pinned = python == sys.executable
    hooks = run_private_hooks(course.root, python)
    if hooks:
        record["private_hooks"] = hooks
    notebooks: dict[str, dict[str, Any]] = {}
    sources = []
    for lesson in course.lessons:
        reused = executed_dir(course) / "lessons" / f"{lesson.stem}.json"
        if pinned and reused.exists():
            run = read_run(reused)
            if run.key == execution_key(lesson.path, course) and all(
                c.status != "not run" for c in run.cells
            ):
                notebooks[f"lessons/{lesson.stem}"] = {"cells": cell_rows(run)}
                continue
        sources.append(lesson.path)
    # A lesson and its solution share a name (01_shapes): they run as two batches.
    batches = [sources] if lessons_only else [sources, [e.source for e in course.exercises]]
    for batch in filter(None, batches):
        echo(f"  jax {release}: running {len(batch)} notebook(s)")
        with tempfile.TemporaryDirectory(prefix="jitlab-matrix-") as scratch:

            def run(sources: list[Path], folder: str) -> Execution:
                return execute(
                    sources,
                    work=Path(scratch) / folder / "notebooks",
                    record=Path(scratch) / folder / "record",
                    course=course,
                    cell_timeout_s=CELL_TIMEOUT_S,
                    python=python,
                    workers=os.cpu_count() or 1,
                )

            done = run(batch, "first")
            again = [source for source in batch if timing_failures(done.runs.get(source))]
            if again:
                echo(f"  jax {release}: a timing failed in {len(again)}: running them again")
            redone = run(again, "again") if again else None
        for source in batch:
            key = f"{source.parent.name}/{source.stem}"
            run = done.runs.get(source)
            second = redone.runs.get(source) if redone else None
            notebooks[key] = {"cells": cell_rows(run, second)} if run else {"error": "did not run"}
    seconds = (dt.datetime.now(dt.UTC) - started).total_seconds()
    return {**record, "seconds": round(seconds, 1), "notebooks": dict(sorted(notebooks.items()))}


def run_matrix(
    course: Course, releases: Sequence[str], *, echo: Echo = print, lessons_only: bool = False
) -> int:
    out = course.root / "results" / "releases"
    out.mkdir(parents=True, exist_ok=True)
    for release in releases:
        echo(f"jax {release}")
        result = run_release(course, release, echo=echo, lessons_only=lessons_only)
        for test, said in result.get("private_hooks", {}).items():
            if said not in ("passed", "skipped"):
                echo(f"  jax {release}: {PRIVATE_HOOKS.name}::{test} failed: {said}")
        (out / f"jax-{release}.json").write_text(json.dumps(result, indent=1) + "\n", "utf-8")
    results = load_releases(out)
    for line in difference_lines(results, pinned_jax(course.root)):
        echo(line)
    return 0
