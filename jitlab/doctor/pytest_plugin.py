"""The doctor in pytest: ``pytest --jitlab`` and ``@pytest.mark.max_compiles``.

- ``pytest --jitlab`` (or ``jitlab_doctor = true`` in the ini file) watches ``jax.jit``
  from the start of the session, so functions jitted when test modules are imported are
  watched too, and adds the doctor's report (per-function table, causes, timelines) to
  the terminal summary.
- ``@pytest.mark.max_compiles(train_step=1)`` fails a test in which ``train_step``
  compiles more than once, and the failure says why (the cause, the call site and the
  lesson). ``@pytest.mark.max_compiles(2)`` budgets every watched function. Only the
  test's call phase is counted, so a fixture may warm functions up. Without ``--jitlab``
  the marker still counts compilations by name, but functions jitted at import time are
  not watched, so it cannot name a cause: run with ``--jitlab`` for that.
- ``max_compiles = {train_step = 1, "*" = 3}`` under ``[tool.jitlab.doctor]`` in the
  ``pyproject.toml`` of pytest's root folder budgets the whole session under ``--jitlab``:
  a broken budget fails the run (exit code 1) and the summary says why; so does one that
  names no function of the project (a misspelt name). A budget for a function that the
  selected tests did not call (``-k``, a shard) is "not run", and passes. A malformed
  table stops pytest at the start with one line naming the key (exit code 2).
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from jitlab.doctor import budgets as budgets_mod
from jitlab.doctor import config as config_mod

# Installed, this plugin loads in every pytest run of the environment: the rest of the
# doctor (and with it JAX, about 0.6 s) is imported only by a run that uses it, with
# --jitlab or a max_compiles marker.
_SESSION = pytest.StashKey[Any]()  # a jitlab.doctor.recorder.Recorder
_BUDGETS = pytest.StashKey[list[budgets_mod.Budget]]()
_REPORT = pytest.StashKey[Any]()  # a jitlab.doctor.report.Report
_UNCHECKED = pytest.StashKey[Path]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("jitlab", "jitlab doctor (JAX recompilations)")
    group.addoption(
        "--jitlab",
        action="store_true",
        default=False,
        help="watch jax.jit for the whole session and report which jitted functions "
        "recompiled, why, where and at what cost",
    )
    parser.addini("jitlab_doctor", type="bool", default=False, help="same as --jitlab")


def _enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("--jitlab", False) or config.getini("jitlab_doctor"))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "max_compiles(name=N, ...): fail the test if the jitted function `name` compiles "
        "more than N times during it; max_compiles(N) budgets every watched function",
    )
    pyproject = config.rootpath / "pyproject.toml"
    if not _enabled(config):
        # budgets in the file, and the doctor not asked for: say so, never skip them silently
        with contextlib.suppress(OSError):
            if pyproject.is_file() and config_mod.SECTION in pyproject.read_text("utf-8"):
                config.stash[_UNCHECKED] = pyproject
    else:
        from jitlab.doctor import wrap
        from jitlab.doctor.recorder import Recorder

        try:
            settings = config_mod.load(pyproject if pyproject.is_file() else None)
        except config_mod.ConfigError as err:
            pytest.exit(f"jitlab doctor: {err}", returncode=2)
        config.stash[_BUDGETS] = list(settings.budgets)
        wrap.install()
        config.stash[_SESSION] = Recorder().start()


def pytest_unconfigure(config: pytest.Config) -> None:
    recorder = config.stash.get(_SESSION, None)
    if recorder is not None:
        from jitlab.doctor import wrap

        recorder.stop()
        wrap.uninstall()


def _budgets(marker: pytest.Mark) -> list[budgets_mod.Budget]:
    marked = budgets_mod.MARKER
    found = [budgets_mod.Budget(name, int(limit), marked) for name, limit in marker.kwargs.items()]
    for arg in marker.args:
        if isinstance(arg, int):
            found.append(budgets_mod.Budget("*", arg, marked))
        elif isinstance(arg, str):
            found.append(dataclasses.replace(budgets_mod.parse(arg), source=marked))
        else:
            raise TypeError(f"max_compiles: cannot read {arg!r}; use max_compiles(step=1)")
    if not found:
        raise TypeError("max_compiles needs a budget, e.g. max_compiles(train_step=1)")
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    marker = item.get_closest_marker("max_compiles")
    if marker is None:
        return (yield)
    from jitlab.doctor import wrap
    from jitlab.doctor.session import Doctor, budget_failure_text

    doctor = Doctor(_budgets(marker))
    doctor.recorder.start()
    try:
        result = yield
    finally:
        doctor.recorder.stop()
    report = doctor.report()
    if not report.budgets_passed:
        text = budget_failure_text(report)
        if not wrap.installed():
            text += "\n(run pytest with --jitlab to watch jax.jit and name the causes)"
        pytest.fail(f"jitlab doctor: compile budget exceeded\n{text}", pytrace=False)
    return result


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The session's report, with the pyproject.toml budgets checked: a broken one fails
    a run that would otherwise pass."""
    recorder = session.config.stash.get(_SESSION, None)
    if recorder is None:
        return
    from jitlab.doctor.report import Report

    budgets = session.config.stash.get(_BUDGETS, [])
    report = Report.from_recorder(
        recorder, budgets, command=["pytest"], project=session.config.rootpath
    )
    session.config.stash[_REPORT] = report
    if not report.budgets_passed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    unchecked = config.stash.get(_UNCHECKED, None)
    if unchecked is not None:
        terminalreporter.write_line(
            f"jitlab doctor: the budgets in {unchecked} ({config_mod.SECTION}) are checked "
            "only with pytest --jitlab (or jitlab_doctor = true)"
        )
    recorder = config.stash.get(_SESSION, None)
    if recorder is None:
        return
    from jitlab.doctor.report import Report

    report = config.stash.get(_REPORT, None) or Report.from_recorder(recorder, command=["pytest"])
    terminalreporter.section("jitlab doctor")
    for line in report.text().splitlines()[1:]:
        terminalreporter.write_line(line)
