"""Which machine a number came from.

A timing without its machine is a rumour: a first call that takes 50 ms on one laptop
takes 400 ms on another. Every lesson prints this report at the top, and every results
file carries it.
"""

from __future__ import annotations

import os
import platform
import sys
from functools import cache
from pathlib import Path

import jax
import jaxlib


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


@cache
def environment() -> dict[str, str | int]:
    """Platform, devices, CPU, core count and versions, as a flat record."""
    devices = jax.devices()
    return {
        "platform": devices[0].platform,
        "device_kind": devices[0].device_kind,
        "device_count": len(devices),
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count() or 0,
        "os": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "x64_enabled": str(bool(jax.config.jax_enable_x64)),
    }


def machine_id() -> str:
    """A short, file-name-safe name for this machine's kind (used for results files)."""
    env = environment()
    text = f"{env['platform']}-{env['device_kind']}-{env['cpu_model']}-{env['cpu_cores']}cores"
    safe = "".join(ch.lower() if ch.isalnum() else "-" for ch in text)
    while "--" in safe:
        safe = safe.replace("--", "-")
    return safe.strip("-")


def environment_report() -> str:
    """The environment as aligned ``key: value`` lines."""
    env = environment()
    width = max(map(len, env))
    return "\n".join(f"{k.ljust(width)} : {v}" for k, v in env.items())


def print_environment() -> None:
    """Print the report; lessons call this first so every number has its machine."""
    print(environment_report())
    if sys.flags.optimize:
        print("note: python -O strips assert statements; the lessons' checks need them")
