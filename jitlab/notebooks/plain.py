"""Lessons run as plain Python, cell by cell, where no Jupyter kernel can start.

nbval needs a kernel, and a kernel needs sockets: on the TPU machine the course is
measured on, every internet socket is refused (loopback included) and a kernel over
``ipc`` dies before it answers. A lesson is plain Python in percent format, so it can
run without one: :func:`run_cells` runs its code cells in order in one namespace (a
module named ``__main__``, as a kernel's), each in a fresh child process per lesson
(as each notebook gets a fresh kernel), and records each cell's outcome the way
:mod:`jitlab.notebooks.recorder` records nbval's (``passed``, ``failed`` with the
exception, ``timeout``, ``died``, ``skipped``): a failing cell does not stop the next,
as under ``--nbval-lax``. :func:`execute_plain` returns the same
:class:`~jitlab.notebooks.pipeline.Execution` as the kernel path, so ``jitlab dev bench``
reads either alike.

What differs from a kernel: no IPython (no magics, no rich display; a cell's last
expression is printed with ``repr`` as IPython's display hook would show its text), and
plots go to matplotlib's ``Agg`` backend. The lessons use neither magics nor widgets.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import linecache
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jitlab.course.manifest import Course, load_course
from jitlab.instruments.measurements import NOTEBOOK_ENV
from jitlab.notebooks import run_env
from jitlab.notebooks.pipeline import Execution, NotebookRun, execution_key, read_run
from jitlab.notebooks.recorder import TRACEBACK_CHARS, explanations_in

_OUTPUT_CHARS = 4_000  # the end of what a cell printed, kept in its record


class CellTimeout(Exception):
    """A cell ran past the cell timeout (raised in it by ``SIGALRM``)."""


def sockets_refused() -> str | None:
    """Why this machine refuses a TCP socket on 127.0.0.1 (the TPU machine: errno 97),
    or None where it allows one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
    except OSError as err:
        return f"this machine refuses a socket on 127.0.0.1 ({err})"
    return None


