"""Run one function on several JAX processes joined by ``jax.distributed``, on this machine.

Lesson 14 and its grader need real multi-process JAX: every process traces and compiles
for itself, and the processes meet only in collectives. On CPU that runs without a
network: N processes on 127.0.0.1, ``jax_cpu_collectives_implementation="gloo"``, and
``jax.distributed.initialize`` with process 0 as the coordinator.

The parent (a notebook, a grader, a test) calls :func:`run`. Each worker process:

1. asks Linux to kill it when its parent dies (its very first line), writes a
   ``started`` record, switches JAX's CPU collectives to gloo and applies the
   ``jax_config`` option;
2. waits for the parent's "go" (processes other than 0 only: see below), then calls
   ``jax.distributed.initialize``;
3. writes ``ready``, imports the task (``"package.module:function"`` or
   ``"/path/to/file.py:function"``) and calls it with a :class:`Worker`;
4. writes ``error`` (with the exception) or ``finished``, and exits.

A task reports by ``worker.emit(kind, **fields)``: one JSON line in a file of its own
(gloo prints to stdout from C++, so stdout is no place for records). The parent reads
them back as :class:`WorkerRun` records.

Why so careful about processes? Because a mismatched program does not always fail: a
process can wait for ever in a collective, or in ``jax.distributed``'s shutdown barrier
for a peer that is gone. So the parent:

- starts every worker in a session of its own and, whatever happens (also when the
  calling code raises or is interrupted), kills each one with SIGKILL and reaps it.
  Not SIGTERM: ``jax.distributed`` installs a SIGTERM handler (its preemption
  notifier) and the process keeps running;
- asks the kernel to kill a worker whose parent dies (``PR_SET_PDEATHSIG`` on Linux),
  so a crashed notebook leaves no worker behind;
- stops the run after ``timeout`` seconds in all, or after ``stall_timeout`` seconds in
  which no worker wrote a record or exited (once all are up): a hang costs seconds;
- binds the coordinator to 127.0.0.1 only, on a free port; when the port was taken in
  the meantime, process 0 fails to start (it says so, or gRPC's log does: the failed
  start sometimes crashes it) and the run starts again on another port. The other
  processes are held back until process 0 is listening on the port, so that they never
  talk to whatever else took it;
- stops at once when a process dies before ``jax.distributed`` is up, since the others
  would wait for it for minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
PORT_TAKEN_EXIT = 75
NO_GO_EXIT = 76
INIT_FAILED_EXIT = 77
TASK_FAILED_EXIT = 1
POLL_SECONDS = 0.05
LAUNCHED_ENV = "JITLAB_LAUNCHED_AT"
WORKER_ENV = "JITLAB_WORKER_PROCESS"  # set in every worker: workers never launch workers

PRELUDE = """\
import collections
import functools
import hashlib
import logging
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jitlab
"""
"""What a module written by :func:`write_module` imports before the functions' sources."""


class LaunchError(RuntimeError):
    """The workers could not be started (no free port, a crash before they were up)."""


class WorkersFailed(AssertionError):
    """A run that was expected to succeed did not; the message holds every worker's log."""


# --- inside a worker ---------------------------------------------------------------------


@dataclasses.dataclass
class Worker:
    """What a task receives: who this process is, the options, and a way to report."""

    process_id: int
    num_processes: int
    options: dict[str, Any]
    _records: Any = dataclasses.field(repr=False, default=None)
    _start: float = dataclasses.field(repr=False, default_factory=time.perf_counter)

    def emit(self, kind: str, **fields: Any) -> None:
        """Write one record (a JSON line) that the parent will read back."""
        record = {
            "kind": kind,
            "process_id": self.process_id,
            "t": round(time.perf_counter() - self._start, 4),
            **fields,
        }
        self._records.write(json.dumps(record, default=_jsonable) + "\n")
        self._records.flush()


