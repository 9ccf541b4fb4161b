"""A kernel started before nbval asks for one, so that starting it overlaps other work.

``jitlab check`` spends about half a second importing Jupytext, nbformat and pytest,
reading the learner's file and converting it; an IPython kernel takes longer than that
to start. Measured with ``jitlab dev runner-speed``'s three solved exercises, run back
to back with and without it on a shared 2-core machine: 0.4 to 0.5 s of a 2.2 to 3.3 s
check, the difference between 2.8x and 3.4x ``import jax``.
The runner starts the kernel first, in its own process, and hands it over when nbval
starts "its" kernel, so the two happen side by side on two cores instead of one after
the other.

The hand-over goes through jupyter_client's public extension point, a kernel
provisioner (:mod:`jitlab.notebooks.spare_provisioner`, registered as the
``jitlab-spare`` entry point), which returns the waiting kernel's connection instead of
launching a process. It adopts a kernel only when it was started in the folder and for
the notebook that nbval is about to run; otherwise it launches one as jupyter_client
always does. The kernel has run nothing when it is adopted and serves that one
notebook, so the learner's code runs in a kernel just as fresh as under CI.

This module starts the kernel, and so imports nothing heavy: not JAX, Jupytext or
pytest, and not even jupyter_client (0.12 s, which the kernel would wait for). It writes
the connection file and runs the command line of nbval's current-environment kernel
the way jupyter_client's ``write_connection_file`` and ``launch_kernel`` do on POSIX
(free ports from the system, a new session, ``JPY_PARENT_PID`` so that the kernel ends
with the runner). Elsewhere the runner starts kernels the usual way.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

from jitlab.course.current import NOTEBOOK_ENV
from jitlab.notebooks import run_env

PROVISIONER = "jitlab-spare"
PROVISIONER_GROUP = "jupyter_client.kernel_provisioners"
PROVISIONER_ENV = "JUPYTER_DEFAULT_PROVISIONER_NAME"  # read by jupyter_client's factory
_LOCALHOST = "127.0.0.1"
SCRATCH_PREFIX = "jitlab-check-"  # a check's temporary folder, with or without a spare
NOTEBOOKS = "notebooks"  # the folder in it where the notebook runs (the kernel's cwd)


@dataclasses.dataclass
class SpareKernel:
    """A started ``ipykernel`` process waiting to be adopted, and how to reach it.

    It owns a fresh temporary folder, ``scratch``: the kernel runs in ``scratch/notebooks``,
    which is where the notebook it is meant for must be written for nbval to adopt it."""

    process: subprocess.Popen[bytes]
    connection: dict[str, Any]
    scratch: Path
    notebook: str  # the $JITLAB_NOTEBOOK it was started with
    adopted: bool = False

    @property
    def cwd(self) -> Path:
        return self.scratch / NOTEBOOKS

    def stop(self) -> None:
        """End the kernel unless nbval adopted it (nbval then shut it down) and remove
        its folder."""
        if not self.adopted and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)


def available() -> bool:
    """Whether a spare kernel can be started and adopted here: on POSIX, with the
    provisioner registered (a copy of the course installed before it existed, and not
    installed again, starts kernels the usual way). Reads only this package's metadata."""
    if os.name != "posix":
        return False
    try:
        points = distribution("jitlab").entry_points
    except PackageNotFoundError:
        return False
    return any(p.group == PROVISIONER_GROUP and p.name == PROVISIONER for p in points)


def _free_ports(count: int) -> list[int]:
    """Ports the system has free now, as jupyter_client finds them (bind to port 0)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((_LOCALHOST, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def start(notebook: Path | str) -> SpareKernel:
    """Start a kernel for ``notebook`` (its $JITLAB_NOTEBOOK), with the command line of
    nbval's current-environment kernel, in a new scratch folder."""
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX)).resolve()
    cwd = scratch / NOTEBOOKS
    cwd.mkdir()
    names = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
    connection: dict[str, Any] = dict(zip(names, _free_ports(len(names)), strict=True))
    connection.update(
        ip=_LOCALHOST,
        key=secrets.token_hex(16),
        transport="tcp",
        signature_scheme="hmac-sha256",
        kernel_name="",
    )
    connection_file = scratch / "kernel.json"
    connection_file.write_text(json.dumps(connection, indent=2), encoding="utf-8")
    os.chmod(connection_file, 0o600)  # it holds the key that signs every message
    env = {**run_env(), NOTEBOOK_ENV: str(notebook), "JPY_PARENT_PID": str(os.getpid())}
    # The kernel's own output goes nowhere, as under nbval: what the learner's cells print
    # travels over the kernel's channels, not these streams.
    process = subprocess.Popen(
        [sys.executable, "-m", "ipykernel_launcher", "-f", str(connection_file)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # so that an interrupt reaches the kernel's whole group
    )
    connection["key"] = connection["key"].encode()  # as a KernelManager holds it
    return SpareKernel(process, connection, scratch, str(notebook))


_waiting: list[SpareKernel] = []


def offer(kernel: SpareKernel) -> None:
    """Make ``kernel`` the one the next matching kernel start in this process adopts."""
    _waiting.clear()
    _waiting.append(kernel)


def withdraw() -> None:
    """Stop offering a kernel (the caller still stops it)."""
    _waiting.clear()


def take(cwd: Any, env: Mapping[str, str] | None) -> SpareKernel | None:
    """The offered kernel, marked adopted, if it was started in ``cwd`` for the notebook
    named in ``env`` and is still running; otherwise None (the offer stands)."""
    if not _waiting:
        return None
    kernel = _waiting[0]
    wanted = (env or {}).get(NOTEBOOK_ENV)
    same_place = cwd is not None and Path(str(cwd)).resolve() == kernel.cwd
    if not same_place or wanted != kernel.notebook or kernel.process.poll() is not None:
        return None
    _waiting.clear()
    kernel.adopted = True
    return kernel