def kernel_unavailable() -> str | None:
    """Why no Jupyter kernel can start here, or None where one can: a kernel talks to
    its client over TCP on 127.0.0.1, so a machine that refuses loopback sockets has
    none; nor has an environment without nbval."""
    refused = sockets_refused()
    if refused:
        return f"{refused}, so no Jupyter kernel can start"
    for module in ("nbval", "ipykernel"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed here"
    return None


# ----------------------------------------------------------------- the child process


class _Tee(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` for the whole run: writes pass through to the real
    stream and into the running cell's buffer. Installed once, before any cell runs, so
    a logging handler made by a cell (JAX's cache-miss explanations) writes here too."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.buffer_ = io.StringIO()

    def write(self, text: str) -> int:
        self.real.write(text)
        return self.buffer_.write(text)

    def flush(self) -> None:
        self.real.flush()

    def isatty(self) -> bool:
        return False

    def take(self) -> str:
        text, self.buffer_ = self.buffer_.getvalue(), io.StringIO()
        return text


def _alarm(signum: int, frame: Any) -> None:
    raise CellTimeout


def _run_one(source: str, name: str, namespace: dict[str, Any]) -> None:
    """Run one cell's code; its last expression, if any, printed as IPython shows it."""
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    tree = ast.parse(source, filename=name)
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    if last is not None:
        tree.body.pop()
    exec(compile(tree, name, "exec"), namespace)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), name, "eval"), namespace)
        if value is not None:
            print(repr(value))


def _failing_line(err: BaseException) -> str:
    """The cell's line that raised, for an error without a message (a bare ``assert``),
    as the recorder reads it off IPython's arrow."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename.startswith("<cell")]
    return (frames[-1].line or "").strip() if frames else ""


def _tags(cell: Any) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def run_cells(source: Path, out: Path, *, cell_timeout_s: int, key: str | None = None) -> int:
    """Run ``source``'s code cells in this process, writing the record to ``out`` after
    each cell (a crash leaves the cell it was in marked ``running``). Returns the number
    of cells that failed."""
    import jupytext

    notebook = jupytext.read(source)
    cells = [c for c in notebook.cells if c.cell_type == "code"]
    rows: list[dict[str, Any]] = [{"index": i, "status": "not run"} for i in range(len(cells))]
    record = {"source": str(source.resolve()), "key": key, "runner": "plain", "cells": rows}

    def save() -> None:
        out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")

    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    # The process's own __main__, streams and alarm handler come back afterwards, so a
    # caller in the same process (a test) finds them as it left them.
    saved = sys.modules.get("__main__"), sys.stdout, sys.stderr
    handler = signal.getsignal(signal.SIGALRM)
    sys.modules["__main__"] = main
    stdout, stderr = _Tee(sys.stdout), _Tee(sys.stderr)
    sys.stdout, sys.stderr = stdout, stderr  # type: ignore[assignment]
    signal.signal(signal.SIGALRM, _alarm)
    try:
        _run_all(cells, rows, main, stdout, stderr, save, cell_timeout_s)
    finally:
        sys.modules["__main__"], sys.stdout, sys.stderr = saved  # type: ignore[assignment]
        signal.signal(signal.SIGALRM, handler)
    save()
    return sum(row["status"] in ("failed", "timeout") for row in rows)


def _run_all(
    cells: list[Any],
    rows: list[dict[str, Any]],
    main: types.ModuleType,
    stdout: _Tee,
    stderr: _Tee,
    save: Any,
    cell_timeout_s: int,
) -> None:
    """Each code cell in order, its outcome written into its row."""
    for index, cell in enumerate(cells):
        row = rows[index]
        tags = _tags(cell)
        if "nbval-skip" in tags or "skip" in tags:
            row["status"] = "skipped"
            continue
        row["status"] = "running"
        save()
        started = time.perf_counter()
        signal.alarm(cell_timeout_s)
        try:
            _run_one(cell.source, f"<cell {index}>", main.__dict__)
        except CellTimeout:
            row.update(status="timeout", error=f"Timeout of {cell_timeout_s} s exceeded")
            row["traceback"] = traceback.format_exc()[-TRACEBACK_CHARS:]
        except BaseException as err:  # noqa: BLE001 (a cell's SystemExit is its failure too)
            if "raises-exception" in tags:
                row["status"] = "passed"
            else:
                row.update(
                    status="failed",
                    ename=type(err).__name__,
                    evalue=str(err) or _failing_line(err),
                    traceback=traceback.format_exc()[-TRACEBACK_CHARS:],
                )
        else:
            row["status"] = "passed"
        finally:
            signal.alarm(0)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        text = stdout.take() + stderr.take()
        row["seconds"] = round(time.perf_counter() - started, 4)
        row["explanations"] = explanations_in(text)
        row["output"] = text[-_OUTPUT_CHARS:]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--cell-timeout", type=int, default=300)
    parser.add_argument("--key", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault(NOTEBOOK_ENV, str(args.source.resolve()))  # jitlab.intro() reads it
    run_cells(args.source, args.out, cell_timeout_s=args.cell_timeout, key=args.key)
    return 0  # failed cells are in the record, as nbval's are in the recorder's


# ----------------------------------------------------------------- the parent


def execute_plain(
    sources: Sequence[Path],
    *,
    record: Path,
    course: Course | None = None,
    cell_timeout_s: int = 300,
    env: dict[str, str] | None = None,
    python: str | None = None,
) -> Execution:
    """Run each source in a child process of its own (``python``, this one's by default),
    records in ``record/<folder>/<stem>.json`` as the recorder writes them. A child that
    ends inside a cell (a crash, ``os._exit``) leaves that cell ``died``."""
    course = course or load_course()
    runs: dict[Path, NotebookRun] = {}
    outputs, worst = [], 0
    for source in sources:
        target = record / source.parent.name / f"{source.stem}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        command = [python or sys.executable, "-m", "jitlab.notebooks.plain", str(source)]
        command += [str(target), f"--cell-timeout={cell_timeout_s}"]
        command += [f"--key={execution_key(source, course)}"]
        extra = {**(env or {}), NOTEBOOK_ENV: str(source.resolve()), "MPLBACKEND": "Agg"}
        done = subprocess.run(
            command,
            cwd=course.root,
            env=run_env(extra),
            capture_output=True,
            text=True,
            check=False,
        )
        outputs.append(done.stdout + done.stderr)
        worst = worst or done.returncode
        if not target.exists():
            continue
        data = json.loads(target.read_text(encoding="utf-8"))
        for row in data["cells"]:
            if row["status"] == "running":
                row.update(status="died", error=f"the process exited (code {done.returncode})")
        target.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        runs[source] = read_run(target)
    return Execution(runs=runs, returncode=worst, output="".join(outputs))


if __name__ == "__main__":
    sys.exit(main())
