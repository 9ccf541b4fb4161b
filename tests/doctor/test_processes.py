"""The doctor across the processes of a ``jax.distributed`` job: lesson 14's ragged last
batch, two CPU processes on 127.0.0.1 with gloo collectives, started the way the lesson
starts them (``jitlab.instruments.multiprocess.run``, with the lesson's time limits).

The workers run the lesson's own functions (read from lessons/14_processes.py), each
process recording its report with ``jitlab.doctor.record_process``; ``jitlab doctor
--merge`` then names the divergence first."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from jitlab.doctor import cli, merge

try:  # the launcher may live among the instruments
    from jitlab.instruments import multiprocess
except ImportError:
    from jitlab.instruments import multiprocess

pytestmark = pytest.mark.slow  # two jobs of two processes each

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "lessons" / "14_processes.py"
FUNCTIONS = (
    "data_mesh",
    "local_batch",
    "inferred_batch",
    "sgd_step",
    "program_id",
    "train",
    "ragged_inferred",
    "sgd_with_errors",
    "ragged_gathered",
    "padded_batch",
    "decayed_step",
    "assert_same_program",
    "report_same_program",
    "from_environment",
)
SETTINGS = ("ragged", "even", "stale")  # the jobs' sizes, and per-process environments

TASK = '''
import jitlab.doctor


def doctor_task(worker):
    """One of the lesson's tasks, with this process's report kept by the doctor."""
    name = worker.options["task"]
    path = os.path.join(worker.options["reports"], "doctor.json")
    with jitlab.doctor.record_process(path, command=["lesson 14", name]):
        globals()[name](worker)
'''


def _lesson():
    """The lesson's functions (decorators included) and its jobs' settings."""
    text = LESSON.read_text()
    lines = text.splitlines()
    sources, settings = {}, {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name in FUNCTIONS:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            sources[node.name] = "\n".join(lines[start - 1 : node.end_lineno])
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            name = getattr(node.targets[0], "id", "")
            if name in SETTINGS:
                settings[name] = ast.literal_eval(node.value)
    assert set(sources) == set(FUNCTIONS), set(FUNCTIONS) - set(sources)
    assert set(settings) == set(SETTINGS), set(SETTINGS) - set(settings)
    return [sources[name] for name in FUNCTIONS], settings


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> tuple[Path, dict]:
    sources, settings = _lesson()
    # install() before the lesson's @jax.jit runs, as `jitlab doctor` would: every call
    # of sgd_step is watched
    prelude = multiprocess.PRELUDE + "\nimport jitlab.doctor\n\njitlab.doctor.install()\n"
    path = tmp_path_factory.mktemp("job") / "lesson_job.py"
    path.write_text("\n\n\n".join([prelude, *sources, TASK]))
    return path, settings


def _job(
    program, folder: Path, task: str, sizes: str = "ragged", **limits
) -> tuple[multiprocess.Run, list[Path]]:
    path, settings = program
    folder.mkdir()
    options = {**settings[sizes], "task": task, "reports": str(folder), "agree": False}
    run = multiprocess.run(f"{path}:doctor_task", options=options, **limits)
    return run, sorted(folder.glob("doctor.p*.json"))


@pytest.fixture(scope="module")
def inferred(program, tmp_path_factory):
    """The lesson's first ragged job (its default time limits): it finishes, silently
    wrong."""
    return _job(program, tmp_path_factory.mktemp("inferred") / "reports", "ragged_inferred")


@pytest.fixture(scope="module")
def gathered(program, tmp_path_factory):
    """The lesson's second: gathering the errors is a collective of one number per row;
    gloo aborts process 1, and the launcher stops process 0 after 3 s (the lesson's
    stall_timeout)."""
    folder = tmp_path_factory.mktemp("gathered") / "reports"
    return _job(program, folder, "ragged_gathered", stall_timeout=3)


def test_the_ragged_last_batch_is_named_first_as_a_divergence(inferred, capsys):
    run, files = inferred
    run.check()
    assert [f.name for f in files] == ["doctor.p0.json", "doctor.p1.json"]
    assert cli.main(["--merge", *map(str, files)]) == 1
    out = capsys.readouterr().out
    print(out)
    lines = out.splitlines()
    assert lines[0] == "jitlab doctor: 2 processes of lesson 14 ragged_inferred"
    assert lines[1:3] == [
        "   process 0: doctor.p0.json, complete",
        "   process 1: doctor.p1.json, complete",
    ]
    first = next(i for i, line in enumerate(lines) if line.startswith("DIVERGENCE"))
    assert first == 5  # named first, before the table
    divergence = " ".join(" ".join(lines[first : first + 8]).split())
    assert "DIVERGENCE: sgd_step" in divergence
    assert "compiled on some processes only, from its call 4" in divergence
    assert "compilation 2 happened on process 1, not on 0" in divergence
    assert "x: f32[6,3] now, f32[8,3] before" in divergence
    assert "process 0: no compilation 2; kept w: f32[3], x: f32[8,3], y: f32[8]" in divergence
    table = next(line for line in lines if line.startswith("   sgd_step"))
    assert table.split() == ["sgd_step", "1", "2", "<-", "diverges"]

    (d,) = merge.divergences(merge.load(files))
    assert (d.function, d.compilation, d.call, d.on, d.missing) == ("sgd_step", 2, 4, [1], [0])


def test_a_process_that_dies_mid_run_is_merged_as_partial(gathered, capsys):
    run, files = gathered
    assert run.workers[1].signal_name == "SIGABRT"
    assert [f.name for f in files] == ["doctor.p0.json", "doctor.p1.json"]
    data = [json.loads(f.read_text()) for f in files]
    assert data[1]["process"]["partial"] is True
    assert cli.main(["--merge", *map(str, files)]) == 1
    out = capsys.readouterr().out
    print(out)
    assert "process 1: doctor.p1.json, partial: the process ended before its report" in out
    (d,) = merge.divergences(merge.load(files))
    assert (d.function, d.compilation, d.call, d.on, d.missing) == (
        "sgd_with_errors",
        2,
        4,
        [1],
        [0],
    )
    assert "f32[6,3]" in " ".join(d.lines)  # what changed, from the doctor or from JAX


def test_a_static_value_read_per_process_diverges_with_equal_counts(program, tmp_path, capsys):
    # The lesson's third job: each process reads the weight decay from its own
    # environment (0 on process 0, 0.1 on process 1). One compilation on each: the
    # counts look healthy, the signatures do not.
    _, settings = program
    run, files = _job(program, tmp_path / "env", "from_environment", "even", env=settings["stale"])
    run.check()
    assert cli.main(["--merge", *map(str, files)]) == 1
    out = capsys.readouterr().out
    print(out)
    (d,) = merge.divergences(merge.load(files))
    assert (d.function, d.compilation, d.call, d.on, d.missing) == (
        "decayed_step",
        1,
        1,
        [0, 1],
        [],
    )
    assert d.kind == "with different signatures"
    signatures = [line for line in d.lines if line.strip().startswith("with ")]
    assert [line.split("; ")[-1] for line in signatures] == ["decay=0.0", "decay=0.1"]
    table = next(line for line in out.splitlines() if line.startswith("   decayed_step"))
    assert table.split() == ["decayed_step", "1", "1", "<-", "diverges"]


def test_reports_of_different_runs_are_refused_naming_the_files(
    program, inferred, gathered, tmp_path, capsys
):
    mixed = [str(inferred[1][0]), str(gathered[1][1])]  # another command
    assert cli.main(["--merge", *mixed]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"jitlab doctor: {mixed[0]} and {mixed[1]} are from different runs: the commands "
        "differ ('lesson 14 ragged_inferred', 'lesson 14 ragged_gathered')"
    )

    _, again = _job(program, tmp_path / "again", "ragged_inferred")  # the same command
    mixed = [str(inferred[1][0]), str(again[1])]
    assert cli.main(["--merge", *mixed]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"jitlab doctor: {mixed[0]} and {mixed[1]} are from different runs (")

    assert cli.main(["--merge", str(inferred[1][0]), str(again[0])]) == 2  # two process 0s
    assert "different runs" in capsys.readouterr().err


def test_one_file_per_process_and_the_cli_s_json_says_which(tmp_path, monkeypatch, capsys):
    from jitlab.doctor.processes import process_path

    assert process_path("out/report.json", 0, 1) == Path("out/report.json")
    assert process_path("out/report.json", 3, 4) == Path("out/report.p3.json")
    (tmp_path / "prog.py").write_text(
        "import jax, jax.numpy as jnp\nf = jax.jit(lambda x: x + 1)\nf(jnp.ones(2))\n"
        "f(jnp.ones(3))\n"
    )
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--json", "report.json", "--", "python", "prog.py"]) == 0
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["process"]["index"] == 0 and data["process"]["count"] == 1
    assert data["process"]["partial"] is False and data["unfinished"] == []
    assert [m["call"] for m in data["functions"][0]["misses"]] == [1, 2]
    assert cli.main(["--merge", "report.json"]) == 0
    assert "No divergence" in capsys.readouterr().out
