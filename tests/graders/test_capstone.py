"""The capstone grader passes the solution and rejects the plausible wrong answers."""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import jupytext
import numpy as np
import pytest

from jitlab.graders import capstone
from jitlab.grading import GradingFailure

SOLUTION = Path(__file__).resolve().parents[2] / "solutions" / "11_capstone.py"

CONFIG = {"weight_decay": 0.0}


def update_config(step):
    CONFIG["weight_decay"] = capstone.weight_decay(step)


def next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def step_body(params, batch, lr, weight_decay, *, mask=True, global_decay=False):
    """One SGD step on a padded batch; the switches make the wrong answers."""

    def batch_loss(params):
        x, length = batch["x"], batch["length"]
        hidden = jnp.tanh(x @ params["w"] + params["b"])
        if mask:
            real = (jnp.arange(x.shape[1]) < length)[None, :, None]
            pooled = jnp.sum(jnp.where(real, hidden, 0.0), axis=1) / length
        else:
            pooled = hidden.mean(axis=1)  # the padded steps count too
        err = (pooled @ params["v"] - batch["y"]) ** 2
        weights = batch.get("weights")
        data = jnp.mean(err) if weights is None else jnp.sum(weights * err) / jnp.sum(weights)
        decay = CONFIG["weight_decay"] if global_decay else weight_decay
        return data + decay * jnp.sum(params["w"] ** 2)

    value, grads = jax.value_and_grad(batch_loss)(params)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), value


def make_learner(
    *,
    mask=True,
    global_decay=False,
    static_lr=False,
    cast_lr=True,
    tidy_weights=True,
    per_step_partial=False,
    eager_pad=False,
):
    """(train_fast, train_step) for the solution, or for one plausible wrong answer."""

    def train_step(params, batch, lr, weight_decay):
        return step_body(params, batch, lr, weight_decay, mask=mask, global_decay=global_decay)

    jitted = jax.jit(train_step, static_argnames="lr" if static_lr else ())

    def prepare(step, batch):
        size, length, features = batch["x"].shape
        if eager_pad:
            x = jnp.pad(batch["x"], ((0, 0), (0, next_power_of_two(length) - length), (0, 0)))
        else:
            x = np.zeros((size, next_power_of_two(length), features), np.float32)
            x[:, :length] = batch["x"]
        fixed = {"x": x, "y": batch["y"], "length": np.int32(length)}
        weights = batch.get("weights")
        if tidy_weights:
            fixed["weights"] = np.ones(size, np.float32) if weights is None else weights
        elif "weights" in batch:
            fixed["weights"] = weights
        lr = capstone.learning_rate(step)
        if static_lr:
            lr = float(lr)
        elif cast_lr:
            lr = np.float32(lr)
        return fixed, lr, np.float32(CONFIG["weight_decay"])

    def train_fast(params, batches):
        losses = []
        for step, batch in enumerate(batches):
            update_config(step)
            fixed, lr, decay = prepare(step, batch)
            if per_step_partial:  # a new function object every step
                step_fn = jax.jit(functools.partial(train_step, lr=lr, weight_decay=decay))
                params, value = step_fn(params, fixed)
            elif static_lr:
                params, value = jitted(params, fixed, lr=lr, weight_decay=decay)
            else:
                params, value = jitted(params, fixed, lr, decay)
            losses.append(float(value))
        return params, np.array(losses)

    return train_fast, jitted


def test_reference_solution_passes():
    train_fast, train_step = make_learner()
    capstone.grade(train_fast, train_step, next_power_of_two)


def test_grader_reference_is_the_exercise_loop():
    # The grader's float64 reference and constants must agree with the naive `train`
    # of the exercise's setup cell, run on the grader's own kind of batches.
    notebook = jupytext.read(SOLUTION)
    setup = next(c.source for c in notebook.cells if "def train(params" in c.source)
    namespace: dict = {}
    exec(compile(setup, str(SOLUTION), "exec"), namespace)
    for name in ("B", "F", "H", "STEPS", "WARMUP", "DECAY_FROM", "MIN_LENGTH", "MAX_LENGTH"):
        assert namespace[name] == getattr(capstone, name), name
    rng = np.random.default_rng(7)
    params = capstone.make_params(rng)
    batches = capstone.make_problem(rng, steps=capstone.DECAY_FROM + 2)
    want_params, want_losses = capstone.reference_train(params, batches)
    got_params, got_losses = namespace["train"](params, batches)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-4, atol=1e-6)
    for name in ("w", "b", "v"):
        np.testing.assert_allclose(got_params[name], want_params[name], rtol=1e-4, atol=1e-6)


