"""The launcher of lesson 14 starts real JAX processes and always cleans up after them.

Each test starts two worker processes (about 3 s on a laptop). The tasks are functions
of this file: ``multiprocess.run`` writes their source to a module the workers import.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import psutil
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jitlab.instruments import multiprocess


def gone(pid: int, within: float = 5.0) -> bool:
    """True once ``pid`` no longer exists (or is a zombie nobody will run again)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def listening(port: int) -> bool:
    return any(
        c.status == psutil.CONN_LISTEN and c.laddr.port == port
        for c in psutil.net_connections(kind="tcp")
    )


# --- tasks (run in the workers) ----------------------------------------------------------
def global_sum(worker):
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    local = np.arange(4.0, dtype=np.float32) + 10 * worker.process_id
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), local)
    worker.emit("sum", value=float(jax.jit(jnp.sum)(x)), shape=x.shape)


def sleep_forever(worker):
    worker.emit("sleeping", pid=os.getpid())
    time.sleep(1000)


def chatter_forever(worker):
    while True:
        worker.emit("tick")
        time.sleep(0.2)


def spawn_grandchild_then_sleep(worker):
    import subprocess

    child = subprocess.Popen(["sleep", "1000"])
    worker.emit("grandchild", pid=child.pid)
    time.sleep(1000)


def shrug_off_sigterm(worker):
    import signal

    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1.0)
    worker.emit("still alive")


def launch_from_a_worker(worker):
    from jitlab.instruments import multiprocess

    multiprocess.run(global_sum)


def raise_on_one(worker):
    if worker.process_id == 1:
        raise KeyError("only on process 1")
    worker.emit("fine")


# --- tests -------------------------------------------------------------------------------


def test_free_port_can_be_bound():
    port = multiprocess.free_port()
    with socket.socket() as probe:
        probe.bind((multiprocess.HOST, port))


def test_two_processes_share_a_global_array():
    run = multiprocess.run(global_sum).check()
    assert run.attempts == 1 and run.stopped is None
    ready = run.one("ready")
    assert [(r["devices"], r["local_devices"]) for r in ready] == [(2, 1), (2, 1)]
    assert [r["process_index"] for r in ready] == [0, 1]
    sums = run.one("sum")
    assert [s["value"] for s in sums] == [float(0 + 1 + 2 + 3 + 10 + 11 + 12 + 13)] * 2
    assert [s["shape"] for s in sums] == [[8], [8]]
    assert all(w.returncode == 0 and not w.killed for w in run.workers)
    assert not listening(run.port)


def test_a_stall_is_stopped_and_every_worker_killed_and_reaped():
    start = time.monotonic()
    run = multiprocess.run(sleep_forever, stall_timeout=1.0)
    assert time.monotonic() - start < 30
    assert run.stopped == "stalled" and 1.0 <= run.quiet_seconds < 5
    assert not run.ok
    for worker in run.workers:
        assert worker.killed and worker.signal_name == "SIGKILL"
        assert gone(worker.one("sleeping")["pid"])
    assert not listening(run.port)
    with pytest.raises(multiprocess.WorkersFailed, match="stalled"):
        run.check()


@pytest.mark.slow  # waits out its 10 s timeout
def test_the_overall_timeout_stops_a_run_that_keeps_talking():
    # 10 s: the workers are up in about 3 s on a laptop (5 s on a busy 2-core machine),
    # then tick every 0.2 s, so a stall timeout of 1 s never fires before the overall one.
    run = multiprocess.run(chatter_forever, timeout=10.0, stall_timeout=1.0)
    assert run.stopped == "timed out", run.describe()
    assert all(w.killed and len(w.of("tick")) >= 2 for w in run.workers), run.describe()
    assert all(gone(w.pid) for w in run.workers)


def test_no_grandchild_outlives_the_run():
    run = multiprocess.run(spawn_grandchild_then_sleep, stall_timeout=1.0)
    assert run.stopped == "stalled"
    for worker in run.workers:
        assert gone(worker.one("grandchild")["pid"])


def test_a_task_that_raises_is_reported_with_its_exception():
    run = multiprocess.run(raise_on_one, stall_timeout=10.0)
    p0, p1 = run.workers
    assert p0.one("fine") and p0.returncode == 0
    assert p1.error["type"] == "KeyError" and "only on process 1" in p1.error["message"]
    assert p1.returncode == multiprocess.TASK_FAILED_EXIT
    assert run.stopped is None and not run.ok


def test_a_taken_port_is_handled_by_picking_another():
    with socket.socket() as squatter:
        squatter.bind((multiprocess.HOST, 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        run = multiprocess.run(global_sum, port=taken).check()
    assert run.attempts == 2 and run.port != taken
    assert [s["value"] for s in run.one("sum")] == [52.0, 52.0]


def test_workers_are_killed_when_the_calling_code_raises(monkeypatch):
    started: list[int] = []

    def interrupted(launch, *args):
        started.extend(proc.pid for proc in launch.procs)
        raise KeyboardInterrupt

    monkeypatch.setattr(multiprocess, "_watch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        multiprocess.run(sleep_forever)
    assert len(started) == 2
    assert all(gone(pid) for pid in started)


def test_workers_die_with_their_parent(tmp_path):
    # A parent that launches workers that never finish, and is then killed outright.
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import time
            from jitlab.instruments import multiprocess

            def sleep_forever(worker):
                worker.emit("sleeping")
                time.sleep(1000)

            multiprocess.run(sleep_forever, stall_timeout=None, timeout=1000)
            """
        )
    )
    parent = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 60
        workers: list[psutil.Process] = []
        while len(workers) < 2 and time.monotonic() < deadline:
            workers = psutil.Process(parent.pid).children()
            time.sleep(0.1)
        assert len(workers) == 2
        time.sleep(1.0)  # past the workers' first lines
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert all(gone(w.pid, within=10) for w in workers)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_jax_distributed_workers_ignore_sigterm():
    # Why the launcher kills with SIGKILL: jax.distributed's preemption notifier catches
    # SIGTERM, and the process carries on.
    run = multiprocess.run(shrug_off_sigterm).check()
    assert all(w.of("still alive") for w in run.workers)
    assert all("SIGTERM caught" in w.log for w in run.workers)


def test_write_module_keeps_decorators(tmp_path):
    path = multiprocess.write_module(tmp_path / "m.py", [global_sum, sleep_forever])
    text = path.read_text()
    assert text.startswith(multiprocess.PRELUDE)
    assert "def global_sum(worker):" in text and "def sleep_forever(worker):" in text


def test_env_per_process_and_options_reach_the_workers():
    def report(worker):
        worker.emit("seen", flag=os.environ.get("JITLAB_TEST_FLAG"), options=worker.options)

    # A nested function has source too; it must only use the prelude's names.
    run = multiprocess.run(
        report, env=[{}, {"JITLAB_TEST_FLAG": "one"}], options={"answer": 42}
    ).check()
    seen = run.one("seen")
    assert [s["flag"] for s in seen] == [None, "one"]
    assert all(s["options"]["answer"] == 42 for s in seen)
    assert os.environ.get("JITLAB_TEST_FLAG") is None


def test_a_worker_cannot_launch_workers():
    # A learner's cell that calls the grader would otherwise start workers recursively.
    run = multiprocess.run(launch_from_a_worker, helpers=[global_sum], stall_timeout=10.0)
    for worker in run.workers:
        assert worker.error["type"] == "LaunchError"
        assert "inside a worker process" in worker.error["message"]
