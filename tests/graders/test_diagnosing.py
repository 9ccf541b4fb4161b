"""The diagnosing grader passes right answers, however solved, and rejects each kind of
wrong answer at the check that names its real cause."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.graders import diagnosing
from jitlab.grading import GradingFailure
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


def grade(prepare, step=None, seed=None, monkeypatch=None):
    if seed is not None:
        monkeypatch.setenv("JITLAB_SEED", str(seed))
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
    grade(*RIGHT[name])


# ----------------------------------------------------------------- wrong answers

ONCE = diagnosing.ONCE
NUMBERS = "learning rate|match the reference"
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
    "constant rate": (lambda b, lr: (b, np.float32(0.05)), None, "match the reference", []),
    "replayed trajectory": (replayer, hand_back, "match the reference", []),
    "step outside jit": (lambda b, lr: (b, np.float32(lr)), sgd_update, "compiled with jax", []),
    "look-alike of jit": (lambda b, lr: (b, lr), LooksJitted(), "compiled with jax", []),
    "wrong return shape": (lambda b, lr: b, None, r"returns \(batch, lr\)", []),
}


SEEDED = ("unchanged", "rounds the rate", "bfloat16 batch")  # 3 seeds each; the rest: 1 fresh


@pytest.mark.parametrize(
    ("name", "seed"), [(n, s) for n in WRONG for s in (range(3) if n in SEEDED else [None])]
)
def test_wrong_answers_fail_at_the_check_that_names_them(name, seed, monkeypatch):
    prepare, step, check, words = WRONG[name]
    if prepare is replayer:
        prepare = replayer()
    with pytest.raises(GradingFailure, match=check) as info:
        grade(prepare, step, seed, monkeypatch)
    text = info.value.seen + " " + info.value.hint
    assert all(word in text for word in words), info.value


def test_the_verdict_names_the_step_and_the_output(monkeypatch):
    with pytest.raises(GradingFailure) as info:
        grade(WRONG["bfloat16 batch"][0], None, 0, monkeypatch)
    assert "w after the update at step 0" in info.value.expected


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
        with pytest.raises(GradingFailure, match=JIT_ON) as info:
            grade(switch_off)
        assert "switched off" in info.value.seen
    finally:
        jax.config.update("jax_disable_jit", False)
        for context in contexts:
            context.__exit__(None, None, None)
    assert jax.config.jax_disable_jit is False


def test_the_reference_is_private():
    assert not hasattr(diagnosing, "learning_rate")
    assert not hasattr(diagnosing, "reference")
