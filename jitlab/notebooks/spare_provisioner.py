"""The kernel provisioner that hands nbval the kernel ``jitlab check`` started early.

jupyter_client finds it by its entry point (``jitlab-spare`` in the
``jupyter_client.kernel_provisioners`` group, see pyproject.toml); the runner chooses it
for its in-process pytest run by ``$JUPYTER_DEFAULT_PROVISIONER_NAME``. Everything else is
jupyter_client's local provisioner. See :mod:`jitlab.notebooks.spare_kernel`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from typing import Any

from jupyter_client.provisioning import LocalProvisioner

from jitlab.notebooks import spare_kernel


class SpareKernelProvisioner(LocalProvisioner):  # type: ignore[misc]
    """jupyter_client's local provisioner, except that it adopts the offered spare kernel
    when it matches the folder and notebook of the kernel being started, and that a
    killed kernel is waited for at once (jupyter_client checks every 0.1 s, which the
    learner would wait for at the end of every check)."""

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> dict[str, Any]:
        kernel = spare_kernel.take(kwargs.get("cwd"), kwargs.get("env"))
        if kernel is None:
            return dict(await super().launch_kernel(cmd, **kwargs))
        self.process = kernel.process
        self.pid = kernel.process.pid
        self.pgid = os.getpgid(kernel.process.pid)
        self.cwd = str(kernel.cwd)
        self.connection_info = dict(kernel.connection)
        return self.connection_info

    async def kill(self, restart: bool = False) -> None:
        await super().kill(restart=restart)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=1.0)  # SIGKILL: milliseconds
