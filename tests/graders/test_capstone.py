"""The capstone grader passes right answers, however solved, and rejects each kind of
wrong answer at the check that names its real cause."""

from __future__ import annotations

import functools

import exercise_cells
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.graders import capstone
from jitlab.grading import GradingFailure

SOLUTION = exercise_cells.exercise("capstone").source

CONFIG = {"weight_decay": 0.0}


def update_config(step):
    CONFIG["weight_decay"] = capstone._weight_decay(step)


def next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def step_body(params, batch, lr, weight_decay, *, mask=True, global_decay=False, le=False):
    """One SGD step on a padded batch; the switches make the wrong answers."""

    def batch_loss(params):
        x, length = batch["x"], batch["length"]
        hidden = jnp.tanh(x @ params["w"] + params["b"])
        if mask:
            steps = jnp.arange(x.shape[1])
            real = ((steps <= length) if le else (steps < length))[None, :, None]
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


def pad_batch(batch, bucket=next_power_of_two, tidy=True):
    """The boundary: a new dict, x padded in NumPy, weights of one when missing."""
    size, length, features = batch["x"].shape
    x = np.zeros((size, bucket(length), features), np.float32)
    x[:, :length] = batch["x"]
    fixed = {"x": x, "y": batch["y"], "length": np.int32(length)}
    weights = batch.get("weights")
    if tidy:
        fixed["weights"] = np.ones(size, np.float32) if weights is None else weights
    elif "weights" in batch:
        fixed["weights"] = weights
    return fixed


def make_learner(
    *,
    mask=True,
    le=False,
    global_decay=False,
    static_lr=False,
    cast_lr=True,
    tidy_weights=True,
    per_step_partial=False,
    eager_pad=False,
):
    """(train_fast, train_step) for the solution, or for one plausible wrong answer."""

    def train_step(params, batch, lr, weight_decay):
        return step_body(
            params, batch, lr, weight_decay, mask=mask, global_decay=global_decay, le=le
        )

    jitted = jax.jit(train_step, static_argnames="lr" if static_lr else ())

    def prepare(step, batch):
        if eager_pad:
            length = batch["x"].shape[1]
            widths = ((0, 0), (0, next_power_of_two(length) - length), (0, 0))
            fixed = pad_batch(batch, tidy=tidy_weights)
            fixed["x"] = jnp.pad(batch["x"], widths)
        else:
            fixed = pad_batch(batch, tidy=tidy_weights)
        lr = capstone._learning_rate(step)
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


def grade(train_fast, train_step, bucket_size=next_power_of_two):
    capstone.grade(train_fast, train_step, bucket_size)


# ------------------------------------------------------------------ right answers


def test_reference_solution_passes():
    grade(*make_learner())


def test_a_different_design_passes():
    # Solved differently: buckets in steps of 8 (six sizes), a flat signature with
    # keyword arguments, jnp float32 scalars, params kept as NumPy arrays between steps,
    # and a warm-up call per bucket before the loop.
    def bucket_of_eight(n: int) -> int:
        return max(8, -(-n // 8) * 8)

    @jax.jit
    def flat_step(params, x, y, weights, length, *, lr, decay):
        def batch_loss(params):
            hidden = jnp.tanh(x @ params["w"] + params["b"])
            real = jnp.arange(x.shape[1])[None, :, None] < length
            pooled = jnp.where(real, hidden, 0.0).sum(axis=1) / length
            err = (pooled @ params["v"] - y) ** 2
            return jnp.sum(weights * err) / jnp.sum(weights) + decay * jnp.sum(params["w"] ** 2)

        value, grads = jax.value_and_grad(batch_loss)(params)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), value

    def arguments(step, batch):
        fixed = pad_batch(batch, bucket=bucket_of_eight)
        return (fixed["x"], fixed["y"], fixed["weights"], fixed["length"]), {
            "lr": jnp.float32(capstone._learning_rate(step)),
            "decay": jnp.float32(CONFIG["weight_decay"]),
        }

    def train_fast(params, batches):
        for size in sorted({bucket_of_eight(b["x"].shape[1]) for b in batches}):
            dummy = {"x": np.zeros((capstone.B, size, capstone.F), np.float32)}
            dummy["y"] = np.zeros(capstone.B, np.float32)
            args, kwargs = arguments(0, dummy)
            flat_step(params, *args, **kwargs)  # warm-up, results thrown away
        losses = []
        for step, batch in enumerate(batches):
            update_config(step)
            args, kwargs = arguments(step, batch)
            params, value = flat_step(params, *args, **kwargs)
            params = {k: np.asarray(p) for k, p in params.items()}
            losses.append(value)
        return params, jnp.stack(losses)

    grade(train_fast, flat_step, bucket_of_eight)


def test_the_step_reached_through_a_default_argument_is_watched():
    train_fast, train_step = make_learner()

    def via_default(params, batches, step_fn=train_step):
        losses = []
        for step, batch in enumerate(batches):
            update_config(step)
            lr = np.float32(capstone._learning_rate(step))
            decay = np.float32(CONFIG["weight_decay"])
            params, value = step_fn(params, pad_batch(batch), lr, decay)
            losses.append(float(value))
        return params, np.array(losses)

    grade(via_default, train_step)


# ------------------------------------------------------------------ the grader itself


def test_grader_reference_is_the_exercise_loop():
    # The grader's float64 reference and constants must agree with the naive `train`
    # of the exercise's setup cell, run on the grader's own kind of batches.
    namespace = exercise_cells.namespace("capstone", until="jitlab.count_compiles")
    for name in ("B", "F", "H", "STEPS", "WARMUP", "DECAY_FROM", "MIN_LENGTH", "MAX_LENGTH"):
        assert namespace[name] == getattr(capstone, name), name
    rng = np.random.default_rng(7)
    params = capstone._make_params(rng)
    batches = capstone._make_problem(rng, steps=capstone.DECAY_FROM + 2)
    want_params, want_losses = capstone._reference_train(params, batches)
    got_params, got_losses = namespace["train"](params, batches)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-4, atol=1e-6)
    for name in ("w", "b", "v"):
        np.testing.assert_allclose(got_params[name], want_params[name], rtol=1e-4, atol=1e-6)


