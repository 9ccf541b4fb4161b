"""The learner's runner: verdicts, exit codes and messages, including bad input."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from jitlab import cli, course, progress

EXERCISE = course.EXERCISES / "01_shapes.py"
SOLUTION = course.SOLUTIONS / "01_shapes.py"


def run(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


def test_unknown_exercise_exits_2_and_lists_the_exercises(capsys):
    code, out = run(capsys, "check", "99")
    assert code == 2
    assert "no exercise 99" in out and "01_shapes" in out


def test_solution_passes_with_exit_0(capsys):
    code, out = run(capsys, "check", str(SOLUTION))
    assert code == 0, out
    assert "PASS" in out and "✓ at most one compilation per bucket" in out
    assert "Traceback" not in out


def test_unsolved_exercise_fails_at_a_grader_with_expected_seen_hint(capsys):
    code, out = run(capsys, "check", "01")
    assert code == 1
    assert "expected:" in out and "seen:" in out and "hint:" in out
    assert "NotImplementedError" in out and "Traceback" not in out


def test_syntax_error_names_file_and_line_without_a_traceback(tmp_path, capsys):
    broken = tmp_path / "01_shapes.py"
    text = SOLUTION.read_text().replace(
        "def bucket_size(n: int) -> int:", "def bucket_size(n: int) -> int"
    )
    broken.write_text(text)
    line = text.splitlines().index("def bucket_size(n: int) -> int") + 1
    code, out = run(capsys, "check", str(broken))
    assert code == 1
    assert f"01_shapes.py:{line}: SyntaxError" in out
    assert "Traceback" not in out


def test_a_cell_that_never_returns_is_stopped_with_a_message(tmp_path, capsys):
    looping = tmp_path / "01_shapes.py"
    looping.write_text(
        SOLUTION.read_text().replace(
            "    return 1 << max(n - 1, 0).bit_length()",
            "    while True:\n        pass",
        )
    )
    code, out = run(capsys, "check", str(looping), "--timeout", "5")
    assert code == 1
    assert "more than 5 s and was stopped" in out
    assert "loop that never ends" in out


def test_a_crash_outside_the_graders_is_reported_in_one_line(tmp_path, capsys):
    crashing = tmp_path / "01_shapes.py"
    crashing.write_text(
        SOLUTION.read_text().replace("import numpy as np", "import numpy as np\n1 / 0")
    )
    code, out = run(capsys, "check", str(crashing))
    assert code == 1
    assert "ZeroDivisionError: division by zero" in out
    assert "01_shapes.py:" in out


def test_hints_come_one_at_a_time_then_stop(capsys):
    hints = course.header_metadata(EXERCISE)["hints"]
    assert len(hints) >= 2
    for number in range(1, len(hints) + 1):
        code, out = run(capsys, "hint", "01")
        assert code == 0 and f"Hint {number} of {len(hints)}" in out
    code, out = run(capsys, "hint", "01")
    assert "last hint" in out


def test_list_shows_progress(capsys):
    code, out = run(capsys, "list")
    assert code == 0 and "not done" in out and "exercises done" in out
    progress.mark_passed(EXERCISE)
    code, out = run(capsys, "list")
    assert "done      01_shapes" in out.replace("done    ", "done      ", 1) or "done    " in out


def test_reset_restores_the_committed_exercise(capsys):
    dirty = subprocess.run(
        ["git", "diff", "--quiet", "HEAD", "--", str(EXERCISE)], cwd=course.ROOT, check=False
    )
    if dirty.returncode != 0:
        pytest.skip("exercises/01_shapes.py has uncommitted changes; not touching them")
    backup = EXERCISE.read_text()
    try:
        EXERCISE.write_text(backup + "\n# learner's edits\n")
        code, out = run(capsys, "reset", "01", "--yes")
        assert code == 0 and "original state" in out
        assert EXERCISE.read_text() == backup
    finally:
        EXERCISE.write_text(backup)


def test_reset_without_a_terminal_refuses_instead_of_guessing(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", open("/dev/null"))  # noqa: SIM115
    code, out = run(capsys, "reset", "01")
    assert code == 2 and "--yes" in out


def test_jitlab_console_script_is_installed():
    assert shutil.which("jitlab") or (course.ROOT / ".venv" / "bin" / "jitlab").exists()


def test_env_prints_the_report(capsys):
    code, out = run(capsys, "env")
    assert code == 0 and "jax" in out and "cpu_cores" in out


def test_watch_rechecks_when_the_file_is_saved(tmp_path):
    watched = tmp_path / "01_shapes.py"
    watched.write_text(SOLUTION.read_text())
    process = subprocess.Popen(
        [sys.executable, "-m", "jitlab.cli", "watch", str(watched)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in process.stdout], daemon=True).start()

    def wait_for(text: str, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if text in lines.get(timeout=1):
                    return
            except queue.Empty:
                continue
        raise AssertionError(f"watch never printed {text!r}")

    try:
        wait_for("PASS")
        watched.write_text(watched.read_text().replace("return 1 << max", "return 2 << max"))
        wait_for("FAIL")
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
