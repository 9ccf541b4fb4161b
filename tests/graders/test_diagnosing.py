"""The diagnosing grader passes right answers, however solved, and rejects each kind of
wrong answer at the check that names its real cause."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tables import fails, passes, rows

from jitlab.graders import diagnosing
from jitlab.grading.checks import JIT_ON


def sgd_update(w, batch, lr):
    return w - lr * jax.grad(lambda w: jnp.mean((batch["x"] @ w - batch["y"]) ** 2))(w)


def tolerant_update(w, batch, lr):  # a step that ignores extra keys
    return sgd_update(w, {"x": batch["x"], "y": batch["y"]}, lr)


@jax.jit
def tuple_update(w, batch, lr):
    x, y = batch
    return w - lr * jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)


@jax.jit
def hand_back(w, batch, lr):
    return batch["answer"]


class LooksJitted:
    def __call__(self, *args):
        return sgd_update(*args)

    def lower(self, *args):
        raise AssertionError

    trace = lower

    def clear_cache(self):
        pass


def replayer():
    """A cheat: its own NumPy training from zeros, handed back by a do-nothing step."""
    state = {"w": np.zeros(4, np.float32)}

    def replay(batch, lr):
        x, y = batch["x"], batch["y"]
        state["w"] = state["w"] - np.float32(lr) * (2.0 / len(y)) * x.T @ (x @ state["w"] - y)
        return {"answer": state["w"].astype(np.float32)}, np.float32(lr)

    return replay


def grade(prepare, step=None):
    diagnosing.grade(prepare, jax.jit(sgd_update) if step is None else step)


# ----------------------------------------------------------------- right answers

RIGHT = {
    "np.float32": (lambda b, lr: (b, np.float32(lr)), None),
    "python float": (lambda b, lr: (b, float(lr)), None),
    "tuple and jnp array": (
        lambda b, lr: ((b["x"], b["y"]), jnp.asarray(lr, dtype=jnp.float32)),
        tuple_update,
    ),
}


@pytest.mark.parametrize("name", RIGHT)
def test_right_answers_pass(name):
    passes(grade, *RIGHT[name])


# ----------------------------------------------------------------- wrong answers

ONCE = diagnosing.ONCE
NUMBERS = (diagnosing.UPDATES, diagnosing.WEIGHTS)
WRONG = {
    # name: (prepare_batch, fixed_step or None, the check, key words of the verdict)
    "unchanged": (
        lambda b, lr: (b, lr),
        None,
        ONCE,
        ["lr: f32[] (NumPy float64) now, ~f32[]", "weak type", "np.float32"],
    ),
    "asarray without dtype": (lambda b, lr: (b, jnp.asarray(lr)), None, ONCE, ["lr"]),
    "converts only non-floats": (
        lambda b, lr: (b, lr if isinstance(lr, float) else np.float32(lr)),
        None,
        ONCE,
        [],
    ),
    "static lr": (
        lambda b, lr: (b, float(lr)),
        jax.jit(sgd_update, static_argnames="lr"),
        ONCE,
        ["(static value)", "static argument", "keep lr traced"],
    ),
    "structure changes in the decay": (
        lambda b, lr: (
            {**b, "note": np.float32(0)} if isinstance(lr, np.floating) else b,
            np.float32(lr),
        ),
        jax.jit(tolerant_update),
        ONCE,
        ["note"],
    ),
    "rounds the rate": (
        lambda b, lr: (b, np.float32(round(float(lr), 3))),
        None,
        NUMBERS,
        ["lr reached the step as", "keep"],
    ),
    "bfloat16 rate": (
        lambda b, lr: (b, jnp.asarray(lr, jnp.bfloat16)),
        None,
        NUMBERS,
        ["bfloat16"],
    ),
    "bfloat16 batch": (
        lambda b, lr: ({k: jnp.asarray(v, jnp.bfloat16) for k, v in b.items()}, np.float32(lr)),
        None,
        NUMBERS,
        ["batch['x'] became bfloat16", "keep the batch as it came"],
    ),
    "constant rate": (lambda b, lr: (b, np.float32(0.05)), None, diagnosing.WEIGHTS, []),
    "replayed trajectory": (replayer, hand_back, diagnosing.WEIGHTS, []),
    "step outside jit": (lambda b, lr: (b, np.float32(lr)), sgd_update, diagnosing.JITTED, []),
    "look-alike of jit": (lambda b, lr: (b, lr), LooksJitted(), diagnosing.JITTED, []),
    "wrong return shape": (lambda b, lr: b, None, diagnosing.RETURNS, []),
}


SEEDED = ("unchanged", "rounds the rate", "bfloat16 batch")  # 3 seeds each; the rest: 1 fresh


@pytest.mark.parametrize(("name", "seed"), rows(WRONG, SEEDED))
def test_wrong_answers_fail_at_the_check_that_names_them(name, seed):
    prepare, step, check, words = WRONG[name]
    prepare = replayer() if prepare is replayer else prepare
    found = fails(grade, prepare, step, check=check, seed=seed)
    text = found.seen + " " + found.hint
    assert all(word in text for word in words), found
    if name == "bfloat16 batch":  # the verdict names the step and the output
        assert "w after the update at step " in found.expected


@pytest.mark.parametrize("how", ["config", "context left open"])
def test_jit_switched_off_in_prepare_batch_is_named(how):
    contexts = []

    def switch_off(batch, lr):
        if how == "config":
            jax.config.update("jax_disable_jit", True)
        elif not contexts:
            contexts.append(jax.disable_jit())
            contexts[0].__enter__()
        return batch, np.float32(lr)

    try:
        assert "switched off" in fails(grade, switch_off, check=JIT_ON).seen
    finally:
        jax.config.update("jax_disable_jit", False)
        for context in contexts:
            context.__exit__(None, None, None)
    assert jax.config.jax_disable_jit is False


def test_the_reference_is_private():
    assert not hasattr(diagnosing, "learning_rate")
    assert not hasattr(diagnosing, "reference")
