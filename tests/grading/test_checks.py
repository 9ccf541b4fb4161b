"""The building blocks of the graders: the ``@grader`` frame every grader uses, its canary,
the compile-count check and the shortening of JAX's text."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jitlab.graders
import jitlab.grading
from jitlab.course import load_course
from jitlab.grading import (
    JIT_ON,
    Grading,
    GradingFailure,
    as_numbers,
    grader,
    shorten,
)
from jitlab.learner.check import code_cells

COURSE = load_course()
GRADER_MODULES = sorted(
    info.name for info in pkgutil.iter_modules(jitlab.graders.__path__) if not info.ispkg
)
PUBLIC_GRADER_MODULES = [name for name in GRADER_MODULES if not name.startswith("_")]


def _grading() -> Grading:
    """A run of no grader in particular, for a building block tried on its own."""
    return Grading("toy", declared=())


def _module(name: str) -> types.ModuleType:
    return importlib.import_module(f"jitlab.graders.{name}")


def _grading_functions(module: types.ModuleType) -> dict[str, object]:
    """The module's own public ``grade`` and ``grade_*`` functions."""
    return {
        name: value
        for name, value in vars(module).items()
        if re.fullmatch(r"grade(_\w+)?", name)
        and callable(value)
        and getattr(value, "__module__", "") == module.__name__
    }


# --- every grader is declared with @grader -------------------------------------------


@pytest.mark.parametrize("name", PUBLIC_GRADER_MODULES)
def test_every_grading_function_is_declared_with_grader(name):
    """``@grader`` runs the canaries, requires every declared check, and reports the run
    complete: a grading function without it would do none of that."""
    functions = _grading_functions(_module(name))
    assert functions, f"jitlab.graders.{name} has no grade* function"
    for function_name, function in functions.items():
        checks = getattr(function, "checks", None)
        assert checks is not None, f"{name}.{function_name} is not decorated with @grader"
        assert isinstance(checks, tuple) and checks[0] == JIT_ON


@pytest.mark.parametrize("name", PUBLIC_GRADER_MODULES)
def test_check_names_are_fixed_strings_without_numbers(name):
    """Numbers belong in expected/seen: a check's name is the same in every run."""
    for function_name, function in _grading_functions(_module(name)).items():
        checks = function.checks
        assert all(isinstance(check, str) and check for check in checks)
        assert len(set(checks)) == len(checks), f"{name}.{function_name} repeats a check"
        numbered = [check for check in checks if re.search(r"\d", check)]
        assert not numbered, f"{name}.{function_name}: numbers in check names {numbered}"


@pytest.mark.parametrize("exercise", COURSE.exercises, ids=lambda e: e.slug)
def test_grader_cells_call_only_declared_graders(exercise):
    """What a grader cell calls on its grader module is a function declared with @grader."""
    for cell in (c for c in code_cells(exercise.source.read_text()) if c.is_grader):
        (module_name,) = re.findall(r"^from jitlab\.graders import (\w+)", cell.source, re.M)
        module = _module(module_name)
        called = re.findall(rf"\b{module_name}\.(\w+)\(", cell.source)
        assert called, f"{exercise.source.name}:{cell.line} calls no grader"
        for function_name in called:
            function = getattr(module, function_name)
            assert hasattr(function, "checks"), (
                f"{exercise.source.name}:{cell.line}: {module_name}.{function_name} is not "
                "declared with @grader"
            )


def test_the_transitional_all_passed_is_gone():
    assert not hasattr(jitlab.grading, "all_passed")
    assert not hasattr(importlib.import_module("jitlab.grading.checks"), "all_passed")
    for name in GRADER_MODULES:
        assert "all_passed" not in inspect.getsource(_module(name)), name


# --- the frame ----------------------------------------------------------------------


def test_a_grader_that_skips_a_declared_check_does_not_complete(capsys):
    @grader("toy", checks=("first", "second"))
    def grade_toy(grading) -> None:
        grading.passed("first")

    with pytest.raises(TypeError, match="never reported \\['second'\\]"):
        grade_toy()
    assert "All checks passed" not in capsys.readouterr().out


def test_a_skipped_check_is_neither_shown_nor_pending(capsys):
    """A check the answer gives nothing to check by (07's loop checks, for a scan) is left
    out: no ✓ the grader did not earn, and the run still completes."""

    @grader("toy", checks=("first", "second"))
    def grade_toy(grading) -> None:
        grading.passed("first")
        grading.skip("second")

    grade_toy()
    out = capsys.readouterr().out
    assert "✓ first" in out and "second" not in out and "All checks passed: toy" in out

    @grader("toy", checks=("first",))
    def grade_wrong(grading) -> None:
        grading.skip("something else")

    with pytest.raises(TypeError, match="skips an undeclared check 'something else'"):
        grade_wrong()


