"""``jitlab dev upstream``: run the course against the newest JAX the package index offers.

JAX's own documentation is executed against JAX's head; this does the same for the
course, one step further: instead of "failed", the report names *which claims* changed.
It finds the newest release on the index, makes (or reuses) a small environment for it
(see :mod:`jitlab.maintainer.matrix`), runs every lesson and solution under nbval, and
compares each cell with the pinned release's recording from ``make matrix``. The
Markdown report lists the release, each cell whose assertion now fails with its message,
and each cache-miss explanation whose wording changed.

Exit codes: 0 when everything holds, 1 when something changed (the weekly workflow then
opens or updates its issue), 2 when the index cannot be reached.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jitlab.course.manifest import Course, pinned_jax
from jitlab.maintainer.matrix import run_release
from jitlab.site.releases import Difference, differences

Echo = Callable[[str], None]
_VERSION = re.compile(r"jax \(([\d.]+)\)")


class IndexUnreachable(RuntimeError):
    """The package index did not answer."""


def newest_release() -> str:
    """The newest ``jax`` release on the package index pip is configured to use."""
    found = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "jax", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    match = _VERSION.search(found.stdout)
    if found.returncode != 0 or not match:
        reason = [line for line in found.stderr.splitlines() if line.startswith("ERROR")]
        raise IndexUnreachable(reason[-1] if reason else "no answer about jax from the index")
    return match.group(1)


def report_markdown(
    release: str, pinned: str, result: dict[str, Any], diffs: list[Difference]
) -> str:
    """The upstream report: what holds and what changed on ``release`` against the pin."""
    lines = [f"# The course against JAX {release}", ""]
    if "unavailable" in result:
        lines += [
            f"JAX {release} could not be used: {result['unavailable']}",
            "",
            "No lesson was run.",
        ]
        return "\n".join(lines) + "\n"
    if release == pinned:
        lines += [
            f"The newest JAX on the index is the pinned release, {pinned}: there is nothing "
            "newer to run. `make test` and `make matrix` check every claim on it "
            f"({len(result.get('notebooks', {}))} notebooks in its recording).",
        ]
        return "\n".join(lines) + "\n"
    notebooks = result.get("notebooks", {})
    lines.append(
        f"Pinned release: {pinned}. Notebooks run: {len(notebooks)} "
        f"({result.get('seconds', '?')} s)."
    )
    assertions = [d for d in diffs if d.kind == "assertion"]
    wording = [d for d in diffs if d.kind == "explanation"]
    if not diffs:
        lines += ["", f"Every lesson and solution behaves on {release} as on {pinned}."]
        return "\n".join(lines) + "\n"
    if assertions:
        lines += ["", f"## Assertions that changed ({len(assertions)})", ""]
        lines += [
            "| notebook | cell | on " + release + " | on " + pinned + " |",
            "|---|---|---|---|",
        ]
        for d in assertions:
            lines.append(
                f"| `{d.notebook}` | {d.cell} | {_cell_text(d.other)} | {_cell_text(d.pinned)} |"
            )
    if wording:
        lines += ["", f"## Cache-miss explanations worded differently ({len(wording)})", ""]
        for d in wording:
            lines += [
                f"### `{d.notebook}`, cell {d.cell}",
                "",
                f"On {release}:",
                "",
                "```text",
                d.other or "(none)",
                "```",
                "",
                f"On {pinned}:",
                "",
                "```text",
                d.pinned or "(none)",
                "```",
                "",
            ]
    return "\n".join(lines).rstrip() + "\n"


def _cell_text(text: str) -> str:
    text = " ".join((text or "passes").split()).replace("|", "\\|")
    return text if len(text) <= 200 else text[:200].rsplit(" ", 1)[0] + " …"


def run_upstream(
    course: Course, *, out: Path, echo: Echo = print, release: str | None = None
) -> int:
    pinned = pinned_jax(course.root) or "?"
    try:
        release = release or newest_release()
    except (IndexUnreachable, subprocess.TimeoutExpired) as err:
        echo(f"upstream: the package index cannot be reached ({err}); nothing was run")
        return 2
    echo(f"newest jax on the index: {release} (the course pins {pinned})")
    baseline_file = course.root / "results" / "releases" / f"jax-{pinned}.json"
    if baseline_file.exists():
        baseline = json.loads(baseline_file.read_text(encoding="utf-8"))
    else:
        echo(f"no recording of jax {pinned} yet: running it first (as `make matrix` would)")
        baseline = run_release(course, pinned, echo=echo)
    result = baseline if release == pinned else run_release(course, release, echo=echo)
    diffs = differences([baseline, result], pinned)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report_markdown(release, pinned, result, diffs), encoding="utf-8")
    (out.with_suffix(".json")).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    changed = bool(diffs) or "unavailable" in result
    echo(f"report written to {out}: " + ("changes found" if changed else "everything holds"))
    return 1 if changed else 0
