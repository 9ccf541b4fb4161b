"""The grader of exercise 07 passes the solution and rejects plausible wrong answers."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exercise_cells import namespace

from jitlab.course import load_course
from jitlab.graders import functions_as_arguments
from jitlab.grading import GradingFailure, recording

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


JIT_ON = "jit is on and the compile counter hears JAX"
G = functions_as_arguments


def grade_failure(step, fit_fn) -> GradingFailure:
    with pytest.raises(GradingFailure) as caught:
        G.grade(step, fit_fn)
    return caught.value


def fresh_step():
    """A new jitted step per test: no test relies on what another compiled."""
    return jax.jit(_update)


# --- right answers ----------------------------------------------------------------------


def test_solution_passes(capsys):
    step = fresh_step()
    G.grade(step, _loop(step))
    assert "All checks passed" in capsys.readouterr().out


def test_solution_file_passes(capsys):
    """The solution's own cells, run as a module: fit finds sgd_step in its globals."""
    solution = namespace("functions_as_arguments", skip="count_compiles")
    G.grade(solution["sgd_step"], solution["fit"])
    assert "All checks passed" in capsys.readouterr().out


def test_another_correct_answer_passes():
    """Keyword arguments, a while loop over an index, the step as a default argument,
    losses as a NumPy array: different from the reference, inside the contract."""

    @jax.jit
    def step(params, x, y, weight_decay):
        grads = jax.grad(loss)(params, x, y, weight_decay)
        new = {k: params[k] - LEARNING_RATE * grads[k] for k in params}
        return new, loss(params, x, y, weight_decay)

    def fit(params, batches, weight_decay, sgd=step):
        losses, i = [], 0
        while i < len(batches):
            x, y = batches[i]
            params, value = sgd(params=params, x=x, y=y, weight_decay=weight_decay)
            losses.append(np.asarray(value))
            i += 1
        return params, np.array(losses)

    G.grade(step, fit)


def test_a_jitted_fit_that_traces_the_step_passes():
    step = fresh_step()
    G.grade(step, jax.jit(_loop(step)))


# --- wrong answers: sgd_step ------------------------------------------------------------


@pytest.mark.parametrize(
    "static", [{"static_argnames": "weight_decay"}, {"static_argnums": 3}], ids=["name", "num"]
)
def test_static_weight_decay_is_rejected(static):
    """One executable per weight_decay value."""
    static_step = jax.jit(_update, **static)
    failure = grade_failure(static_step, _loop(static_step))
    assert failure.check == G.STEP_ONCE
    assert failure.seen.startswith("3 compilation")
    assert "only weight_decay changed" in failure.seen
    assert "weight_decay" in failure.hint


def test_unjitted_step_is_rejected():
    """Work moved outside jit: no compilation to count, but not what was asked."""
    failure = grade_failure(_update, _loop(_update))
    assert failure.check == G.STEP_JITTED


def test_weight_decay_left_out_is_rejected():
    """Wrong numbers: the penalty is forgotten in the step."""

    @jax.jit
    def no_decay_step(params, x, y, weight_decay):
        return _update(params, x, y, 0.0)

    assert grade_failure(no_decay_step, _loop(no_decay_step)).check == G.STEP_LOSS


def test_loss_after_the_update_is_rejected():
    """Wrong numbers: the loss reported is the one after the step, not before."""

    @jax.jit
    def late_loss_step(params, x, y, weight_decay):
        new_params, _ = _update(params, x, y, weight_decay)
        return new_params, loss(new_params, x, y, weight_decay)

    assert grade_failure(late_loss_step, _loop(late_loss_step)).check == G.STEP_LOSS


# --- wrong answers: fit -----------------------------------------------------------------


def test_lambda_per_batch_is_rejected():
    """The inherited code: a new lambda, value_and_grad and jit for every batch; it never
    calls the learner's step."""

    def slow_fit(params, batches, weight_decay):
        losses = []
        for x, y in batches:
            objective = jax.value_and_grad(lambda p: loss(p, x, y, weight_decay))  # noqa: B023
            value, grads = jax.jit(objective)(params)
            params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
            losses.append(value)
        return params, jnp.stack(losses)

    failure = grade_failure(fresh_step(), slow_fit)
    assert failure.check == G.FIT_CALLS
    assert failure.seen == "0 call(s) of sgd_step"


def test_a_new_jitted_function_per_fit_is_rejected():
    """Calls the step as asked, but jits a fresh lambda on every fit."""
    step = fresh_step()

    def fit(params, batches, weight_decay):
        losses = []
        for x, y in batches:
            params, value = step(params, x, y, weight_decay)
            losses.append(value)
        return params, jax.jit(lambda values: jnp.stack(values))(losses)

    failure = grade_failure(step, fit)
    assert failure.check == G.FIT_NOTHING
    assert "in fit number 2" in failure.seen


