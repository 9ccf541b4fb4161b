"""Budgets in the project's own ``pyproject.toml`` (``[tool.jitlab.doctor]``), read by
``jitlab doctor`` and by ``pytest --jitlab``."""

from __future__ import annotations

import textwrap

import jax
import pytest

from jitlab.doctor import cli, wrap
from jitlab.doctor import config as config_mod
from jitlab.doctor.budgets import Budget

pytest_plugins = ["pytester"]
REAL_JIT = jax.jit

PROGRAM = """\
import jax
import jax.numpy as jnp


@jax.jit
def train_step(x):
    return x * 2


@jax.jit
def evaluate(x):
    return x.sum()


for n in (2, 3):
    train_step(jnp.ones(n))
evaluate(jnp.ones(2))
"""


@pytest.fixture(autouse=True)
def jit_restored():
    yield
    assert jax.jit is REAL_JIT and not wrap.installed(), "the doctor left jax.jit replaced"


def _project(tmp_path, table: str, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "team"\n\n[tool.jitlab.doctor]\n' + textwrap.dedent(table)
    )
    (tmp_path / "train.py").write_text(PROGRAM)
    sub = tmp_path / "scripts"  # run from a folder below: the nearest pyproject.toml counts
    sub.mkdir()
    monkeypatch.chdir(sub)
    return str(tmp_path / "train.py")


def test_the_cli_reads_the_budgets_and_the_command_line_replaces_one(tmp_path, monkeypatch, capsys):
    script = _project(tmp_path, 'max_compiles = {train_step = 1, "*" = 3}\n', monkeypatch)
    assert cli.main(["--", "python", script]) == 1
    err = capsys.readouterr().err
    assert "EXCEEDED: train_step=1: train_step" in err
    assert "ok: *=3" in err
    assert err.rstrip().endswith("jitlab doctor: exit code 1 (budget: train_step=1)")

    assert cli.main(["--max-compiles", "train_step=2", "--", "python", script]) == 0
    err = capsys.readouterr().err
    assert "ok: train_step=2" in err and "ok: *=3" in err and "train_step=1" not in err


def test_a_budget_for_a_function_that_never_ran_fails(tmp_path, monkeypatch, capsys):
    script = _project(tmp_path, "max_compiles = {trian_step = 1}\n", monkeypatch)
    assert cli.main(["--", "python", script]) == 1
    err = capsys.readouterr().err
    assert "warning: trian_step=1: no jitted function named 'trian_step' ran" in err


@pytest.mark.parametrize(
    "table, names",
    [
        ("max_compiles = {train_step = -1}\n", "max_compiles.train_step"),
        ('max_compiles = {train_step = "1"}\n', "max_compiles.train_step"),
        ("max_compiles = {train_step = true}\n", "max_compiles.train_step"),
        ("max_compiles = 3\n", "max_compiles: expected a table"),
        ("max_compile = {train_step = 1}\n", "unknown key 'max_compile'"),
        ("max_compiles = {train_step = \n", "not valid TOML"),
    ],
)
def test_a_malformed_table_is_one_line_naming_the_key_and_exit_2(
    tmp_path, monkeypatch, capsys, table, names
):
    script = _project(tmp_path, table, monkeypatch)
    assert cli.main(["--", "python", script]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"jitlab doctor: {tmp_path / 'pyproject.toml'}: ")
    assert names in line


def test_no_file_or_no_section_means_no_budgets(tmp_path):
    assert config_mod.load(None).budgets == ()
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n")
    assert config_mod.load(tmp_path / "pyproject.toml").budgets == ()
    loaded = config_mod.load(_write(tmp_path, 'max_compiles = {"train_*" = 2}\n'))
    assert loaded.budgets == (Budget("train_*", 2),)


def _write(tmp_path, table: str):
    path = tmp_path / "pyproject.toml"
    path.write_text("[tool.jitlab.doctor]\n" + table)
    return path


TESTS = """
import jax, jax.numpy as jnp

@jax.jit
def train_step(x):
    return x * 2

def test_two_lengths():
    for n in (2, 3):
        train_step(jnp.ones(n))
"""


def test_pytest_checks_the_session_against_the_budgets(pytester):
    pytester.makepyfile(test_train=TESTS)
    pytester.makefile(".toml", pyproject="[tool.jitlab.doctor]\nmax_compiles = {train_step = 1}\n")
    result = pytester.runpytest_inprocess("--jitlab", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*EXCEEDED: train_step=1: train_step*compiled 2 times*"])

    pytester.makefile(".toml", pyproject="[tool.jitlab.doctor]\nmax_compiles = {train_step = 2}\n")
    result = pytester.runpytest_inprocess("--jitlab", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*ok: train_step=2*"])


def test_pytest_without_jitlab_says_the_budgets_are_not_checked(pytester):
    pytester.makepyfile(test_train=TESTS)
    pytester.makefile(".toml", pyproject="[tool.jitlab.doctor]\nmax_compiles = {train_step = 1}\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["jitlab doctor: the budgets in *pyproject.toml*--jitlab*"])


def test_pytest_stops_at_a_malformed_table_with_one_line(pytester):
    pytester.makepyfile(test_train=TESTS)
    pytester.makefile(".toml", pyproject="[tool.jitlab.doctor]\nmax_compiles = {train_step = -1}\n")
    result = pytester.runpytest_subprocess("--jitlab", "-p", "no:cacheprovider")
    assert result.ret == 2
    text = result.stdout.str() + result.stderr.str()
    lines = [line for line in text.splitlines() if "jitlab doctor" in line]
    assert len(lines) == 1 and "max_compiles.train_step" in lines[0], text
