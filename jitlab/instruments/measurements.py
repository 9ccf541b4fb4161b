"""Measured numbers that leave the notebook: one record per timed experiment.

Lessons call ``record(...)`` next to the numbers they print. Nothing is written unless
``$JITLAB_MEASUREMENTS`` names a file, which ``jitlab dev bench`` sets while it re-runs
every lesson; the bench then writes one file per machine and JAX release under
``results/machines/`` (with the environment report inside) for the site's "Measured
results" page. Each record names the notebook it ran in (``$JITLAB_NOTEBOOK``, which the
course's notebook pipeline sets for every kernel it starts); the bench turns that into
the lesson's slug, so a lesson never spells its own name and the instruments need
nothing from the course.
"""

from __future__ import annotations

import json
import os
from typing import Any

MEASUREMENTS_ENV = "JITLAB_MEASUREMENTS"
NOTEBOOK_ENV = "JITLAB_NOTEBOOK"
"""The file a kernel runs, set by the notebook pipeline (read by ``course.current``)."""


def record(
    experiment: str,
    *,
    compiles: int | None = None,
    first_ms: float | None = None,
    steady_us: float | None = None,
    total_s: float | None = None,
    speedup: float | None = None,
    **extra: Any,
) -> None:
    """Keep one experiment's numbers (the fields the results page shows side by side).

    ``compiles``: compilations of the function under study. ``first_ms``: first call.
    ``steady_us``: median cached call. ``total_s``: a whole workload. ``speedup``: the
    fix against the problem, as a ratio. Extra keyword values are kept as they are.
    Returns nothing, so a ``record`` call at the end of a cell prints nothing on the page.
    """
    row = {
        "experiment": experiment,
        "compiles": compiles,
        "first_ms": first_ms,
        "steady_us": steady_us,
        "total_s": total_s,
        "speedup": speedup,
        **extra,
    }
    path = os.environ.get(MEASUREMENTS_ENV)
    if path:
        row = {"notebook": os.environ.get(NOTEBOOK_ENV, ""), **row}
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(row, default=float) + "\n")
