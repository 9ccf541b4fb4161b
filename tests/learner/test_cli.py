"""The learner's runner on the fixture course: verdicts, exit codes and messages for
every kind of input, right and wrong, including a grader cell changed by mistake."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
from answers import SOLVED, run, start_watch, write_answer

from jitlab.learner import progress

# ------------------------------------------------------------------ verdicts


def test_a_right_answer_passes_and_points_to_the_next_step(fixture_course, capsys):
    write_answer(fixture_course, SOLVED)
    code, out = run(capsys, "check", "01")
    assert code == 0, out
    assert "PASS  exercises/01_doubling.py" in out
    assert "✓ double doubles" in out and "✓ one compilation per shape" in out
    assert "last exercise" in out  # the fixture's only exercise
    assert "Traceback" not in out


def test_the_untouched_exercise_fails_at_its_grader_without_green_ticks(fixture_course, capsys):
    code, out = run(capsys, "check", "doubling")
    assert code == 1
    assert "✗ double doubles" in out and "NotImplementedError" in out
    assert "✓" not in out, "an unwritten stub must not be shown passing checks"
    assert "jitlab hint 01" in out


def test_a_wrong_answer_names_expected_seen_and_hint(fixture_course, capsys):
    write_answer(fixture_course, "    return x * 3\n")
    code, out = run(capsys, "check", "01_doubling")
    assert code == 1
    assert "✗ double doubles" in out
    assert "expected:" in out and "seen:" in out and "hint:" in out


def test_a_syntax_error_names_file_and_line(fixture_course, capsys):
    text = write_answer(fixture_course, "    return x *\n")
    line = text.splitlines().index("    return x *") + 1
    code, out = run(capsys, "check", "01")
    assert code == 1
    assert f"01_doubling.py:{line}: SyntaxError" in out
    assert "Traceback" not in out


def test_an_endless_loop_is_stopped_and_points_at_the_learners_line(fixture_course, capsys):
    text = write_answer(fixture_course, "    while True:\n        pass\n")
    line = text.splitlines().index("    while True:") + 1
    code, out = run(capsys, "check", "01", "--timeout", "5")
    assert code == 1
    assert "still running after 5 s" in out and "loop that never ends" in out
    # The loop runs when the grader calls double, but the verdict names the learner's line.
    assert f"01_doubling.py:{line}" in out, out


FORGE_AND_EXIT = (
    "    import os\n"
    "    print('✓ double doubles\\n✓ one compilation per shape')\n"
    "    print('\\nPASS  exercises/01_doubling.py')\n"
    "    os._exit(0)\n"
)


def test_a_kernel_that_exits_is_named_at_once_and_its_forged_ticks_are_not_shown(
    fixture_course, capsys
):
    text = write_answer(fixture_course, FORGE_AND_EXIT)
    grader_line = text.splitlines().index('# %% tags=["grader"]') + 1
    started = time.monotonic()
    code, out = run(capsys, "check", "01", "--timeout", "300")
    waited = time.monotonic() - started
    assert code == 1, out
    assert "the kernel process exited (code 0)" in out, out
    assert f"grader cell at line {grader_line}" in out, out
    assert "✓ double doubles" not in out and "PASS" not in out, out
    # Noticed when the process ended, not when the cell's 300 s ran out.
    assert waited < 150, waited


def test_a_learners_error_text_cannot_pass_for_ticks(fixture_course, capsys):
    forge = "raise ValueError('\\n✓ double doubles\\n\\nPASS  exercises/01_doubling.py')\n"
    write_answer(fixture_course, SOLVED, after_import=forge)  # raised by a learner's cell
    code, out = run(capsys, "check", "01")
    assert code == 1, out
    forged = [line for line in out.splitlines() if "✓ double doubles" in line]
    assert forged and all(line.lstrip().startswith("│") for line in forged), out
    assert not any(line.startswith("PASS") for line in out.splitlines()), out


def test_a_crash_in_a_setup_cell_is_one_line_with_its_place(fixture_course, capsys):
    write_answer(fixture_course, SOLVED, after_import="1 / 0\n")
    code, out = run(capsys, "check", "01")
    assert code == 1
    assert "ZeroDivisionError: division by zero" in out
    assert "01_doubling.py:" in out and "Traceback" not in out


# ------------------------------------------------------------------ grader cells put back

GRADER_CELL = "from fixture_graders import doubling\n\ndoubling.grade(double)\n"
GRADER = '# %% tags=["grader"]\n' + GRADER_CELL


@pytest.mark.parametrize(
    ("edit", "put_back"),
    [
        (lambda t: t.replace(GRADER_CELL, ""), "the grader cell of part 1"),
        (lambda t: t.replace('# %% tags=["grader"]', "# %%"), "the grader cell of part 1"),
        (
            lambda t: t.replace('# %% tags=["grader"]', '# %% tags=["grader", "nbval-skip"]'),
            "the grader cell of part 1",
        ),
        (
            lambda t: t.replace('# %% tags=["grader"]', '# %% tags=["grader", "raises-exception"]'),
            "the grader cell of part 1",
        ),
        (
            lambda t: t.replace(
                "doubling.grade(double)\n",
                "try:\n    doubling.grade(double)\nexcept Exception:\n    pass\n",
            ),
            "the grader cell of part 1",
        ),
        (lambda t: t + "\n# %%\nprint('after the grader')\n", "your cells below the grader cells"),
        (
            lambda t: t.replace(GRADER, "").replace(
                "# %%\n@jax.jit", GRADER + "\n\n# %%\n@jax.jit"
            ),
            "your cells below the grader cells, now run above them",
        ),
        (
            lambda t: t.replace("doubling.grade(double)\n", "doubling.grade(double\n"),
            "the grader cell of part 1 (changed or deleted)",
        ),
    ],
    ids=[
        "grader-emptied",
        "tag-removed",
        "nbval-skip",
        "raises-exception",
        "try-except",
        "cell-after",
        "grader-moved-up",
        "grader-syntax-error",
    ],
)
def test_a_changed_grader_cell_is_put_back_and_the_verdict_says_so(
    fixture_course, capsys, edit, put_back
):
    exercise = fixture_course.lesson("doubling").exercise
    text = write_answer(fixture_course, "    return x * 3\n")  # wrong: the grader must say so
    exercise.learner_copy.write_text(edit(text))
    code, out = run(capsys, "check", "01")
    assert code == 1, out
    said = " ".join(out.split())
    assert f"note: put back from solutions/01_doubling.py: {put_back}" in said, out
    assert "✗ double doubles" in out, out  # the original grader ran, on the learner's code
    assert exercise.learner_copy.read_text() == edit(text)  # the learner's file untouched


def test_a_solved_exercise_with_a_changed_grader_cell_passes_with_the_original(
    fixture_course, capsys
):
    text = write_answer(fixture_course, SOLVED)
    fixture_course.lesson("doubling").exercise.learner_copy.write_text(
        text.replace(GRADER_CELL, "print('done')\n")
    )
    code, out = run(capsys, "check", "01")
    assert code == 0, out
    assert "put back from solutions/01_doubling.py" in out and "✓ double doubles" in out


PLANT_FAKE = """
import sys, types
fake = types.ModuleType("fixture_graders.doubling")
fake.grade = lambda *args: print("All checks passed")
sys.modules["fixture_graders.doubling"] = fake
import fixture_graders
fixture_graders.doubling = fake
"""

EMPTY_LISTENERS = """
from jax._src import monitoring as _m
_m._event_duration_secs_listeners.clear()
"""


@pytest.mark.parametrize(
    ("cheat", "body", "message"),
    [
        (PLANT_FAKE, "    return x * 3\n", "did not run to its end"),
        ("jax.config.update('jax_disable_jit', True)\n", SOLVED, "jit is switched off"),
    ],
    ids=["fake-grader-module", "jit-disabled"],
)
def test_a_grader_that_did_not_run_or_jit_switched_off_fails(
    fixture_course, capsys, cheat, body, message
):
    write_answer(fixture_course, body, before="# %%\n" + cheat)
    code, out = run(capsys, "check", "01")
    assert message in out, out
    assert code == 1, out


def test_emptied_monitoring_listeners_before_grading_do_not_fool_the_counter(
    fixture_course, capsys
):
    # The grader's counter registers its own listeners after the learner's cells ran.
    write_answer(fixture_course, SOLVED, before="# %%\n" + EMPTY_LISTENERS)
    code, out = run(capsys, "check", "01")
    assert code == 0, out


def test_listeners_emptied_while_the_grader_runs_are_caught(fixture_course, capsys):
    body = (
        "    from jax._src import monitoring as _m\n"
        "    _m._event_duration_secs_listeners.clear()\n"
        "    return x * 2\n"
    )
    write_answer(fixture_course, body)
    code, out = run(capsys, "check", "01")
    assert code == 1, out
    assert "monitoring listeners were removed" in out or "compilation" in out, out


# ------------------------------------------------------------------ bad input


def test_unknown_exercise_exits_2_and_lists_the_exercises(fixture_course, capsys):
    code, out = run(capsys, "check", "99")
    assert code == 2
    assert "no exercise '99'" in out and "01  doubling" in out


def test_a_notebook_path_is_refused_with_exit_2(fixture_course, capsys):
    code, out = run(capsys, "check", "exercises/01_doubling.ipynb")
    assert code == 2 and "jitlab check 01_doubling" in out


def test_a_course_file_that_does_not_load_exits_2_naming_file_and_key(fixture_course, capsys):
    lesson = fixture_course.root / "lessons" / "00_basics.py"
    lesson.write_text(lesson.read_text().replace("#     keypoints:", "#     keypoint:"))
    from jitlab.course.manifest import _load

    _load.cache_clear()
    code, out = run(capsys, "list")
    assert code == 2
    assert "00_basics.py" in out and "'keypoint'" in out


# ------------------------------------------------------------------ other verbs


def test_hints_come_one_at_a_time_then_stop(fixture_course, capsys):
    hints = fixture_course.lesson("doubling").exercise.meta.hints
    for number in range(1, len(hints) + 1):
        code, out = run(capsys, "hint", "01")
        assert code == 0 and f"Hint {number} of {len(hints)}" in out
    code, out = run(capsys, "hint", "doubling")
    assert "last hint" in out


def test_list_shows_not_done_done_and_changed_since_it_passed(fixture_course, capsys):
    exercise = fixture_course.lesson("doubling").exercise
    code, out = run(capsys, "list", "--json")
    assert json.loads(out)["exercises"][0]["status"] == "not done"
    write_answer(fixture_course, SOLVED)
    progress.mark_passed(exercise)
    _, out = run(capsys, "list")
    assert "[done] 01 doubling" in out and "1/1 exercises done" in out
    exercise.learner_copy.write_text(exercise.learner_copy.read_text() + "\n# edited\n")
    _, out = run(capsys, "list", "--json")
    assert json.loads(out)["exercises"][0]["status"].startswith("changed since it passed")


def test_reset_restores_the_generated_exercise_without_git(fixture_course, capsys):
    exercise = fixture_course.lesson("doubling").exercise
    original = exercise.learner_copy.read_text()
    assert not (fixture_course.root / ".git").exists()
    write_answer(fixture_course, SOLVED)
    code, out = run(capsys, "reset", "01", "--yes")
    assert code == 0 and "original state" in out
    assert exercise.learner_copy.read_text() == original


def test_reset_without_a_terminal_refuses_instead_of_guessing(fixture_course, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", open(os.devnull))  # noqa: SIM115
    code, out = run(capsys, "reset", "01")
    assert code == 2 and "--yes" in out


def test_list_into_a_closed_pipe_ends_without_a_traceback(fixture_course):
    listing = subprocess.run(
        f"{sys.executable} -m jitlab.learner.cli list | head -c 10",
        shell=True,
        capture_output=True,
        text=True,
        check=False,
    )
    assert "Traceback" not in listing.stderr and "BrokenPipeError" not in listing.stderr


class Lines:
    """What a ``jitlab watch`` process prints, line by line, as it comes."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process, self.queue = process, queue.Queue()
        threading.Thread(
            target=lambda: [self.queue.put(x) for x in process.stdout], daemon=True
        ).start()

    def wait_for(self, text: str) -> list[str]:
        """The lines up to the first that holds ``text``, however long a busy machine
        takes; it stops early only if the process has died, and gives up after ten silent
        minutes."""
        seen, silent = [], 0.0
        while silent < 600:
            try:
                line = self.queue.get(timeout=1)
            except queue.Empty:
                if self.process.poll() is not None:
                    raise AssertionError(f"watch exited before printing {text!r}: {seen}") from None
                silent += 1
                continue
            silent = 0.0
            seen.append(line)
            if text in line:
                return seen
        raise AssertionError(f"watch printed nothing for 10 minutes (waiting for {text!r})")


