"""The kernel ``jitlab check`` starts before it reads the file: nbval adopts exactly that
kernel when it is meant for the file, and no kernel outlives the check.

Each case runs the check in a fresh Python process, as a learner's ``jitlab check`` does
(pytest runs inside it, which cannot happen inside this test session). The learner's
code writes the pid of the kernel it runs in, which is compared with the spare's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from jitlab.notebooks import spare_kernel, spare_provisioner

CHECK_WITH_A_SPARE = """
import json, sys
from pathlib import Path
from jitlab.learner.check import check_file
from jitlab.notebooks import spare_kernel

path = Path(sys.argv[1]).resolve()
meant_for = Path(sys.argv[2]).resolve()
kernel = spare_kernel.start(meant_for)
try:
    verdict = check_file(path, in_process=True, kernel=kernel, cell_timeout_s=int(sys.argv[3]))
finally:
    kernel.stop()
print(json.dumps({
    "passed": verdict.passed,
    "kind": verdict.kind,
    "problem": verdict.problem,
    "adopted": kernel.adopted,
    "spare_pid": kernel.process.pid,
    "spare_ended": kernel.process.poll() is not None,
    "scratch_left": kernel.scratch.exists(),
}))
"""


def answer(course, body: str) -> Path:
    """The learner's copy with ``double`` written as ``body``; the cell before the
    grader records the pid of the kernel it runs in."""
    copy = course.lesson("doubling").exercise.learner_copy
    text = copy.read_text().replace("    raise NotImplementedError\n", body)
    record_pid = "# %%\nimport os\nopen(os.environ['PID_FILE'], 'w').write(str(os.getpid()))\n\n"
    copy.write_text(text.replace('# %% tags=["grader"]', record_pid + '# %% tags=["grader"]'))
    return copy


def check(tmp_path: Path, path: Path, meant_for: Path, timeout_s: int = 60) -> dict:
    pid_file = tmp_path / "kernel.pid"
    pid_file.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    done = subprocess.run(
        [sys.executable, "-c", CHECK_WITH_A_SPARE, str(path), str(meant_for), str(timeout_s)],
        env={**env, "PID_FILE": str(pid_file)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    outcome["kernel_pid"] = int(pid_file.read_text()) if pid_file.exists() else None
    return outcome


def test_the_provisioner_is_registered_where_jupyter_client_looks():
    (found,) = entry_points(group="jupyter_client.kernel_provisioners", name="jitlab-spare")
    assert found.load() is spare_provisioner.SpareKernelProvisioner
    assert spare_kernel.available()


def test_the_learners_code_runs_in_the_spare_kernel(fixture_course, tmp_path):
    path = answer(fixture_course, "    return x * 2\n")
    outcome = check(tmp_path, path, meant_for=path)
    assert outcome["passed"], outcome["problem"]
    assert outcome["adopted"]
    assert outcome["kernel_pid"] == outcome["spare_pid"]
    assert outcome["spare_ended"] and not outcome["scratch_left"]


def test_a_spare_meant_for_another_file_is_not_adopted_and_is_stopped(fixture_course, tmp_path):
    path = answer(fixture_course, "    return x * 2\n")
    other = fixture_course.root / "solutions" / "01_doubling.py"
    outcome = check(tmp_path, path, meant_for=other)
    assert outcome["passed"], outcome["problem"]
    assert not outcome["adopted"]
    assert outcome["kernel_pid"] not in (None, outcome["spare_pid"])
    assert outcome["spare_ended"] and not outcome["scratch_left"]


def test_a_file_that_does_not_parse_runs_nothing_and_leaves_no_kernel(fixture_course, tmp_path):
    path = answer(fixture_course, "    return x *\n")
    outcome = check(tmp_path, path, meant_for=path)
    assert outcome["kind"] == "syntax"
    assert not outcome["adopted"] and outcome["kernel_pid"] is None
    assert outcome["spare_ended"] and not outcome["scratch_left"]


@pytest.mark.slow
def test_an_endless_loop_in_the_adopted_kernel_is_interrupted(fixture_course, tmp_path):
    path = answer(fixture_course, "    while True:\n        pass\n")
    outcome = check(tmp_path, path, meant_for=path, timeout_s=5)
    assert outcome["adopted"] and outcome["kernel_pid"] == outcome["spare_pid"]
    assert outcome["kind"] == "timeout", outcome["problem"]
    assert "still running after 5 s" in outcome["problem"]
    assert outcome["spare_ended"] and not outcome["scratch_left"]


@pytest.mark.parametrize(("body", "code", "verdict"), [("x * 2", 0, "PASS"), ("x * 3", 1, "FAIL")])
def test_the_jitlab_command_prints_its_whole_verdict_and_exit_code(
    fixture_course, body, code, verdict
):
    # The learner's path end to end: the spare kernel, pytest in the process, and an exit
    # that skips the interpreter's teardown, with stdout a pipe (block-buffered).
    answer(fixture_course, f"    return {body}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    done = subprocess.run(
        [sys.executable, "-m", "jitlab.learner.cli", "check", "01"],
        env={**env, "PID_FILE": os.devnull},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == code, done.stdout + done.stderr
    assert f"{verdict}  exercises/01_doubling.py" in done.stdout
    assert done.stdout.endswith("\n") and "Traceback" not in done.stderr
