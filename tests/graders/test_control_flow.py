"""The control-flow grader passes right answers, however they are written, and rejects
every kind of wrong answer with a verdict that names its real mistake."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exercise_cells import namespace
from jax import lax

from jitlab.graders import control_flow
from jitlab.grading import GradingFailure

MAX_STEPS = control_flow.MAX_STEPS
JIT_ON = "jit is on and the compile counter hears JAX"


@pytest.fixture
def solution() -> dict:
    """The solution's cells, grader cells left out, in fresh functions for every test."""
    return namespace("control_flow")


def clip_failure(clip) -> GradingFailure:
    with pytest.raises(GradingFailure) as caught:
        control_flow.grade_clip(clip)
    return caught.value


def descend_failure(descend) -> GradingFailure:
    with pytest.raises(GradingFailure) as caught:
        control_flow.grade_descend(descend)
    return caught.value


def good_clip():
    @jax.jit
    def clip_by_norm(g, max_norm):
        norm = jnp.linalg.norm(g)
        return g * jnp.where(norm > max_norm, max_norm / norm, 1.0)

    return clip_by_norm


def while_descend(clip, *, start=0, clip_step=True, and_op=None):
    """descend with lax.while_loop; the keywords plant one mistake each."""

    @jax.jit
    def descend(x0, curvature, lr, tol):
        def keep_going(state):
            x, steps = state
            if and_op is not None:
                return and_op(jnp.linalg.norm(curvature * x) > tol, steps < MAX_STEPS)
            return (jnp.linalg.norm(curvature * x) > tol) & (steps < MAX_STEPS)

        def step(state):
            x, steps = state
            g = curvature * x
            return x - lr * (clip(g, 1.0) if clip_step else g), steps + 1

        return lax.while_loop(keep_going, step, (x0, jnp.int32(start)))

    return descend


# --- right answers ----------------------------------------------------------------------


def test_solution_file_passes(solution, capsys):
    control_flow.grade_clip(solution["clip_by_norm"])
    control_flow.grade_descend(solution["descend"])
    out = capsys.readouterr().out
    assert out.count("All checks passed") == 2


def test_solution_constants_match_the_grader(solution):
    assert solution["MAX_STEPS"] == control_flow.MAX_STEPS
    assert solution["CLIP_NORM"] == control_flow.CLIP_NORM


def test_another_correct_answer_passes():
    """lax.cond, a norm by hand, and fori_loop with a frozen state: all different from
    the reference, all inside the contract."""

    @jax.jit
    def clip_by_norm(g, max_norm):
        norm = jnp.sqrt(jnp.sum(g * g))
        return lax.cond(norm > max_norm, lambda v: v * (max_norm / norm), lambda v: v, g)

    @jax.jit
    def descend(x0, curvature, lr, tol):
        def body(_, state):
            x, steps = state
            done = jnp.linalg.norm(curvature * x) <= tol
            new_x = x - lr * clip_by_norm(curvature * x, 1.0)
            return jnp.where(done, x, new_x), jnp.where(done, steps, steps + 1)

        return lax.fori_loop(0, MAX_STEPS, body, (x0, jnp.int32(0)))

    control_flow.grade_clip(clip_by_norm)
    control_flow.grade_descend(descend)


def test_a_minimum_of_factors_passes():
    """min(1, max_norm / norm) is inf-safe for a zero vector: also right."""

    @jax.jit
    def clip_by_norm(g, max_norm):
        return g * jnp.minimum(1.0, max_norm / jnp.linalg.norm(g))

    control_flow.grade_clip(clip_by_norm)
    control_flow.grade_descend(while_descend(clip_by_norm))


def test_steps_as_another_integer_type_pass():
    @jax.jit
    def descend(x0, curvature, lr, tol):
        x, steps = while_descend(good_clip())(x0, curvature, lr, tol)
        return x, steps.astype(jnp.int16)

    control_flow.grade_descend(descend)


# --- wrong answers: clip_by_norm --------------------------------------------------------


