"""Watching a block of code from Python: what the CLI, the pytest plugin, the notebook
magic and the course's lessons all use.

>>> with jitlab.doctor.watch() as doctor:
...     train()                    # jax.jit is watched inside the block
>>> print(doctor.report())
>>> doctor.report().causes("train_step")
{'shape': 9, 'weak_type': 3}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from jitlab.doctor import budgets as budgets_mod
from jitlab.doctor import wrap
from jitlab.doctor.recorder import Recorder
from jitlab.doctor.report import Report, budget_lines, cause_lines


class Doctor:
    """One watch: a recorder, and the budgets its report checks."""

    def __init__(self, budgets: Sequence[budgets_mod.Budget | str] = (), command=None) -> None:
        self.budgets = [
            b if isinstance(b, budgets_mod.Budget) else budgets_mod.parse(b) for b in budgets
        ]
        self.command = list(command or [])
        self.recorder = Recorder()
        self.project: Path | None = None  # the folder of the pyproject.toml read, if any

    def report(self) -> Report:
        return Report.from_recorder(self.recorder, self.budgets, self.command, self.project)

    def check(self) -> Report:
        """The report; raises BudgetExceeded (an AssertionError) naming what broke a budget."""
        report = self.report()
        broken = [v for v in report.verdicts if not v.passed]
        if broken:
            raise budgets_mod.BudgetExceeded(budget_failure_text(report))
        return report


def budget_failure_text(report: Report) -> str:
    broken = dataclasses.replace(report, verdicts=[v for v in report.verdicts if not v.passed])
    lines = [line[3:] for line in budget_lines(broken)[1:]]
    for v in report.verdicts:
        if v.status != "exceeded":
            continue
        for name, location, n in v.counts:
            if n > v.budget.limit:
                record = next(
                    (f for f in report.functions if f.name == name and f.location == location),
                    None,
                )
                if record is not None:
                    lines += cause_lines(record)
    return "\n".join(lines)


@contextmanager
def watch(budgets: Sequence[budgets_mod.Budget | str] = (), command=None) -> Iterator[Doctor]:
    """Watch ``jax.jit`` inside the block. Functions jitted inside it are watched;
    functions jitted before it are counted by name only (see :func:`install`)."""
    doctor = Doctor(budgets, command)
    wrap.install()
    doctor.recorder.start()
    try:
        yield doctor
    finally:
        doctor.recorder.stop()
        wrap.uninstall()


install = wrap.install
uninstall = wrap.uninstall
