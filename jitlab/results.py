"""Measured numbers that leave the notebook: one record per lesson experiment.

Lessons call ``record(...)`` next to the numbers they print. Nothing is written unless
``$JITLAB_RESULTS`` names a file, which ``jitlab bench`` sets while it re-runs every
lesson; it then writes one results file per machine under ``results/``, with the
environment report inside, for the site's "Measured results" page.
"""

from __future__ import annotations

import json
import os
from typing import Any

RESULTS_ENV = "JITLAB_RESULTS"


def record(
    lesson: str,
    experiment: str,
    *,
    compiles: int | None = None,
    first_ms: float | None = None,
    steady_us: float | None = None,
    total_s: float | None = None,
    speedup: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Keep one experiment's numbers (the fields the results page shows side by side).

    ``compiles``: compilations of the function under study. ``first_ms``: first call.
    ``steady_us``: median cached call. ``total_s``: a whole workload. ``speedup``: the
    fix against the problem, as a ratio. Extra keyword values are kept as they are.
    """
    row = {
        "lesson": lesson,
        "experiment": experiment,
        "compiles": compiles,
        "first_ms": first_ms,
        "steady_us": steady_us,
        "total_s": total_s,
        "speedup": speedup,
        **extra,
    }
    path = os.environ.get(RESULTS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(row, default=float) + "\n")
    return row