def test_rejects_python_if_on_a_tracer():
    @jax.jit
    def clip_by_norm(g, max_norm):
        norm = jnp.linalg.norm(g)
        if norm > max_norm:
            return g * (max_norm / norm)
        return g

    failure = clip_failure(clip_by_norm)
    assert failure.check == control_flow.CLIP_RUNS
    assert "TracerBoolConversionError" in failure.seen
    assert "max_norm" in failure.seen  # JAX's message names the argument
    assert "jnp.where" in failure.hint


@pytest.mark.parametrize("static", [{"static_argnames": "max_norm"}, {"static_argnums": 1}])
def test_rejects_static_max_norm(static):
    # Numbers right, but one compilation per distinct max_norm.
    @partial(jax.jit, **static)
    def clip_by_norm(g, max_norm):
        norm = jnp.linalg.norm(g)
        return jnp.where(norm > max_norm, g * (max_norm / norm), g)

    failure = clip_failure(clip_by_norm)
    assert failure.check == control_flow.CLIP_ONCE
    assert failure.seen.startswith(f"{control_flow.CLIP_CALLS} compilations")
    assert "a new max_norm alone compiled" in failure.seen  # the grader's own finding
    assert "max_norm" in failure.hint and "static" in failure.hint


def test_rejects_decision_outside_jit_with_a_decoy_call():
    @jax.jit
    def scale(g, factor):
        return g * factor

    def clip_by_norm(g, max_norm):  # the branch is taken in Python, outside jit
        scale(g, 1.0)  # a decoy call, so that something compiles
        norm = float(np.linalg.norm(g))
        return g * (max_norm / norm) if norm > max_norm else g

    assert clip_failure(clip_by_norm).check == control_flow.CLIP_JITTED


def test_rejects_a_look_alike_of_a_jitted_function():
    class LooksJitted:
        def __init__(self, fn):
            self.fn, self.lower, self.trace = fn, None, None

        def clear_cache(self):
            pass

        def __call__(self, *args):
            return self.fn(*args)

    failure = clip_failure(LooksJitted(control_flow._reference_clip))
    assert failure.check == control_flow.CLIP_JITTED


def test_rejects_numpy_through_a_host_callback():
    def numpy_clip(g, max_norm):
        norm = np.linalg.norm(g)
        return (g * (max_norm / norm) if norm > max_norm else g).astype(np.float32)

    @jax.jit
    def clip_by_norm(g, max_norm):
        return jax.pure_callback(numpy_clip, jax.ShapeDtypeStruct(g.shape, g.dtype), g, max_norm)

    failure = clip_failure(clip_by_norm)
    assert failure.check == control_flow.CLIP_INSIDE
    assert "pure_callback" in failure.seen


def test_rejects_elementwise_clip():
    @jax.jit
    def clip_by_norm(g, max_norm):
        return jnp.clip(g, -max_norm, max_norm)

    failure = clip_failure(clip_by_norm)
    assert failure.check in (control_flow.CLIP_SHORT, control_flow.CLIP_LONG)


def test_rejects_normalising_without_max_norm():
    @jax.jit
    def clip_by_norm(g, max_norm):
        norm = jnp.linalg.norm(g)
        return jnp.where(norm > max_norm, g / norm, g)

    assert clip_failure(clip_by_norm).check == control_flow.CLIP_LONG


def test_rejects_inverted_condition():
    @jax.jit
    def clip_by_norm(g, max_norm):
        norm = jnp.linalg.norm(g)
        return jnp.where(norm < max_norm, g * (max_norm / norm), g)

    assert clip_failure(clip_by_norm).check == control_flow.CLIP_LONG


def test_rejects_scaling_short_vectors_up():
    @jax.jit
    def clip_by_norm(g, max_norm):
        return g * (max_norm / jnp.maximum(jnp.linalg.norm(g), 1e-12))  # always to max_norm

    assert clip_failure(clip_by_norm).check == control_flow.CLIP_SHORT


