"""``jitlab doctor``'s command line: budgets and exit codes, ``--json``, ``-m``, and bad input.

``main`` runs the program in this process, as the real command does, so most tests call it
directly with small programs written to a temporary directory (each defines its own
functions, so nothing depends on what an earlier test compiled). Ctrl-C needs a real
process and a real signal.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import pytest

from jitlab.course.manifest import load_course
from jitlab.doctor import main, wrap

CORPUS = Path(__file__).parent / "corpus"
REAL_JIT = jax.jit


@pytest.fixture(autouse=True)
def jit_restored():
    yield
    assert jax.jit is REAL_JIT and not wrap.installed(), "the doctor left jax.jit replaced"


def program(tmp_path: Path, source: str, name: str = "prog.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


SHAPES = """
    import jax, jax.numpy as jnp

    @jax.jit
    def grow(x):
        return x * 2

    for n in (2, 3, 4):
        grow(jnp.ones(n))
    print("program output", float(grow(jnp.ones(2)).sum()))
"""


def test_report_goes_to_stderr_and_program_output_is_unchanged(tmp_path, capsys):
    script = program(tmp_path, SHAPES)
    assert main(["--", "python", script]) == 0
    out, err = capsys.readouterr()
    assert out == "program output 4.0\n"
    assert "jitlab doctor: python " in err
    assert "grow" in err and "array types (shape): 2 misses." in err
    assert "See lesson 01 shapes" in err
    assert max(len(line) for line in err.splitlines()) <= 100


def test_budget_exceeded_names_function_and_cause(tmp_path, capsys):
    script = program(tmp_path, SHAPES)
    code = main(["--max-compiles", "grow=1", "--", "python", script])
    err = capsys.readouterr().err
    flat = " ".join(err.split())  # the report wraps at 100 columns, by path length
    assert code == 1
    assert "EXCEEDED: grow=1: grow" in err and "compiled 3 times" in flat
    assert "why: array types (shape) 2 (lesson 01)" in flat
    assert "jitlab doctor: exit code 1 (budget: grow=1)" in err


def test_budget_met_passes_and_star_pattern_counts_every_function(tmp_path, capsys):
    script = program(tmp_path, SHAPES)
    assert main(["--max-compiles", "grow=3", "--", "python", script]) == 0
    assert "ok: grow=3" in capsys.readouterr().err
    assert main(["--max-compiles", "*=2", "--", "python", script]) == 1
    assert "EXCEEDED: *=2: grow" in capsys.readouterr().err


def test_budget_for_a_function_that_never_ran_is_a_warning_and_not_a_pass(tmp_path, capsys):
    script = program(tmp_path, SHAPES)
    code = main(["--max-compiles", "grwo=5", "--", "python", script])
    err = capsys.readouterr().err
    assert code == 1
    assert "warning: grwo=5: no jitted function named 'grwo' ran" in err


def test_json_report(tmp_path, capsys):
    script = program(tmp_path, SHAPES)
    out = tmp_path / "report.json"
    assert main(["--json", str(out), "--max-compiles", "grow=1", "--", script]) == 1
    data = json.loads(out.read_text())
    assert data["schema"] == "jitlab-doctor/1" and data["exit_code"] == 1
    (grow,) = [f for f in data["functions"] if f["name"] == "grow"]
    assert (grow["compiles"], grow["recompiles"], grow["calls"]) == (3, 2, 4)
    assert grow["causes"] == {"shape": 2}
    second = grow["misses"][1]
    assert second["causes"] == ["shape"] and second["lessons"] == ["01 shapes"]
    assert second["differences"] == [
        {"part": "shape", "where": "x", "now": "f32[3]", "before": "f32[2]", "what": ""}
    ]
    assert "different input types" in second["jax_explanation"]
    assert second["call_site"].endswith("prog.py:9 in <module>")  # grow(jnp.ones(n))
    assert data["budgets"] == [
        {
            "budget": "grow=1",
            "status": "exceeded",
            "counts": [{"name": "grow", "defined_at": grow["defined_at"], "compiles": 3}],
        }
    ]


AHEAD = """
    import jax, jax.numpy as jnp

    @jax.jit
    def predict(w, x):
        return (x @ w).sum()

    w, x = jnp.ones((3, 2)), jnp.ones((4, 3))
    compiled = predict.lower(w, x).compile()
    compiled(w, x)
    predict(w, x)
    predict(w, jnp.ones((5, 3)))
