"""The control-flow grader passes the solution and rejects the plausible wrong answers."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import jupytext
import numpy as np
import pytest
from jax import lax

from jitlab.graders import control_flow
from jitlab.grading import GradingFailure

SOLUTION = Path(__file__).resolve().parents[2] / "solutions" / "05_control_flow.py"
MAX_STEPS = control_flow.MAX_STEPS


@pytest.fixture(scope="module")
def solution() -> dict:
    """The solution file's code cells, grader cells left out, run in one namespace."""
    namespace: dict = {"__name__": "solution_05"}
    for cell in jupytext.read(SOLUTION).cells:
        if cell.cell_type == "code" and "grader" not in cell.metadata.get("tags", []):
            exec(compile(cell.source, str(SOLUTION), "exec"), namespace)
    return namespace


def test_solution_file_passes(solution):
    control_flow.grade_clip(solution["clip_by_norm"])
    control_flow.grade_descend(solution["descend"])


def test_solution_constants_match_the_grader(solution):
    assert solution["MAX_STEPS"] == control_flow.MAX_STEPS
    assert solution["CLIP_NORM"] == control_flow.CLIP_NORM


# A second correct answer, written differently (lax.cond, a norm by hand, fori_loop
# with a frozen state): the grader must accept it too.


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


def test_another_correct_answer_passes():
    control_flow.grade_clip(clip_by_norm)
    control_flow.grade_descend(descend)


# --- wrong answers: clip_by_norm ------------------------------------------------------


def test_rejects_unfinished_stub():
    @jax.jit
    def clip_by_norm(g, max_norm):
        raise NotImplementedError

    with pytest.raises(GradingFailure, match="not solved yet"):
        control_flow.grade_clip(clip_by_norm)


def test_rejects_python_if_on_a_tracer():
    @jax.jit
    def clip_by_norm(g, max_norm):
        norm = jnp.linalg.norm(g)
        if norm > max_norm:
            return g * (max_norm / norm)
        return g

    with pytest.raises(GradingFailure, match="runs under jit") as caught:
        control_flow.grade_clip(clip_by_norm)
    assert "TracerBoolConversionError" in caught.value.seen
    assert "max_norm" in caught.value.seen  # JAX's message names the argument
    assert "jnp.where" in caught.value.hint


def test_rejects_static_max_norm():
    # Numbers right, but one compilation per distinct max_norm.
    @partial(jax.jit, static_argnames="max_norm")
    def clip_by_norm(g, max_norm):
        norm = jnp.linalg.norm(g)
        return jnp.where(norm > max_norm, g * (max_norm / norm), g)

    with pytest.raises(GradingFailure, match="compiles once") as caught:
        control_flow.grade_clip(clip_by_norm)
    assert caught.value.seen.startswith(f"{control_flow.CLIP_CALLS} compilations")


def test_rejects_decision_outside_jit():
    @jax.jit
    def scale(g, factor):
        return g * factor

    def clip_by_norm(g, max_norm):  # the branch is taken in Python, outside jit
        norm = float(np.linalg.norm(g))
        return scale(g, max_norm / norm) if norm > max_norm else g

    with pytest.raises(GradingFailure, match="compiled with jax.jit"):
        control_flow.grade_clip(clip_by_norm)


def test_rejects_elementwise_clip():
    @jax.jit
    def clip_by_norm(g, max_norm):
        return jnp.clip(g, -max_norm, max_norm)

    with pytest.raises(GradingFailure, match="scales long vectors|leaves short vectors"):
        control_flow.grade_clip(clip_by_norm)


def test_rejects_normalising_without_max_norm():
    @jax.jit
    def clip_by_norm(g, max_norm):
        norm = jnp.linalg.norm(g)
        return jnp.where(norm > max_norm, g / norm, g)

    with pytest.raises(GradingFailure, match="scales long vectors"):
        control_flow.grade_clip(clip_by_norm)


def test_rejects_inverted_condition():
    @jax.jit
    def clip_by_norm(g, max_norm):
        norm = jnp.linalg.norm(g)
        return jnp.where(norm < max_norm, g * (max_norm / norm), g)

    with pytest.raises(GradingFailure, match="leaves short vectors"):
        control_flow.grade_clip(clip_by_norm)


# --- wrong answers: descend -----------------------------------------------------------


