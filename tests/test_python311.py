"""The package compiles under Python 3.11: the TPU machine the course is measured on has
Python 3.11.7 (with jax 0.10.2), though learners use 3.12 and the pinned JAX.

No PEP 695 ``def f[T]`` or ``type X = ...``, no backslash inside an f-string's
expressions. Ruff targets py311 so that it never asks for them; this test compiles every
module with a real 3.11 interpreter, when the machine has one (CI's has, under pyenv), and
is skipped where none is found.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import jitlab

PACKAGE = Path(jitlab.__file__).parent
# What compiles each module without writing bytecode beside it: the source is read,
# compiled, and every SyntaxError is printed with its file and line.
_COMPILE_ALL = """
import pathlib, sys
bad = []
for path in sorted(pathlib.Path(sys.argv[1]).rglob("*.py")):
    try:
        compile(path.read_text(encoding="utf-8"), str(path), "exec")
    except SyntaxError as err:
        bad.append(f"{path}:{err.lineno}: {err.msg}")
print("\\n".join(bad))
sys.exit(1 if bad else 0)
"""


def python311() -> str | None:
    """A Python 3.11 interpreter: ``python3.11`` on PATH, else pyenv's newest 3.11."""
    found = shutil.which("python3.11")
    if found:
        return found
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    versions = sorted(root.glob("3.11*"), key=lambda p: [int(n) for n in _numbers(p.name)])
    candidates = [v / "bin" / "python" for v in versions if (v / "bin" / "python").exists()]
    return str(candidates[-1]) if candidates else None


def _numbers(name: str) -> list[str]:
    return [part for part in name.split(".") if part.isdigit()]


def test_the_package_compiles_under_python_3_11() -> None:
    interpreter = python311()
    if interpreter is None:
        pytest.skip("no Python 3.11 interpreter here (python3.11 or ~/.pyenv/versions/3.11*)")
    done = subprocess.run(
        [interpreter, "-c", _COMPILE_ALL, str(PACKAGE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"not valid Python 3.11:\n{done.stdout}{done.stderr}"


def test_the_check_sees_3_12_only_syntax(tmp_path: Path) -> None:
    """The check can fail: a PEP 695 function is refused by 3.11 (and taken by 3.12)."""
    interpreter = python311()
    if interpreter is None:
        pytest.skip("no Python 3.11 interpreter here")
    (tmp_path / "new.py").write_text("def first[T](items: list[T]) -> T:\n    return items[0]\n")
    done = subprocess.run(
        [interpreter, "-c", _COMPILE_ALL, str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 1 and "new.py:1" in done.stdout
    if sys.version_info >= (3, 12):
        compile((tmp_path / "new.py").read_text(), "new.py", "exec")