def test_rejects_nan_for_a_zero_vector():
    @jax.jit
    def clip_by_norm(g, max_norm):
        norm = jnp.linalg.norm(g)
        return g / norm * jnp.minimum(norm, max_norm)  # 0 / 0 for a zero gradient

    failure = clip_failure(clip_by_norm)
    assert failure.check == control_flow.CLIP_ZERO
    assert "NaN" in failure.hint


def test_rejects_a_wrapper_that_switches_jit_off_around_the_call():
    jitted = good_clip()

    def clip_by_norm(g, max_norm):
        with jax.disable_jit():
            return jitted(g, max_norm)

    assert clip_failure(clip_by_norm).check == control_flow.CLIP_JITTED


def test_rejects_jit_switched_off_while_the_learner_code_runs():
    @jax.jit
    def clip_by_norm(g, max_norm):
        jax.config.update("jax_disable_jit", True)  # while tracing: every later call eager
        norm = jnp.linalg.norm(g)
        return g * jnp.where(norm > max_norm, max_norm / norm, 1.0)

    try:
        failure = clip_failure(clip_by_norm)
    finally:
        jax.config.update("jax_disable_jit", False)
    assert failure.check == JIT_ON


# --- wrong answers: descend -------------------------------------------------------------


def test_rejects_python_while_on_a_tracer():
    clip = good_clip()

    @jax.jit
    def descend(x0, curvature, lr, tol):
        x, steps = x0, 0
        while jnp.linalg.norm(curvature * x) > tol and steps < MAX_STEPS:
            x = x - lr * clip(curvature * x, 1.0)
            steps += 1
        return x, steps

    failure = descend_failure(descend)
    assert failure.check == control_flow.DESCEND_RUNS
    assert "lax.while_loop" in failure.hint


def test_python_and_inside_while_loop_is_told_about_the_ampersand():
    descend = while_descend(good_clip(), and_op=lambda a, b: a and b)
    failure = descend_failure(descend)
    assert failure.check == control_flow.DESCEND_RUNS
    assert "while_cond" in failure.seen
    assert "you already use lax.while_loop" in failure.hint and "`&`" in failure.hint


@pytest.mark.parametrize("static", ["tol", "lr"])
def test_rejects_a_static_float_and_names_it(static):
    clip = good_clip()

    @partial(jax.jit, static_argnames=static)
    def descend(x0, curvature, lr, tol):
        def keep_going(state):
            x, steps = state
            return (jnp.linalg.norm(curvature * x) > tol) & (steps < MAX_STEPS)

        def step(state):
            x, steps = state
            return x - lr * clip(curvature * x, 1.0), steps + 1

        return lax.while_loop(keep_going, step, (x0, jnp.int32(0)))

    failure = descend_failure(descend)
    other = {"tol": "lr", "lr": "tol"}[static]
    assert failure.check == control_flow.DESCEND_ONCE
    assert f"a new {static} alone compiled" in failure.seen
    assert other not in failure.seen.split("alone compiled")[0]
    assert failure.hint.startswith(f"{static} changes on every call")


def test_rejects_loop_that_never_stops_early():
    clip = good_clip()

    @jax.jit
    def descend(x0, curvature, lr, tol):
        def body(_, state):
            x, steps = state
            return x - lr * clip(curvature * x, 1.0), steps + 1

        return lax.fori_loop(0, MAX_STEPS, body, (x0, jnp.int32(0)))

    failure = descend_failure(descend)
    assert failure.check == control_flow.DESCEND_STEPS
    assert "never stops early" in failure.hint


def test_rejects_step_counted_off_by_one():
    failure = descend_failure(while_descend(good_clip(), start=1))
    assert failure.check == control_flow.DESCEND_STEPS
    assert "x is right, but every count is off by 1" in failure.hint


def test_rejects_a_loop_that_steps_before_testing():
    """A do-while: right whenever at least one step is needed, wrong for a start that has
    already converged (drawn on purpose every run)."""
    clip = good_clip()

    @jax.jit
    def descend(x0, curvature, lr, tol):
        def step(state):
            x, steps = state
            return x - lr * clip(curvature * x, 1.0), steps + 1

        def keep_going(state):
            x, steps = state
            return (jnp.linalg.norm(curvature * x) > tol) & (steps < MAX_STEPS)

        return lax.while_loop(keep_going, step, step((x0, jnp.int32(0))))

    failure = descend_failure(descend)
    assert failure.check == control_flow.DESCEND_STEPS
    assert "starts converged" in failure.hint


