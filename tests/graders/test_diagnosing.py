"""The diagnosing grader passes the solution and rejects the plausible wrong answers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.graders import diagnosing
from jitlab.grading import GradingFailure


def sgd_update(w, batch, lr):
    def loss(w):
        return jnp.mean((batch["x"] @ w - batch["y"]) ** 2)

    return w - lr * jax.grad(loss)(w)


# A fresh jitted function per test, so no test sees another's cache.
def make_step():
    return jax.jit(sgd_update)


def unchanged(batch, lr):
    return batch, lr


def as_float32(batch, lr):
    return batch, np.float32(lr)


def test_reference_solution_passes():
    diagnosing.grade(as_float32, make_step())


def test_python_float_everywhere_also_passes():
    def as_python_float(batch, lr):
        return batch, float(lr)

    diagnosing.grade(as_python_float, make_step())


def test_rejects_unchanged_code():
    with pytest.raises(GradingFailure, match="one compilation for the whole run"):
        diagnosing.grade(unchanged, make_step())


def test_rejects_asarray_without_dtype():
    # jnp.asarray keeps a Python float weak and a NumPy float64 strong: still two keys.
    def as_array(batch, lr):
        return batch, jnp.asarray(lr)

    with pytest.raises(GradingFailure, match="one compilation for the whole run"):
        diagnosing.grade(as_array, make_step())


def test_rejects_static_learning_rate():
    step = jax.jit(sgd_update, static_argnames="lr")

    def as_float(batch, lr):
        return batch, float(lr)

    with pytest.raises(GradingFailure, match="one compilation for the whole run") as info:
        diagnosing.grade(as_float, step)
    assert "compiles once per value" in info.value.hint


def test_rejects_a_fix_that_changes_the_rate():
    def as_bfloat16(batch, lr):
        return batch, jnp.asarray(lr, jnp.bfloat16)

    with pytest.raises(GradingFailure, match="match the reference"):
        diagnosing.grade(as_bfloat16, make_step())


def test_rejects_a_constant_rate():
    def constant(batch, lr):
        return batch, np.float32(0.05)

    with pytest.raises(GradingFailure, match="match the reference"):
        diagnosing.grade(constant, make_step())


def test_rejects_a_step_outside_jit():
    with pytest.raises(GradingFailure, match="compiled with jax.jit"):
        diagnosing.grade(as_float32, sgd_update)


def test_rejects_a_wrong_return_shape():
    def only_batch(batch, lr):
        return batch

    with pytest.raises(GradingFailure, match=r"returns \(batch, lr\)"):
        diagnosing.grade(only_batch, make_step())


def test_rejects_unfinished_stub():
    def stub(batch, lr):
        raise NotImplementedError

    with pytest.raises(GradingFailure, match="not solved yet"):
        diagnosing.grade(stub, make_step())
