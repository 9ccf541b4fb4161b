"""A problem and its fix, measured the same way and shown side by side.

Most experiments in the course run a workload twice: once the way that recompiles, once
fixed. ``measure`` runs one workload under ``count_compiles`` and a stopwatch, and keeps
what it returned; ``compare`` shows two of them as one table, records both rows and
their ratio for the bench (``jitlab dev bench``), and hands the numbers back for the
lesson's asserts. A lesson then spends its lines on the experiment, not on bookkeeping.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

from jitlab.instruments.counting import CompileCount, count_compiles
from jitlab.instruments.measurements import record
from jitlab.instruments.timing import print_table, stopwatch


@dataclasses.dataclass(frozen=True)
class Run:
    """One workload, measured: its label, wall time, counts and what it returned."""

    label: str
    seconds: float
    counts: CompileCount
    result: Any = dataclasses.field(repr=False)

    @property
    def compiles(self) -> int:
        return self.counts.compiles

    @property
    def traces(self) -> int:
        return self.counts.traces

    def row(self) -> dict[str, Any]:
        return {
            "run": self.label,
            "traces": self.traces,
            "compiles": self.compiles,
            "total_s": self.seconds,
        }


def measure(
    label: str,
    work: Callable[[], Any],
    *,
    count: Callable[..., Any] | str | None,
    explain: bool = True,
) -> Run:
    """Run ``work()`` once, counting the compilations of ``count`` and timing the whole.

    ``count`` is the jitted function under study (``None`` counts every function, which
    is rarely honest: see lesson ``what_jit_caches``). The result is waited for inside the
    stopwatch, so the time includes the work, not only its dispatch. Nothing is printed:
    a measurement that answers a *Predict* prompt is shown by ``compare`` or in the
    answer cell.
    """
    with count_compiles(count, explain=explain) as counts, stopwatch() as clock:
        result = jax.block_until_ready(work())
    return Run(label=label, seconds=clock.seconds, counts=counts, result=result)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A problem run against its fix: the numbers a lesson asserts on."""

    problem: Run
    fix: Run

    @property
    def speedup(self) -> float:
        """Wall time of the problem over that of the fix (on this machine)."""
        return self.problem.seconds / self.fix.seconds

    def rows(self) -> list[dict[str, Any]]:
        return [self.problem.row(), self.fix.row()]


def compare(problem: Run, fix: Run, *, bench: str | None = None, show: bool = True) -> Comparison:
    """Show ``problem`` against ``fix`` as one table, and record both for the bench.

    ``bench`` names the ratio's row in the results file (default: "<problem> vs <fix>").
    Returns the ``Comparison``; assert on its counts and, with a wide margin, its
    ``speedup``. Timings are this machine's: the table says so.
    """
    result = Comparison(problem=problem, fix=fix)
    if show:
        print_table(result.rows())
        print(f"on this machine the fix took 1/{result.speedup:.1f} of the time")
    record(problem.label, compiles=problem.compiles, total_s=problem.seconds)
    record(fix.label, compiles=fix.compiles, total_s=fix.seconds)
    record(bench or f"{problem.label} vs {fix.label}", speedup=result.speedup)
    return result
