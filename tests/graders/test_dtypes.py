"""The dtypes grader passes the solution and rejects the plausible wrong answers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.graders import dtypes
from jitlab.grading import GradingFailure


def make_solution():
    """Fresh functions for each test: no test depends on what another compiled."""

    @jax.jit
    def score_core(x, weights):
        z = (x - x.mean(axis=0)) / x.std(axis=0)
        return z @ weights

    def score(batch, weights):
        return score_core(jnp.asarray(batch, jnp.float32), weights)

    return score, score_core


def test_reference_solution_passes(capsys):
    dtypes.grade(*make_solution())
    assert "All checks passed" in capsys.readouterr().out


def test_a_different_right_answer_passes():
    # Casts with NumPy's astype, takes weights as a jnp array, standardises with its own
    # arithmetic, returns a NumPy array, and reaches the kernel through a helper.
    @jax.jit
    def score_core(x, weights):
        centred = x - jnp.mean(x, axis=0, keepdims=True)
        spread = jnp.sqrt(jnp.mean(centred**2, axis=0))
        return jnp.einsum("rc,c->r", centred / spread, weights)

    def prepare(batch):
        return batch.astype(np.float32)

    def run(x, w):
        return score_core(x, jnp.asarray(w))

    def score(batch, weights):
        return np.asarray(run(prepare(batch), weights))

    dtypes.grade(score, score_core)


def test_host_cast_with_numpy_passes():
    score, score_core = make_solution()

    def score_numpy_cast(batch, weights):
        return score_core(np.asarray(batch, np.float32), weights)

    dtypes.grade(score_numpy_cast, score_core)


def test_passes_even_when_the_cache_is_already_warm():
    # The learner may have run score_core before grading: the grader empties its cache.
    score, score_core = make_solution()
    score(np.ones((4, 3), np.float32) * np.arange(4)[:, None], jnp.ones(3, jnp.float32))
    dtypes.grade(score, score_core)


def test_rejects_no_cast():
    _, score_core = make_solution()

    def score_raw(batch, weights):
        return score_core(batch, weights)

    with pytest.raises(GradingFailure, match="compiles once") as failure:
        dtypes.grade(score_raw, score_core)
    assert "before calling score_core" in failure.value.hint
    assert "received x as 4 dtypes" in failure.value.seen  # 6 sources, 4 after canon.


def test_rejects_cast_inside_the_jitted_function():
    @jax.jit
    def core_casting_inside(x, weights):
        x = x.astype(jnp.float32)
        return (x - x.mean(axis=0)) / x.std(axis=0) @ weights

    def score_inside(batch, weights):
        return core_casting_inside(batch, weights)

    with pytest.raises(GradingFailure, match="compiles once") as failure:
        dtypes.grade(score_inside, core_casting_inside)
    assert "a cast inside score_core comes after the cache" in failure.value.hint


def test_rejects_asarray_without_a_dtype():
    _, score_core = make_solution()

    def score_asarray(batch, weights):
        return score_core(jnp.asarray(batch), weights)

    with pytest.raises(GradingFailure, match="compiles once"):
        dtypes.grade(score_asarray, score_core)


def test_rejects_cast_to_an_integer_dtype():
    _, score_core = make_solution()

    def score_int(batch, weights):
        return score_core(jnp.asarray(batch, jnp.int32), weights)

    with pytest.raises(GradingFailure, match="matches the reference") as failure:
        dtypes.grade(score_int, score_core)
    assert "wrong for float" in failure.value.seen and "right for" in failure.value.seen
    assert "integer type" in failure.value.hint


def test_rejects_cast_to_float16():
    _, score_core = make_solution()

    def score_half(batch, weights):
        return score_core(jnp.asarray(batch, jnp.float16), weights)

    with pytest.raises(GradingFailure, match="matches the reference") as failure:
        dtypes.grade(score_half, score_core)
    assert "float16" in failure.value.hint


def test_a_formula_mistake_is_not_blamed_on_one_dtype():
    @jax.jit
    def sample_std_core(x, weights):
        z = (x - x.mean(axis=0)) / jnp.std(x, axis=0, ddof=1)  # sample, not population
        return z @ weights

    def score(batch, weights):
        return sample_std_core(jnp.asarray(batch, jnp.float32), weights)

    with pytest.raises(GradingFailure, match="matches the reference") as failure:
        dtypes.grade(score, sample_std_core)
    assert "every source dtype" in failure.value.seen
    assert "formula" in failure.value.hint and "float64" not in failure.value.check


def test_rejects_numpy_work_outside_jit():
    def numpy_core(x, weights):
        x = np.asarray(x, np.float64)
        return (x - x.mean(axis=0)) / x.std(axis=0) @ np.asarray(weights)

    def score_numpy(batch, weights):
        return numpy_core(batch, weights)

    with pytest.raises(GradingFailure, match="score_core is compiled with jax.jit"):
        dtypes.grade(score_numpy, numpy_core)


def test_rejects_a_numpy_callback_inside_the_jitted_function():
    def numpy_core(x, weights):
        x = np.asarray(x, np.float64)
        z = (x - x.mean(axis=0)) / x.std(axis=0)
        return (z @ np.asarray(weights, np.float64)).astype(np.float32)

    @jax.jit
    def score_core(x, weights):
        out = jax.ShapeDtypeStruct((x.shape[0],), jnp.float32)
        return jax.pure_callback(numpy_core, out, x, weights)

    def score(batch, weights):
        return score_core(jnp.asarray(batch, jnp.float32), weights)

    with pytest.raises(GradingFailure, match="computes inside its compiled program"):
        dtypes.grade(score, score_core)


def test_rejects_score_that_bypasses_score_core():
    _, score_core = make_solution()

    def score_bypass(batch, weights):
        x = np.asarray(batch, np.float64)
        z = (x - x.mean(axis=0)) / x.std(axis=0)
        return jnp.asarray(z @ np.asarray(weights, np.float64), jnp.float32)

    with pytest.raises(GradingFailure, match="returns what score_core computed") as failure:
        dtypes.grade(score_bypass, score_core)
    assert "never called score_core" in failure.value.seen


def test_rejects_score_core_called_only_inside_another_jit():
    _, score_core = make_solution()

    def score_traced(batch, weights):
        x = jnp.asarray(batch, jnp.float32)
        return jax.jit(lambda b, w: score_core(b, w))(x, weights)  # score_core is inlined

    with pytest.raises(GradingFailure, match="returns what score_core computed") as failure:
        dtypes.grade(score_traced, score_core)
    assert "while another function was being traced" in failure.value.seen
    assert "not inside a jax.jit of your own" in failure.value.hint


def test_rejects_a_numpy_path_with_a_decoy_call():
    _, score_core = make_solution()

    def score_decoy(batch, weights):
        score_core(jnp.ones((4, len(weights)), jnp.float32), weights)  # compiles once
        x = np.asarray(batch, np.float64)
        z = (x - x.mean(axis=0)) / x.std(axis=0)
        return z @ np.asarray(weights, np.float64)

    with pytest.raises(GradingFailure, match="returns what score_core computed") as failure:
        dtypes.grade(score_decoy, score_core)
    assert "did not compute" in failure.value.seen


def test_rejects_returning_the_graders_reference_with_a_real_call():
    score, score_core = make_solution()

    def score_reference(batch, weights):
        score(batch, weights)  # the right call, thrown away
        return dtypes._reference(batch, weights)

    with pytest.raises(GradingFailure, match="returns what score_core computed"):
        dtypes.grade(score_reference, score_core)


def test_rejects_jitting_the_boundary_too():
    score, score_core = make_solution()
    with pytest.raises(GradingFailure, match="score is a plain Python function"):
        dtypes.grade(jax.jit(score), score_core)


def test_rejects_changing_the_batch_in_place():
    _, score_core = make_solution()

    def score_in_place(batch, weights):
        batch.sort(axis=0)  # column statistics are unchanged, the caller's data is not
        return score_core(jnp.asarray(batch, jnp.float32), weights)

    # Sorting each column reorders the rows, so the scores no longer match row by row;
    # compare the check that names the mutation with one that keeps the order.
    with pytest.raises(GradingFailure, match="matches the reference|unchanged"):
        dtypes.grade(score_in_place, score_core)

    def score_scaling_in_place(batch, weights):
        x = jnp.asarray(batch, jnp.float32)
        batch[...] = 0  # the scores come from x; the caller's batch is wiped
        return score_core(x, weights)

    for _ in range(5):
        with pytest.raises(GradingFailure, match="score leaves the caller.s arguments unchanged"):
            dtypes.grade(score_scaling_in_place, score_core)


def test_rejects_hard_coded_output():
    _, score_core = make_solution()
    fixed = np.zeros(64, np.float32)

    def score_fixed(batch, weights):
        return fixed[: batch.shape[0]]

    with pytest.raises(GradingFailure, match="matches the reference"):
        dtypes.grade(score_fixed, score_core)


def test_rejects_wrong_shape():
    _, score_core = make_solution()

    def score_per_column(batch, weights):
        x = score_core(jnp.asarray(batch, jnp.float32), weights)  # compiles once, as asked
        return jnp.zeros(batch.shape[1]) + x.mean()

    with pytest.raises(GradingFailure, match="matches the reference") as failure:
        dtypes.grade(score_per_column, score_core)
    assert "shape" in failure.value.expected and "one score per row" in failure.value.hint


def test_loader_yields_six_dtypes_of_one_shape():
    batches, weights = dtypes.make_loader(np.random.default_rng(0))
    assert {b.dtype for b in batches} == {np.dtype(d) for d in dtypes.SOURCE_DTYPES}
    assert len({b.shape for b in batches}) == 1
    assert weights.dtype == np.float32 and weights.shape == (batches[0].shape[1],)
    assert all(np.all(b.std(axis=0) > 0) for b in batches)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(
    "standardise",
    [
        lambda x: (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-6),
        lambda x: jax.nn.standardize(x, axis=0),  # adds 1e-5 to the variance
    ],
    ids=["eps on the std", "jax.nn.standardize"],
)
def test_rejects_an_eps_in_the_denominator(standardise, seed, monkeypatch):
    monkeypatch.setenv("JITLAB_SEED", str(seed))

    @jax.jit
    def score_core(x, weights):
        return standardise(x) @ weights

    def score(batch, weights):
        return score_core(jnp.asarray(batch, jnp.float32), weights)

    with pytest.raises(GradingFailure, match="matches the reference") as failure:
        dtypes.grade(score, score_core)
    assert "eps" in failure.value.hint and "spread" in failure.value.hint