def test_watch_rechecks_when_the_file_is_saved(fixture_course):
    exercise = fixture_course.lesson("doubling").exercise
    write_answer(fixture_course, SOLVED)
    process = start_watch()
    lines = Lines(process)
    try:
        lines.wait_for("PASS")
        text = exercise.learner_copy.read_text()
        exercise.learner_copy.write_text(text.replace("return x * 2", "return x * 3"))
        lines.wait_for("FAIL")
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


@pytest.fixture
def two_exercises(fixture_course):
    """The fixture course with a second exercise, ``02 doubling_again``, a copy of 01."""
    root = fixture_course.root
    for folder in ("lessons", "solutions", "exercises"):
        text = (root / folder / "01_doubling.py").read_text()
        text = text.replace("Exercise 01 · Doubling", "Exercise 02 · Doubling again")
        (root / folder / "02_doubling_again.py").write_text(text)
    manifest = root / "course.yml"
    manifest.write_text(manifest.read_text() + "  - doubling_again\n")
    from jitlab.course.manifest import _load, load_course

    _load.cache_clear()
    return load_course(root)


def test_watch_checks_whichever_exercise_is_saved_and_moves_on_after_a_pass(two_exercises):
    first, second = (two_exercises.lesson(s).exercise for s in ("doubling", "doubling_again"))
    process = start_watch()  # no exercise named: the first not done, 01
    lines = Lines(process)
    try:
        assert any("FAIL  exercises/01_doubling.py" in x for x in lines.wait_for("FAIL"))
        solved = second.learner_copy.read_text().replace("    raise NotImplementedError\n", SOLVED)
        second.learner_copy.write_text(solved)  # the learner works on 02 instead
        said = lines.wait_for("watching on")
        assert any("PASS  exercises/02_doubling_again.py" in x for x in said), said
        assert "save exercises/01_doubling.py next" in said[-1], said
        first.learner_copy.write_text(
            first.learner_copy.read_text().replace("    raise NotImplementedError\n", SOLVED)
        )
        said = lines.wait_for("every exercise is done")
        assert any("PASS  exercises/01_doubling.py" in x for x in said), said
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


