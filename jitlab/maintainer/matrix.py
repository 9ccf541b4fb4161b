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

Results go to ``results/releases/jax-<release>.json``; the "JAX releases" page renders
them as a lesson × release table, with each difference and the text that differs.
"""

from __future__ import annotations

import dataclasses
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

from jitlab.course.boxes import pinned_jax
from jitlab.course.manifest import Course
from jitlab.notebooks.pipeline import (
    NotebookRun,
    execute,
    executed_dir,
    execution_key,
    read_run,
)

DEFAULT_RELEASES = ("0.10.2", "0.11.2", "0.12.0.1")
CELL_TIMEOUT_S = 180
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


def _cells(run: NotebookRun) -> list[dict[str, Any]]:
    rows = []
    for cell in run.cells:
        row: dict[str, Any] = {"index": cell.index, "status": cell.status}
        if cell.failed:
            row["error"] = cell.one_line[:400]
        if cell.explanations:
            row["explanations"] = list(cell.explanations)
        rows.append(row)
    return rows


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
    notebooks: dict[str, dict[str, Any]] = {}
    sources = []
    for lesson in course.lessons:
        reused = executed_dir(course) / "lessons" / f"{lesson.stem}.json"
        if pinned and reused.exists():
            run = read_run(reused)
            if run.key == execution_key(lesson.path, course) and all(
                c.status != "not run" for c in run.cells
            ):
                notebooks[f"lessons/{lesson.stem}"] = {"cells": _cells(run)}
                continue
        sources.append(lesson.path)
    # A lesson and its solution share a name (01_shapes): they run as two batches.
    batches = [sources] if lessons_only else [sources, [e.source for e in course.exercises]]
    for batch in filter(None, batches):
        echo(f"  jax {release}: running {len(batch)} notebook(s)")
        with tempfile.TemporaryDirectory(prefix="jitlab-matrix-") as scratch:
            done = execute(
                batch,
                work=Path(scratch) / "notebooks",
                record=Path(scratch) / "record",
                course=course,
                cell_timeout_s=CELL_TIMEOUT_S,
                python=python,
                workers=os.cpu_count() or 1,
            )
        for source in batch:
            key = f"{source.parent.name}/{source.stem}"
            run = done.runs.get(source)
            notebooks[key] = {"cells": _cells(run)} if run else {"error": "did not run"}
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
        (out / f"jax-{release}.json").write_text(json.dumps(result, indent=1) + "\n", "utf-8")
    results = load_releases(out)
    for line in difference_lines(results, pinned_jax(course.root)):
        echo(line)
    return 0


# ------------------------------------------------------------------ differences


def load_releases(folder: Path) -> list[dict[str, Any]]:
    found = [json.loads(p.read_text(encoding="utf-8")) for p in folder.glob("jax-*.json")]
    return sorted(found, key=lambda r: tuple(int(x) for x in r["release"].split(".")))


@dataclasses.dataclass(frozen=True)
class Difference:
    """One cell that behaves differently on ``release`` than on the pinned release."""

    release: str
    notebook: str
    cell: int
    kind: str  # "assertion" or "explanation"
    pinned: str
    other: str


def differences(results: list[dict[str, Any]], pinned: str | None) -> list[Difference]:
    by_release = {r["release"]: r for r in results}
    base = by_release.get(pinned or "")
    if base is None or "notebooks" not in base:
        return []
    found = []
    for result in results:
        if result["release"] == pinned or "notebooks" not in result:
            continue
        for name, notebook in result["notebooks"].items():
            reference = base["notebooks"].get(name, {}).get("cells", [])
            for cell in notebook.get("cells", []):
                index = cell["index"]
                theirs = reference[index] if index < len(reference) else {}
                if cell["status"] != theirs.get("status"):
                    found.append(
                        Difference(
                            result["release"],
                            name,
                            index,
                            "assertion",
                            theirs.get("error", theirs.get("status", "")),
                            cell.get("error", cell["status"]),
                        )
                    )
                mine = cell.get("explanations", [])
                reference_text = theirs.get("explanations", [])
                if _wording(mine) != _wording(reference_text):
                    found.append(
                        Difference(
                            result["release"],
                            name,
                            index,
                            "explanation",
                            "\n\n".join(reference_text),
                            "\n\n".join(mine),
                        )
                    )
    return found


def _wording(explanations: list[str]) -> list[str]:
    """Explanations without what changes from run to run (object ids, file paths)."""
    import re

    cleaned = []
    for text in explanations:
        text = re.sub(r"id=\d+", "id=…", text)
        text = re.sub(r"(?:/[^\s:]+)+\.(?:py|ipynb)(?::\d+)*", "<file>", text)
        cleaned.append(text)
    return cleaned


def difference_lines(results: list[dict[str, Any]], pinned: str | None) -> list[str]:
    lines = []
    for result in results:
        if "unavailable" in result:
            lines.append(f"jax {result['release']}: not run ({result['unavailable']})")
    for diff in differences(results, pinned):
        if diff.kind == "assertion":
            lines.append(
                f"jax {diff.release}: {diff.notebook} cell {diff.cell}: {diff.other or 'passes'}"
                f" (on {pinned}: {diff.pinned or 'passes'})"
            )
        else:
            lines.append(
                f"jax {diff.release}: {diff.notebook} cell {diff.cell}: explanation differs"
            )
    return lines


# ------------------------------------------------------------------------ page


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def releases_page(folder: Path) -> str:
    """Markdown for the "JAX releases" page: a table, then every difference."""
    from jitlab.course.manifest import load_course

    results = load_releases(folder) if folder.exists() else []
    if not results:
        return "*No release matrix yet: run `make matrix`.*"
    course = load_course()
    pinned = pinned_jax(course.root)
    diffs = differences(results, pinned)
    releases = [r["release"] for r in results]
    header = (
        "| notebook | "
        + " | ".join(f"jax {r}" + (" (taught)" if r == pinned else "") for r in releases)
        + " |"
    )
    rows = [header, "|---" * (len(releases) + 1) + "|"]
    names = sorted({name for r in results for name in r.get("notebooks", {})})
    for name in names:
        cells = []
        for result in results:
            if "unavailable" in result:
                cells.append("not run")
                continue
            notebook = result.get("notebooks", {}).get(name)
            if notebook is None:
                cells.append("–")
                continue
            failed = sum(c["status"] in ("failed", "timeout") for c in notebook.get("cells", []))
            changed = sum(
                d.kind == "explanation"
                for d in diffs
                if d.release == result["release"] and d.notebook == name
            )
            text = "all hold" if not failed else f"**{failed} fail**"
            if changed:
                text += f", {changed} explanation(s) worded differently"
            cells.append(text)
        rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
    parts = [
        f"The lessons teach JAX {pinned}. `make matrix` re-runs every lesson and solution "
        "under each release below; this page shows where they differ, so a reader on "
        "another release knows what to expect.\n",
        *rows,
        "",
    ]
    for result in results:
        if "unavailable" in result:
            parts.append(f"- **jax {result['release']}** was not run: {result['unavailable']}")
    assertion_diffs = [d for d in diffs if d.kind == "assertion"]
    if assertion_diffs:
        parts.append("\n## Assertions that differ\n")
        for d in assertion_diffs:
            parts.append(
                f"- **jax {d.release}**, `{d.notebook}`, cell {d.cell}: "
                f"`{_short(d.other) or 'passes'}` (on {pinned}: `{_short(d.pinned) or 'passes'}`)"
            )
    wording = [d for d in diffs if d.kind == "explanation"]
    if wording:
        parts.append("\n## Explanations worded differently\n")
        for d in wording:
            parts.append(
                f"<details><summary>jax {d.release}, <code>{d.notebook}</code>, cell {d.cell}"
                f"</summary>\n\n```text\n# jax {d.release}\n{d.other or '(none)'}\n\n"
                f"# jax {pinned}\n{d.pinned or '(none)'}\n```\n\n</details>\n"
            )
    return "\n".join(parts)