def _jsonable(value: Any) -> Any:
    """NumPy and JAX values as plain lists and numbers, anything else as text."""
    if hasattr(value, "tolist"):
        with contextlib.suppress(Exception):
            return value.tolist()
    if hasattr(value, "__array__"):
        with contextlib.suppress(Exception):
            import numpy as np

            return np.asarray(value).tolist()
    return str(value)


def _load_task(target: str) -> Callable[[Worker], Any]:
    where, _, name = target.rpartition(":")
    if not where or not name:
        raise ValueError(f"task {target!r} is not 'module:function' or 'file.py:function'")
    if where.endswith(".py"):
        path = Path(where)
        spec = importlib.util.spec_from_file_location(f"_jitlab_task_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # so that dataclasses and pickling find it
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def _worker_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="One jitlab worker process (started by run).")
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--records", required=True)
    parser.add_argument("--options", default="{}")
    parser.add_argument("--parent", type=int, default=None)
    args = parser.parse_args(argv)

    with open(args.records, "a", encoding="utf-8") as records:
        options = json.loads(args.options)
        worker = Worker(args.process_id, args.num_processes, options, records)
        worker.emit("started", pid=os.getpid())
        import jax

        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        for name, value in worker.options.get("jax_config", {}).items():
            jax.config.update(name, value)

        if args.process_id != 0 and sys.stdin.readline().strip() != "go":
            worker.emit("error", where="start", type="NoGo", message="the parent never said go")
            return NO_GO_EXIT
        try:
            jax.distributed.initialize(
                coordinator_address=f"{HOST}:{args.port}",
                coordinator_bind_address=f"{HOST}:{args.port}",
                num_processes=args.num_processes,
                process_id=args.process_id,
                cluster_detection_method="deactivate",
                **worker.options.get("initialize", {}),
            )
        except Exception as err:  # JaxRuntimeError: "Failed to start RPC server" when bound
            taken = args.process_id == 0 and "Failed to start RPC server" in str(err)
            worker.emit(
                "port taken" if taken else "error",
                where="initialize",
                type=type(err).__name__,
                message=str(err),
            )
            records.flush()
            os._exit(PORT_TAKEN_EXIT if taken else INIT_FAILED_EXIT)  # nothing to shut down
        launched = float(os.environ.get(LAUNCHED_ENV, "nan"))
        worker.emit(
            "ready",
            port=args.port,
            startup_s=round(time.time() - launched, 4),  # interpreter, imports, initialize
            process_index=jax.process_index(),
            devices=len(jax.devices()),
            local_devices=len(jax.local_devices()),
        )
        try:
            _load_task(args.target)(worker)
        except Exception as err:
            worker.emit(
                "error",
                where="task",
                type=type(err).__name__,
                message=str(err),
                traceback=traceback.format_exc()[-4000:],
            )
            return TASK_FAILED_EXIT  # a normal exit: jax.distributed shuts down as usual
        worker.emit("finished")
        return 0


# --- in the parent -----------------------------------------------------------------------


@dataclasses.dataclass
class WorkerRun:
    """One worker process, as the parent saw it: exit status, records and log."""

    process_id: int
    pid: int
    returncode: int
    killed: bool  # the parent killed it (time out or stall)
    records: list[dict[str, Any]]
    log: str  # stdout and stderr together

    def of(self, kind: str) -> list[dict[str, Any]]:
        """Every record of one kind, in order."""
        return [r for r in self.records if r.get("kind") == kind]

    def one(self, kind: str) -> dict[str, Any]:
        """The single record of one kind (raises if there is none or several)."""
        found = self.of(kind)
        if len(found) != 1:
            raise WorkersFailed(
                f"process {self.process_id}: expected one {kind!r} record, found {len(found)}"
                f"\n{self.describe()}"
            )
        return found[0]

    @property
    def error(self) -> dict[str, Any] | None:
        """The task's exception, if it raised one."""
        errors = self.of("error")
        return errors[-1] if errors else None

    @property
    def signal_name(self) -> str | None:
        """The signal that ended the process (``SIGKILL``, ``SIGABRT``), if one did."""
        if self.returncode >= 0:
            return None
        with contextlib.suppress(ValueError):
            return signal.Signals(-self.returncode).name
        return f"signal {-self.returncode}"

    @property
    def last_record_t(self) -> float:
        return max((r.get("t", 0.0) for r in self.records), default=0.0)

    def status(self) -> str:
        """How the process ended, in a few words."""
        if self.killed:
            return "killed by the launcher"
        if self.signal_name:
            return f"died of {self.signal_name}"
        return f"exit {self.returncode}"

    def describe(self, log_lines: int = 15) -> str:
        lines = [f"--- process {self.process_id} (pid {self.pid}): {self.status()}"]
        lines += [json.dumps(r)[:400] for r in self.records]
        tail = [ln for ln in self.log.splitlines() if ln.strip()][-log_lines:]
        if tail:
            lines.append("    log: " + "\n    log: ".join(ln[:300] for ln in tail))
        return "\n".join(lines)