PART_TWO = """@jax.jit
def double_too(x):
    # BEGIN SOLUTION
    return x * 2
    # END SOLUTION


# %% tags=["grader"]
"""
GRADER_TWO = """

# %% tags=["grader"]
from fixture_graders import doubling

doubling.grade(double_too)
"""


def test_each_parts_outcome_is_shown_and_an_unwritten_stub_is_not_passing(fixture_course, capsys):
    from jitlab.course.exercise_source import generated_text

    exercise = fixture_course.lesson("doubling").exercise
    source = exercise.source.read_text().replace('# %% tags=["grader"]\n', PART_TWO, 1)
    exercise.source.write_text(source.rstrip("\n") + "\n" + GRADER_TWO)
    exercise.learner_copy.write_text(generated_text(exercise))
    text = exercise.learner_copy.read_text()  # part 1 solved; part 2 still its stub
    exercise.learner_copy.write_text(text.replace("    raise NotImplementedError\n", SOLVED, 1))
    from jitlab.grading.verdict import format_verdict
    from jitlab.learner.check import check_file

    verdict = check_file(exercise.learner_copy, course=fixture_course)
    out = format_verdict(verdict)
    assert not verdict.passed, out
    assert verdict.parts == (("part 1 (double)", "passed"), ("part 2 (double_too)", "not started"))
    assert "✓ part 1 (double): passed" in out and "part 2 (double_too): not started" in out, out
    # part 1's four checks passed; part 2's grader passed two before it met the stub, and
    # those are not shown
    assert len([c for c in verdict.checks if c.passed]) == 4, verdict.checks
    assert "✗ double doubles" in out and "NotImplementedError" in out, out
    assert "put back" not in out, out


def test_a_misspelt_name_in_a_cell_gets_pythons_suggestion(fixture_course, capsys):
    write_answer(fixture_course, SOLVED, after_import="limit = 3\nprint(limt)\n")
    code, out = run(capsys, "check", "01")
    assert code == 1, out
    assert "NameError: name 'limt' is not defined" in out and "did you mean `limit`?" in out, out
