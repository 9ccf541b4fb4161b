"""The grader of exercise 07 passes the solution and rejects plausible wrong answers."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.course import load_course
from jitlab.graders import functions_as_arguments
from jitlab.grading import GradingFailure

LEARNING_RATE = functions_as_arguments.LEARNING_RATE


def loss(params, x, y, weight_decay):
    prediction = x @ params["w"] + params["b"]
    return jnp.mean((prediction - y) ** 2) + weight_decay * jnp.sum(params["w"] ** 2)


def _update(params, x, y, weight_decay):
    value, grads = jax.value_and_grad(loss)(params, x, y, weight_decay)
    return jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads), value


def _loop(step):
    def fit(params, batches, weight_decay):
        losses = []
        for x, y in batches:
            params, value = step(params, x, y, weight_decay)
            losses.append(value)
        return params, jnp.stack(losses)

    return fit


# --- the reference solution -------------------------------------------------------
sgd_step = jax.jit(_update)
fit = _loop(sgd_step)


def grade_failure(step, fit_fn) -> GradingFailure:
    with pytest.raises(GradingFailure) as caught:
        functions_as_arguments.grade(step, fit_fn)
    return caught.value


def test_solution_passes(capsys):
    functions_as_arguments.grade(sgd_step, fit)
    assert "All checks passed" in capsys.readouterr().out


def test_reference_matches_the_jax_model():
    """The grader's NumPy reference agrees with the exercise's loss and step in JAX."""
    rng = np.random.default_rng(1)
    w, b = rng.normal(size=3), 0.2
    x, y = rng.normal(size=(8, 3)), rng.normal(size=8)
    want_w, want_b, want_value = functions_as_arguments.reference_step(w, b, x, y, 0.05)
    params = {"w": jnp.asarray(w, jnp.float32), "b": jnp.float32(b)}
    got, value = sgd_step(params, jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32), 0.05)
    np.testing.assert_allclose(got["w"], want_w, rtol=1e-5)
    np.testing.assert_allclose(got["b"], want_b, rtol=1e-5)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_learning_rate_matches_the_exercise(folder):
    source = (load_course().root / folder / "07_functions_as_arguments.py").read_text("utf-8")
    assert f"\nLEARNING_RATE = {LEARNING_RATE}\n" in source


def test_unsolved_stubs_are_rejected():
    def stub_step(params, x, y, weight_decay):
        raise NotImplementedError

    def stub_fit(params, batches, weight_decay):
        raise NotImplementedError

    failure = grade_failure(stub_step, stub_fit)
    assert failure.check == "sgd_step runs"
    assert "NotImplementedError" in failure.seen


def test_lambda_per_batch_is_rejected():
    """The inherited code: a new lambda, value_and_grad and jit for every batch."""

    def slow_fit(params, batches, weight_decay):
        losses = []
        for x, y in batches:
            objective = jax.value_and_grad(lambda p: loss(p, x, y, weight_decay))  # noqa: B023
            value, grads = jax.jit(objective)(params)
            params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
            losses.append(value)
        return params, jnp.stack(losses)

    failure = grade_failure(sgd_step, slow_fit)
    assert failure.check == "three more fits (new data, new weight_decay) compile nothing"


def test_fresh_partial_per_call_is_rejected():
    """Binding weight_decay with functools.partial inside fit, then jitting: new each call."""

    def partial_fit(params, batches, weight_decay):
        step = jax.jit(functools.partial(_update, weight_decay=weight_decay))
        losses = []
        for x, y in batches:
            params, value = step(params, x, y)
            losses.append(value)
        return params, jnp.stack(losses)

    failure = grade_failure(sgd_step, partial_fit)
    assert failure.check == "three more fits (new data, new weight_decay) compile nothing"


def test_jit_of_grad_inside_the_loop_is_rejected():
    """No lambda at all, but jax.jit(jax.value_and_grad(loss)) is still rebuilt per batch."""

    def regrad_fit(params, batches, weight_decay):
        losses = []
        for x, y in batches:
            value, grads = jax.jit(jax.value_and_grad(loss))(params, x, y, weight_decay)
            params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
            losses.append(value)
        return params, jnp.stack(losses)

    failure = grade_failure(sgd_step, regrad_fit)
    assert failure.check == "three more fits (new data, new weight_decay) compile nothing"


@pytest.mark.parametrize(
    "static", [{"static_argnames": "weight_decay"}, {"static_argnums": 3}], ids=["name", "num"]
)
def test_static_weight_decay_is_rejected(static):
    """One executable per weight_decay value."""
    static_step = jax.jit(_update, **static)
    failure = grade_failure(static_step, _loop(static_step))
    assert failure.check == "sgd_step does not compile again for a new weight_decay"
    assert "weight_decay" in failure.hint


def test_unjitted_step_is_rejected():
    """Work moved outside jit: no compilation to count, but not what was asked."""
    failure = grade_failure(_update, _loop(_update))
    assert failure.check == "sgd_step is wrapped by jax.jit"


def test_weight_decay_left_out_is_rejected():
    """Wrong numbers: the penalty is forgotten in the step."""

    @jax.jit
    def no_decay_step(params, x, y, weight_decay):
        return _update(params, x, y, 0.0)

    failure = grade_failure(no_decay_step, _loop(no_decay_step))
    assert failure.check == "sgd_step: loss before the update"


def test_loss_after_the_update_is_rejected():
    """Wrong numbers: the loss reported is the one after the step, not before."""

    @jax.jit
    def late_loss_step(params, x, y, weight_decay):
        new_params, _ = _update(params, x, y, weight_decay)
        return new_params, loss(new_params, x, y, weight_decay)

    failure = grade_failure(late_loss_step, _loop(late_loss_step))
    assert failure.check == "sgd_step: loss before the update"


def test_weight_decay_frozen_at_first_call_is_rejected():
    """Compiles once, but the first weight_decay is baked in: later fits are wrong."""
    frozen: dict[str, object] = {}

    def frozen_fit(params, batches, weight_decay):
        if "step" not in frozen:
            frozen["step"] = jax.jit(functools.partial(_update, weight_decay=weight_decay))
        step = frozen["step"]
        losses = []
        for x, y in batches:
            params, value = step(params, x, y)
            losses.append(value)
        return params, jnp.stack(losses)

    failure = grade_failure(sgd_step, frozen_fit)
    assert failure.check == "fit stays right for every weight_decay"
