"""The cheats that every exercise must refuse, tested once, over every exercise: the
untouched learner's copy, jit switched off; and for the wrapper-and-kernel exercises
(:mod:`jitlab.grading.kernel`) jit off inside the wrapper, an in-place change, a host
callback, and, where the grader records the wrapper's calls, a copy of the kernel and a
decoy call. Each exercise's own file keeps its lesson's mistakes and its right answers
written differently.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import pytest
from exercise_cells import exercise, grader_cells, namespace, run_cell

from jitlab.course.manifest import load_course
from jitlab.graders import (
    capstone,
    dtypes,
    functions_as_arguments,
    python_scalars,
    pytree_structure,
    shapes,
)
from jitlab.grading import GradingFailure
from jitlab.grading.checks import JIT_ON
from jitlab.grading.kernel import CALLS_KERNEL, JITTED, NO_CALLBACKS, UNCHANGED, KernelExercise
from jitlab.grading.kernel import JIT_ON as JIT_ON_IN_WRAPPER

# These two run their learner's code elsewhere (eight simulated devices from the start,
# two worker processes): their own files load it and test these cheats there.
ELSEWHERE = ("devices_and_shardings", "processes")
EXERCISES = [item.slug for item in load_course().exercises if item.slug not in ELSEWHERE]

KERNELS: dict[str, tuple[KernelExercise, str]] = {
    # slug: (the declaration, the check a separately jitted copy of the kernel fails, ""
    # where the grader counts the kernel's compilations instead of recording its calls)
    "shapes": (shapes.RMS, ""),
    "dtypes": (dtypes.SCORE, dtypes.SCORE.name(CALLS_KERNEL)),
    "python_scalars": (python_scalars.TRAIN, python_scalars.EVERY_BATCH),
    "pytree_structure": (pytree_structure.LOSS, pytree_structure.ONE_CALL),
    "functions_as_arguments": (functions_as_arguments.FIT, functions_as_arguments.FIT_CALLS),
    "capstone": (capstone.STEP, capstone.CALLED),
}
RECORDED = [slug for slug, (_, copy_fails) in KERNELS.items() if copy_fails]
# The check that jit switched off inside the wrapper fails where it is not JIT_ON_IN_WRAPPER:
# shapes sees no compilation of padded_rms at all.
JIT_OFF_INSIDE = {"shapes": shapes.COMPILED}


def loaded(slug: str, learner_copy: bool = False) -> dict:
    """The names of the exercise's cells that its grader cells need (no slow demos)."""
    return namespace(slug, learner_copy=learner_copy, graders_only=True)


def grade(slug: str, names: dict, *, around: Any = contextlib.nullcontext) -> GradingFailure:
    """Run the exercise's first grader cell on ``names``; return its failure."""
    with pytest.raises(GradingFailure) as failure, around():
        run_cell(grader_cells(slug)[0], names, exercise(slug).source)
    return failure.value


# ------------------------------------------------------------------ every exercise


@pytest.mark.parametrize("slug", EXERCISES)
def test_the_untouched_learner_copy_fails_as_not_solved(slug):
    failure = grade(slug, loaded(slug, learner_copy=True))
    assert "not solved yet" in failure.seen, failure
    assert f"`jitlab hint {slug}`" in failure.hint


@pytest.mark.parametrize("slug", EXERCISES)
def test_jit_switched_off_by_the_config_fails(slug):
    names = loaded(slug)
    jax.config.update("jax_disable_jit", True)
    try:
        failure = grade(slug, names)
    finally:
        jax.config.update("jax_disable_jit", False)
    assert failure.check == JIT_ON and "switched off" in failure.seen


@pytest.mark.parametrize("slug", EXERCISES)
def test_jit_switched_off_around_the_grader_fails(slug):
    failure = grade(slug, loaded(slug), around=jax.disable_jit)
    assert failure.check == JIT_ON and "switched off" in failure.seen


# ------------------------------------------------------------ wrapper-and-kernel


def cheating(slug: str, cheat: Callable[[Callable[..., Any]], Callable[..., Any]]) -> dict:
    """The solution's names, with the wrapper replaced by ``cheat(wrapper)``."""
    names = loaded(slug)
    wrapper = KERNELS[slug][0].wrapper
    names[wrapper] = cheat(names[wrapper])
    return names


def config_off():
    jax.config.update("jax_disable_jit", True)
    return contextlib.nullcontext()


@pytest.mark.parametrize("off", [jax.disable_jit, config_off], ids=["context", "config"])
@pytest.mark.parametrize("slug", KERNELS)
def test_jit_switched_off_inside_the_wrapper_fails(slug, off):
    def cheat(wrapper):
        def without_jit(*args, **kwargs):
            with off():
                return wrapper(*args, **kwargs)

        return without_jit

    try:
        failure = grade(slug, cheating(slug, cheat))
    finally:
        jax.config.update("jax_disable_jit", False)
    named = JIT_OFF_INSIDE.get(slug) or KERNELS[slug][0].name(JIT_ON_IN_WRAPPER)
    assert failure.check == named, failure
    assert "switched off" in failure.seen


