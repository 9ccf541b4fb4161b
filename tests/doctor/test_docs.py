"""``docs/doctor.md`` shows commands and their output: the cheap ones are run here, through
the ``jitlab`` command, and the output pasted on the page must be what the tool prints now
(lines with seconds in them excepted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from jitlab.doctor import wrap
from jitlab.learner import cli

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "doctor.md").read_text()
REAL_JIT = jax.jit


@pytest.fixture(autouse=True)
def jit_restored():
    yield
    assert jax.jit is REAL_JIT and not wrap.installed(), "the doctor left jax.jit replaced"


def block_after(marker: str, kind: str) -> str:
    """The first fenced block of ``kind`` after ``marker`` on the page."""
    start = PAGE.index(marker)
    found = re.compile(rf"```{kind}\n(.*?)```", re.S).search(PAGE, start)
    assert found, f"no ```{kind} block after {marker!r}"
    return found.group(1)


def test_the_budget_example(capsys, monkeypatch):
    command = block_after("## Budgets in CI", "console").strip()
    assert command.startswith("$ jitlab doctor ")
    monkeypatch.chdir(ROOT)
    code = cli.main(command.removeprefix("$ jitlab ").split())
    err = capsys.readouterr().err
    assert code == 1
    pasted = block_after("The report ends with:", "text")
    assert err.rstrip().endswith(pasted.rstrip())


def test_the_pytest_example(tmp_path):
    (tmp_path / "test_train.py").write_text(block_after("A file `test_train.py`", "python"))
    # -p jitlab.course: the course registers its lessons with the doctor, as its entry
    # point does where the course is installed (the page shows the lesson's number)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--jitlab", "-p", "no:cacheprovider"]
        + ["-p", "jitlab.course", "test_train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout[-2000:]
    pasted = block_after("`pytest --jitlab test_train.py` fails the test", "text")
    for line in pasted.splitlines()[1:]:  # after pytest's header line
        if line.strip().startswith("See lesson"):  # its link is a path on this machine
            line = line.split(": ")[0]
        assert line in done.stdout, line


def test_commands_on_the_page_use_the_jitlab_command():
    commands = re.findall(r"^\$ (.*)$", PAGE, re.M)
    assert commands and all(c.startswith("jitlab doctor ") for c in commands), commands
    assert "python -m jitlab.doctor" not in PAGE
    assert not re.search(r"\]\(lessons/[^)]*\.py\)", PAGE), "the site shows lessons as .ipynb"
