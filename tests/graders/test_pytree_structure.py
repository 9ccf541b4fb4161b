"""The pytree-structure grader passes right answers and rejects each kind of wrong one.

Every test builds its own jitted functions, so no test depends on what another compiled.
The grader calls ``loss`` with every (kind of batch, calling style) pair on every run, so
each wrong answer below fails at the check in its ``match=`` every time.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exercise_cells import namespace

from jitlab.graders import pytree_structure
from jitlab.grading import GradingFailure


def predict(params, x):
    return x @ params["w"] + params["b"]


def make_batch_loss():
    """A correct jitted core (fresh object each time), for the wrappers below."""

    @jax.jit
    def batch_loss(params, batch):
        err = (predict(params, batch["x"]) - batch["y"]) ** 2
        return jnp.sum(batch["weights"] * err) / jnp.sum(batch["weights"])

    return batch_loss


def tidy(batch):
    weights = batch.get("weights")
    if weights is None:
        weights = np.ones_like(batch["y"])
    return {"x": batch["x"], "y": batch["y"], "weights": weights}


def make_loss(batch_loss):
    def loss(params, batch):
        return batch_loss(params, tidy(batch))

    return loss


def numpy_loss(params, batch):
    weights = batch.get("weights")
    w = np.ones_like(batch["y"]) if weights is None else np.asarray(weights)
    pred = np.asarray(batch["x"]) @ np.asarray(params["w"]) + float(params["b"])
    return np.sum(w * (pred - batch["y"]) ** 2) / np.sum(w)


def grade_failure(loss, batch_loss, match: str) -> GradingFailure:
    with pytest.raises(GradingFailure, match=match) as info:
        pytree_structure.grade(loss, batch_loss)
    return info.value


# ------------------------------------------------------------------ right answers


def test_solution_passes(capsys):
    solved = namespace("pytree_structure")
    pytree_structure.grade(solved["loss"], solved["batch_loss"])
    assert "All checks passed" in capsys.readouterr().out


def test_a_differently_written_right_answer_passes():
    # A tuple instead of a dict, float64 ones (canonicalised to float32), keyword-only
    # handling through **kwargs, a helper reached through a global, and a Python float
    # returned instead of the array: all within the contract.
    namespace = {"jax": jax, "jnp": jnp, "np": np, "predict": predict}
    exec(
        "@jax.jit\n"
        "def batch_loss(params, batch):\n"
        "    x, y, w = batch\n"
        "    return jnp.average((predict(params, x) - y) ** 2, weights=w)\n"
        "def fill(batch):\n"
        "    w = batch.get('weights')\n"
        "    return np.ones(len(batch['y'])) if w is None else w\n"
        "def core(params, batch):\n"
        "    return batch_loss(params, (batch['x'], batch['y'], fill(batch)))\n"
        "def loss(*args, **kwargs):\n"
        "    params = kwargs['params'] if 'params' in kwargs else args[0]\n"
        "    batch = kwargs['batch'] if 'batch' in kwargs else args[-1]\n"
        "    return float(core(params, batch))\n",
        namespace,
    )
    pytree_structure.grade(namespace["loss"], namespace["batch_loss"])
    assert type(namespace["batch_loss"]).__name__ != "Recorder"  # put back afterwards


# -------------------------------------------------------------- structure and style


def test_rejects_batch_passed_through_unchanged():
    # Numerically right: the jitted function handles the optional field itself. But
    # every structure is a new compilation.
    @jax.jit
    def batch_loss(params, batch):
        err = (predict(params, batch["x"]) - batch["y"]) ** 2
        weights = batch.get("weights")
        if weights is None:
            return jnp.mean(err)
        return jnp.sum(weights * err) / jnp.sum(weights)

    def loss(params, batch):
        return batch_loss(params, batch)

    failure = grade_failure(loss, batch_loss, "compiles once")
    assert failure.seen.startswith("4 compilations")
    assert "batch['" in failure.seen  # the grader names the entry that changed


def test_rejects_jitted_loss():
    @jax.jit
    def batch_loss(params, batch):
        return make_batch_loss()(params, tidy(batch))

    grade_failure(batch_loss, batch_loss, "plain Python function")


def test_rejects_only_missing_key_handled():
    # `"weights" in batch` misses the batches whose weights are None.
    @jax.jit
    def batch_loss(params, batch):
        err = (predict(params, batch["x"]) - batch["y"]) ** 2
        if batch["weights"] is None:
            return jnp.mean(err)
        return jnp.sum(batch["weights"] * err) / jnp.sum(batch["weights"])

    def loss(params, batch):
        weights = batch["weights"] if "weights" in batch else np.ones_like(batch["y"])
        return batch_loss(params, {"x": batch["x"], "y": batch["y"], "weights": weights})

    failure = grade_failure(loss, batch_loss, "compiles once")
    assert failure.seen.startswith("2 compilations")
    assert "batch['weights']" in failure.seen and "None" in failure.seen
    assert "None" in failure.hint


def test_rejects_extra_keys_kept():
    batch_loss = make_batch_loss()

    def loss(params, batch):
        kept = dict(batch)  # a copy, so the caller's dict is safe...
        if kept.get("weights") is None:
            kept["weights"] = np.ones_like(batch["y"])
        return batch_loss(params, kept)  # ...but "ids" rides along

    failure = grade_failure(loss, batch_loss, "compiles once")
    assert "batch['ids']" in failure.seen
    assert "exactly the keys" in failure.hint


def test_rejects_forwarded_calling_style():
    batch_loss = make_batch_loss()

    def loss(*args, **kwargs):
        # Tidies the batch, but calls batch_loss the way loss was called.
        if "batch" in kwargs:
            kwargs["batch"] = tidy(kwargs["batch"])
        else:
            args = (args[0], tidy(args[1]))
        return batch_loss(*args, **kwargs)

    failure = grade_failure(loss, batch_loss, "compiles once")
    assert "keyword" in failure.seen and "positional" in failure.seen
    assert "one way" in failure.hint


def test_rejects_integer_fill():
    # Integer ones give the right numbers, but int32[n] is not float32[n]: a new cache key.
    batch_loss = make_batch_loss()

    def loss(params, batch):
        weights = batch.get("weights")
        if weights is None:
            weights = np.ones(len(batch["y"]), dtype=np.int32)
        return batch_loss(params, {"x": batch["x"], "y": batch["y"], "weights": weights})

    failure = grade_failure(loss, batch_loss, "compiles once")
    assert "i32[" in failure.seen and "f32[" in failure.seen
    assert "dtype" in failure.hint


def test_rejects_weak_fill():
    # jnp.full(n, 1.0) has the right shape and values, but it is a weak ~float32[n].
    batch_loss = make_batch_loss()

    def loss(params, batch):
        weights = batch.get("weights")
        if weights is None:
            weights = jnp.full(len(batch["y"]), 1.0)
        return batch_loss(params, {"x": batch["x"], "y": batch["y"], "weights": weights})

    failure = grade_failure(loss, batch_loss, "compiles once")
    assert failure.seen.startswith("2 compilations")
    assert "~f32[" in failure.seen and "weak" in failure.hint


def test_rejects_a_cache_cleared_every_call():
    batch_loss = make_batch_loss()

    def loss(params, batch):
        batch_loss.clear_cache()
        return batch_loss(params, tidy(batch))

    failure = grade_failure(loss, batch_loss, "compiles once")
    assert "the same signature as call 1" in failure.seen
    assert "clear its cache" in failure.hint


# ------------------------------------------------------------- where the work runs


def test_rejects_work_outside_jit():
    batch_loss = make_batch_loss()
    failure = grade_failure(numpy_loss, batch_loss, "once per call")
    assert failure.seen.startswith("0 call(s)")


def test_rejects_numpy_path_with_one_decoy_call():
    batch_loss = make_batch_loss()
    decoy = []

    def loss(params, batch):
        if not decoy:
            decoy.append(batch_loss(params, tidy(batch)))
        return jnp.asarray(numpy_loss(params, batch), jnp.float32)

    grade_failure(loss, batch_loss, "once per call")


def test_rejects_numpy_result_after_a_real_call():
    # batch_loss is called every time, but the result returned is computed outside it.
    batch_loss = make_batch_loss()

    def loss(params, batch):
        batch_loss(params, tidy(batch))
        return jnp.asarray(numpy_loss(params, batch), jnp.float32)

    grade_failure(loss, batch_loss, "returns what batch_loss computed")


def test_rejects_the_graders_reference():
    batch_loss = make_batch_loss()

    def loss(params, batch):
        batch_loss(params, tidy(batch))
        return pytree_structure._reference_loss(params, batch)

    grade_failure(loss, batch_loss, "returns what batch_loss computed")


def test_rejects_a_new_jit_per_call():
    batch_loss = make_batch_loss()

    def loss(params, batch):
        return jax.jit(lambda p, b: batch_loss(p, b))(params, tidy(batch))

    failure = grade_failure(loss, batch_loss, "once per call")
    assert "while another function was being traced" in failure.hint


def test_rejects_unjitted_batch_loss():
    def batch_loss(params, batch):
        err = (predict(params, batch["x"]) - batch["y"]) ** 2
        return jnp.sum(batch["weights"] * err) / jnp.sum(batch["weights"])

    grade_failure(make_loss(batch_loss), batch_loss, "compiled with jax.jit")


def test_rejects_a_look_alike_of_a_jitted_function():
    real = make_batch_loss()

    class LooksJitted:
        def __call__(self, params, batch):
            return real(params, batch)

        def lower(self, *args):
            raise NotImplementedError

        def trace(self, *args):
            raise NotImplementedError

        def clear_cache(self):
            pass

    fake = LooksJitted()
    grade_failure(make_loss(fake), fake, "compiled with jax.jit")


# ------------------------------------------------------------ numbers and the batch


def test_rejects_weights_filled_with_zeros():
    batch_loss = make_batch_loss()

    def loss(params, batch):
        weights = batch.get("weights")
        if weights is None:
            weights = np.zeros_like(batch["y"])
        return batch_loss(params, {"x": batch["x"], "y": batch["y"], "weights": weights})

    failure = grade_failure(loss, batch_loss, "match the reference")
    assert "no weights" in failure.hint


def test_rejects_weights_ignored():
    @jax.jit
    def batch_loss(params, batch):
        return jnp.mean((predict(params, batch["x"]) - batch["y"]) ** 2)

    failure = grade_failure(make_loss(batch_loss), batch_loss, "match the reference")
    assert "weights" in failure.hint


def test_rejects_editing_the_callers_batch():
    batch_loss = make_batch_loss()

    def loss(params, batch):
        if batch.get("weights") is None:
            batch["weights"] = np.ones_like(batch["y"])
        batch.pop("ids", None)
        return batch_loss(params, batch)

    grade_failure(loss, batch_loss, "caller's arguments")


def test_rejects_weights_normalised_in_place():
    # The same dict and the same array objects come back, but the weights' values were
    # changed in place (the loss does not change: a weighted mean ignores the scale).
    batch_loss = make_batch_loss()

    def loss(params, batch):
        tidy_batch = tidy(batch)
        tidy_batch["weights"] /= tidy_batch["weights"].sum()
        return batch_loss(params, tidy_batch)

    failure = grade_failure(loss, batch_loss, "caller's arguments")
    assert "weights" in failure.seen and "in place" in failure.hint


# ------------------------------------------------------------------ jit switched off


def test_disable_jit_by_config_inside_loss_is_named():
    batch_loss = make_batch_loss()

    def loss(params, batch):
        jax.config.update("jax_disable_jit", True)
        return batch_loss(params, tidy(batch))

    try:
        failure = grade_failure(loss, batch_loss, "with jit on")
    finally:
        jax.config.update("jax_disable_jit", False)
    assert "switched off" in failure.seen


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rejects_batches_memoised_by_id(seed, monkeypatch):
    # The loader reuses its dicts and arrays: a copy kept by id() goes stale.
    monkeypatch.setenv("JITLAB_SEED", str(seed))
    batch_loss, kept = make_batch_loss(), {}

    def loss(params, batch):
        if id(batch) not in kept:
            kept[id(batch)] = {k: np.array(v) for k, v in tidy(batch).items()}
        return batch_loss(params, kept[id(batch)])

    failure = grade_failure(loss, batch_loss, "match the reference")
    assert "reused" in failure.hint and "id()" in failure.hint


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rejects_results_memoised_by_id(seed, monkeypatch):
    monkeypatch.setenv("JITLAB_SEED", str(seed))
    batch_loss, kept = make_batch_loss(), {}

    def loss(params, batch):
        if id(batch) not in kept:
            kept[id(batch)] = batch_loss(params, tidy(batch))
        return kept[id(batch)]

    grade_failure(loss, batch_loss, "once per call")
