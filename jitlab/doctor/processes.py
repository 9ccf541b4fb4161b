"""One report per process of a ``jax.distributed`` job, written as the job runs.

Every process of a multi-process job traces and compiles for itself, so each one keeps
its own report: ``report.json`` becomes ``report.p0.json``, ``report.p1.json``, ... (the
process index in the name; a job of one process keeps the plain name). The file is
written again after every compilation, marked ``"partial": true``, and a last time when
the run ends, marked complete. A process that dies (a collective that aborts, a launcher
that kills a hung job) leaves the report of everything up to its last compilation, which
``jitlab doctor --merge`` shows as partial.

Two places write these reports:

- ``jitlab doctor --json report.json -- python train.py``, run in every process (as the
  launcher starts them: ``srun``, ``mpirun``, a script);
- ``with jitlab.doctor.record_process("report.json"): ...`` inside the program.

Each report says which run it belongs to, so that reports of different runs are never
merged: the command, the number of processes, the time the recording started, and a run
id when the launcher gives one (``$JITLAB_DOCTOR_RUN``, the same in every process of a
job; the course's launcher sets its own).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jax

from jitlab.doctor import budgets as budgets_mod
from jitlab.doctor import wrap
from jitlab.doctor.recorder import COUNTERS, TRANSFORM, Recorder
from jitlab.doctor.report import Report, to_dict
from jitlab.instruments import events

RUN_ENV = "JITLAB_DOCTOR_RUN"
# The course's own launcher (jitlab.instruments.multiprocess) stamps every worker of one launch with
# the time it started them: as good a run id as any.
LAUNCHER_RUN_ENVS = (RUN_ENV, "JITLAB_LAUNCHED_AT")
# The file is rewritten after each of the first compilations, then after every tenth:
# a program that compiles thousands of times must not spend its run writing reports.
_EVERY_WRITE, _THEN_EVERY = 200, 10


def run_id() -> str | None:
    for name in LAUNCHER_RUN_ENVS:
        value = os.environ.get(name)
        if value:
            return f"{name}={value}"
    return None


def process_path(path: str | Path, index: int, count: int) -> Path:
    """``report.json`` for a job of one process; ``report.p3.json`` for process 3."""
    path = Path(path)
    if count <= 1:
        return path
    return path.with_name(f"{path.stem}.p{index}{path.suffix or '.json'}")


def _process_index() -> tuple[int, int]:
    """(index, count) of this process. Only asked once JAX has compiled something, when
    its backends, and jax.distributed if the program uses it, are up."""
    try:
        return jax.process_index(), jax.process_count()
    except Exception:  # no backend: a single process as far as the doctor can tell
        return 0, 1


class ProcessRecorder(Recorder):
    """A recorder that rewrites its report file after every compilation."""

    def __init__(
        self,
        path: str | Path,
        command: Sequence[str] | None = None,
        budgets: Sequence[budgets_mod.Budget] = (),
    ) -> None:
        super().__init__()
        self.path = Path(path)
        self.command = list(command if command is not None else ["python", *sys.argv])
        self.budgets = list(budgets)
        self.started_at = time.time()
        self.run = run_id()
        self._calls: dict[tuple[tuple[str, int, str, str], int], int] = {}
        self._where: tuple[int, int] | None = None
        self._writes = 0
        self._calls_before: dict[tuple[str, int, str, str], int] = {}
        # Compilations of known functions whose call has not returned yet: a process
        # that dies in that call (a collective that does not match) still reports them.
        self._unfinished: list[dict[str, Any]] = []
        self.write_errors: list[str] = []

    def start(self) -> ProcessRecorder:
        self._calls_before = {k: c.calls for k, c in COUNTERS.items()}
        super().start()
        events.subscribe(self._on_duration)
        return self

    def stop(self) -> None:
        if self.stopped is None:
            events.unsubscribe(self._on_duration)
        super().stop()

    def _call_number(self, key: tuple[str, int, str, str]) -> int | None:
        counter = COUNTERS.get(key)
        if counter is None:
            return None
        return counter.calls - self._calls_before.get(key, 0)

    def _on_duration(self, event: str, seconds: float, **kwargs: Any) -> None:
        """A backend compilation of a function seen before: written down before the
        program runs, in case running it is what kills the process."""
        if event != events.COMPILE_EVENT:
            return
        try:
            name = str(kwargs.get("fun_name", ""))
            name = name[4:-1] if name.startswith("jit(") and name.endswith(")") else name
            known = [(k, r) for k, r in self.functions.items() if r.event_name == name]
            if len(known) != 1:
                return
            key, record = known[0]
            said = next(
                (e.text for e in reversed(events.STREAM) if e.kind == "explain" and e.name == name),
                None,
            )
            self._unfinished.append(
                {
                    "name": record.name,
                    "defined_at": record.location,
                    "call": self._call_number(key),
                    "jax_explanation": said,
                }
            )
            self.write(partial=True)
        except Exception as err:  # never break the program from inside JAX's compiler
            self.internal_errors.append(f"{type(err).__name__}: {err}")

    def add(self, miss_events: list[Any], info: Any) -> Any:
        miss = super().add(miss_events, info)
        key = info.function.key
        record = self.functions[key]
        if miss.kind != TRANSFORM:
            # the function's call number (1-based, counted from the recorder's start)
            self._calls[(key, miss.number)] = self._call_number(key)
        self._unfinished = [u for u in self._unfinished if u["name"] != record.name]
        self._writes += 1
        if self._writes <= _EVERY_WRITE or self._writes % _THEN_EVERY == 0:
            self.write(partial=True)
        return miss  # the caller keeps it: a .lower()'s .compile() settles it later

    @property
    def written_path(self) -> Path:
        index, count = self._where or _process_index()
        return process_path(self.path, index, count)

    def data(self, partial: bool, report: Report | None = None) -> dict[str, Any]:
        """The JSON report, with each compilation's call number and the process block."""
        report = report or Report.from_recorder(self, self.budgets, self.command)
        data = to_dict(report)
        keys = {(r.name, r.location): k for k, r in self.functions.items()}
        for f in data["functions"]:
            key = keys.get((f["name"], f["defined_at"]))
            for m in f["misses"]:
                if m["kind"] != TRANSFORM:
                    m["call"] = self._calls.get((key, m["number"]))
        if self._where is None:
            self._where = _process_index()
        index, count = self._where
        data["unfinished"] = list(self._unfinished) if partial else []
        data["process"] = {
            "index": index,
            "count": count,
            "run": self.run,
            "started": self.started_at,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "partial": partial,
        }
        return data

    def write(self, partial: bool, report: Report | None = None) -> Path | None:
        """Write the report (atomically: a reader never sees half a file)."""
        target = self.written_path
        scratch = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            data = self.data(partial, report)
            scratch.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
            os.replace(scratch, target)
            return target
        except OSError as err:
            self.write_errors.append(f"{target}: {err.strerror or err}")
            with contextlib.suppress(OSError):
                scratch.unlink()  # never leave the half-written file behind
            return None


@contextmanager
def record_process(
    path: str | Path,
    command: Sequence[str] | None = None,
    budgets: Sequence[budgets_mod.Budget] = (),
) -> Iterator[ProcessRecorder]:
    """Watch ``jax.jit`` inside the block and keep this process's report in ``path`` (the
    process index added to the name under jax.distributed), up to date after every
    compilation and complete at the end of the block."""
    recorder = ProcessRecorder(path, command, budgets)
    wrap.install()
    recorder.start()
    try:
        yield recorder
    finally:
        recorder.stop()
        wrap.uninstall()
        recorder.write(partial=False)
