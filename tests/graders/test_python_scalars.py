"""The grader of exercise 03 passes the solution and rejects plausible wrong answers.

Each wrong answer below is one a learner could write after a quick read of the lesson.
Every test builds its own functions, so no cache is shared between tests.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.graders import python_scalars
from jitlab.grading import GradingFailure


def loss(params, batch):
    inputs, targets = batch
    return jnp.mean((inputs @ params["w"] + params["b"] - targets) ** 2)


def update(params, batch, lr):
    grads = jax.grad(loss)(params, batch)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads)


def make_train(step_fn, convert):
    def train(params, batches, schedule):
        for step, batch in enumerate(batches):
            params = step_fn(params, batch, convert(schedule(step)))
        return params

    return train


def grade_failure(sgd_step, train) -> GradingFailure:
    with pytest.raises(GradingFailure) as info:
        python_scalars.grade(sgd_step, train)
    return info.value


def test_solution_passes(capsys):
    @jax.jit
    def sgd_step(params, batch, lr):
        return update(params, batch, lr)

    python_scalars.grade(sgd_step, make_train(sgd_step, lambda v: jnp.asarray(v, jnp.float32)))
    assert "All checks passed" in capsys.readouterr().out


def test_float_conversion_also_passes():
    # Every value becomes a Python float, traced as ~float32[]: one key, one compilation.
    @jax.jit
    def sgd_step(params, batch, lr):
        return update(params, batch, lr)

    python_scalars.grade(sgd_step, make_train(sgd_step, float))


def test_raw_scalars_compile_once_per_kind():
    @jax.jit
    def sgd_step(params, batch, lr):
        return update(params, batch, lr)

    failure = grade_failure(sgd_step, make_train(sgd_step, lambda v: v))
    assert failure.check.startswith("sgd_step compiled exactly once")
    assert failure.seen.startswith("3 compilation(s)"), failure.seen
    assert "abstract values" in failure.hint


def test_static_lr_compiles_once_per_value():
    @jax.jit(static_argnames="lr")
    def sgd_step(params, batch, lr):
        return update(params, batch, lr)

    failure = grade_failure(sgd_step, make_train(sgd_step, float))
    assert failure.check.startswith("sgd_step compiled exactly once")
    assert int(failure.seen.split()[0]) > 3
    assert "static" in failure.hint


def test_integer_cast_gives_wrong_numbers():
    @jax.jit
    def sgd_step(params, batch, lr):
        return update(params, batch, lr)

    failure = grade_failure(sgd_step, make_train(sgd_step, lambda v: jnp.asarray(v, jnp.int32)))
    assert failure.check == "train's final params match the reference"


def test_asarray_without_dtype_keeps_ints_and_floats_apart():
    @jax.jit
    def sgd_step(params, batch, lr):
        return update(params, batch, lr)

    failure = grade_failure(sgd_step, make_train(sgd_step, jnp.asarray))
    assert failure.check.startswith("sgd_step compiled exactly once")


def test_converting_inside_jit_is_too_late():
    @jax.jit
    def sgd_step(params, batch, lr):
        return update(params, batch, jnp.asarray(lr, jnp.float32))

    failure = grade_failure(sgd_step, make_train(sgd_step, lambda v: v))
    assert failure.check.startswith("sgd_step compiled exactly once")


def test_work_outside_the_jitted_step_is_rejected():
    @jax.jit
    def sgd_step(params, batch, lr):
        return update(params, batch, lr)

    def train(params, batches, schedule):  # right numbers, but sgd_step is never called
        w, b = np.asarray(params["w"], np.float64), float(params["b"])
        for step, (x, y) in enumerate(batches):
            x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
            residual = x @ w + b - y
            lr = float(schedule(step))
            w, b = w - lr * 2 * x.T @ residual / len(y), b - lr * 2 * residual.mean()
        return {"w": w, "b": b}

    failure = grade_failure(sgd_step, train)
    assert failure.seen.startswith("0 compilation(s)")


def test_unjitted_step_is_rejected():
    def sgd_step(params, batch, lr):
        return update(params, batch, lr)

    failure = grade_failure(sgd_step, make_train(sgd_step, float))
    assert failure.check == "sgd_step is wrapped by jax.jit"


def test_wrong_update_is_rejected():
    @jax.jit
    def sgd_step(params, batch, lr):
        return jax.tree.map(lambda p, g: p + lr * g, params, jax.grad(loss)(params, batch))

    failure = grade_failure(sgd_step, make_train(sgd_step, float))
    assert failure.check == "one sgd_step matches the reference"


def test_unsolved_stub_is_rejected():
    @jax.jit
    def sgd_step(params, batch, lr):
        raise NotImplementedError

    def train(params, batches, schedule):
        raise NotImplementedError

    failure = grade_failure(sgd_step, train)
    assert "NotImplementedError" in failure.seen