@dataclasses.dataclass
class Run:
    """Every worker of one launch, and how the launch ended."""

    workers: list[WorkerRun]
    port: int
    attempts: int  # 1, or more when a port was taken
    seconds: float  # from the first start to the last reaped worker
    stopped: str | None  # None, "stalled", "timed out" or "failed to start"
    quiet_seconds: float  # how long nothing happened before the launcher stopped it

    @property
    def ok(self) -> bool:
        """Every worker finished its task and exited 0."""
        return self.stopped is None and all(
            w.returncode == 0 and w.of("finished") for w in self.workers
        )

    def check(self) -> Run:
        """Raise :class:`WorkersFailed` with every log unless the run is ``ok``."""
        if not self.ok:
            raise WorkersFailed(self.describe())
        return self

    def one(self, kind: str) -> list[dict[str, Any]]:
        """The single record of ``kind`` from each process, in process order."""
        return [w.one(kind) for w in self.workers]

    def describe(self) -> str:
        head = f"run on port {self.port} ({self.attempts} attempt(s), {self.seconds:.1f} s)"
        if self.stopped:
            head += f", {self.stopped} after {self.quiet_seconds:.1f} s without news"
        return "\n".join([head, *(w.describe() for w in self.workers)])


def free_port(host: str = HOST) -> int:
    """A TCP port nobody listens on right now (someone may take it before we do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def function_source(fn: Callable[..., Any]) -> str:
    """The source of a function (decorators included), as written."""
    return textwrap.dedent(inspect.getsource(inspect.unwrap(fn)))


def write_module(path: Path, functions: Iterable[Callable[..., Any]], prelude: str = PRELUDE):
    """Write ``prelude`` and the source of each function to ``path``, for the workers.

    Each function must be self-contained: it may use the prelude's names (jax, jnp, np,
    NamedSharding, P, functools, os, time, jitlab) and the other functions, nothing else
    from the notebook that defined it.
    """
    parts = [prelude] + [function_source(fn) for fn in functions]
    Path(path).write_text("\n\n".join(parts), encoding="utf-8")
    return Path(path)


def _worker_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("JITLAB_REPORT", None)  # the grader reports from the parent, not the workers
    flags = [
        flag
        for flag in env.get("XLA_FLAGS", "").split()
        if not flag.startswith("--xla_force_host_platform_device_count")
    ]
    env["XLA_FLAGS"] = " ".join(flags)
    env.update(extra or {})
    env[WORKER_ENV] = "1"
    return env


# The worker's first lines: die with the parent before anything slow (importing jitlab
# imports JAX), then hand over to _worker_main.
_BOOT = """\
import sys
if sys.platform == "linux":
    import ctypes, os, signal
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    parent = [a for a in sys.argv if a.startswith("--parent=")]
    if parent and os.getppid() != int(parent[0].split("=")[1]):
        os._exit(76)  # the parent is already gone