def test_rejects_python_while_on_a_tracer():
    @jax.jit
    def descend(x0, curvature, lr, tol):
        x, steps = x0, 0
        while jnp.linalg.norm(curvature * x) > tol and steps < MAX_STEPS:
            x = x - lr * clip_by_norm(curvature * x, 1.0)
            steps += 1
        return x, steps

    with pytest.raises(GradingFailure, match="runs under jit") as caught:
        control_flow.grade_descend(descend)
    assert "lax.while_loop" in caught.value.hint


def test_rejects_static_tolerance():
    @partial(jax.jit, static_argnames=("lr", "tol"))
    def descend(x0, curvature, lr, tol):
        def keep_going(state):
            x, steps = state
            return (jnp.linalg.norm(curvature * x) > tol) & (steps < MAX_STEPS)

        def step(state):
            x, steps = state
            return x - lr * clip_by_norm(curvature * x, 1.0), steps + 1

        return lax.while_loop(keep_going, step, (x0, jnp.int32(0)))

    with pytest.raises(GradingFailure, match="descend compiles once"):
        control_flow.grade_descend(descend)


def test_rejects_loop_that_never_stops_early():
    @jax.jit
    def descend(x0, curvature, lr, tol):
        def body(_, state):
            x, steps = state
            return x - lr * clip_by_norm(curvature * x, 1.0), steps + 1

        return lax.fori_loop(0, MAX_STEPS, body, (x0, jnp.int32(0)))

    with pytest.raises(GradingFailure, match="stops at the right step"):
        control_flow.grade_descend(descend)


def test_rejects_step_counted_off_by_one():
    @jax.jit
    def descend(x0, curvature, lr, tol):
        def keep_going(state):
            x, steps = state
            return (jnp.linalg.norm(curvature * x) > tol) & (steps < MAX_STEPS)

        def step(state):
            x, steps = state
            return x - lr * clip_by_norm(curvature * x, 1.0), steps + 1

        x, steps = lax.while_loop(keep_going, step, (x0, jnp.int32(1)))  # starts at 1
        return x, steps

    with pytest.raises(GradingFailure, match="stops at the right step"):
        control_flow.grade_descend(descend)


def test_rejects_unclipped_steps():
    @jax.jit
    def descend(x0, curvature, lr, tol):
        def keep_going(state):
            x, steps = state
            return (jnp.linalg.norm(curvature * x) > tol) & (steps < MAX_STEPS)

        def step(state):
            x, steps = state
            return x - lr * curvature * x, steps + 1  # forgot the clipping

        return lax.while_loop(keep_going, step, (x0, jnp.int32(0)))

    with pytest.raises(GradingFailure, match="descend"):
        control_flow.grade_descend(descend)


def test_rejects_only_x_returned():
    @jax.jit
    def descend(x0, curvature, lr, tol):
        def keep_going(state):
            x, steps = state
            return (jnp.linalg.norm(curvature * x) > tol) & (steps < MAX_STEPS)

        def step(state):
            x, steps = state
            return x - lr * clip_by_norm(curvature * x, 1.0), steps + 1

        return lax.while_loop(keep_going, step, (x0, jnp.int32(0)))[0]

    with pytest.raises(GradingFailure, match=r"returns \(x, steps\)"):
        control_flow.grade_descend(descend)


# --- the reference itself ---------------------------------------------------------------


def test_reference_agrees_with_the_numpy_version_in_the_exercise(solution):
    rng = np.random.default_rng(0)
    for _ in range(20):
        x0 = rng.normal(0.0, 2.0, size=6)
        curvature = rng.uniform(0.5, 2.0, size=6)
        lr, tol = float(rng.uniform(0.01, 0.9)), float(10 ** rng.uniform(-3, -1))
        xs, _, steps = control_flow.reference_trajectory(x0, curvature, lr, tol)
        want_x, want_steps = solution["descend_numpy"](x0, curvature, lr, tol)
        assert steps == want_steps
        np.testing.assert_allclose(xs[steps], want_x, rtol=1e-12)


def test_acceptable_steps_allows_only_the_boundary():
    norms = [10.0, 1.0, 0.1, 0.01000001, 0.001] + [0.0001] * (MAX_STEPS - 4)
    assert control_flow.acceptable_steps(norms, 0.01, 4)
    assert control_flow.acceptable_steps(norms, 0.01, 3)  # 0.01000001 is within the slack
    assert not control_flow.acceptable_steps(norms, 0.01, 2)
    assert not control_flow.acceptable_steps(norms, 0.01, 5)
    assert not control_flow.acceptable_steps(norms, 0.01, MAX_STEPS)
    assert not control_flow.acceptable_steps(norms, 0.01, -1)
