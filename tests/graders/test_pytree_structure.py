"""The pytree-structure grader passes the solution and rejects plausible wrong answers."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import jupytext
import numpy as np
import pytest

from jitlab.graders import pytree_structure
from jitlab.grading import GradingFailure

ROOT = Path(__file__).resolve().parents[2]


def learner_namespace(path: Path) -> dict:
    """Run every code cell of an exercise file except its grader cells; return the names."""
    notebook = jupytext.read(path)
    namespace: dict = {}
    for cell in notebook.cells:
        if cell.cell_type == "code" and "grader" not in cell.metadata.get("tags", []):
            exec(compile(cell.source, str(path), "exec"), namespace)
    return namespace


def predict(params, x):
    return x @ params["w"] + params["b"]


def make_batch_loss():
    """A correct jitted core (fresh object each time), for the wrong wrappers below."""

    @jax.jit
    def batch_loss(params, batch):
        err = (predict(params, batch["x"]) - batch["y"]) ** 2
        return jnp.sum(batch["weights"] * err) / jnp.sum(batch["weights"])

    return batch_loss


def test_solution_passes():
    solved = learner_namespace(ROOT / "solutions" / "04_pytree_structure.py")
    pytree_structure.grade(solved["loss"], solved["batch_loss"])


def test_unsolved_exercise_fails_as_not_solved():
    unsolved = learner_namespace(ROOT / "exercises" / "04_pytree_structure.py")
    with pytest.raises(GradingFailure, match="not solved yet"):
        pytree_structure.grade(unsolved["loss"], unsolved["batch_loss"])


def test_rejects_batch_passed_through_unchanged():
    # Numerically right: the jitted function handles the optional field itself. But
    # every structure (and every calling style) is a new compilation.
    @jax.jit
    def batch_loss(params, batch):
        err = (predict(params, batch["x"]) - batch["y"]) ** 2
        weights = batch.get("weights")
        if weights is None:
            return jnp.mean(err)
        return jnp.sum(weights * err) / jnp.sum(weights)

    def loss(params, batch):
        return batch_loss(params, batch)

    with pytest.raises(GradingFailure, match="compiles once") as failure:
        pytree_structure.grade(loss, batch_loss)
    assert "key sets" in failure.value.seen or "NoneType" in failure.value.seen


def test_rejects_jitted_loss():
    @jax.jit
    def batch_loss(params, batch):
        err = (predict(params, batch["x"]) - batch["y"]) ** 2
        weights = batch.get("weights")
        if weights is None:
            return jnp.mean(err)
        return jnp.sum(weights * err) / jnp.sum(weights)

    with pytest.raises(GradingFailure, match="plain Python function"):
        pytree_structure.grade(batch_loss, batch_loss)


def test_rejects_weights_filled_with_zeros():
    batch_loss = make_batch_loss()

    def loss(params, batch):
        weights = batch.get("weights")
        if weights is None:
            weights = np.zeros_like(batch["y"])
        return batch_loss(params, {"x": batch["x"], "y": batch["y"], "weights": weights})

    with pytest.raises(GradingFailure, match="match the reference") as failure:
        pytree_structure.grade(loss, batch_loss)
    assert "no weights" in failure.value.hint


def test_rejects_only_missing_key_handled():
    # `"weights" not in batch` misses the batches whose weights are None.
    @jax.jit
    def batch_loss(params, batch):
        err = (predict(params, batch["x"]) - batch["y"]) ** 2
        if batch["weights"] is None:
            return jnp.mean(err)
        return jnp.sum(batch["weights"] * err) / jnp.sum(batch["weights"])

    def loss(params, batch):
        weights = batch["weights"] if "weights" in batch else np.ones_like(batch["y"])
        return batch_loss(params, {"x": batch["x"], "y": batch["y"], "weights": weights})

    with pytest.raises(GradingFailure, match="compiles once") as failure:
        pytree_structure.grade(loss, batch_loss)
    assert "NoneType" in failure.value.seen
    assert "None" in failure.value.hint


def test_rejects_forwarded_calling_style():
    batch_loss = make_batch_loss()

    def loss(*args, **kwargs):
        # Tidies the batch, but calls batch_loss the way loss was called.
        if "batch" in kwargs:
            kwargs["batch"] = tidy(kwargs["batch"])
        else:
            args = (args[0], tidy(args[1]))
        return batch_loss(*args, **kwargs)

    def tidy(batch):
        weights = batch.get("weights")
        if weights is None:
            weights = np.ones_like(batch["y"])
        return {"x": batch["x"], "y": batch["y"], "weights": weights}

    with pytest.raises(GradingFailure, match="compiles once") as failure:
        pytree_structure.grade(loss, batch_loss)
    assert "tuple of length" in failure.value.seen
    assert "positionally" in failure.value.hint or "one way" in failure.value.hint


def test_rejects_work_outside_jit():
    batch_loss = make_batch_loss()

    def loss(params, batch):
        weights = batch.get("weights")
        w = np.ones_like(batch["y"]) if weights is None else np.asarray(weights)
        pred = np.asarray(batch["x"]) @ np.asarray(params["w"]) + float(params["b"])
        return np.sum(w * (pred - batch["y"]) ** 2) / np.sum(w)

    with pytest.raises(GradingFailure, match="inside the jitted batch_loss"):
        pytree_structure.grade(loss, batch_loss)


def test_rejects_editing_the_callers_batch():
    batch_loss = make_batch_loss()

    def loss(params, batch):
        if batch.get("weights") is None:
            batch["weights"] = np.ones_like(batch["y"])
        batch.pop("ids", None)
        return batch_loss(params, batch)

    with pytest.raises(GradingFailure, match="caller's batch"):
        pytree_structure.grade(loss, batch_loss)


def test_rejects_integer_fill():
    # Integer ones give the right numbers, but int32[n] is not float32[n]: a new cache key.
    batch_loss = make_batch_loss()

    def loss(params, batch):
        weights = batch.get("weights")
        if weights is None:
            weights = np.ones(len(batch["y"]), dtype=int)
        return batch_loss(params, {"x": batch["x"], "y": batch["y"], "weights": weights})

    with pytest.raises(GradingFailure, match="compiles once") as failure:
        pytree_structure.grade(loss, batch_loss)
    assert "different input types" in failure.value.seen
    assert "dtype" in failure.value.hint