def test_a_grader_that_reports_an_undeclared_check_fails_loudly():
    @grader("toy", checks=("first",))
    def grade_toy(grading) -> None:
        grading.passed("first")
        grading.passed("something else")

    with pytest.raises(TypeError, match="undeclared check 'something else'"):
        grade_toy()


def test_a_donated_array_or_an_emptied_list_is_a_verdict_not_a_crash():
    """The grader reading back an argument the learner's code deleted (donation) or
    emptied fails the first check not yet passed, naming the mistake."""
    donating = jax.jit(lambda a: a * 2, donate_argnums=0)

    @grader("toy", checks=("first", "second"))
    def grade_toy(grading, step) -> None:
        given = jnp.ones(3)
        step(given)
        grading.passed("first")
        np.asarray(given)  # a grader reading back what it handed over

    with pytest.raises(GradingFailure) as failed:
        grade_toy(donating)
    assert failed.value.check == "second" and "donate" in failed.value.hint, failed.value

    @grader("toy", checks=("first",))
    def grade_list(grading, fit) -> None:
        batches = [1, 2, 3]
        fit(batches)
        list(zip(batches, [1, 2, 3], strict=True))

    with pytest.raises(GradingFailure) as failed:
        grade_list(lambda batches: batches.clear())
    assert "changed length" in failed.value.hint and "zip()" in failed.value.seen


def test_a_grader_bug_is_not_worded_as_the_learners_mistake():
    @grader("toy", checks=("first",))
    def grade_toy(grading) -> None:
        raise ValueError("the grader's own bug")

    with pytest.raises(ValueError, match="own bug"):
        grade_toy()


def test_a_grader_that_reports_every_check_completes(capsys):
    @grader("toy", checks=("first",))
    def grade_toy(grading) -> None:
        grading.passed("first")

    grade_toy()
    out = capsys.readouterr().out
    assert f"✓ {JIT_ON}" in out and "✓ first" in out and "All checks passed: toy" in out
    assert grade_toy.checks == (JIT_ON, "first")


def test_the_runner_is_told_the_failure_a_grader_raises_not_one_it_caught(monkeypatch):
    # A grader may catch a generic failure (call_learner's) and raise a better-worded one:
    # the learner's verdict must be the one the grader raised, as the grader tests see it.
    from jitlab.grading import fail, verdict

    @grader("toy", checks=("first",))
    def grade_toy(grading) -> None:
        try:
            grading.call_learner("first", lambda: {}[3])
        except GradingFailure as generic:
            raise fail("first", expected="specific", seen=generic.seen, hint="look here") from None

    records: list[dict] = []
    monkeypatch.setattr(verdict, "_publish", lambda record, text: records.append(record))
    with pytest.raises(GradingFailure):
        grade_toy()
    run = verdict.grader_run(0, records)
    failed = [check for check in run.checks if not check.passed]
    assert [(c.expected, c.hint) for c in failed] == [("specific", "look here")]
    assert not run.completed


# --- the canary ---------------------------------------------------------------------


def test_canary_passes_with_jit_on(capsys):
    _grading().require_jit_on("now")
    assert f"✓ {JIT_ON}" in capsys.readouterr().out


def test_canary_fails_under_disable_jit_and_says_jit_is_off():
    with jax.disable_jit(), pytest.raises(GradingFailure) as caught:
        _grading().require_jit_on("now")
    assert caught.value.check == JIT_ON
    assert "jit is switched off" in caught.value.seen
    assert "disable_jit" in caught.value.hint


def test_canary_fails_with_jit_switched_off_by_config():
    jax.config.update("jax_disable_jit", True)
    try:
        with pytest.raises(GradingFailure) as caught:
            _grading().require_jit_on("now")
    finally:
        jax.config.update("jax_disable_jit", False)
    assert caught.value.check == JIT_ON
    assert "jit is switched off" in caught.value.seen


def test_canary_fails_when_jax_jit_was_replaced(monkeypatch):
    monkeypatch.setattr(jax, "jit", lambda fn, **_: fn)  # "jit" that compiles nothing
    with pytest.raises(GradingFailure) as caught:
        _grading().require_jit_on("now")
    assert caught.value.check == JIT_ON
    assert "0 trace(s) and 0 compilation(s)" in caught.value.seen


def test_a_grader_run_with_jit_off_fails_before_the_learners_code_runs():
    ran = []

    @grader("toy", checks=("first",))
    def grade_toy(grading) -> None:
        ran.append(True)
        grading.passed("first")

    with jax.disable_jit(), pytest.raises(GradingFailure, match=JIT_ON):
        grade_toy()
    assert not ran


# --- require_compiles ---------------------------------------------------------------