def _change_in_place(tree: Any) -> bool:
    """Change the first NumPy array in ``tree`` in place, or else add a key to its
    first dict; False when there is neither."""
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, np.ndarray) and leaf.flags.writeable and leaf.size:
            leaf.flat[0] += 1
            return True
    found = [node for node in jax.tree.leaves(tree, is_leaf=lambda n: isinstance(n, dict))]
    for node in found:
        if isinstance(node, dict):
            node["changed"] = True
            return True
    return False


@pytest.mark.parametrize("slug", [slug for slug in KERNELS if slug != "functions_as_arguments"])
def test_a_wrapper_that_changes_the_callers_arguments_fails(slug):
    def cheat(wrapper):
        def in_place(*args, **kwargs):
            out = wrapper(*args, **kwargs)
            assert _change_in_place((args, kwargs))
            return out

        return in_place

    failure = grade(slug, cheating(slug, cheat))
    assert failure.check == KERNELS[slug][0].name(UNCHANGED), failure


@pytest.mark.parametrize("slug", RECORDED)
def test_a_separately_jitted_copy_of_the_kernel_fails(slug):
    """The wrapper of a second run of the cells calls that run's kernel: a jitted
    function with the same name and code, but not the kernel the grader is given."""
    declared, check = KERNELS[slug]
    names = loaded(slug)
    names[declared.wrapper] = loaded(slug)[declared.wrapper]
    failure = grade(slug, names)
    assert failure.check == check, failure


# The kernels whose wrapper is called many times, and those whose grader checks for a
# host callback (the others test theirs in their own files, with their own arguments).
MANY_CALLS = ("dtypes", "pytree_structure")
CHECKS_CALLBACKS = {"shapes": shapes.RMS, "dtypes": dtypes.SCORE}
LATER_TRACES = [slug for slug in CHECKS_CALLBACKS if slug in RECORDED]


@pytest.mark.parametrize("slug", MANY_CALLS)
def test_one_decoy_call_then_a_copy_of_the_kernel_fails(slug):
    declared, check = KERNELS[slug]
    names, elsewhere = loaded(slug), loaded(slug)[declared.wrapper]
    real, calls = names[declared.wrapper], []

    def decoy(*args, **kwargs):
        calls.append(1)
        return (real if len(calls) == 1 else elsewhere)(*args, **kwargs)

    names[declared.wrapper] = decoy
    assert grade(slug, names).check == check


@pytest.mark.parametrize("slug", CHECKS_CALLBACKS)
def test_a_kernel_that_computes_in_a_host_callback_fails(slug):
    declared = CHECKS_CALLBACKS[slug]
    names = loaded(slug)
    inner = names[declared.kernel]

    def on_the_host(*args):
        return jax.pure_callback(inner, jax.eval_shape(inner, *args), *args)

    names[declared.kernel] = jax.jit(on_the_host)
    assert grade(slug, names).check == declared.name(NO_CALLBACKS)


@pytest.mark.parametrize("slug", LATER_TRACES)
def test_a_kernel_whose_later_traces_call_back_to_the_host_fails(slug):
    # Red team 9: the program the grader traced first is clean, the ones the counted
    # calls compile are not. The check reads the programs those calls compiled.
    declared = CHECKS_CALLBACKS[slug]
    names = loaded(slug)
    inner, traces = names[declared.kernel], []

    def clean_once(*args):
        traces.append(1)
        if len(traces) == 1:
            return inner(*args)
        return jax.pure_callback(inner, jax.eval_shape(inner, *args), *args)

    names[declared.kernel] = jax.jit(clean_once)
    assert grade(slug, names).check == declared.name(NO_CALLBACKS)


def test_a_debug_print_is_not_taken_for_work_done_on_the_host():
    from jitlab.grading.calls import host_callbacks

    assert not host_callbacks(jax.jit(jnp_sin_with_a_print), np.ones(3, np.float32))


def jnp_sin_with_a_print(x):
    jax.debug.print("x = {}", x)  # a callback that returns nothing: not the work moved out
    return jax.numpy.sin(x)


class LooksJitted:
    """Calls the real kernel and has jit's methods, but is not what jax.jit returns."""

    def __init__(self, real):
        self.real, self.lower, self.trace, self.clear_cache = (
            real,
            real.lower,
            real.trace,
            real.clear_cache,
        )

    def __call__(self, *args, **kwargs):
        return self.real(*args, **kwargs)


@pytest.mark.parametrize("slug", KERNELS)
def test_a_look_alike_of_a_jitted_kernel_fails(slug):
    declared = KERNELS[slug][0]
    names = loaded(slug)
    names[declared.kernel] = LooksJitted(names[declared.kernel])
    assert grade(slug, names).check == declared.name(JITTED)
