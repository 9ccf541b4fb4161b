"""The one notebook pipeline: convert the Jupytext sources, execute them under nbval.

Everything that runs a notebook goes through here: ``make test`` (lessons), the site
(executed lessons, reused rather than run again), ``jitlab check`` and ``jitlab dev
verify`` (exercises and solutions), ``jitlab dev bench`` (lessons, with measurements on)
and ``jitlab dev matrix`` (lessons and solutions under other JAX releases).

- :func:`convert` writes ``.ipynb`` files (nbval reads only those) into ``_build``,
  stamping each with its source and a key that changes when the source, the course's
  instruments or the locked dependencies change.
- :func:`execute` runs them with pytest and nbval in a subprocess (``--nbval-lax``: a
  cell fails only by raising), with :mod:`jitlab.notebooks.recorder` keeping every cell's
  outcome and the executed notebook.
- :func:`executed_lessons` returns up-to-date executed lessons, running only the stale
  ones; the site calls it, so a lesson executed by ``make test`` is not executed again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import jupytext
import nbformat

from jitlab.course.manifest import Course, load_course
from jitlab.notebooks import run_env, spare_kernel
from jitlab.notebooks.spare_kernel import SpareKernel

DEFAULT_CELL_TIMEOUT_S = 120
PACKAGE = Path(__file__).resolve().parents[1]


def _digest(paths: Iterable[Path]) -> str:
    sha = hashlib.sha256()
    for path in sorted(paths):
        sha.update(path.as_posix().encode())
        sha.update(path.read_bytes())
    return sha.hexdigest()


def execution_key(source: Path, course: Course) -> str:
    """What an executed notebook's outputs depend on: the source, the instruments and
    boxes it calls, and the locked dependencies. A change in any of them re-executes."""
    inputs = [source, *PACKAGE.glob("instruments/*.py"), *PACKAGE.glob("course/*.py")]
    lock = course.root / "requirements.lock"
    if lock.exists():
        inputs.append(lock)
    return _digest(inputs)[:16]


def relative(path: Path, course: Course) -> str:
    try:
        return path.resolve().relative_to(course.root).as_posix()
    except ValueError:
        return str(path.resolve())


def to_notebook(source: Path, course: Course) -> nbformat.NotebookNode:
    """The notebook for a Jupytext source, stamped with where it came from."""
    notebook = jupytext.read(source)
    notebook.metadata["jitlab"] = {
        "source": str(source.resolve()),
        "key": execution_key(source, course),
    }
    return notebook


def convert(
    sources: Sequence[Path],
    folder: Path,
    *,
    course: Course | None = None,
    transform: Callable[[nbformat.NotebookNode], None] | None = None,
) -> list[Path]:
    """Write one ``.ipynb`` per source into ``folder`` (emptied of old notebooks first).

    Sources must have distinct stems: a lesson and its solution share one
    (``01_shapes``), and one would silently overwrite the other. Run them apart."""
    course = course or load_course()
    stems = [source.stem for source in sources]
    shared = sorted({stem for stem in stems if stems.count(stem) > 1})
    if shared:
        raise ValueError(f"sources with the same name cannot run together: {shared}")
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.ipynb"):
        stale.unlink()
    written = []
    for source in sources:
        notebook = to_notebook(source, course)
        if transform is not None:
            transform(notebook)
        target = folder / f"{source.stem}.ipynb"
        nbformat.write(notebook, str(target))
        written.append(target)
    return written


@dataclasses.dataclass(frozen=True)
class CellRun:
    """One code cell as nbval ran it."""

    index: int
    status: str  # "passed", "failed", "timeout", "died", "skipped" or "not run"
    seconds: float = 0.0
    ename: str = ""
    evalue: str = ""
    traceback: str = ""
    error: str = ""
    explanations: tuple[str, ...] = ()
    reports: tuple[dict[str, Any], ...] = ()  # the graders' records (grading.verdict)

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "timeout", "died")

    @property
    def failing_line(self) -> str:
        """The source line that raised (IPython's arrow, or a plain run's last cell frame)."""
        return _failing_line(self.traceback)

    @property
    def timing(self) -> bool:
        """Whether the line that failed compares timings (a ratio, seconds, a speedup):
        such a failure can be a busy machine, so it is run again before it is reported
        as a difference, and it is shown apart from differences in behaviour."""
        return self.failed and timing_line(self.failing_line or self.one_line)

    @property
    def one_line(self) -> str:
        """The error in one line: ``ename: evalue`` or what went wrong. A bare
        ``assert`` has no message, so the line that failed stands in for it."""
        if self.ename:
            message = self.evalue.strip() or _failing_line(self.traceback)
            return f"{self.ename}: {message}".strip()
        return self.error.strip().splitlines()[-1] if self.error.strip() else self.status


_ARROW = re.compile(r"^\s*-+>\s*\d+\s(.*)$", re.MULTILINE)  # "---> 16 assert ..."
# A plain run's frame in a cell: 'File "<cell 16>", line 7, in <module>' and its line.
_CELL_FRAME = re.compile(r'^\s*File "<cell \d+>", line \d+, in .*\n\s*(\S.*)$', re.MULTILINE)
# Names of timings in the course's asserts: ratios, speedups, seconds, medians.
_TIMING = re.compile(
    r"speedup|ratio|per_pair|steady|seconds|_ms\b|_us\b|_s\b|_s\[|finished|returned|"
    r"\bsingle\b|fastest|\btimes?\b"
)


def timing_line(text: str) -> bool:
    """Whether an assertion's line (or an older record's error line) compares timings."""
    return bool(_TIMING.search(text))


def _failing_line(traceback: str) -> str:
    """The source line IPython marks with an arrow in the last frame of a traceback (or,
    from :mod:`jitlab.notebooks.plain`, the line under the last frame in a cell)."""
    marked = [m.group(1) for m in _ARROW.finditer(traceback)]
    marked = marked or [m.group(1) for m in _CELL_FRAME.finditer(traceback)]
    return marked[-1].strip() if marked else ""


@dataclasses.dataclass(frozen=True)
class NotebookRun:
    """One notebook's execution: where it came from, each cell, and the executed copy."""

    source: Path
    key: str | None
    cells: tuple[CellRun, ...]
    executed: Path

    @property
    def passed(self) -> bool:
        return bool(self.cells) and all(c.status in ("passed", "skipped") for c in self.cells)

    @property
    def first_failure(self) -> CellRun | None:
        return next((c for c in self.cells if c.failed), None)


