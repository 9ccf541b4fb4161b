"""The dtypes grader passes the solution and rejects the plausible wrong answers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.graders import dtypes
from jitlab.grading import GradingFailure


@jax.jit
def score_core(x, weights):
    z = (x - x.mean(axis=0)) / x.std(axis=0)
    return z @ weights


def score(batch, weights):
    return score_core(jnp.asarray(batch, jnp.float32), weights)


def test_reference_solution_passes(capsys):
    dtypes.grade(score, score_core)
    assert "All checks passed" in capsys.readouterr().out


def test_host_cast_with_numpy_passes():
    def score_numpy_cast(batch, weights):
        return score_core(np.asarray(batch, np.float32), weights)

    dtypes.grade(score_numpy_cast, score_core)


def test_passes_even_when_the_cache_is_already_warm():
    # The learner may have run score_core before grading: the grader empties its cache.
    score(np.ones((4, 3), np.float32) * np.arange(4)[:, None], jnp.ones(3, jnp.float32))
    dtypes.grade(score, score_core)


def test_rejects_unsolved_stubs():
    @jax.jit
    def stub_core(x, weights):
        raise NotImplementedError

    def stub(batch, weights):
        raise NotImplementedError

    with pytest.raises(GradingFailure, match="not solved yet"):
        dtypes.grade(stub, stub_core)


def test_rejects_no_cast():
    def score_raw(batch, weights):
        return score_core(batch, weights)

    with pytest.raises(GradingFailure, match="compiles once") as failure:
        dtypes.grade(score_raw, score_core)
    assert "before calling score_core" in failure.value.hint


def test_rejects_cast_inside_the_jitted_function():
    @jax.jit
    def core_casting_inside(x, weights):
        x = x.astype(jnp.float32)
        return (x - x.mean(axis=0)) / x.std(axis=0) @ weights

    def score_inside(batch, weights):
        return core_casting_inside(batch, weights)

    with pytest.raises(GradingFailure, match="compiles once"):
        dtypes.grade(score_inside, core_casting_inside)


def test_rejects_asarray_without_a_dtype():
    def score_asarray(batch, weights):
        return score_core(jnp.asarray(batch), weights)

    with pytest.raises(GradingFailure, match="compiles once"):
        dtypes.grade(score_asarray, score_core)


def test_rejects_cast_to_an_integer_dtype():
    def score_int(batch, weights):
        return score_core(jnp.asarray(batch, jnp.int32), weights)

    with pytest.raises(GradingFailure, match="numbers match") as failure:
        dtypes.grade(score_int, score_core)
    assert "float" in failure.value.check  # a float batch is the one that goes wrong


def test_rejects_cast_to_float16():
    def score_half(batch, weights):
        return score_core(jnp.asarray(batch, jnp.float16), weights)

    with pytest.raises(GradingFailure, match="numbers match"):
        dtypes.grade(score_half, score_core)


def test_rejects_numpy_work_outside_jit():
    def numpy_core(x, weights):
        x = np.asarray(x, np.float64)
        return (x - x.mean(axis=0)) / x.std(axis=0) @ np.asarray(weights)

    def score_numpy(batch, weights):
        return numpy_core(batch, weights)

    with pytest.raises(GradingFailure, match="is jitted"):
        dtypes.grade(score_numpy, numpy_core)


def test_rejects_score_that_bypasses_score_core():
    def score_bypass(batch, weights):
        x = np.asarray(batch, np.float64)
        z = (x - x.mean(axis=0)) / x.std(axis=0)
        return jnp.asarray(z @ np.asarray(weights, np.float64), jnp.float32)

    with pytest.raises(GradingFailure, match="compiles once") as failure:
        dtypes.grade(score_bypass, score_core)
    assert failure.value.seen.startswith("0 compilation")


def test_rejects_jitting_the_boundary_too():
    # With score jitted, score_core is inlined into score's program and never compiled
    # on its own; and score would compile once per dtype anyway.
    score_jitted = jax.jit(score)

    with pytest.raises(GradingFailure, match="compiles once"):
        dtypes.grade(score_jitted, score_core)


def test_rejects_hard_coded_output():
    fixed = np.zeros(32, np.float32)

    def score_fixed(batch, weights):
        return fixed[: batch.shape[0]]

    with pytest.raises(GradingFailure, match="numbers match"):
        dtypes.grade(score_fixed, score_core)


def test_rejects_wrong_shape():
    def score_per_column(batch, weights):
        x = score_core(jnp.asarray(batch, jnp.float32), weights)  # compiles once, as asked
        return jnp.zeros(batch.shape[1]) + x.mean()

    with pytest.raises(GradingFailure, match="numbers match") as failure:
        dtypes.grade(score_per_column, score_core)
    assert "shape" in failure.value.expected


def test_loader_yields_six_dtypes_of_one_shape():
    batches, weights = dtypes.make_loader(np.random.default_rng(0))
    assert {b.dtype for b in batches} == {np.dtype(d) for d in dtypes.SOURCE_DTYPES}
    assert len({b.shape for b in batches}) == 1
    assert weights.dtype == np.float32 and weights.shape == (batches[0].shape[1],)
    assert all(np.all(b.std(axis=0) > 0) for b in batches)
