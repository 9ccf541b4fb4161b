"""The doctor installed as a team would: a fresh virtualenv with only JAX and pytest (the
versions requirements.lock pins), then the course's wheel, from a folder of wheels with
every index switched off. If the wheel needed any package outside JAX's own
dependencies, the install itself would fail; the test also compares ``pip freeze``
before and after. Then ``jitlab doctor`` and ``pytest --jitlab`` run there, and
``jitlab check`` says in one line that it needs the course's extra.

Needs the package index once, to download the wheels into ``_build/light-install``, and
unpacks JAX and pytest from them once, into ``_build/light-install/site`` (both kept for
the next run, and made again when requirements.lock changes). Each run then makes a
virtualenv without pip whose only packages are that folder (one ``.pth`` line, as
``jitlab dev matrix`` makes its release environments), and installs the course's wheel
into it with this interpreter's pip (``pip --python``): JAX is not unpacked again.
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
SITE = WHEELS / "site"


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


def _freeze(pip: list[str], cwd: Path) -> set[str]:
    out = _check(_run([*pip, "freeze", "--all"], cwd))
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


def _site(requirements: list[str], pip: list[str], cwd: Path) -> Path:
    """JAX and pytest, unpacked from the wheels into a folder of their own (once)."""
    stamp = SITE / ".requirements"
    wanted = "\n".join(requirements)
    if stamp.exists() and stamp.read_text() == wanted:
        return SITE
    WHEELS.mkdir(parents=True, exist_ok=True)
    _check(_run([*pip, "download", "-q", "--dest", str(WHEELS), *requirements], cwd))
    shutil.rmtree(SITE, ignore_errors=True)
    offline = ["--no-index", "--find-links", str(WHEELS)]
    target = ["--target", str(SITE), "--no-compile", *offline]
    _check(_run([*pip, "install", "-q", *target, *requirements], cwd))
    stamp.write_text(wanted)
    return SITE


def test_light_install(tmp_path: Path) -> None:
    requirements = [_pinned("jax"), _pinned("jaxlib"), _pinned("pytest")]
    pip = [sys.executable, "-m", "pip"]
    site = _site(requirements, pip, tmp_path)

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
    _check(_run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path))
    python = str(venv / "bin" / "python")
    purelib = _check(
        _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path)
    ).strip()
    (Path(purelib) / "light_install.pth").write_text(f"{site}\n")
    vpip = [*pip, "--python", python]
    before = _freeze(vpip, tmp_path)
    assert {"jax", "jaxlib", "pytest"} <= before and "nbformat" not in before, before
    offline = ["--no-index", "--find-links", str(WHEELS)]
    _check(_run([*vpip, "install", "-q", "--no-compile", *offline, str(wheel)], tmp_path))
    assert _freeze(vpip, tmp_path) - before == {"jitlab"}

    project = tmp_path / "project"
    project.mkdir()
    (project / "prog.py").write_text(PROGRAM)
    (project / "test_prog.py").write_text(TEST)
    bin_ = venv / "bin"

    doctor = _run([str(bin_ / "jitlab"), "doctor", "--", "python", "prog.py"], project)
    assert doctor.returncode == 0, doctor.stderr
    assert re.search(r"^ 1 step\s+3\s+3\s+3\s", doctor.stderr, re.M), doctor.stderr
    assert "array types (shape): 2 misses" in doctor.stderr, doctor.stderr

    tests = _run([python, "-m", "pytest", "--jitlab", "-q", "-p", "no:cacheprovider"], project)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "jitlab doctor" in tests.stdout, tests.stdout
    assert "array types (shape): 1 miss" in tests.stdout, tests.stdout

    helped = _run([str(bin_ / "jitlab"), "--help"], project)
    assert helped.returncode == 0, helped.stderr
    assert "jitlab doctor -- python train.py" in helped.stdout, helped.stdout
    assert "pytest --jitlab" in helped.stdout and "jitlab[course]" in helped.stdout

    check = _run([str(bin_ / "jitlab"), "check", "01"], project)
    assert check.returncode == 2
    assert check.stdout == ""
    lines = check.stderr.strip().splitlines()
    assert len(lines) == 1 and "jitlab[course]" in lines[0], textwrap.indent(check.stderr, "  ")