from jitlab.instruments.multiprocess import _worker_main
sys.exit(_worker_main(sys.argv[1:]))
"""


def _listening(pid: int, port: int) -> bool:
    import psutil

    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in connections)


class _Launch:
    """One attempt: N processes on one port. Always ``close()`` it."""

    def __init__(self, target, num_processes, port, options, envs, directory) -> None:
        self.port = port
        self.procs: list[subprocess.Popen] = []
        self.record_paths = [directory / f"p{i}-port{port}.jsonl" for i in range(num_processes)]
        self.log_paths = [directory / f"p{i}-port{port}.log" for i in range(num_processes)]
        self.killed = [False] * num_processes
        self._sizes = [0] * num_processes
        self._logs = []
        launched = str(time.time())
        for i in range(num_processes):
            log = open(self.log_paths[i], "wb")  # noqa: SIM115 (closed in close())
            self._logs.append(log)
            command = [
                sys.executable,
                "-c",
                _BOOT,
                f"--process-id={i}",
                f"--num-processes={num_processes}",
                f"--port={port}",
                f"--target={target}",
                f"--records={self.record_paths[i]}",
                f"--options={json.dumps(options)}",
                f"--parent={os.getpid()}",
            ]
            self.procs.append(
                subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**envs[i], LAUNCHED_ENV: launched},
                    start_new_session=True,
                )
            )
            if i == 0:  # the others wait for "go" on it
                with contextlib.suppress(BrokenPipeError, OSError):
                    self.procs[-1].stdin.close()

    def records(self, i: int) -> list[dict[str, Any]]:
        path = self.record_paths[i]
        if not path.exists():
            return []
        text = path.read_text(encoding="utf-8")
        complete = text[: text.rfind("\n") + 1]
        out = []
        for line in complete.splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
        return out

    def port_taken(self) -> bool:
        """Did process 0 fail to bind the coordinator's port? It says so in a record, or,
        when the failed start crashes the process first (it sometimes segfaults), in
        gRPC's log line."""
        if any(r.get("kind") == "port taken" for r in self.records(0)):
            return True
        log = self.log_paths[0].read_text(encoding="utf-8", errors="replace")
        return "Address already in use" in log

    def news(self) -> bool:
        """Did any worker write a record since the last look?"""
        changed = False
        for i, path in enumerate(self.record_paths):
            size = path.stat().st_size if path.exists() else 0
            if size != self._sizes[i]:
                self._sizes[i] = size
                changed = True
        return changed

    def go(self) -> None:
        for proc in self.procs[1:]:
            with contextlib.suppress(BrokenPipeError, OSError):
                proc.stdin.write(b"go\n")
                proc.stdin.close()

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        if proc.poll() is None:
            self.killed[i] = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    def close(self) -> None:
        """Kill whatever still runs, reap every process, close every file."""
        for i in range(len(self.procs)):
            self.kill(i)
        for proc in self.procs:
            with contextlib.suppress(Exception):
                proc.wait(timeout=30)
            if proc.stdin is not None:
                with contextlib.suppress(Exception):
                    proc.stdin.close()
        for log in self._logs:
            log.close()

    def results(self) -> list[WorkerRun]:
        return [
            WorkerRun(
                process_id=i,
                pid=proc.pid,
                returncode=proc.returncode if proc.returncode is not None else -signal.SIGKILL,
                killed=self.killed[i],
                records=self.records(i),
                log=self.log_paths[i].read_text(encoding="utf-8", errors="replace"),
            )
            for i, proc in enumerate(self.procs)
        ]


