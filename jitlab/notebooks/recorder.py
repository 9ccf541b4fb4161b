"""A pytest plugin that records what nbval ran: every cell's outcome, and the notebook
with its outputs, so one execution serves the tests, the site and the release matrix.

nbval checks a notebook cell by cell in one kernel, but keeps nothing once pytest ends.
The package registers it with pytest, so any nbval run in the course's environment gets
it; with ``--jitlab-record=DIR`` it also writes, for each
notebook, ``DIR/<folder>/<stem>.ipynb`` (the executed notebook, outputs included: the
site renders it and offers it for download) and ``DIR/<folder>/<stem>.json`` (each code
cell's status, error, the cache-miss explanations JAX printed in it and the graders'
reports it displayed, :mod:`jitlab.grading.verdict`). ``<folder>`` is
the source's folder (``lessons``, ``exercises``, ``solutions``).

It also tells each kernel which file it runs (``$JITLAB_NOTEBOOK``, read by
``jitlab.intro()``), notices at once a kernel process that ended while a cell ran (nbval
would wait out the cell timeout: a ``died`` cell, with the exit code).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from queue import Empty
from typing import Any

import pytest

from jitlab.grading.verdict import MIME

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TIMEOUT = re.compile(r"Timeout of ([\d.]+) seconds exceeded")
EXPLANATION_START = "TRACING CACHE MISS"
# Enough of a traceback to reach back through JAX's frames to the learner's deepest
# line (a loop interrupted while JAX traces it can sit under twenty of JAX's frames).
TRACEBACK_CHARS = 40_000
_POLL_S = 0.1  # how often a kernel that keeps quiet is asked whether it is still alive


class KernelDied(RuntimeError):
    """The kernel process ended while nbval waited for one of its messages."""

    def __init__(self, code: int | None) -> None:
        super().__init__(f"the kernel process exited (code {code})")
        self.code = code


def _exit_code(kernel: Any) -> int | None:
    """The kernel process's exit status, or None while it runs (or cannot be seen)."""
    process = getattr(getattr(getattr(kernel, "km", None), "provisioner", None), "process", None)
    if process is None or process.poll() is None:
        return None
    return int(process.returncode)


def _watch_kernel(kernel: Any) -> None:
    """Make nbval's waits on ``kernel`` end when its process ends: each wait for a
    message is cut into slices of :data:`_POLL_S`, and between slices the process is
    asked whether it still runs. A kernel killed by ``os._exit`` or a crash sends
    nothing more, so without this nbval would wait out the whole cell timeout."""
    if getattr(kernel, "_jitlab_watched", False):
        return
    wait: Callable[..., Any] = kernel.get_message

    def get_message(stream: str, timeout: float | None = None) -> Any:
        left = timeout
        while True:
            piece = _POLL_S if left is None else min(_POLL_S, left)
            try:
                return wait(stream, timeout=piece)
            except Empty:
                if left is not None:
                    left -= piece
                    if left <= 0:
                        raise
                code = _exit_code(kernel)
                if code is not None:
                    raise KernelDied(code) from None

    kernel.get_message = get_message
    kernel._jitlab_watched = True


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("jitlab", "the course's notebook recorder")
    group.addoption("--jitlab-record", default=None, help="folder for executed notebooks")


def _is_cell(item: pytest.Item) -> bool:
    return type(item).__name__ == "IPyNbCell"


def _source_of(notebook: Any) -> str:
    return str((notebook.metadata.get("jitlab") or {}).get("source", ""))


class _Recorder:
    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.notebooks: dict[Path, Any] = {}
        self.cells: dict[Path, dict[int, dict[str, Any]]] = {}

    def cell(self, item: Any) -> dict[str, Any]:
        path = Path(str(item.fspath))
        self.notebooks.setdefault(path, item.parent.nb)
        return self.cells.setdefault(path, {}).setdefault(
            item.cell_num, {"index": item.cell_num, "status": "not run", "seconds": 0.0}
        )

    def write(self) -> None:
        if self.folder is None:
            return
        import nbformat  # here: the plugin loads in every pytest run, even without the course

        for path, notebook in self.notebooks.items():
            source = _source_of(notebook)
            kind = Path(source).parent.name or "notebooks"
            target = self.folder / kind
            target.mkdir(parents=True, exist_ok=True)
            cells = self.cells.get(path, {})
            code = [c for c in notebook.cells if c.cell_type == "code"]
            for index, cell in enumerate(code):
                found = cells.get(index)
                cell.outputs = found.pop("_outputs", []) if found else []
                cell.execution_count = index + 1 if found and found["status"] != "not run" else None
            nbformat.write(notebook, str(target / f"{path.stem}.ipynb"))
            rows = [cells.get(i, {"index": i, "status": "not run"}) for i in range(len(code))]
            for row in rows:
                row.pop("_outputs", None)
            record = {
                "source": source,
                "key": (notebook.metadata.get("jitlab") or {}).get("key"),
                "cells": rows,
            }
            (target / f"{path.stem}.json").write_text(
                json.dumps(record, indent=1) + "\n", encoding="utf-8"
            )