"""


def test_json_report_counts_an_ahead_of_time_compilation_of_real_arguments(tmp_path, capsys):
    """Under --json each process keeps its own recorder; a ``.lower(args).compile()`` is
    settled by the miss that recorder returns (it returned none: an internal error, and
    the compilation left a lowering)."""
    out = tmp_path / "report.json"
    assert main(["--json", str(out), "--", program(tmp_path, AHEAD)]) == 0
    data = json.loads(out.read_text())
    assert data["internal_errors"] == []
    (predict,) = data["functions"]
    assert (predict["compiles"], predict["recompiles"]) == (2, 1)
    assert [m["kind"] for m in predict["misses"]] == ["aot", "miss"]
    assert predict["misses"][1]["causes"] == ["shape"]


def test_a_program_named_persistent_keeps_jax_s_text_off_stderr(tmp_path):
    """JAX's tracing-miss text quotes the program's path; a path with "persistent" in it
    is still a tracing miss, kept by the doctor and not printed. (A real process: pytest's
    own log handler would take the text here.)"""
    script = program(tmp_path, SHAPES, name="persistent_train.py")
    done = subprocess.run(
        [sys.executable, "-m", "jitlab.doctor", "--", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "array types (shape): 2 misses" in done.stderr
    assert "TRACING CACHE MISS" not in done.stderr


TWO_LOSSES = """
    import jax, jax.numpy as jnp

    class Classifier:
        @staticmethod
        @jax.jit
        def loss(x):
            return x.sum()

    class Regressor:
        @staticmethod
        @jax.jit
        def loss(x):
            return (x * x).sum()

    for n in (2, 3):
        Classifier.loss(jnp.ones(n))
    Regressor.loss(jnp.ones(2))