def run(
    task: str | Callable[..., Any],
    *,
    helpers: Sequence[Callable[..., Any]] = (),
    options: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | Sequence[Mapping[str, str]] | None = None,
    num_processes: int = 2,
    timeout: float = 120.0,
    start_timeout: float = 60.0,
    stall_timeout: float | None = 30.0,
    attempts: int = 5,
    port: int | None = None,
) -> Run:
    """Run ``task`` on ``num_processes`` JAX processes on this machine; return what happened.

    ``task``: ``"package.module:function"``, ``"/path/file.py:function"``, or a function
    (then its source and the ``helpers``' sources are written to a module after
    :data:`PRELUDE`; see :func:`write_module`). It is called as ``task(worker)`` once
    ``jax.distributed`` is up, and reports with ``worker.emit``.
    ``options``: JSON-able; ``worker.options`` in the task. Two keys are the launcher's:
    ``"jax_config"`` (``{name: value}`` for ``jax.config.update`` before anything else)
    and ``"initialize"`` (extra keyword arguments for ``jax.distributed.initialize``).
    ``env``: extra environment variables, one mapping for all or one per process.
    ``timeout``: the whole run; ``start_timeout``: until every process is up;
    ``stall_timeout``: once all are up, how long the run may go without a new record or
    an exit before it is stopped (``Run.stopped == "stalled"``). A run that is stopped
    returns normally; call ``Run.check()`` to demand success.
    ``port``: try this port first (tests use it); later attempts pick free ones.
    """
    if os.environ.get(WORKER_ENV):
        raise LaunchError(
            "jitlab.instruments.multiprocess.run was called inside a worker process (from "
            "code that the workers import): keep only definitions in the code you hand to "
            "the workers"
        )
    options = dict(options or {})
    envs = list(env) if isinstance(env, Sequence) else [env or {}] * num_processes
    if len(envs) != num_processes:
        raise ValueError(f"env has {len(envs)} entries for {num_processes} processes")
    envs = [_worker_env(extra) for extra in envs]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="jitlab-processes-") as scratch:
        directory = Path(scratch)
        if callable(task):
            module = write_module(directory / f"{task.__name__}_program.py", [*helpers, task])
            target = f"{module}:{task.__name__}"
        else:
            target = task
        for attempt in range(1, attempts + 1):
            chosen = port if (port is not None and attempt == 1) else free_port()
            launch = _Launch(target, num_processes, chosen, options, envs, directory)
            try:
                outcome = _watch(launch, start, timeout, start_timeout, stall_timeout)
            finally:
                launch.close()
            if outcome == "port taken":
                continue
            stopped, quiet = outcome
            return Run(
                workers=launch.results(),
                port=chosen,
                attempts=attempt,
                seconds=time.perf_counter() - start,
                stopped=stopped,
                quiet_seconds=quiet,
            )
    raise LaunchError(f"no free port for the coordinator after {attempts} attempts")


def _watch(launch: _Launch, start: float, timeout, start_timeout, stall_timeout):
    """Gate, then watch one attempt until every process exits or it must be stopped.

    Returns ``"port taken"``, or ``(stopped, quiet_seconds)`` where ``stopped`` is None,
    ``"stalled"``, ``"timed out"`` or ``"failed to start"``.
    """
    procs = launch.procs
    attempt_start = time.perf_counter()
    # Hold the others back until process 0 listens on the port (or gives up on it).
    while not _listening(procs[0].pid, launch.port):
        if procs[0].poll() is not None:
            if launch.port_taken():
                return "port taken"
            break  # it died for another reason: reported below
        if time.perf_counter() - attempt_start > start_timeout:
            break
        time.sleep(POLL_SECONDS)
    launch.go()

    last_news = time.perf_counter()
    exits_seen = 0
    while True:
        now = time.perf_counter()
        exited = [p.poll() is not None for p in procs]
        if launch.news() or sum(exited) != exits_seen:  # an exit is news too
            last_news, exits_seen = now, sum(exited)
        if all(exited):
            return None, 0.0
        ready = [
            any(r.get("kind") == "ready" for r in launch.records(i)) for i in range(len(procs))
        ]
        if any(done and not up for done, up in zip(exited, ready, strict=True)):
            # A process died before jax.distributed was up: the others wait for it in
            # initialize (for minutes), so there is nothing more to wait for.
            return "failed to start", now - last_news
        if now - start > timeout or (not all(ready) and now - attempt_start > start_timeout):
            return "timed out", now - last_news
        if all(ready) and stall_timeout is not None and now - last_news > stall_timeout:
            return "stalled", now - last_news
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(_worker_main())