def _output_text(outputs: list[Any]) -> str:
    parts = []
    for out in outputs or []:
        if out.get("output_type") == "stream":
            parts.append(str(out.get("text", "")))
        elif "data" in out:
            parts.append(str(out["data"].get("text/plain", "")))
    return "".join(parts)


def explanations_in(text: str) -> list[str]:
    """JAX's cache-miss explanations in a cell's printed output, one string each."""
    found, current = [], None
    for line in text.splitlines():
        if EXPLANATION_START in line:
            if current:
                found.append("\n".join(current))
            current = [line[line.index(EXPLANATION_START) :]]
        elif current is not None and line.startswith("  "):
            current.append(line)
        elif current is not None:
            found.append("\n".join(current))
            current = None
    if current:
        found.append("\n".join(current))
    return found


def pytest_configure(config: pytest.Config) -> None:
    folder = config.getoption("--jitlab-record")
    config.stash[_KEY] = _Recorder(Path(folder).resolve() if folder else None)


_KEY = pytest.StashKey[_Recorder]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # The kernel starts in the setup of a notebook's first cell; tell it its source.
    if _is_cell(item) and item.cell_num == 0:  # type: ignore[attr-defined]
        from jitlab.course.current import NOTEBOOK_ENV

        source = _source_of(item.parent.nb)  # type: ignore[attr-defined]
        if source:
            os.environ[NOTEBOOK_ENV] = source
        else:
            os.environ.pop(NOTEBOOK_ENV, None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    # By now nbval's setup has started the notebook's kernel.
    kernel = getattr(getattr(item, "parent", None), "kernel", None) if _is_cell(item) else None
    if kernel is not None:
        _watch_kernel(kernel)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    if not _is_cell(item):
        return
    report = outcome.get_result()
    row = item.config.stash[_KEY].cell(item)
    if report.when == "setup" and report.skipped:
        row["status"] = "skipped"
    if report.when != "call":
        if report.when == "setup" and report.failed:
            row.update(status="failed", error=_ANSI.sub("", str(report.longrepr))[-2000:])
        return
    outputs = list(getattr(item, "test_outputs", None) or [])
    row["seconds"] = round(call.duration, 4)
    row["_outputs"] = outputs
    row["explanations"] = explanations_in(_output_text(outputs))
    row["reports"] = [o["data"][MIME] for o in outputs if MIME in (o.get("data") or {})]
    if report.skipped:
        row["status"] = "skipped"
    elif report.passed:
        row["status"] = "passed"
    else:
        text = _ANSI.sub("", str(report.longrepr))
        errors = [o for o in outputs if o.get("output_type") == "error"]
        timeout = _TIMEOUT.search(text)
        died = call.excinfo is not None and isinstance(call.excinfo.value, KernelDied)
        if died:
            row.update(status="died", error=str(call.excinfo.value))  # type: ignore[union-attr]
        elif timeout:
            row.update(status="timeout", error=f"Timeout of {timeout.group(1)} s exceeded")
            if errors:  # the interrupted frames: where the loop was when it was stopped
                traceback = _ANSI.sub("", "\n".join(errors[-1].get("traceback", [])))
                row["traceback"] = traceback[-TRACEBACK_CHARS:]
        elif errors:
            error = errors[-1]
            traceback = _ANSI.sub("", "\n".join(error.get("traceback", [])))
            row.update(
                status="failed",
                ename=str(error.get("ename", "")),
                evalue=str(error.get("evalue", "")),
                traceback=traceback[-TRACEBACK_CHARS:],
            )
        else:
            row.update(status="failed", error=text[-2000:])


def pytest_sessionfinish(session: pytest.Session) -> None:
    session.config.stash[_KEY].write()