def read_run(record: Path) -> NotebookRun:
    """Load what the recorder wrote for one notebook."""
    data = json.loads(record.read_text(encoding="utf-8"))
    cells = tuple(
        CellRun(
            index=c["index"],
            status=c["status"],
            seconds=c.get("seconds", 0.0),
            ename=c.get("ename", ""),
            evalue=c.get("evalue", ""),
            traceback=c.get("traceback", ""),
            error=c.get("error", ""),
            explanations=tuple(c.get("explanations", ())),
            reports=tuple(c.get("reports", ())),
        )
        for c in data["cells"]
    )
    return NotebookRun(
        source=Path(data["source"]),
        key=data.get("key"),
        cells=cells,
        executed=record.with_suffix(".ipynb"),
    )


@dataclasses.dataclass(frozen=True)
class Execution:
    """The outcome of one :func:`execute`: each notebook's run, and pytest's own words."""

    runs: dict[Path, NotebookRun]
    returncode: int
    output: str


def pytest_command(
    notebooks: Sequence[Path],
    record: Path,
    *,
    cell_timeout_s: int,
    stop_at_first_failure: bool = False,
    workers: int = 1,
) -> list[str]:
    """The pytest command line that runs notebooks under nbval with the recorder;
    ``workers`` > 1 spreads the notebooks over that many processes (pytest-xdist, one
    notebook to a worker, since its cells share one kernel)."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        *map(str, notebooks),
        "-p",
        "nbval",
        "-p",
        "jitlab.notebooks.recorder",
        "--nbval-lax",
        "--nbval-current-env",
        f"--nbval-cell-timeout={cell_timeout_s}",
        f"--jitlab-record={record}",
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(Path(notebooks[0]).parent),
    ]
    if workers > 1:
        command += ["-p", "xdist", "-n", str(workers), "--dist", "loadfile"]
    if stop_at_first_failure:
        command.append("-x")
    return command


def execute(
    sources: Sequence[Path],
    *,
    work: Path,
    record: Path,
    course: Course | None = None,
    cell_timeout_s: int = DEFAULT_CELL_TIMEOUT_S,
    stop_at_first_failure: bool = False,
    transform: Callable[[nbformat.NotebookNode], None] | None = None,
    env: dict[str, str] | None = None,
    python: str | None = None,
    in_process: bool = False,
    workers: int = 1,
    kernel: SpareKernel | None = None,
) -> Execution:
    """Convert ``sources`` into ``work`` and run them under nbval; records go to ``record``.

    ``python`` runs pytest with another interpreter (the release matrix does, with an
    older JAX); the kernels use that interpreter too (``--nbval-current-env``).
    ``in_process`` runs pytest in this process instead of a new one (the runner does),
    and then ``kernel``, a kernel started beforehand for the one source, is adopted by
    nbval instead of starting another (see :mod:`jitlab.notebooks.spare_kernel`).
    """
    course = course or load_course()
    notebooks = convert(sources, work, course=course, transform=transform)
    command = pytest_command(
        notebooks,
        record,
        cell_timeout_s=cell_timeout_s,
        stop_at_first_failure=stop_at_first_failure,
        workers=workers,
    )
    if python is not None:
        command[0] = python
    environment = run_env(env)
    if python is None and in_process:
        returncode, output = _pytest_here(command[3:], course.root, environment, kernel)
    else:
        completed = subprocess.run(
            command,
            cwd=course.root,
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
        returncode, output = completed.returncode, completed.stdout
    runs = {}
    for source in sources:
        found = record / source.parent.name / f"{source.stem}.json"
        if found.exists():
            runs[source] = read_run(found)
    return Execution(runs=runs, returncode=returncode, output=output)


def _pytest_here(
    arguments: list[str], cwd: Path, env: dict[str, str], kernel: SpareKernel | None
) -> tuple[int, str]:
    """Run pytest in this process: the learner's runner saves a Python start-up and the
    imports it already made (jupytext, nbformat). The kernel is still a fresh process,
    so the learner's code runs exactly as under CI."""
    import contextlib
    import io

    import pytest

    saved_env, saved_cwd = dict(os.environ), Path.cwd()
    output = io.StringIO()
    # pytest turns Ctrl-C into a session that ends "interrupted", with whatever cells
    # ran recorded: the check would then read a half-run notebook as a failure. The
    # interrupt is noted here and raised again once pytest has cleaned up.
    interrupted = []
    previous = None
    if threading.current_thread() is threading.main_thread():

        def note_interrupt(signum: int, frame: Any) -> None:
            interrupted.append(signum)
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGINT, note_interrupt)
    if kernel is not None:
        spare_kernel.offer(kernel)
        env = {**env, spare_kernel.PROVISIONER_ENV: spare_kernel.PROVISIONER}
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            code = int(pytest.main(arguments))
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        spare_kernel.withdraw()
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
    if interrupted:
        raise KeyboardInterrupt
    return code, output.getvalue()