def test_the_exercise_states_the_bucket_bound():
    text = SOLUTION.read_text()
    assert f"at most {capstone.MOST_BUCKETS}**" in text
    assert f"lengths 1 to {capstone.BUCKETS_UP_TO}" in text


@pytest.mark.parametrize("seed", range(5))
def test_every_problem_has_the_edge_cases(seed):
    rng = np.random.default_rng(seed)
    edges = capstone._edge_lengths(rng, next_power_of_two)
    batches = capstone._make_problem(rng, edges=edges)
    lengths = [b["x"].shape[1] for b in batches]
    assert any(n == next_power_of_two(n) for n in lengths)  # no padding at all
    assert any(n - 1 == next_power_of_two(n - 1) for n in lengths)  # the most padding
    assert lengths[0] != next_power_of_two(lengths[0])
    assert lengths[capstone.DECAY_FROM] == lengths[0]


def test_the_reference_is_private():
    for name in ("reference_train", "reference_step", "learning_rate", "make_problem"):
        assert not hasattr(capstone, name), name


# ------------------------------------------------------------------ wrong answers


def test_rejects_the_naive_loop_that_never_calls_the_step():
    def naive_train(params, batches):
        losses = []
        for step, batch in enumerate(batches):
            update_config(step)
            lr = capstone._learning_rate(step)
            objective = jax.value_and_grad(lambda p: naive_loss(p, batch))  # noqa: B023
            value, grads = jax.jit(objective)(params)
            params = jax.tree.map(lambda p, g: p - lr * g, params, grads)  # noqa: B023
            losses.append(float(value))
        return params, np.array(losses)

    _, train_step = make_learner()
    with pytest.raises(GradingFailure, match="calls train_step at every step") as info:
        grade(naive_train, train_step)
    assert info.value.seen.startswith("0 calls")


def naive_loss(params, batch):
    hidden = jnp.tanh(batch["x"] @ params["w"] + params["b"])
    err = (hidden.mean(axis=1) @ params["v"] - batch["y"]) ** 2
    weights = batch.get("weights")
    data = jnp.mean(err) if weights is None else jnp.sum(weights * err) / jnp.sum(weights)
    return data + CONFIG["weight_decay"] * jnp.sum(params["w"] ** 2)


def test_rejects_a_new_function_per_step():
    # Shapes, weights and types fixed, but jax.jit(partial(...)) is built every step.
    train_fast, train_step = make_learner(per_step_partial=True)
    with pytest.raises(GradingFailure, match="calls train_step at every step") as info:
        grade(train_fast, train_step)
    assert "new function each time" in info.value.hint


