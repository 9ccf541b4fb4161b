"""Compile budgets: ``--max-compiles train_step=1``, ``--max-compiles '*=4'``, and the pytest
marker ``@pytest.mark.max_compiles(train_step=1)``.

A budget names functions by the name JAX reports (``train_step``) or a shell pattern of
it (``train_*``, ``*``). A pattern with a dot is matched against qualified names instead
(``Model.step``, ``Model.*``): ``eval*`` does not match a ``<lambda>`` defined inside
``evaluate``, whose qualified name is ``evaluate.<locals>.<lambda>``. It counts compilations from
direct calls; for a function that only ever ran inside another jit, its traces. ``*``
matches the functions the program jitted itself, not JAX's internal helpers (name those
explicitly to budget them). A budget that matches nothing is a warning, and it does not
pass: a misspelt name must not turn a check off silently.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the pytest plugin reads budgets without importing JAX
    from jitlab.doctor.recorder import FunctionRecord, Unwatched


class BudgetExceeded(AssertionError):
    """Raised by the notebook magic and the pytest marker when a budget is broken."""


COMMAND_LINE = "--max-compiles"
MARKER = "@pytest.mark.max_compiles"


@dataclasses.dataclass(frozen=True)
class Budget:
    pattern: str
    limit: int
    # where it was set: "--max-compiles", "pyproject.toml", "@max_compiles" (a marker)
    source: str = dataclasses.field(default=COMMAND_LINE, compare=False)

    def __str__(self) -> str:
        return f"{self.pattern}={self.limit}"

    @property
    def qualified(self) -> bool:
        """A pattern with a dot asks for qualified names."""
        return "." in self.pattern

    def matches(self, name: str, qualname: str = "") -> bool:
        if self.qualified:
            return bool(qualname) and fnmatch.fnmatchcase(qualname, self.pattern)
        return fnmatch.fnmatchcase(name, self.pattern)


def parse(text: str) -> Budget:
    """``NAME=N`` -> Budget. Raises ValueError with a message fit for the user."""
    name, sep, number = text.rpartition("=")
    if not sep or not name.strip():
        raise ValueError(f"--max-compiles {text!r}: expected NAME=N, e.g. train_step=1")
    try:
        limit = int(number)
    except ValueError:
        raise ValueError(f"--max-compiles {text!r}: {number!r} is not a whole number") from None
    if limit < 0:
        raise ValueError(f"--max-compiles {text!r}: the limit cannot be negative")
    return Budget(name.strip(), limit)


@dataclasses.dataclass
class Verdict:
    budget: Budget
    # "ok" | "exceeded" | "unused" (names no function: a typo?) | "not run" (a function of
    # the project that this run did not call: a file's budget in a subset of the tests)
    status: str
    counts: list[tuple[str, str, int]]  # (name, location, compilations) per match

    @property
    def passed(self) -> bool:
        return self.status in ("ok", NOT_RUN)


NOT_RUN = "not run"


def check(
    budgets: list[Budget],
    functions: list[FunctionRecord],
    unwatched: list[Unwatched],
    known: Callable[[Budget], bool] | None = None,
) -> list[Verdict]:
    """Each budget's verdict. A budget from the project's file that no function of this
    run matched, but that names a function the project has (``known``), is "not run": a
    CI job that selects or shards tests stays green, and a misspelt name still fails."""
    verdicts = []
    for budget in budgets:
        counts = [
            (f.name, f.location, f.builds)
            for f in functions
            if budget.matches(f.name, f.qualname) or budget.matches(f.event_name, f.qualname)
        ]
        if budget.pattern != "*":
            counts += [
                (u.name, "not watched", u.compiles) for u in unwatched if budget.matches(u.name)
            ]
        if not counts:
            from_file = budget.source not in (COMMAND_LINE, MARKER)
            status = NOT_RUN if from_file and known is not None and known(budget) else "unused"
        elif any(n > budget.limit for _, _, n in counts):
            status = "exceeded"
        else:
            status = "ok"
        verdicts.append(Verdict(budget, status, counts))
    return verdicts