EXECUTED = "executed"


def executed_dir(course: Course) -> Path:
    return course.build_dir / EXECUTED


def executed_lessons(
    course: Course | None = None, *, echo: Callable[[str], Any] = print
) -> list[NotebookRun]:
    """Every lesson executed, reusing each one whose key still matches (``make test``
    executes them under nbval with the recorder on); runs the stale ones and raises
    ``RuntimeError`` naming the lesson and cell if any fails."""
    course = course or load_course()
    record = executed_dir(course)
    runs: dict[Path, NotebookRun] = {}
    stale = []
    for lesson in course.lessons:
        found = record / "lessons" / f"{lesson.stem}.json"
        if found.exists():
            run = read_run(found)
            if run.key == execution_key(lesson.path, course) and run.passed:
                runs[lesson.path] = run
                continue
        stale.append(lesson.path)
    if stale:
        # On every core, as `make test` runs them; a worker for every two lessons at least,
        # since each one starts Python, pytest and nbval. Each lesson is its own run, so a
        # line says when it is done: the site's build is minutes of work, never silent.
        workers = max(1, min(len(stale) // 2, os.cpu_count() or 1))
        echo(f"executing {len(stale)} lesson(s): {', '.join(p.stem for p in stale)}")
        work = course.build_dir / "notebooks" / "site"

        def run_one(source: Path) -> tuple[Path, Execution, float]:
            started = time.monotonic()
            done = execute([source], work=work / source.stem, record=record, course=course)
            return source, done, time.monotonic() - started

        finished: dict[Path, Execution] = {}
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(run_one, source) for source in stale]
            for count, future in enumerate(as_completed(futures), start=1):
                source, done, seconds = future.result()
                finished[source] = done
                run = done.runs.get(source)
                verdict = "" if run is not None and run.passed else "  FAILED"
                echo(f"  [{count}/{len(stale)}] {source.stem}  {seconds:.0f} s{verdict}")
        for source in stale:
            done = finished[source]
            run = done.runs.get(source)
            if run is None or not run.passed:
                failure = run.first_failure if run else None
                where = f"cell {failure.index}: {failure.one_line}" if failure else done.output
                raise RuntimeError(f"{source.name} failed: {where}")
            runs[source] = run
    return [runs[lesson.path] for lesson in course.lessons]
