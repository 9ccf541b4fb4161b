"""Time jitted calls honestly.

JAX dispatches work asynchronously: ``f(x)`` returns as soon as the computation is
queued, so a stopwatch around the call alone measures dispatch, not work. Every timer
here waits with ``jax.block_until_ready`` on the whole output pytree.

The first call of a jitted function pays for tracing and compilation; later calls hit
the cache. ``time_calls`` reports the two apart, and reports the steady state as a
median with its spread over repeated runs, because single timings on a shared laptop
are noise.
"""

from __future__ import annotations

import dataclasses
import html
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import jax


@dataclasses.dataclass
class Stopwatch:
    """Wall time of a ``with stopwatch():`` block, in seconds."""

    seconds: float = 0.0


@contextmanager
def stopwatch() -> Iterator[Stopwatch]:
    """Time a block of code. Block on results inside it: the watch cannot see JAX's queue.

    >>> with stopwatch() as sw:
    ...     jax.block_until_ready(f(x))
    >>> sw.seconds
    """
    watch = Stopwatch()
    start = time.perf_counter()
    try:
        yield watch
    finally:
        watch.seconds = time.perf_counter() - start


def time_once(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    """Seconds for one call of ``fn``, waiting for every array in its output."""
    start = time.perf_counter()
    jax.block_until_ready(fn(*args, **kwargs))
    return time.perf_counter() - start


@dataclasses.dataclass(frozen=True)
class CallTimes:
    """First call against the steady state of one function on one set of arguments."""

    label: str
    first_seconds: float
    steady_seconds: tuple[float, ...]

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.steady_seconds)

    @property
    def spread_seconds(self) -> float:
        """Interquartile range of the steady-state samples (0 with fewer than 4)."""
        if len(self.steady_seconds) < 4:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.steady_seconds, n=4)
        return q3 - q1

    @property
    def first_over_steady(self) -> float:
        """How many cached calls one first call costs."""
        return self.first_seconds / self.median_seconds

    def row(self) -> dict[str, float | str]:
        """One flat record, for tables, plots and the results file."""
        return {
            "label": self.label,
            "first_ms": 1e3 * self.first_seconds,
            "steady_median_us": 1e6 * self.median_seconds,
            "steady_iqr_us": 1e6 * self.spread_seconds,
            "first_over_steady": self.first_over_steady,
            "repeats": len(self.steady_seconds),
        }

    def __str__(self) -> str:
        return format_table([self.row()])

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def time_calls(
    fn: Callable[..., Any],
    *args: Any,
    repeats: int = 50,
    warmup: int = 2,
    label: str | None = None,
    **kwargs: Any,
) -> CallTimes:
    """Time the first call of ``fn(*args, **kwargs)``, then ``repeats`` cached calls.

    Pass a function whose cache does not yet hold these argument types, or the "first
    call" is just another cached call. ``warmup`` extra calls run between the first and
    the measured ones, so one-off effects (allocations, thread-pool start) stay out of
    the steady state.
    """
    first = time_once(fn, *args, **kwargs)
    for _ in range(warmup):
        time_once(fn, *args, **kwargs)
    steady = tuple(time_once(fn, *args, **kwargs) for _ in range(repeats))
    name = label or getattr(fn, "__name__", "function")
    return CallTimes(label=name, first_seconds=first, steady_seconds=steady)


def median_seconds(thunk: Callable[[], Any], *, repeats: int = 5, warmup: int = 0) -> float:
    """Median wall time of ``thunk()`` over ``repeats`` runs, blocking on its result.

    For timing a whole workload (a loop of calls) several times.
    """
    for _ in range(warmup):
        jax.block_until_ready(thunk())
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(thunk())
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value == 0 or abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:.1f}"
        return f"{value:.3g}"
    return str(value)


def format_table(rows: Sequence[dict[str, Any]] | Iterable[dict[str, Any]]) -> str:
    """Plain-text table of records with the same keys (the first row's keys lead)."""
    rows = list(rows)
    if not rows:
        return "(no rows)"
    columns = list(rows[0])
    for row in rows[1:]:
        columns += [c for c in row if c not in columns]
    cells = [[_cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


class Table:
    """Records shown as an HTML table in a notebook (the page styles it, and a wide table
    scrolls as a whole instead of wrapping mid-row) and as aligned text elsewhere."""

    def __init__(self, rows: Iterable[dict[str, Any]]) -> None:
        self.rows = list(rows)

    def __str__(self) -> str:
        return format_table(self.rows)

    def _repr_html_(self) -> str:
        if not self.rows:
            return "<p>(no rows)</p>"
        columns = list(self.rows[0])
        for row in self.rows[1:]:
            columns += [c for c in row if c not in columns]
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
        body = "".join(
            "<tr>"
            + "".join(f"<td>{html.escape(_cell(r.get(c, '')))}</td>" for c in columns)
            + "</tr>"
            for r in self.rows
        )
        return (
            '<div class="jitlab-table"><table><thead><tr>'
            f"{head}</tr></thead><tbody>{body}</tbody></table></div>"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def print_table(rows: Iterable[dict[str, Any]]) -> None:
    """Show records as a table: HTML in a notebook, aligned text in a terminal."""
    table = Table(rows)
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python, no IPython installed
        print(table)
        return
    if get_ipython() is None:
        print(table)
    else:
        display(table)
