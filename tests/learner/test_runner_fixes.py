"""The runner's smaller promises: Ctrl-C during a check is an interruption, not a FAIL;
a timeout names the learner's running line; a misspelt name gets a suggestion; the
grader cells can be restored without losing the learner's code; hints come per part."""

from __future__ import annotations

import json
import signal
import threading

from answers import GRADER, SOLVED, run, start_watch, write_answer

from jitlab.course.exercise_source import generated_text
from jitlab.course.manifest import ROOT_ENV, load_course
from jitlab.learner import parts, progress
from jitlab.learner.check import restore_grader_cells

# --------------------------------------------------------------- interrupted


def test_ctrl_c_during_a_check_under_watch_stops_at_once_and_changes_nothing(fixture_course):
    exercise = fixture_course.lesson("doubling").exercise
    text = write_answer(fixture_course, SOLVED, before="# %%\nimport time\ntime.sleep(600)\n")
    state = progress.state_file()
    process = start_watch()
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(process.stdout), daemon=True)
    reader.start()
    waited = 0.0
    while not any("checking" in line for line in seen) and waited < 300:
        threading.Event().wait(0.2)
        waited += 0.2
    # The check is under way (the learner's cell sleeps for 10 minutes): one Ctrl-C.
    threading.Event().wait(3)
    process.send_signal(signal.SIGINT)
    code = process.wait(timeout=120)  # not another Ctrl-C, not the sleep
    reader.join(timeout=10)
    out = "".join(seen)
    assert "interrupted" in out, out
    assert "FAIL" not in out and "✗" not in out, out
    assert code == 0, out
    assert exercise.learner_copy.read_text() == text
    assert not state.exists() or "passed" not in json.loads(state.read_text())


# --------------------------------------------------------------- timeout line


def test_a_timeout_names_the_running_line_of_a_long_cell(fixture_course, capsys):
    # A loop of plain Python (an interrupt that lands inside JAX's own code can be
    # swallowed there, and the kernel then dies without a traceback).
    filler = "".join(f"    y{i} = x + {i}\n" for i in range(12))
    text = write_answer(fixture_course, filler + "    while True:\n        pass\n")
    lines = text.splitlines()
    loop = lines.index("    while True:") + 1
    code, out = run(capsys, "check", "01", "--timeout", "5")
    assert code == 1, out
    assert "still running after 5 s" in out, out
    # The line IPython marks with "---> 16" (a two-digit line in its cell).
    assert f"01_doubling.py:{loop}:" in out or f"01_doubling.py:{loop + 1}:" in out, out


# --------------------------------------------------------------- suggestions


def test_a_misspelt_exercise_gets_the_close_name(fixture_course, capsys):
    code, out = run(capsys, "check", "doublin")
    assert code == 2
    assert "Did you mean `jitlab check doubling`" in out, out
    code, out = run(capsys, "hint", "dubling")
    assert code == 2 and "`jitlab hint doubling`" in out, out


def test_the_real_course_suggests_shapes_for_shape(capsys, monkeypatch):
    monkeypatch.delenv(ROOT_ENV, raising=False)
    code, out = run(capsys, "check", "shape")
    assert code == 2
    assert "Did you mean `jitlab check shapes`" in out, out


# --------------------------------------------------------------- grader cells


def test_an_edited_grader_cell_is_restored_and_the_learners_code_kept(fixture_course, capsys):
    exercise = fixture_course.lesson("doubling").exercise
    text = write_answer(fixture_course, SOLVED)
    edited = text.replace("doubling.grade(double)", "pass  # doubling.grade(double)")
    edited += "\n\n# %%\nprint('a cell of mine, below the graders')\n"
    edited += "\n# %% [markdown]\n# my notes, below the graders\n"
    exercise.learner_copy.write_text(edited)
    code, out = run(capsys, "check", "01")
    assert code == 0 and "put back from solutions/01_doubling.py" in out, out
    assert exercise.learner_copy.read_text() == edited  # the check writes nothing

    code, out = run(capsys, "reset", "01", "--grader-cells")
    assert code == 0, out
    restored = exercise.learner_copy.read_text()
    assert SOLVED in restored and "a cell of mine, below the graders" in restored
    assert restored.index("a cell of mine") < restored.index(GRADER)
    assert restored.index("my notes, below the graders") < restored.index(GRADER)  # kept
    code, out = run(capsys, "check", "01")
    assert code == 0 and "put back" not in out, out


