"""The doctor installed as a team would: a fresh virtualenv with only JAX and pytest (the
versions requirements.lock pins), then the course's wheel, from a folder of wheels with
every index switched off. If the wheel needed any package outside JAX's own
dependencies, the install itself would fail; the test also compares ``pip freeze``
before and after. Then ``jitlab doctor`` and ``pytest --jitlab`` run there, and
``jitlab check`` says in one line that it needs the course's extra.

Needs the package index once, to download the wheels into ``_build/light-install`` (kept
for the next run); about 30 s after that.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / "_build" / "light-install"


def _pinned(name: str) -> str:
    found = re.search(
        rf"^{re.escape(name)}==(\S+)$", (ROOT / "requirements.lock").read_text(), re.M
    )
    assert found, f"{name} is not pinned in requirements.lock"
    return f"{name}=={found.group(1)}"


def _run(args: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(kwargs.pop("env", {}))
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, **kwargs
    )


def _check(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _freeze(venv: Path, cwd: Path) -> set[str]:
    out = _check(_run([str(venv / "bin/python"), "-m", "pip", "freeze", "--all"], cwd))
    return {line.split("==")[0].split(" @ ")[0].lower() for line in out.splitlines()}


PROGRAM = """\
import jax
import jax.numpy as jnp

@jax.jit
def step(x):
    return x * 2

for n in (3, 4, 5):
    step(jnp.ones(n))
"""

TEST = """\
import jax
import jax.numpy as jnp

def test_step():
    step = jax.jit(lambda x: x + 1)
    step(jnp.ones(2))
    step(jnp.ones(3))
"""


def test_light_install(tmp_path: Path) -> None:
    requirements = [_pinned("jax"), _pinned("jaxlib"), _pinned("pytest")]
    pip = [sys.executable, "-m", "pip"]
    WHEELS.mkdir(parents=True, exist_ok=True)
    _check(_run([*pip, "download", "-q", "--dest", str(WHEELS), *requirements], tmp_path))

    # The course's wheel, built from a copy of the package (no build/ left in the checkout).
    source = tmp_path / "source"
    shutil.copytree(
        ROOT / "jitlab", source / "jitlab", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    dist = tmp_path / "dist"
    _check(
        _run(
            [
                *pip,
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                str(dist),
                str(source),
            ],
            tmp_path,
        )
    )
    (wheel,) = dist.glob("jitlab-*.whl")

    venv = tmp_path / "venv"
    _check(_run([sys.executable, "-m", "venv", str(venv)], tmp_path))
    offline = ["--no-index", "--find-links", str(WHEELS)]
    # --no-compile: no bytecode for thousands of files of JAX and SciPy (most of the time)
    vpip = [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-compile", *offline]
    _check(_run([*vpip, *requirements], tmp_path))
    before = _freeze(venv, tmp_path)
    _check(_run([*vpip, str(wheel)], tmp_path))
    assert _freeze(venv, tmp_path) - before == {"jitlab"}

    project = tmp_path / "project"
    project.mkdir()
    (project / "prog.py").write_text(PROGRAM)
    (project / "test_prog.py").write_text(TEST)
    bin_ = venv / "bin"

    doctor = _run([str(bin_ / "jitlab"), "doctor", "--", "python", "prog.py"], project)
    assert doctor.returncode == 0, doctor.stderr
    assert re.search(r"^ 1 step\s+3\s+3\s+3\s", doctor.stderr, re.M), doctor.stderr
    assert "shape: 2 misses" in doctor.stderr, doctor.stderr

    tests = _run([str(bin_ / "pytest"), "--jitlab", "-q", "-p", "no:cacheprovider"], project)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "jitlab doctor" in tests.stdout and "shape: 1 miss" in tests.stdout, tests.stdout

    check = _run([str(bin_ / "jitlab"), "check", "01"], project)
    assert check.returncode == 2
    assert check.stdout == ""
    lines = check.stderr.strip().splitlines()
    assert len(lines) == 1 and "jitlab[course]" in lines[0], textwrap.indent(check.stderr, "  ")
