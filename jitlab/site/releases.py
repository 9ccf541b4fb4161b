"""The "JAX releases" page: what ``make matrix`` found, read back and compared.

``jitlab dev matrix`` (:mod:`jitlab.maintainer.matrix`) runs every lesson under each
release and writes ``results/releases/jax-<release>.json``; this module reads those
files, lists the cells that behave differently from the pinned release, and renders the
page. It sits with the site so that the site needs nothing from the maintainer's tools.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from jitlab.course.manifest import load_course, pinned_jax
from jitlab.notebooks.pipeline import timing_line

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
    timing: bool = False  # an assertion on timings: the machine's speed, not JAX's behaviour


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
                            timing=is_timing(cell) or is_timing(theirs),
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


def is_timing(cell: dict[str, Any]) -> bool:
    """A recorded cell that failed on a timing: marked so by the matrix or the bench, or,
    in a file written before they marked it, with a timing in its error line."""
    if cell.get("status") not in ("failed", "timeout"):
        return False
    return bool(cell.get("timing")) or timing_line(str(cell.get("error", "")))


def _wording(explanations: list[str]) -> list[str]:
    """Explanations without what changes from run to run (object ids, file paths)."""
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
            what = "timing" if diff.timing else "behaviour"
            lines.append(
                f"jax {diff.release}: {diff.notebook} cell {diff.cell} ({what}): "
                f"{diff.other or 'passes'} (on {pinned}: {diff.pinned or 'passes'})"
            )
        else:
            lines.append(
                f"jax {diff.release}: {diff.notebook} cell {diff.cell}: explanation differs"
            )
    return lines


# ----------------------------------------------------------- the same release elsewhere


def machine_runs(folder: Path) -> list[dict[str, Any]]:
    """The results files of ``jitlab dev bench`` that kept each cell's outcome."""
    found = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]
    return [run for run in found if isinstance(run.get("cells"), dict)]


def machine_differences(runs: list[dict[str, Any]]) -> list[tuple[dict, dict, str, dict, dict]]:
    """Cells that hold on one machine and fail on another under the same JAX release:
    ``(accelerator run, CPU run, lesson, its cell, the CPU's cell)``, each accelerator
    against each CPU run of its release (its own machine's CPU among them)."""
    found = []
    for run in runs:
        env = run.get("environment", {})
        if env.get("platform") == "cpu":
            continue
        for other in runs:
            other_env = other.get("environment", {})
            if other_env.get("platform") != "cpu" or other_env.get("jax") != env.get("jax"):
                continue
            for lesson, cells in run["cells"].items():
                theirs = {c["index"]: c for c in other["cells"].get(lesson, [])}
                for cell in cells:
                    twin = theirs.get(cell["index"])
                    if twin is not None and (cell["status"] == "passed") != (
                        twin["status"] == "passed"
                    ):
                        found.append((run, other, lesson, cell, twin))
    return found


def _machine_lines(folder: Path) -> list[str]:
    """The releases' cells on the course's other machines: each lesson's cells that hold
    per run (the TPU beside the CPUs), then every cell that differs between an accelerator
    and a CPU under the same release, timing apart from behaviour."""
    from jitlab.course.results import machine_label

    runs = machine_runs(folder)
    if not runs:
        return []
    names = [f"{machine_label(r['environment'])} · jax {r['environment'].get('jax')}" for r in runs]
    lines = [
        "\n## The same releases on other machines\n",
        "`jitlab dev bench` keeps each lesson's cells too (on the TPU machine, run as plain "
        "Python: no kernel can start there). A cell that fails on every machine of a "
        "release is that release's difference (above); one that fails on one machine "
        "only is listed below.\n",
        "| lesson | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    lessons = sorted({lesson for run in runs for lesson in run["cells"]} | {
        lesson for run in runs for lesson in run.get("skipped_lessons") or {}
    })
    for lesson in lessons:
        cells = []
        for run in runs:
            rows = run["cells"].get(lesson)
            if lesson in (run.get("skipped_lessons") or {}):
                cells.append("skipped (needs sockets)")
            elif rows is None:
                cells.append("–")
            else:
                held = sum(r["status"] == "passed" for r in rows)
                cells.append(f"{held} of {len(rows)} hold")
        lines.append(f"| `{lesson}` | " + " | ".join(cells) + " |")
    diffs = machine_differences(runs)
    for kind, wanted in (("Behaviour", False), ("Timing", True)):
        chosen = [d for d in diffs if (is_timing(d[3]) or is_timing(d[4])) == wanted]
        if not chosen:
            continue
        lines.append(f"\n### {kind} that differs between machines\n")
        for run, other, lesson, cell, twin in chosen:
            mine = cell.get("error") or cell["status"]
            their = twin.get("error") or twin["status"]
            lines.append(
                f"- **{machine_label(run['environment'])}**, `{lesson}`, cell {cell['index']}: "
                f"`{_short(mine)}` (on {machine_label(other['environment'])}: `{_short(their)}`)"
            )
    if not diffs:
        lines.append(
            "\nNo cell differs between an accelerator and a CPU under the same release."
        )
    return lines


# ------------------------------------------------------------------------ page


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def _hook_lines(results: list[dict[str, Any]]) -> list[str]:
    """The doctor's private JAX hooks under each release (``tests/doctor/test_private_hooks.py``,
    run by the matrix): a team on an older JAX learns which report lines it loses."""
    recorded = [r for r in results if r.get("private_hooks")]
    if not recorded:
        return []
    lines = ["\n## The doctor's private hooks\n"]
    for result in recorded:
        hooks = result["private_hooks"]
        broken = {test: said for test, said in hooks.items() if said not in ("passed", "skipped")}
        skipped = sum(said == "skipped" for said in hooks.values())
        lines.append(
            f"- **jax {result['release']}**: {len(hooks) - len(broken) - skipped} of "
            f"{len(hooks)} hold" + (f", {skipped} skipped (a package absent)" if skipped else "")
        )
        lines += [f"    - `{test}`: {_short(said, 160)}" for test, said in sorted(broken.items())]
    return lines


def releases_page(folder: Path) -> str:
    """Markdown for the "JAX releases" page: a table, then every difference."""
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
    behaviour = [d for d in diffs if d.kind == "assertion" and not d.timing]
    if behaviour:
        parts.append("\n## Assertions that differ\n")
        for d in behaviour:
            parts.append(
                f"- **jax {d.release}**, `{d.notebook}`, cell {d.cell}: "
                f"`{_short(d.other) or 'passes'}` (on {pinned}: `{_short(d.pinned) or 'passes'}`)"
            )
    timings = [d for d in diffs if d.kind == "assertion" and d.timing]
    if timings:
        parts.append("\n## Timing assertions that differ\n")
        parts.append(
            "A ratio of timings that missed its margin: the speed of the machine the matrix "
            "ran on, under load, rather than JAX's behaviour. The matrix runs such a "
            "notebook a second time and keeps a failure only when it fails again.\n"
        )
        for d in timings:
            parts.append(
                f"- **jax {d.release}**, `{d.notebook}`, cell {d.cell}: "
                f"`{_short(d.other) or 'passes'}` (on {pinned}: `{_short(d.pinned) or 'passes'}`)"
            )
    parts += _machine_lines(folder.parent / "machines")
    parts += _hook_lines(results)
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