def test_rejects_unclipped_steps():
    failure = descend_failure(while_descend(good_clip(), clip_step=False))
    assert failure.check == control_flow.DESCEND_STEPS
    assert "clip the gradient before stepping" in failure.hint


def test_rejects_only_x_returned():
    inner = while_descend(good_clip())

    @jax.jit
    def descend(x0, curvature, lr, tol):
        return inner(x0, curvature, lr, tol)[0]

    assert descend_failure(descend).check == control_flow.DESCEND_PAIR


def test_rejects_descend_through_a_host_callback():
    def numpy_descend(x0, curvature, lr, tol):
        x, steps = np.asarray(x0, np.float64), 0
        while np.linalg.norm(curvature * x) > tol and steps < MAX_STEPS:
            x = x - lr * control_flow._reference_clip(curvature * x, 1.0)
            steps += 1
        return x.astype(np.float32), np.int32(steps)

    @jax.jit
    def descend(x0, curvature, lr, tol):
        shapes = (jax.ShapeDtypeStruct(x0.shape, x0.dtype), jax.ShapeDtypeStruct((), jnp.int32))
        return jax.pure_callback(numpy_descend, shapes, x0, curvature, lr, tol)

    assert descend_failure(descend).check == control_flow.DESCEND_INSIDE


def test_rejects_descend_with_jit_switched_off():
    jax.config.update("jax_disable_jit", True)
    try:
        failure = descend_failure(while_descend(good_clip()))
    finally:
        jax.config.update("jax_disable_jit", False)
    assert failure.check == JIT_ON


# --- the reference itself ---------------------------------------------------------------


def test_reference_agrees_with_the_numpy_version_in_the_exercise(solution):
    rng = np.random.default_rng(0)
    for _ in range(20):
        x0 = rng.normal(0.0, 2.0, size=6)
        curvature = rng.uniform(0.5, 2.0, size=6)
        lr, tol = float(rng.uniform(0.01, 0.9)), float(10 ** rng.uniform(-3, -1))
        xs, _, steps = control_flow._reference_trajectory(x0, curvature, lr, tol)
        want_x, want_steps = solution["descend_numpy"](x0, curvature, lr, tol)
        assert steps == want_steps
        np.testing.assert_allclose(xs[steps], want_x, rtol=1e-12)


def test_the_drawn_problems_include_every_edge_case():
    rng = np.random.default_rng(3)
    problems = control_flow._problems(rng)
    steps = [control_flow._reference_trajectory(*p)[2] for p in problems]
    assert steps[2] == 0  # a start that has already converged
    assert steps[-1] == steps[-2] == MAX_STEPS  # problems that run into the limit
    assert all(0 < s < MAX_STEPS for s in steps[:2] + steps[3:-2])  # early stops
    assert len({p[2] for p in problems}) == len({p[3] for p in problems}) == len(problems)
    cases = control_flow._clip_cases(rng, 7)
    assert not cases[1][0].any()  # a zero vector
    assert np.isclose(np.linalg.norm(cases[3][0].astype(np.float64)), cases[3][1])
    assert len({m for _, m in cases}) == len(cases)


def test_acceptable_steps_allows_only_the_boundary():
    norms = [10.0, 1.0, 0.1, 0.01000001, 0.001] + [0.0001] * (MAX_STEPS - 4)
    assert control_flow._acceptable_steps(norms, 0.01, 4)
    assert control_flow._acceptable_steps(norms, 0.01, 3)  # 0.01000001 is within the slack
    assert not control_flow._acceptable_steps(norms, 0.01, 2)
    assert not control_flow._acceptable_steps(norms, 0.01, 5)
    assert not control_flow._acceptable_steps(norms, 0.01, MAX_STEPS)
    assert not control_flow._acceptable_steps(norms, 0.01, -1)
