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
from tables import fails, passes, rows

from jitlab.graders import pytree_structure as G


def predict(params, x):
    return x @ params["w"] + params["b"]


def weighted(params, batch):
    err = (predict(params, batch["x"]) - batch["y"]) ** 2
    return jnp.sum(batch["weights"] * err) / jnp.sum(batch["weights"])


def core(body=weighted):
    """Makes a jitted batch_loss over ``body``, a new function each time."""

    def make():
        def batch_loss(params, batch):  # count_compiles knows a function by its name
            return body(params, batch)

        return jax.jit(batch_loss)

    return make


def tidy(batch):
    weights = batch.get("weights")
    if weights is None:
        weights = np.ones_like(batch["y"])
    return {"x": batch["x"], "y": batch["y"], "weights": weights}


def loss_of(body):
    """Makes, around a batch_loss ``c``, a loss(params, batch) returning ``body(c, params,
    batch)``."""
    return lambda c: lambda params, batch: body(c, params, batch)


same = loss_of(lambda c, p, b: c(p, tidy(b)))


# ------------------------------------------------------------------ right answers


def test_solution_passes():
    solved = namespace("pytree_structure")
    passes(G.grade, solved["loss"], solved["batch_loss"])


def test_a_differently_written_right_answer_passes():
    # A tuple instead of a dict, float64 ones (canonicalised to float32), keyword-only
    # handling through **kwargs, a helper reached through a global, and a Python float
    # returned instead of the array: all within the contract.
    names = {"jax": jax, "jnp": jnp, "np": np, "predict": predict}
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
        names,
    )
    passes(G.grade, names["loss"], names["batch_loss"])
    assert type(names["batch_loss"]).__name__ != "Recorder"  # put back afterwards


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
    return loss_of(lambda c, p, b: c(p, {**tidy(b), "weights": weights(b)}))


def filled(fill):
    """A loss that fills missing weights with ``fill(batch)``."""
    return given(lambda b: fill(b) if b.get("weights") is None else b["weights"])


keeps_ids = loss_of(lambda c, p, b: c(p, {**b, **tidy(b)}))  # the caller's dict is safe
clears_cache = loss_of(lambda c, p, b: c.clear_cache() or c(p, tidy(b)))
jit_per_call = loss_of(lambda c, p, b: jax.jit(lambda q, d: c(q, d))(p, tidy(b)))


def forwards_style(batch_loss):
    def loss(*args, **kwargs):  # tidies the batch, but calls the way loss was called
        if "batch" in kwargs:
            return batch_loss(*args, **{**kwargs, "batch": tidy(kwargs["batch"])})
        return batch_loss(args[0], tidy(args[1]))

    return loss


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


def memoised_by_id(results, copies=True):
    """A loss that keeps, by the batch's id(), its tidied copy (or with ``results`` its
    loss; without ``copies`` the batch's own arrays): the loader reuses its dicts and
    arrays, so what it keeps goes stale."""

    def wrap(batch_loss):
        kept = {}

        def loss(params, batch):
            if id(batch) not in kept:
                tidied = {k: np.array(v) if copies else v for k, v in tidy(batch).items()}
                kept[id(batch)] = batch_loss(params, tidied) if results else tidied
            return kept[id(batch)] if results else batch_loss(params, kept[id(batch)])

        return loss

    return wrap


ONCE, CALL, NUMBERS, SAME = "compiles once", "once per call", "match the reference", "caller's"
C = core()
# fmt: off
WRONG = {  # name: (makes the core, makes the loss around it, the failing check, words in the
    # verdict, words in its hint); a decoy, NumPy outside jit, a look-alike of jit and jit
    # switched off in the wrapper are in test_generic_cheats.py
    "batch passed through": (core(handles_weights_inside), loss_of(lambda c, p, b: c(p, b)), ONCE,
                             ["4 compilations", "batch['"], []),
    "only a missing key handled": (core(only_missing_key), given(lambda b: b.get(
        "weights", np.ones_like(b["y"]))), ONCE, ["2 compilations", "batch['weights']"],
        ["None and no"]),
    "extra keys kept": (C, keeps_ids, ONCE, ["ids"], ["exactly the keys"]),
    "None passed on": (C, given(lambda b: b.get("weights", np.ones_like(b["y"]))), "runs on",
                       ["TypeError", "a batch with weights=None"], ["a None reached"]),
    "calling style forwarded": (C, forwards_style, ONCE, ["keyword", "positional"], ["one way"]),
    "integer fill": (C, filled(lambda b: np.ones(len(b["y"]), np.int32)), ONCE,
                     ["i32[", "f32["], ["dtype"]),
    "weak fill": (C, filled(lambda b: jnp.full(len(b["y"]), 1.0)), ONCE,
                  ["2 compilations", "~f32["], ["weak"]),
    "cache cleared every call": (C, clears_cache, ONCE, ["the same signature as call 1"],
                                 ["clear its cache"]),
    "a new jit per call": (C, jit_per_call, CALL, ["while another function was being traced"],
                           []),
    "jitted loss": (lambda: jax.jit(lambda p, b: weighted(p, tidy(b))), lambda c: c,
                    "plain Python function", [], []),
    "batch_loss not jitted": (lambda: weighted, same, "compiled with jax.jit", [], []),
    "weights filled with zeros": (C, filled(lambda b: np.zeros_like(b["y"])), NUMBERS,
                                  ["no weights"], ["one weight per row"]),
    "a scalar fill": (C, filled(lambda b: np.float32(1.0)), NUMBERS, ["no weights"], ["scalar"]),
    "weights ignored": (core(lambda p, b: jnp.mean((predict(p, b["x"]) - b["y"]) ** 2)), same,
                        NUMBERS, ["weights"], []),
    "caller's batch edited": (C, edits_callers_batch, SAME, [], []),
    "weights normalised in place": (C, normalises_in_place, SAME,
                                    ["batch['weights'] was changed in place"], ["in place"]),
    "tidied batches kept by id()": (C, memoised_by_id(False), NUMBERS, [], ["used before", "id()"]),
    "results kept by id()": (C, memoised_by_id(True), CALL, ["never called batch_loss"],
                             ["an earlier call's loss", "id()"]),  # blind set 2: hint named it
    "the batch's own arrays kept by id()": (C, memoised_by_id(False, copies=False), NUMBERS, [],
                                            ["used before", "id()"]),  # blind set 9
}
# fmt: on
MEMO = (
    "tidied batches kept by id()",
    "results kept by id()",
    "the batch's own arrays kept by id()",
)


@pytest.mark.parametrize(("name", "seed"), rows(WRONG, seeded=MEMO))
def test_a_wrong_answer_fails_its_check(name, seed):
    make_core, make_loss, check, words, hint = WRONG[name]
    batch_loss = make_core()
    loss = make_loss(batch_loss)
    fails(G.grade, loss, batch_loss, check=check, words=words, hint=hint, seed=seed)
