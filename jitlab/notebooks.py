"""Convert the Jupytext sources to ``.ipynb`` under ``_build/notebooks/`` for nbval.

nbval collects only ``.ipynb`` files; the ``.py`` files stay the single source, and the
generated notebooks live in an ignored build folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jupytext

from jitlab.course import BUILD, ROOT

OUT = BUILD / "notebooks"


def convert(folder: str) -> list[Path]:
    """Convert every numbered ``.py`` in ``folder`` (lessons, exercises or solutions)."""
    target = OUT / folder
    target.mkdir(parents=True, exist_ok=True)
    for stale in target.glob("*.ipynb"):
        stale.unlink()
    written = []
    for source in sorted((ROOT / folder).glob("[0-9][0-9]_*.py")):
        notebook = target / f"{source.stem}.ipynb"
        jupytext.write(jupytext.read(source), notebook)
        written.append(notebook)
    return written


def main(argv: list[str]) -> int:
    for folder in argv or ["lessons"]:
        written = convert(folder)
        print(f"{len(written)} notebooks from {folder}/ in {OUT / folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