def test_rejects_the_naive_loop():
    # Right numbers, but the jitted step handed to the grader never runs.
    def naive_train(params, batches):
        losses = []
        for step, batch in enumerate(batches):
            update_config(step)
            lr = capstone.learning_rate(step)
            objective = jax.value_and_grad(
                lambda p: step_body_naive_loss(p, batch)  # noqa: B023
            )
            value, grads = jax.jit(objective)(params)
            params = jax.tree.map(lambda p, g: p - lr * g, params, grads)  # noqa: B023
            losses.append(float(value))
        return params, np.array(losses)

    _, train_step = make_learner()
    with pytest.raises(GradingFailure, match="train_step does the training"):
        capstone.grade(naive_train, train_step, next_power_of_two)


def step_body_naive_loss(params, batch):
    hidden = jnp.tanh(batch["x"] @ params["w"] + params["b"])
    err = (hidden.mean(axis=1) @ params["v"] - batch["y"]) ** 2
    weights = batch.get("weights")
    data = jnp.mean(err) if weights is None else jnp.sum(weights * err) / jnp.sum(weights)
    return data + CONFIG["weight_decay"] * jnp.sum(params["w"] ** 2)


def test_rejects_a_new_function_per_step():
    # Shapes, weights and types fixed, but jax.jit(partial(...)) is built every step.
    train_fast, train_step = make_learner(per_step_partial=True)
    with pytest.raises(GradingFailure, match="one compilation of train_step per bucket") as info:
        capstone.grade(train_fast, train_step, next_power_of_two)
    assert "new every step" in info.value.hint


def test_rejects_padding_without_a_mask():
    train_fast, train_step = make_learner(mask=False)
    with pytest.raises(GradingFailure, match="matches the original loop") as info:
        capstone.grade(train_fast, train_step, next_power_of_two)
    assert "mask" in info.value.hint


def test_rejects_a_stale_global():
    train_fast, train_step = make_learner(global_decay=True)
    with pytest.raises(GradingFailure, match="matches the original loop") as info:
        capstone.grade(train_fast, train_step, next_power_of_two)
    assert "Read CONFIG in train_fast" in info.value.hint


def test_rejects_a_static_learning_rate():
    train_fast, train_step = make_learner(static_lr=True)
    with pytest.raises(GradingFailure, match="one compilation of train_step per bucket") as info:
        capstone.grade(train_fast, train_step, next_power_of_two)
    assert "static argument compiles once per value" in info.value.hint


def test_rejects_two_learning_rate_types():
    train_fast, train_step = make_learner(cast_lr=False)
    with pytest.raises(GradingFailure, match="one compilation of train_step per bucket") as info:
        capstone.grade(train_fast, train_step, next_power_of_two)
    assert "np.float32" in info.value.hint


def test_rejects_weights_in_several_forms():
    train_fast, train_step = make_learner(tidy_weights=False)
    with pytest.raises(GradingFailure, match="one compilation of train_step per bucket") as info:
        capstone.grade(train_fast, train_step, next_power_of_two)
    assert "same keys" in info.value.hint


def test_rejects_an_eager_pad_that_compiles_per_length():
    train_fast, train_step = make_learner(eager_pad=True)
    with pytest.raises(GradingFailure, match="second run in the same buckets compiles nothing"):
        capstone.grade(train_fast, train_step, next_power_of_two)


def test_rejects_one_huge_bucket():
    train_fast, train_step = make_learner()
    with pytest.raises(GradingFailure, match="wastes less than half"):
        capstone.grade(train_fast, train_step, lambda n: 64)


def test_rejects_a_bucket_per_length():
    train_fast, train_step = make_learner()
    with pytest.raises(GradingFailure, match="lengths share a few buckets"):
        capstone.grade(train_fast, train_step, lambda n: n)


def test_rejects_unfinished_stubs():
    @jax.jit
    def train_step(params, batch, lr, weight_decay):
        raise NotImplementedError

    def stub(*args):
        raise NotImplementedError

    with pytest.raises(GradingFailure, match="not solved yet"):
        capstone.grade(stub, train_step, next_power_of_two)
