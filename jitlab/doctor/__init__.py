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

import importlib
from typing import Any

# The names below load on first use, so that a grader that needs only the signature model
# and the classifier (``jitlab.instruments.signature``, ``.classify``) does not import the
# command line, the report and the jit wrapper (about 0.3 s of every ``jitlab check``).
_HOME = {
    "Budget": "budgets",
    "BudgetExceeded": "budgets",
    "CAUSES": "classify",
    "Cause": "classify",
    "main": "cli",
    "Recompiled": "guard",
    "no_recompiles": "guard",
    "load_ipython_extension": "ipython",
    "unload_ipython_extension": "ipython",
    "record_process": "processes",
    "Report": "report",
    "Doctor": "session",
    "install": "session",
    "uninstall": "session",
    "watch": "session",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'jitlab.doctor' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"jitlab.doctor.{_HOME[name]}"), name)
    globals()[name] = value
    return value


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