def test_restoring_grader_cells_of_an_untouched_copy_changes_nothing(fixture_course):
    exercise = fixture_course.lesson("doubling").exercise
    original = generated_text(exercise)
    assert restore_grader_cells(original, original) == original
    untagged = original.replace(GRADER, "# %%")
    assert restore_grader_cells(untagged, original) == original


# --------------------------------------------------------------- hints per part

TWO_PARTS = """
# %% tags=["grader"]
from fixture_graders import doubling

doubling.grade(double)

# %%
@jax.jit
def double_again(x):
    # BEGIN SOLUTION
    return x * 2
    # END SOLUTION


# %% tags=["grader"]
from fixture_graders import doubling_again

doubling_again.grade(double_again)
"""

HINTS = """#     hints:
#       - Read the whole exercise first.
#       - Multiply by two in double.
#       - "Return x * 2 from inside the jitted function."
#       - "Part 2: the same again."
#       - In double_again, return x * 2 as well.
"""


def two_part_course(course):
    """The fixture exercise with a second part (a second grader cell, whose grader is a
    module of its own: the runner renews only ``jitlab``'s modules in each grader cell,
    and a grader module imported in an earlier cell would report to that cell)."""
    graders = course.root / "graders" / "fixture_graders"
    (graders / "doubling_again.py").write_text((graders / "doubling.py").read_text())
    exercise = course.lesson("doubling").exercise
    text = exercise.source.read_text()
    head, _, _ = text.partition('# %% tags=["grader"]')
    text = head.rstrip("\n") + "\n\n" + TWO_PARTS
    start = text.index("#     hints:")
    end = text.index("# ---", start)
    exercise.source.write_text(text[:start] + HINTS + text[end:])
    from jitlab.course.manifest import _load

    _load.cache_clear()
    course = load_course(course.root)
    exercise = course.lesson("doubling").exercise
    exercise.learner_copy.write_text(generated_text(exercise))
    return course, exercise


def test_hints_are_read_per_part_from_the_flat_list(fixture_course):
    course, exercise = two_part_course(fixture_course)
    found = parts.parts(exercise)
    assert [p.functions for p in found] == [("double",), ("double_again",)]
    assert [i for i, _ in parts.hints_for(exercise, 1)] == [0, 1, 2]
    assert [i for i, _ in parts.hints_for(exercise, 2)] == [0, 3, 4]


def test_part_twos_hints_do_not_wait_behind_part_ones(fixture_course, capsys):
    course, exercise = two_part_course(fixture_course)
    copy = exercise.learner_copy
    # Part 1 solved, part 2 not: the check stops at part 2, and the hints follow it.
    copy.write_text(copy.read_text().replace("    raise NotImplementedError\n", SOLVED, 1))
    code, out = run(capsys, "check", "01")
    assert code == 1 and "double_again to return a result" in out, out
    assert progress.current_part(exercise) == 2
    code, out = run(capsys, "hint", "01")
    assert "Hint 1 of 3 for 01_doubling, part 2 (double_again)" in out, out
    code, out = run(capsys, "hint", "01")
    assert "Part 2: the same again." in out, out
    code, out = run(capsys, "hint", "01", "1")  # asked for by number
    assert "Hint 1 of 3 for 01_doubling, part 1 (double)" in out, out
    code, out = run(capsys, "hint", "01", "nothing")
    assert code == 2 and "no part 'nothing'" in out


def test_an_older_state_files_hint_count_still_reads(fixture_course, capsys):
    exercise = fixture_course.lesson("doubling").exercise
    state = progress.state_file()
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"hints": {"doubling": 1}}))
    assert progress.hints_shown(exercise) == 1
    code, out = run(capsys, "hint", "01")
    assert "Hint 2 of 2 for 01_doubling" in out, out
    assert progress.hints_shown(exercise) == 2
