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