"""


def test_a_budget_line_names_the_function_as_the_table_does(tmp_path, capsys):
    """Two functions named ``loss``: the table shows their qualified names, and so does
    each budget line (it said ``loss`` for both)."""
    script = program(tmp_path, TWO_LOSSES)
    budgets = ["--max-compiles", "Classifier.loss=1", "--max-compiles", "Regressor.*=1"]
    assert main([*budgets, "--", script]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "EXCEEDED: Classifier.loss=1: Classifier.loss (" in err
    assert "ok: Regressor.*=1 (at most 1: Regressor.loss)" in err


def test_module_form(tmp_path, capsys, monkeypatch):
    program(tmp_path, SHAPES, name="shapes_module.py")
    monkeypatch.chdir(tmp_path)
    assert main(["--", "python", "-m", "shapes_module", "--flag"]) == 0
    assert "jitlab doctor: python -m shapes_module --flag" in capsys.readouterr().err


def test_program_arguments_reach_the_program(tmp_path, capsys):
    script = program(tmp_path, "import sys\nprint(sys.argv[1:])\n")
    assert main(["--", "python", script, "a", "--b"]) == 0
    assert capsys.readouterr().out == "['a', '--b']\n"


def test_program_that_raises_gets_report_then_traceback_and_exit_1(tmp_path, capsys):
    script = program(
        tmp_path,
        """
        import jax, jax.numpy as jnp

        @jax.jit
        def fails_later(x):
            return x + 1

        fails_later(jnp.ones(2))
        fails_later(jnp.ones(3))
        raise ValueError("bad batch")
        """,
    )
    code = main(["--", "python", script])
    err = capsys.readouterr().err
    assert code == 1
    report, traceback = err.index("fails_later"), err.index("Traceback (most recent call last)")
    assert report < traceback
    assert err.rstrip().endswith("jitlab doctor: exit code 1 (the program raised an exception)")
    assert "ValueError: bad batch" in err and "runpy" not in err[traceback:]


def test_control_flow_error_points_to_the_control_flow_lesson(tmp_path, capsys):
    script = program(
        tmp_path,
        """
        import jax, jax.numpy as jnp

        @jax.jit
        def branch(x, n):
            return x if n > 5 else -x

        branch(jnp.ones(2), 7)
        """,
    )
    assert main(["--", script]) == 1
    err = capsys.readouterr().err
    lesson = load_course().lesson("control_flow")
    assert "TracerBoolConversionError" in err
    assert f"Lesson {lesson.number} control_flow" in err
    # the function whose trace raised is the program's own, watched, and said to have raised
    assert "1 watched function, 0 compilations" in err
    assert "its trace raised: TracerBoolConversionError" in err
    assert "branch" not in err[err.find("Not watched") : err.index("The program failed")]
    traceback = err[err.index("Traceback (most recent call last)") :]
    assert "wrap.py" not in traceback and "jitlab/doctor" not in traceback
    assert "in branch" in traceback  # the user's frame, where the trace raised


def test_an_unhashable_static_argument_points_to_the_static_arguments_lesson(tmp_path, capsys):
    script = program(
        tmp_path,
        """
        from functools import partial
        import jax, jax.numpy as jnp

        @partial(jax.jit, static_argnames="sizes")
        def widths(x, sizes):
            return x * len(sizes)

        widths(jnp.ones(2), sizes=[16, 1])
        """,
    )
    assert main(["--", script]) == 1
    err = capsys.readouterr().err
    lesson = load_course().lesson("static_arguments")
    assert "ValueError: Non-hashable static arguments are not supported" in err
    assert f"pass a tuple, not a list or dict (lesson {lesson.number} static_arguments)" in err
    # the call raised before anything was traced: nothing compiled, and the report says so
    assert "no jitted function created while the doctor watched compiled" in err


def test_program_exit_code_is_kept(tmp_path, capsys):
    script = program(tmp_path, "import sys\nsys.exit(3)\n")
    assert main(["--", "python", script]) == 3
    assert "exit code 3 (the program's own exit code)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--", "python", "no_such_train.py"], "cannot run 'no_such_train.py': no such file"),
        (["--", "python", "-m", "no_such_module_xyz"], "no module named 'no_such_module_xyz'"),
        (["--"], "no program to run"),
        (["--max-compiles", "train_step", "--", "x.py"], "expected NAME=N"),
        (["--max-compiles", "f=one", "--", "x.py"], "'one' is not a whole number"),
        (["--", "python", "-c", "print(1)"], "unsupported python option '-c'"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def ctrl_c_as_usual() -> None:
    """In the child: Ctrl-C's default action, even when the tests were started with it
    ignored (a shell's background job), so that Python raises KeyboardInterrupt on it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_prints_the_report_so_far(tmp_path):
    script = program(
        tmp_path,
        """
        import itertools, sys
        import jax, jax.numpy as jnp

        @jax.jit
        def endless(x):
            return x + 1

        for n in itertools.count(1):
            endless(jnp.ones(n))
            if n == 3:
                print("three compiled", flush=True)
        """,
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jitlab.doctor", "--", "python", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=ctrl_c_as_usual,
    )
    try:
        line = proc.stdout.readline()  # blocks until the program says it is running
        assert line == "three compiled\n", line + proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted (Ctrl-C): the report so far" in err
    # the lesson's number comes from the course's entry point, once the course is installed
    assert "endless" in err and re.search(r"See lesson (\d\d )?shapes", err), err
    assert err.rstrip().endswith("jitlab doctor: exit code 130 (interrupted)")


def test_ctrl_c_that_jax_turns_into_another_error_still_counts_as_interrupted(tmp_path):
    # A Ctrl-C that lands while XLA runs a callback comes out of JAX as a RuntimeError
    # ("Exception raised in callback"); this program does the same on purpose.
    script = program(
        tmp_path,
        """
        import os, signal, time

        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt as err:
            raise RuntimeError("Exception raised in callback") from err
        """,
    )
    done = subprocess.run(
        [sys.executable, "-m", "jitlab.doctor", "--", "python", script],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=ctrl_c_as_usual,
    )
    assert done.returncode == 130, done.stderr
    assert "interrupted (Ctrl-C): the report so far" in done.stderr
    assert done.stderr.rstrip().endswith("jitlab doctor: exit code 130 (interrupted)")


PERSISTENT = """
    import sys, jax, jax.numpy as jnp

    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)

    @jax.jit
    def stepper(x):
        return x * float(sys.argv[2])  # a constant baked into the program

    stepper(jnp.ones(3))
"""


def test_persistent_cache_across_two_runs_names_the_part_of_the_key(tmp_path):
    script, cache = program(tmp_path, PERSISTENT), tmp_path / "cache"
    said = []
    for factor in ("2.0", "2.0", "3.0"):  # written; read back; another computation
        out = tmp_path / "report.json"
        command = [sys.executable, "-m", "jitlab.doctor", "--json", str(out), "--"]
        subprocess.run([*command, "python", script, str(cache), factor], check=True)
        (record,) = [f for f in json.loads(out.read_text())["functions"]]
        said.append(record["persistent_cache"])
    assert said[0] == {"miss": 1, "written": 1}
    assert said[1] == {"hit": 1}
    assert said[2]["miss"] == 1
    assert said[2]["key differs from an earlier run's in: computation"] == 1