def test_rejects_the_step_called_inside_a_new_jit_per_step():
    _, train_step = make_learner()

    def wrapped(params, batches):
        losses = []
        for step, batch in enumerate(batches):
            update_config(step)
            lr = np.float32(capstone._learning_rate(step))
            decay = np.float32(CONFIG["weight_decay"])
            fixed = pad_batch(batch)
            outer = jax.jit(lambda p: train_step(p, fixed, lr, decay))  # noqa: B023
            params, value = outer(params)
            losses.append(float(value))
        return params, np.array(losses)

    with pytest.raises(GradingFailure, match="calls train_step at every step") as info:
        grade(wrapped, train_step)
    assert "inside another jax.jit" in info.value.seen


def test_rejects_a_numpy_loop_with_one_decoy_call():
    _, train_step = make_learner()

    def decoy(params, batches):
        lr, nothing = np.float32(0.1), np.float32(0.0)
        train_step(params, pad_batch(batches[0]), lr, nothing)  # the decoy
        final, losses = capstone._reference_train(params, batches)  # the real work
        return {k: np.float32(v) for k, v in final.items()}, losses

    with pytest.raises(GradingFailure, match="calls train_step at every step") as info:
        grade(decoy, train_step)
    assert info.value.seen.startswith("1 calls")


@pytest.mark.parametrize("repeat", range(5))
def test_rejects_numpy_results_behind_a_loop_of_honest_calls(repeat):
    # train_step runs at every step, on the right inputs, but what is returned is the
    # grader's own float64 reference (the numbers are right).
    _, train_step = make_learner()

    def decoys(params, batches):
        current = params
        for step, batch in enumerate(batches):
            update_config(step)
            lr = np.float32(capstone._learning_rate(step))
            decay = np.float32(CONFIG["weight_decay"])
            current, _ = train_step(current, pad_batch(batch), lr, decay)
        final, losses = capstone._reference_train(params, batches)
        return {k: np.float32(v) for k, v in final.items()}, losses

    with pytest.raises(GradingFailure, match="come from train_step"):
        grade(decoys, train_step)


def test_rejects_numpy_params_fed_through_a_step_that_does_nothing():
    # Every step calls train_step, but with lr = 0 on params computed in NumPy.
    train_fast, train_step = make_learner()

    def lr_zero(params, batches):
        current = {k: np.asarray(v, np.float64) for k, v in params.items()}
        losses = []
        for step, batch in enumerate(batches):
            update_config(step)
            lr = float(capstone._learning_rate(step))
            current, value = capstone._reference_step(current, batch, lr, CONFIG["weight_decay"])
            as32 = {k: np.float32(v) for k, v in current.items()}
            train_step(as32, pad_batch(batch), np.float32(0.0), np.float32(0.0))
            losses.append(value)
        return {k: np.float32(v) for k, v in current.items()}, np.array(losses)

    with pytest.raises(GradingFailure, match="come from train_step"):
        grade(lr_zero, train_step)


def test_rejects_a_step_that_hands_back_a_precomputed_answer():
    # The chain of calls is right and so are the numbers, but the step only returns
    # what NumPy computed outside it.
    @jax.jit
    def hand_back(params, answer, value):
        return answer, value

    def outside(params, batches):
        current = {k: np.asarray(v, np.float64) for k, v in params.items()}
        losses = []
        for step, batch in enumerate(batches):
            update_config(step)
            lr = float(capstone._learning_rate(step))
            current, value = capstone._reference_step(current, batch, lr, CONFIG["weight_decay"])
            answer = {k: np.asarray(v, np.float32) for k, v in current.items()}
            params, out = hand_back(params, answer, np.float32(value))
            losses.append(float(out))
        return params, np.array(losses)

    with pytest.raises(GradingFailure, match="computes the update"):
        grade(outside, hand_back)


@pytest.mark.parametrize("repeat", range(3))
def test_rejects_padding_without_a_mask(repeat):
    train_fast, train_step = make_learner(mask=False)
    with pytest.raises(GradingFailure, match="loss at each step matches") as info:
        grade(train_fast, train_step)
    assert "mask" in info.value.hint


@pytest.mark.parametrize("repeat", range(3))
def test_rejects_a_mask_off_by_one(repeat):
    train_fast, train_step = make_learner(le=True)
    with pytest.raises(GradingFailure, match="loss at each step matches") as info:
        grade(train_fast, train_step)
    assert "before the weight decay changes" in info.value.hint


def test_rejects_a_stale_global():
    train_fast, train_step = make_learner(global_decay=True)
    with pytest.raises(GradingFailure, match="loss at each step matches") as info:
        grade(train_fast, train_step)
    assert "Read CONFIG in train_fast" in info.value.hint