def test_fresh_partial_per_call_is_rejected():
    """Binding weight_decay with functools.partial inside fit, then jitting."""

    def partial_fit(params, batches, weight_decay):
        step = jax.jit(functools.partial(_update, weight_decay=weight_decay))
        losses = []
        for x, y in batches:
            params, value = step(params, x, y)
            losses.append(value)
        return params, jnp.stack(losses)

    assert grade_failure(fresh_step(), partial_fit).check == G.FIT_CALLS


def test_numpy_loop_with_one_decoy_call_is_rejected():
    step = fresh_step()

    def fit(params, batches, weight_decay):
        step(params, *batches[0], weight_decay)  # the decoy
        w = np.asarray(params["w"], np.float64)
        b = float(params["b"])
        numpy_batches = [(np.asarray(x, np.float64), np.asarray(y, np.float64)) for x, y in batches]
        w, b, losses = G._reference_fit(w, b, numpy_batches, weight_decay)
        return {"w": w, "b": b}, losses

    failure = grade_failure(step, fit)
    assert failure.check == G.FIT_CALLS
    assert failure.seen == "1 call(s) of sgd_step"


def test_decoy_calls_per_batch_with_numpy_results_are_rejected():
    step = fresh_step()

    def fit(params, batches, weight_decay):
        w = np.asarray(params["w"], np.float64)
        b = float(params["b"])
        losses = []
        for x, y in batches:
            params, _ = step(params, x, y, weight_decay)  # called, then ignored
            w, b, value = G._reference_step(
                w, b, np.asarray(x, np.float64), np.asarray(y, np.float64), weight_decay
            )
            losses.append(value)
        return {"w": w, "b": b}, np.array(losses)

    assert grade_failure(step, fit).check == G.FIT_FROM_STEP


def test_params_not_threaded_through_the_loop_are_rejected():
    step = fresh_step()

    def fit(params, batches, weight_decay):
        losses = []
        new = params
        for x, y in batches:
            new, value = step(params, x, y, weight_decay)  # always the initial params
            losses.append(value)
        return new, jnp.stack(losses)

    failure = grade_failure(step, fit)
    assert failure.check == G.FIT_THREADS
    assert "previous step's new params" in failure.seen


def test_weight_decay_frozen_at_first_call_is_rejected():
    """Calls the step, compiles once, but passes the first fit's weight_decay forever."""
    step = fresh_step()
    frozen: dict[str, float] = {}

    def fit(params, batches, weight_decay):
        kept = frozen.setdefault("weight_decay", weight_decay)
        losses = []
        for x, y in batches:
            params, value = step(params, x, y, kept)
            losses.append(value)
        return params, jnp.stack(losses)

    failure = grade_failure(step, fit)
    assert failure.check == G.FIT_THREADS
    assert "weight_decay=" in failure.seen and "stale" in failure.hint


def test_results_cached_by_the_identity_of_the_batches_are_rejected():
    """The grader refills the previous fit's NumPy buffers in place for its last fit."""
    step = fresh_step()
    inner = _loop(step)
    cache: dict[tuple[int, ...], object] = {}

    def fit(params, batches, weight_decay):
        key = tuple(id(x) for x, _ in batches)
        if key not in cache:
            cache[key] = inner(params, batches, weight_decay)
        return cache[key]

    failure = grade_failure(step, fit)
    assert failure.check == G.FIT_CALLS
    assert "fit number 4" in failure.expected and failure.seen == "0 call(s) of sgd_step"


def test_the_watch_puts_every_name_back():
    step = fresh_step()
    fit = _loop(step)
    with recording(fit, step) as proxy:
        assert fit.__closure__[0].cell_contents is proxy
    assert fit.__closure__[0].cell_contents is step


# --- the reference itself ---------------------------------------------------------------


def test_reference_matches_the_jax_model():
    """The grader's NumPy reference agrees with the exercise's loss and step in JAX."""
    rng = np.random.default_rng(1)
    w, b = rng.normal(size=3), 0.2
    x, y = rng.normal(size=(8, 3)), rng.normal(size=8)
    want_w, want_b, want_value = G._reference_step(w, b, x, y, 0.05)
    params = {"w": jnp.asarray(w, jnp.float32), "b": jnp.float32(b)}
    got, value = fresh_step()(
        params, jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32), 0.05
    )
    np.testing.assert_allclose(got["w"], want_w, rtol=1e-5)
    np.testing.assert_allclose(got["b"], want_b, rtol=1e-5)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_learning_rate_matches_the_exercise(folder):
    source = (load_course().root / folder / "07_functions_as_arguments.py").read_text("utf-8")
    assert f"\nLEARNING_RATE = {LEARNING_RATE}\n" in source