def _count(compiles: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(compiles=compiles)


def test_require_compiles_reads_well_for_one():
    with pytest.raises(GradingFailure) as caught:
        _grading().require_compiles(
            "once", _count(2), exactly=1, what="compilations of f over 5 calls", hint="h"
        )
    assert caught.value.expected == "exactly 1 compilation of f over 5 calls"
    assert caught.value.seen == "2 compilations of f over 5 calls"


def test_require_compiles_reads_well_for_one_seen_and_for_the_hedged_noun():
    with pytest.raises(GradingFailure) as caught:
        _grading().require_compiles(
            "twice", _count(1), at_least=2, what="compilation(s) for 3 calls", hint="h"
        )
    assert caught.value.expected == "at least 2 compilation(s) for 3 calls"
    assert caught.value.seen == "1 compilation for 3 calls"
    with pytest.raises(GradingFailure) as caught:
        _grading().require_compiles(
            "none", _count(3), at_most=1, what="compilation(s) for 3 calls", hint="h"
        )
    assert caught.value.expected == "at most 1 compilation for 3 calls"


def test_require_compiles_combines_bounds_and_adds_what_was_found(capsys):
    with pytest.raises(GradingFailure) as caught:
        _grading().require_compiles(
            "some",
            _count(5),
            at_least=1,
            at_most=3,
            what="compilations of g",
            hint="h",
            seen_extra="each new length compiled",
        )
    assert caught.value.expected == "at least 1 and at most 3 compilations of g"
    assert caught.value.seen == "5 compilations of g; each new length compiled"
    _grading().require_compiles(
        "some", _count(2), at_least=1, at_most=3, what="compilations", hint="h"
    )
    assert "✓ some" in capsys.readouterr().out


# --- shorten ------------------------------------------------------------------------

EXPLANATION = (
    "TRACING CACHE MISS at f:12 because:\n  for call at g:3 the static argument "
    "config differs: was Static(val=0.001234) and now Static(val=0.002468), "
    "and the key of the closest earlier call differs in 2 more places"
)


def test_shorten_keeps_short_text_whole_on_one_line():
    assert shorten("a  b\n  c") == "a b c"
    assert shorten(EXPLANATION, 1000) == " ".join(EXPLANATION.split())


@pytest.mark.parametrize("limit", range(20, len(EXPLANATION), 3))
def test_shorten_cuts_at_a_word_boundary_never_inside_a_number(limit):
    one_line = " ".join(EXPLANATION.split())
    short = shorten(EXPLANATION, limit)
    assert short.endswith(" …") and len(short) <= limit + 2
    words, kept = one_line.split(" "), short.removesuffix(" …").split(" ")
    # Every word kept is a whole word of the text (the last one without a trailing comma),
    # so no value is cut short, as "Static(val=0.00" would be.
    assert kept[:-1] == words[: len(kept) - 1]
    assert kept[-1] == words[len(kept) - 1].rstrip(",;:")


def test_shorten_never_cuts_one_long_token_mid_number():
    short = shorten("Static(val=0.0012345678901234567890)", 20)
    assert short == "Static(val= …"
    assert shorten("1234567890" * 5, 20) == "…"


def test_a_wrong_array_verdict_shows_where_the_arrays_differ():
    want = np.arange(60.0)
    got = want.copy()
    got[40] = -7.0
    with pytest.raises(GradingFailure) as failure:
        _grading().require_close("numbers", got, want)
    assert "-7." in failure.value.seen and "40." in failure.value.expected
    assert "first wrong at flat index 40" in failure.value.seen


def test_a_small_difference_is_printed_with_the_digits_that_show_it():
    want, got = np.array([0.5, 0.123456]), np.array([0.5, 0.123457])  # alike to five digits
    with pytest.raises(GradingFailure) as failure:
        _grading().require_close("numbers", got, want, rtol=1e-7, atol=0)
    assert "0.123456" in failure.value.expected and "0.123457" in failure.value.seen


def test_a_wrong_entry_verdict_names_the_entry_and_the_input():
    names = ["w[0]", "w[1]", "b"]
    with pytest.raises(GradingFailure) as failure:
        _grading().require_close("numbers", [1.0, 2.0, 5.0], [1.0, 2.0, 3.0], names=names,
                                 whose="the state", about="batch 2",
                                 hint=lambda wrong: f"look at {wrong}")  # fmt: skip
    assert failure.value.expected == "b = 3 for batch 2"
    assert failure.value.seen == "b = 5 (1 of 3 entries of the state differ)"
    assert failure.value.hint == "look at ['b']"
    with pytest.raises(GradingFailure) as failure:
        _grading().require_close("numbers", np.ones(2), np.ones(3), about="x of size 3")
    assert failure.value.expected == "an array of shape (3,) for x of size 3"


def test_same_value_ignores_containers_not_numbers():
    from jitlab.grading.kernel import same_value

    x = np.array([1.0, np.nan])
    assert same_value((x, 2.0), [jax.numpy.asarray(x), np.float32(2.0)])
    assert same_value({"a": x}, (x,)) and same_value(np.stack([x, x]), [x, x])
    assert not same_value((x, 2.0), (x, 3.0)) and not same_value(x, x[:1])
    assert not same_value((x, x), (x,)) and not same_value("a", "a")


def test_wrong_cases_counts_shape_type_nan_and_value():
    from jitlab.grading import wrong_cases

    got = [1.0, np.ones(2), "x", np.nan, 1.1, np.ones(3)]
    want = [1.0, np.ones(3), 1.0, 1.0, 1.0, np.ones(3)]
    assert wrong_cases(got, want, rtol=1e-3, atol=0.0) == [1, 2, 3, 4]
    assert wrong_cases(got[:1], want[:1], rtol=0.0, atol=0.0) == []


def test_require_cases_names_the_first_wrong_case_by_its_input(capsys):

    want = [1.0, 2.0, 3.0]
    _grading().require_cases("numbers", [1.0, 2.0, 3.0 + 1e-7], want, about=str, hint="h")
    assert "✓ numbers" in capsys.readouterr().out
    with pytest.raises(GradingFailure) as failure:
        _grading().require_cases("numbers", [1.0, 5.0, {"a": 1}], want,
                                 about=lambda i: f"batch {i}",
                                 hint=lambda wrong: f"look at {wrong}")  # fmt: skip
    assert failure.value.expected == "2 (the reference) for batch 1"
    assert failure.value.seen == "5; wrong for 2 of 3 cases"
    assert failure.value.hint == "look at [1, 2]"


def test_a_check_that_passed_a_round_then_failed_is_shown_once_failed():
    from jitlab.grading.verdict import Check, Verdict, format_verdict

    checks = (Check("fit runs", True), Check("fit stays right", True))
    checks += (Check("fit stays right", False, "1.0", "2.0", "pass weight_decay in"),)
    shown = format_verdict(Verdict("ex.py", passed=False, checks=checks))
    assert "✓ fit runs" in shown and "✓ fit stays right" not in shown
    assert "✗ fit stays right" in shown


@pytest.mark.parametrize(
    ("static", "words"),
    [
        (np.ones(3), "traced"),
        (jax.numpy.ones(3), "traced"),
        ({"w": jax.numpy.ones(3)}, "traced"),
        ([1, 2], "a tuple"),
    ],
    ids=["a NumPy array", "a JAX array", "a dict of JAX arrays", "a list"],
)
def test_the_hint_for_an_unhashable_static_argument_names_what_to_do(static, words):
    from jitlab.grading.checks import learner_error

    with pytest.raises(ValueError, match="Non-hashable static arguments") as caught:
        jax.jit(lambda s, x: x, static_argnums=0)(static, 1.0)
    assert words in learner_error(JIT_ON, caught.value).hint


def test_a_host_callback_is_found_inside_a_cond():
    """The program's equations are read, nested jaxprs too (a callback inside a cond)."""
    import jax
    import jax.numpy as jnp

    from jitlab.grading.kernel import host_callbacks

    out = jax.ShapeDtypeStruct((3,), jnp.float32)
    inside_cond = jax.jit(
        lambda x: jax.lax.cond(
            x.sum() > 0, lambda y: jax.pure_callback(np.asarray, out, y), jnp.sin, x
        )
    )
    assert host_callbacks(inside_cond, jnp.ones(3, jnp.float32)) == ["pure_callback"]
    assert host_callbacks(jax.jit(jnp.sin), jnp.ones(3)) == []


def test_an_answer_of_arrays_in_containers_of_its_own_is_read_as_it_is():
    from typing import NamedTuple

    class Pair(NamedTuple):
        a: object
        b: object

    out = _grading().call_learner(
        "runs", lambda x: Pair(jax.numpy.asarray(x), np.asarray(x)), np.ones(2)
    )
    assert isinstance(out, Pair) and as_numbers(out).shape == (2, 2)


def test_a_misspelt_name_gets_pythons_suggestion_and_an_unknown_one_the_general_hint():
    from jitlab.grading.checks import learner_error

    cell = (  # a learner's notebook cell: `block` defined, `blok` typed
        "block = 2.0\n"
        "def misspelt(x):\n"
        "    return blok * x\n"
        "def unknown(x):\n"
        "    return never_defined_anywhere * x\n"
    )
    exec(cell, names := {})  # noqa: S102
    with pytest.raises(NameError) as typo:
        names["misspelt"](1.0)
    assert learner_error(JIT_ON, typo.value).hint.startswith("did you mean `block`?")
    with pytest.raises(NameError) as missing:
        names["unknown"](1.0)
    assert "did you mean" not in learner_error(JIT_ON, missing.value).hint
