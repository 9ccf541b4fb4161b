"""A kernel started before nbval asks for one, so that starting it overlaps other work.

``jitlab check`` spends about half a second reading and vetting the learner's file,
converting it and starting pytest; an IPython kernel takes about as long to start. The
runner starts the kernel first, in its own process, and hands it over when nbval starts
"its" kernel, so the two happen side by side on two cores instead of one after the other.

The hand-over goes through jupyter_client's public extension point, a kernel
provisioner: :class:`SpareKernelProvisioner` (registered as the ``jitlab-spare`` entry
point) returns the waiting kernel's connection instead of launching a process. It adopts
a kernel only when it was started in the folder and for the notebook that nbval is about
to run; otherwise it launches one as jupyter_client always does. The kernel has run
nothing when it is adopted and serves that one notebook, so the learner's code runs in
a kernel just as fresh as before. Nothing here imports JAX, Jupytext or pytest: starting
the kernel must come before those imports to gain anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_client.connect import write_connection_file
from jupyter_client.launcher import launch_kernel
from jupyter_client.provisioning import LocalProvisioner

from jitlab.course.current import NOTEBOOK_ENV
from jitlab.notebooks import run_env

PROVISIONER = "jitlab-spare"
PROVISIONER_ENV = "JUPYTER_DEFAULT_PROVISIONER_NAME"  # read by jupyter_client's factory


@dataclasses.dataclass
class SpareKernel:
    """A started ``ipykernel`` process waiting to be adopted, and how to reach it.

    It owns a fresh temporary folder, ``scratch``: the kernel runs in ``scratch/notebooks``,
    which is where the notebook it is meant for must be written for nbval to adopt it."""

    process: subprocess.Popen[bytes]
    connection_file: Path
    connection: dict[str, Any]
    scratch: Path
    notebook: str  # the $JITLAB_NOTEBOOK it was started with
    adopted: bool = False

    @property
    def cwd(self) -> Path:
        return self.scratch / "notebooks"

    def stop(self) -> None:
        """End the kernel unless nbval adopted it (nbval then shut it down) and remove
        its folder."""
        if not self.adopted and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)


def start(notebook: Path | str, extra_env: Mapping[str, str] | None = None) -> SpareKernel:
    """Start a kernel for ``notebook`` (its $JITLAB_NOTEBOOK), with the command line of
    nbval's current-environment kernel, in a new scratch folder."""
    scratch = Path(tempfile.mkdtemp(prefix="jitlab-check-")).resolve()
    cwd = scratch / "notebooks"
    cwd.mkdir()
    connection_file = scratch / "kernel.json"
    _, info = write_connection_file(
        str(connection_file), ip="127.0.0.1", key=secrets.token_hex(16).encode()
    )
    env = {**run_env(extra_env), NOTEBOOK_ENV: str(notebook)}  # as the recorder sets it
    command = [sys.executable, "-m", "ipykernel_launcher", "-f", str(connection_file)]
    # Its own output goes nowhere, as under nbval (which captures it): what the learner's
    # cells print travels over the kernel's channels, not these streams.
    quiet = subprocess.DEVNULL
    process = launch_kernel(command, env=env, cwd=str(cwd), stdout=quiet, stderr=quiet)
    connection = dict(info)
    connection["key"] = str(connection["key"]).encode()  # as a KernelManager holds it
    return SpareKernel(process, connection_file, connection, scratch, str(notebook))


def registered() -> bool:
    """Whether jupyter_client can find the provisioner (the package's entry point; a
    copy of the course installed without it simply starts kernels the usual way)."""
    from importlib.metadata import entry_points

    found = entry_points(group="jupyter_client.kernel_provisioners", name=PROVISIONER)
    return any(e.value.endswith(":SpareKernelProvisioner") for e in found)


_waiting: list[SpareKernel] = []


def offer(kernel: SpareKernel) -> None:
    """Make ``kernel`` the one the next matching kernel start in this process adopts."""
    _waiting.clear()
    _waiting.append(kernel)


def withdraw() -> None:
    """Stop offering a kernel (the caller still stops it)."""
    _waiting.clear()


def _take(cwd: Any, env: Mapping[str, str] | None) -> SpareKernel | None:
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


class SpareKernelProvisioner(LocalProvisioner):  # type: ignore[misc]
    """jupyter_client's local provisioner, except that it adopts the offered spare kernel
    when it matches the folder and notebook of the kernel being started, and that a
    killed kernel is waited for at once (jupyter_client checks every 0.1 s, which the
    learner would wait for at the end of every check)."""

    async def kill(self, restart: bool = False) -> None:
        await super().kill(restart=restart)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=1.0)  # SIGKILL: milliseconds

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> dict[str, Any]:
        kernel = _take(kwargs.get("cwd"), kwargs.get("env"))
        if kernel is None:
            return dict(await super().launch_kernel(cmd, **kwargs))
        self.process = kernel.process
        self.pid = kernel.process.pid
        self.pgid = os.getpgid(kernel.process.pid) if hasattr(os, "getpgid") else None
        self.cwd = str(kernel.cwd)
        self.connection_info = dict(kernel.connection)
        return self.connection_info
