"""``jitlab doctor``: which of your jitted functions recompile, why, where, and at what cost.

- ``jitlab doctor -- python train.py`` (or ``python -m jitlab.doctor -- ...``) runs a program
  and prints the report at exit; ``--max-compiles NAME=N`` sets budgets, ``--json FILE``
  writes the report for CI.
- ``pytest --jitlab`` and ``@pytest.mark.max_compiles(train_step=1)``.
- ``%load_ext jitlab.doctor`` and the cell magic ``%%jitlab_doctor`` in a notebook.
- ``with jitlab.doctor.watch() as doctor: ...`` from Python.
- ``with jitlab.doctor.no_recompiles(train_step): ...`` (or as a decorator) raises
  :class:`Recompiled` at the first recompilation, with the doctor's cause.
- ``with jitlab.doctor.record_process("report.json"): ...`` in every process of a
  ``jax.distributed`` job, then ``jitlab doctor --merge report.p*.json``.

To see each call's arguments the doctor replaces ``jax.jit`` with a thin wrapper while it
runs (see :mod:`jitlab.doctor.wrap`). Everything else it learns from JAX's public hooks:
``jax.monitoring`` events, the cache-miss explanations JAX logs, and ``jax.config``.
"""

from jitlab.doctor.budgets import Budget, BudgetExceeded
from jitlab.doctor.classify import CAUSES, Cause
from jitlab.doctor.cli import main
from jitlab.doctor.guard import Recompiled, no_recompiles
from jitlab.doctor.ipython import load_ipython_extension, unload_ipython_extension
from jitlab.doctor.processes import record_process
from jitlab.doctor.report import Report
from jitlab.doctor.session import Doctor, install, uninstall, watch

__all__ = [
    "CAUSES",
    "Budget",
    "BudgetExceeded",
    "Cause",
    "Doctor",
    "Recompiled",
    "Report",
    "install",
    "load_ipython_extension",
    "main",
    "no_recompiles",
    "record_process",
    "uninstall",
    "unload_ipython_extension",
    "watch",
]
