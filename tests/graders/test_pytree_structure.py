"""The pytree-structure grader passes right answers and rejects each kind of wrong one.

The grader calls ``loss`` with every (kind of batch, calling style) pair on every run, so
each wrong answer fails its check every time; the generic cheats are in
test_generic_cheats.py. Every answer builds fresh jitted functions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exercise_cells import namespace

import jitlab.grading.checks as grading_checks
from jitlab.graders import pytree_structure
from jitlab.grading import GradingFailure


def predict(params, x):
    return x @ params["w"] + params["b"]


def weighted(params, batch):
    err = (predict(params, batch["x"]) - batch["y"]) ** 2
    return jnp.sum(batch["weights"] * err) / jnp.sum(batch["weights"])


def make_batch_loss(body=weighted):
    """A jitted core (a fresh object each time), for the wrappers below."""

    def batch_loss(params, batch):  # count_compiles knows a function by its name
        return body(params, batch)

    return jax.jit(batch_loss)


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


# ------------------------------------------------------------------ wrong answers


def handles_weights_inside(params, batch, missing=lambda b: b.get("weights") is None):
    err = (predict(params, batch["x"]) - batch["y"]) ** 2
    if missing(batch):
        return jnp.mean(err)
    return jnp.sum(batch["weights"] * err) / jnp.sum(batch["weights"])


def only_missing_key(params, batch):
    return handles_weights_inside(params, batch, lambda b: b["weights"] is None)


def given(weights):
    """A loss that passes batch_loss x, y and ``weights(batch)``."""
    return lambda c: lambda params, batch: c(params, {**tidy(batch), "weights": weights(batch)})


def filled(fill):
    """A loss that fills missing weights with ``fill(batch)``."""
    return given(lambda b: fill(b) if b.get("weights") is None else b["weights"])


def keeps_extra_keys(batch_loss):
    # a copy, so the caller's dict is safe, but "ids" rides along
    return lambda params, batch: batch_loss(params, {**batch, **tidy(batch)})


def forwards_style(batch_loss):
    def loss(*args, **kwargs):  # tidies the batch, but calls the way loss was called
        if "batch" in kwargs:
            return batch_loss(*args, **{**kwargs, "batch": tidy(kwargs["batch"])})
        return batch_loss(args[0], tidy(args[1]))

    return loss


def after_a_real_call(answer):
    return lambda c: lambda params, batch: c(params, tidy(batch)) and answer(params, batch)


def edits_callers_batch(batch_loss):
    def loss(params, batch):
        if batch.get("weights") is None:
            batch["weights"] = np.ones_like(batch["y"])
        batch.pop("ids", None)
        return batch_loss(params, batch)

    return loss


def normalises_in_place(batch_loss):
    def loss(params, batch):  # the loss is unchanged: a weighted mean ignores the scale
        tidy_batch = tidy(batch)
        tidy_batch["weights"] /= tidy_batch["weights"].sum()
        return batch_loss(params, tidy_batch)

    return loss


def core(body=weighted):
    return lambda: make_batch_loss(body)


same = make_loss
WRONG = {
    # name: (makes the core, makes the loss around it, the failing check, words in the
    # verdict); a decoy, NumPy outside jit, a look-alike of jit and jit switched off in
    # the wrapper are in test_generic_cheats.py
    "batch passed through": (
        core(handles_weights_inside),
        lambda c: lambda params, batch: c(params, batch),
        "compiles once",
        ("4 compilations", "batch['"),
    ),
    "only a missing key handled": (
        core(only_missing_key),
        given(lambda b: b["weights"] if "weights" in b else np.ones_like(b["y"])),
        "compiles once",
        ("2 compilations", "batch['weights']", "None and no"),
    ),
    "extra keys kept": (core(), keeps_extra_keys, "compiles once", ("ids", "exactly the keys")),
    "calling style forwarded": (
        core(),
        forwards_style,
        "compiles once",
        ("keyword", "positional", "one way"),
    ),
    "integer fill": (
        core(),
        filled(lambda b: np.ones(len(b["y"]), np.int32)),
        "compiles once",
        ("i32[", "f32[", "dtype"),
    ),
    "weak fill": (
        core(),
        filled(lambda b: jnp.full(len(b["y"]), 1.0)),
        "compiles once",
        ("2 compilations", "~f32[", "weak"),
    ),
    "cache cleared every call": (
        core(),
        lambda c: lambda params, batch: c.clear_cache() or c(params, tidy(batch)),
        "compiles once",
        ("the same signature as call 1", "clear its cache"),
    ),
    "NumPy answer after a real call": (
        core(),
        after_a_real_call(lambda p, b: jnp.asarray(numpy_loss(p, b), jnp.float32)),
        "returns what batch_loss computed",
        "",
    ),
    "the grader's reference": (
        core(),
        after_a_real_call(pytree_structure._reference_loss),
        "returns what batch_loss computed",
        "",
    ),
    "a new jit per call": (
        core(),
        lambda c: lambda params, batch: jax.jit(lambda q, d: c(q, d))(params, tidy(batch)),
        "once per call",
        "while another function was being traced",
    ),
    "jitted loss": (
        lambda: jax.jit(lambda params, batch: weighted(params, tidy(batch))),
        lambda c: c,
        "plain Python function",
        "",
    ),
    "batch_loss not jitted": (lambda: weighted, same, "compiled with jax.jit", ""),
    "weights filled with zeros": (
        core(),
        filled(lambda b: np.zeros_like(b["y"])),
        "match the reference",
        "no weights",
    ),
    "weights ignored": (
        core(lambda p, b: jnp.mean((predict(p, b["x"]) - b["y"]) ** 2)),
        same,
        "match the reference",
        "weights",
    ),
    "caller's batch edited": (core(), edits_callers_batch, "caller's arguments", ""),
    "weights normalised in place": (
        core(),
        normalises_in_place,
        "caller's arguments",
        ("weights", "in place"),
    ),
}


@pytest.mark.parametrize("name", WRONG)
def test_a_wrong_answer_fails_its_check(name):
    make_core, make_wrapper, check, words = WRONG[name]
    batch_loss = make_core()
    failure = grade_failure(make_wrapper(batch_loss), batch_loss, check)
    text = str(failure)
    assert all(w in text for w in ([words] if isinstance(words, str) else words)), text


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rejects_batches_memoised_by_id(seed, monkeypatch):
    # The loader reuses its dicts and arrays: a copy kept by id() goes stale.
    monkeypatch.setattr(grading_checks, "SEED", int(seed))
    batch_loss, kept = make_batch_loss(), {}

    def loss(params, batch):
        if id(batch) not in kept:
            kept[id(batch)] = {k: np.array(v) for k, v in tidy(batch).items()}
        return batch_loss(params, kept[id(batch)])

    failure = grade_failure(loss, batch_loss, "match the reference")
    assert "reused" in failure.hint and "id()" in failure.hint


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rejects_results_memoised_by_id(seed, monkeypatch):
    monkeypatch.setattr(grading_checks, "SEED", int(seed))
    batch_loss, kept = make_batch_loss(), {}

    def loss(params, batch):
        if id(batch) not in kept:
            kept[id(batch)] = batch_loss(params, tidy(batch))
        return kept[id(batch)]

    grade_failure(loss, batch_loss, "once per call")