def test_rejects_a_static_learning_rate_and_names_it():
    train_fast, train_step = make_learner(static_lr=True)
    with pytest.raises(GradingFailure, match="one compilation of train_step per bucket") as info:
        grade(train_fast, train_step)
    assert "once per value of lr" in info.value.seen
    assert "keep lr traced" in info.value.hint


def test_rejects_a_static_length_and_names_the_length_not_lr():
    @functools.partial(jax.jit, static_argnames="length")
    def static_length_step(params, x, y, weights, lr, decay, length):
        batch = {"x": x, "y": y, "weights": weights, "length": length}
        return step_body(params, batch, lr, decay)

    def train_fast(params, batches):
        losses = []
        for step, batch in enumerate(batches):
            update_config(step)
            fixed = pad_batch(batch)
            params, value = static_length_step(
                params,
                fixed["x"],
                fixed["y"],
                fixed["weights"],
                np.float32(capstone._learning_rate(step)),
                np.float32(CONFIG["weight_decay"]),
                length=int(fixed["length"]),
            )
            losses.append(float(value))
        return params, np.array(losses)

    with pytest.raises(GradingFailure, match="one compilation of train_step per bucket") as info:
        grade(train_fast, static_length_step)
    assert "once per value of length" in info.value.seen
    assert "keep length traced" in info.value.hint and "lr" not in info.value.hint


def test_rejects_two_learning_rate_types_and_names_them():
    train_fast, train_step = make_learner(cast_lr=False)
    with pytest.raises(GradingFailure, match="one compilation of train_step per bucket") as info:
        grade(train_fast, train_step)
    assert "lr reached train_step as 2 types" in info.value.seen
    assert "np.float32" in info.value.hint


def test_rejects_weights_in_several_forms():
    train_fast, train_step = make_learner(tidy_weights=False)
    with pytest.raises(GradingFailure, match="one compilation of train_step per bucket") as info:
        grade(train_fast, train_step)
    assert "batch['weights']" in info.value.seen
    assert "same keys" in info.value.hint


def test_rejects_batches_that_are_not_padded():
    train_fast, train_step = make_learner()

    def no_bucket(n):
        return n

    def unpadded(params, batches):
        # Pads to the learner's own (identity) rule, so every length is its own shape,
        # while bucket_size handed to the grader claims powers of two.
        losses = []
        for step, batch in enumerate(batches):
            update_config(step)
            fixed = pad_batch(batch, bucket=no_bucket)
            lr = np.float32(capstone._learning_rate(step))
            params, value = train_step(params, fixed, lr, np.float32(CONFIG["weight_decay"]))
            losses.append(float(value))
        return params, np.array(losses)

    with pytest.raises(GradingFailure, match="one compilation of train_step per bucket") as info:
        grade(unpadded, train_step)
    assert "shapes for" in info.value.seen and "pad every batch" in info.value.hint


def test_rejects_an_eager_pad_that_compiles_per_length():
    train_fast, train_step = make_learner(eager_pad=True)
    with pytest.raises(GradingFailure, match="second run in the same buckets compiles nothing"):
        grade(train_fast, train_step)


def test_rejects_a_boundary_that_changes_the_callers_batches():
    _, train_step = make_learner()

    def in_place(params, batches):
        losses = []
        for step, batch in enumerate(batches):
            update_config(step)
            if batch.get("weights") is None:
                batch["weights"] = np.ones(capstone.B, np.float32)  # the caller's dict
            lr = np.float32(capstone._learning_rate(step))
            fixed = pad_batch(batch)
            params, value = train_step(params, fixed, lr, np.float32(CONFIG["weight_decay"]))
            losses.append(float(value))
        return params, np.array(losses)

    with pytest.raises(GradingFailure, match="leaves the caller's arguments") as info:
        grade(in_place, train_step)
    assert "'weights'" in info.value.seen


def test_rejects_jit_switched_off_by_config_and_says_so():
    train_fast, train_step = make_learner()

    def switch_off(params, batches):
        jax.config.update("jax_disable_jit", True)
        return train_fast(params, batches)

    try:
        with pytest.raises(GradingFailure, match="calls train_step with jit on") as info:
            grade(switch_off, train_step)
        assert "switched off" in info.value.seen
    finally:
        jax.config.update("jax_disable_jit", False)


def test_rejects_one_huge_bucket():
    train_fast, train_step = make_learner()
    with pytest.raises(GradingFailure, match="wastes less than half"):
        grade(train_fast, train_step, lambda n: 64)


def test_rejects_a_bucket_per_length():
    train_fast, train_step = make_learner()
    with pytest.raises(GradingFailure, match="lengths share a few buckets"):
        grade(train_fast, train_step, lambda n: n)
