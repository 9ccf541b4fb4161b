"""The shapes grader passes the solution and rejects the plausible wrong answers."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.graders import shapes
from jitlab.grading import GradingFailure


def next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


@jax.jit
def padded_rms(padded, n):
    mask = jnp.arange(padded.shape[0]) < n
    return jnp.sqrt(jnp.sum(jnp.where(mask, padded * padded, 0.0)) / n)


def pad_and_call(kernel, size_fn):
    def rms(x):
        padded = np.zeros(size_fn(len(x)), dtype=np.float32)
        padded[: len(x)] = x
        return kernel(padded, len(x))

    return rms


def test_reference_solution_passes():
    shapes.grade(next_power_of_two, padded_rms, pad_and_call(padded_rms, next_power_of_two))


def test_rejects_one_huge_bucket():
    def huge(n):
        return 4096

    with pytest.raises(GradingFailure, match="wastes less than half"):
        shapes.grade(huge, padded_rms, pad_and_call(padded_rms, huge))


def test_rejects_a_bucket_per_length():
    def exact(n):
        return n  # wastes nothing, but compiles once per length

    with pytest.raises(GradingFailure, match="lengths share a few buckets"):
        shapes.grade(exact, padded_rms, pad_and_call(padded_rms, exact))


def test_rejects_work_outside_jit():
    def numpy_rms(x):
        return np.sqrt(np.mean(np.square(x)))

    with pytest.raises(GradingFailure, match="inside the jitted"):
        shapes.grade(next_power_of_two, padded_rms, numpy_rms)


def test_rejects_static_length():
    @partial(jax.jit, static_argnums=1)
    def padded_rms(padded, n):
        return jnp.sqrt(jnp.sum(padded[:n] ** 2) / n)

    with pytest.raises(GradingFailure, match="one compilation per bucket"):
        shapes.grade(next_power_of_two, padded_rms, pad_and_call(padded_rms, next_power_of_two))


def test_rejects_unmasked_padding():
    @jax.jit
    def padded_rms(padded, n):
        return jnp.sqrt(jnp.mean(padded * padded))

    with pytest.raises(GradingFailure, match="ignores the padding"):
        shapes.grade(next_power_of_two, padded_rms, pad_and_call(padded_rms, next_power_of_two))


def test_rejects_hard_coded_answer():
    def constant(x):
        return padded_rms(np.ones(8, np.float32), 8) * 0 + 1.0

    with pytest.raises(GradingFailure, match="matches the reference"):
        shapes.grade(next_power_of_two, padded_rms, constant)


def test_rejects_unfinished_stub():
    def stub(*args):
        raise NotImplementedError

    with pytest.raises(GradingFailure, match="not solved yet"):
        shapes.grade(stub, padded_rms, stub)
