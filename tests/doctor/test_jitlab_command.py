"""``jitlab doctor`` as a learner types it: through the ``jitlab`` command, not the doctor's
own ``main``. Most tests call ``jitlab.learner.cli.main`` in this process (the console
script calls exactly that); one runs the installed ``jitlab`` executable.

Each program defines its own jitted functions, so nothing depends on what an earlier test
compiled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import pytest

from jitlab.course.metadata import CourseError
from jitlab.doctor import wrap
from jitlab.learner import cli

REAL_JIT = jax.jit

GROW = """
    import sys
    import jax, jax.numpy as jnp

    @jax.jit
    def grow_{tag}(x):
        return x * 2

    for n in (2, 3, 4):
        grow_{tag}(jnp.ones(n))
    print("argv", sys.argv[1:])
"""


@pytest.fixture(autouse=True)
def jit_restored():
    yield
    assert jax.jit is REAL_JIT and not wrap.installed(), "the doctor left jax.jit replaced"


def program(folder: Path, tag: str, name: str | None = None) -> Path:
    path = folder / (name or f"grow_{tag}.py")
    path.write_text(textwrap.dedent(GROW.format(tag=tag)))
    return path


def jitlab(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_help_is_the_doctors_own(capsys):
    code, out, _ = jitlab(capsys, "doctor", "--help")
    assert code == 0
    assert out.startswith("usage: jitlab doctor [--max-compiles NAME=N ...]")
    assert "--json FILE" in out and "-m module" in out


def test_jitlab_help_lists_the_doctor(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    assert "doctor    find and explain recompilations" in capsys.readouterr().out


def test_script_after_dashes(tmp_path, capsys, monkeypatch):
    script = program(tmp_path, "dashes")
    monkeypatch.chdir(tmp_path)  # a short command line: the report's header shows it whole
    code, out, err = jitlab(capsys, "doctor", "--", "python", script.name, "a", "--b")
    assert code == 0
    assert out == "argv ['a', '--b']\n"  # the program's output, untouched, on stdout
    assert f"jitlab doctor: python {script.name} a --b" in err
    assert "array types (shape): 2 misses." in err and "See lesson 01 shapes" in err


def test_script_without_dashes_or_python(tmp_path, capsys):
    script = program(tmp_path, "bare")
    code, out, err = jitlab(capsys, "doctor", str(script), "--", "x")
    assert code == 0
    assert out == "argv ['--', 'x']\n"  # a "--" after the program is the program's
    assert "grow_bare" in err


def test_module_form(tmp_path, capsys, monkeypatch):
    program(tmp_path, "module", name="grow_module_prog.py")
    monkeypatch.chdir(tmp_path)
    code, out, err = jitlab(capsys, "doctor", "-m", "grow_module_prog", "--epochs", "3")
    assert code == 0
    assert out == "argv ['--epochs', '3']\n"
    assert "jitlab doctor: python -m grow_module_prog --epochs 3" in err
    assert "grow_module (grow_module_prog.py:" in err


def test_budgets(tmp_path, capsys):
    script = str(program(tmp_path, "budget"))
    code, _, err = jitlab(capsys, "doctor", "--max-compiles", "grow_budget=1", script)
    assert code == 1
    assert "EXCEEDED: grow_budget=1: grow_budget" in err
    assert "compiled 3 times; why: array types (shape) 2 (lesson 01)" in " ".join(err.split())
    assert err.rstrip().endswith("jitlab doctor: exit code 1 (budget: grow_budget=1)")

    code, _, err = jitlab(capsys, "doctor", "--max-compiles=grow_*=3", "--", script)
    assert code == 0 and "ok: grow_*=3 (at most 3: grow_budget)" in err

    code, _, err = jitlab(capsys, "doctor", "--max-compiles", "grwo_budget=9", script)
    assert code == 1 and "warning: grwo_budget=9: no jitted function named" in err


def test_json(tmp_path, capsys):
    script = str(program(tmp_path, "json"))
    out = tmp_path / "doctor.json"
    code, _, _ = jitlab(capsys, "doctor", "--json", str(out), "--", "python", script)
    assert code == 0
    data = json.loads(out.read_text())
    assert data["schema"] == "jitlab-doctor/1" and data["exit_code"] == 0
    (grow,) = [f for f in data["functions"] if f["name"] == "grow_json"]
    assert (grow["calls"], grow["compiles"], grow["causes"]) == (3, 3, {"shape": 2})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--", "python", "no_such_train.py"], "cannot run 'no_such_train.py': no such file"),
        (["-m", "no_such_module_xyz"], "no module named 'no_such_module_xyz'"),
        ([], "no program to run"),
        (["--max-compiles", "f=one", "x.py"], "'one' is not a whole number"),
        (["--max-compile", "f=1", "x.py"], "unrecognized arguments: --max-compile"),
    ],
)
def test_bad_input_exits_2(argv, message, capsys):
    code, out, err = jitlab(capsys, "doctor", *argv)
    assert code == 2
    assert message in out + err


def test_the_programs_exit_code_is_kept(tmp_path, capsys):
    script = tmp_path / "exits.py"
    script.write_text("import sys\nsys.exit(3)\n")
    code, _, err = jitlab(capsys, "doctor", str(script))
    assert code == 3 and "exit code 3 (the program's own exit code)" in err


def test_the_doctor_does_not_need_the_course_to_load(tmp_path, capsys, monkeypatch):
    """It runs the learner's own code, anywhere: a course file that does not load (a
    lesson being edited) must not stop it, as it stops `jitlab list`."""

    def broken() -> None:
        raise CourseError("course.yml: broken on purpose")

    monkeypatch.setattr(cli, "load_course", broken)
    assert jitlab(capsys, "list")[0] == 2  # the other commands do need it
    script = program(tmp_path, "nocourse")
    code, _, err = jitlab(capsys, "doctor", str(script))
    assert code == 0 and "grow_nocourse" in err


def test_the_installed_jitlab_command(tmp_path):
    """The console script itself, in a fresh process, from another directory."""
    command = Path(sys.executable).with_name("jitlab")
    if not command.exists():
        pytest.skip(f"no jitlab console script next to {sys.executable}")
    script = program(tmp_path, "installed")
    report = tmp_path / "report.json"
    done = subprocess.run(
        [str(command), "doctor", "--max-compiles", "grow_installed=1", "--json", str(report)]
        + ["--", "python", script.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        check=False,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stdout == "argv []\n"
    assert "EXCEEDED: grow_installed=1" in done.stderr
    assert json.loads(report.read_text())["exit_code"] == 1


def test_top_level_help_in_a_doctor_only_install_lists_what_it_can_do(monkeypatch, capsys):
    """Without the course's extra (the learner's runner cannot load), `jitlab --help`
    still works: exit 0, the doctor's commands, and the one line on the extra."""
    import jitlab.cli

    def no_extra():
        raise ModuleNotFoundError("No module named 'yaml'", name="yaml")

    monkeypatch.setattr(jitlab.cli, "_learner", no_extra)
    for argv in (["--help"], ["-h"], ["help"]):
        assert jitlab.cli.main(argv) == 0
        out = capsys.readouterr().out
        assert "jitlab doctor -- python train.py" in out and "pytest --jitlab" in out
        assert "no module named 'yaml'" in out and "jitlab[course]" in out
    assert jitlab.cli.main([]) == 2  # no command at all: the same help, and a usage error
    assert "jitlab doctor" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:  # a learner's verb: still the one line
        jitlab.cli.main(["check", "01"])
    assert done.value.code == 2
    assert "needs the course's extra" in capsys.readouterr().err
