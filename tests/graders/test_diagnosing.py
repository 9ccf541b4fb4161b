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
def tuple_update(w, batch, lr):  # the batch as a tuple, y first
    return sgd_update(w, {"x": batch[1], "y": batch[0]}, lr)


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


def on_the_host(w, batch, lr):
    """The update computed by NumPy through a callback: right numbers, no work compiled."""
    update = lambda *args: np.asarray(sgd_update(*args), np.float32)  # noqa: E731
    return jax.pure_callback(update, jax.ShapeDtypeStruct(w.shape, w.dtype), w, batch, lr)


def grade(prepare, step=None, *, seed=None):
    prepare = replayer() if prepare is replayer else prepare
    diagnosing.grade(prepare, jax.jit(sgd_update) if step is None else step, seed=seed)


def lr_as(convert, batch=lambda b: b):
    """A prepare_batch returning ``batch(batch)`` and ``convert(lr)``."""
    return lambda b, lr: (batch(b), convert(lr))


def cast(dtype):  # the batch cast to another dtype, lr fixed
    return lr_as(np.float32, lambda b: {k: np.asarray(v, dtype) for k, v in b.items()})


def same(lr):
    return lr


def memo_by_id():  # device copies kept by id(batch["x"]): stale once an id comes back
    cache = {}
    return lambda b, lr: (cache.setdefault(id(b["x"]), jax.tree.map(np.copy, b)), np.float32(lr))


RIGHT = {
    "np.float32": (lr_as(np.float32), None),
    "python float": (lr_as(float), None),
    "lr of shape (1,)": (lr_as(lambda lr: np.array([lr], np.float32)), None),  # a held-out one
    "a float64 batch (the same numbers for JAX)": (cast(np.float64), None),
    "tuple and jnp array": (lr_as(jnp.float32, lambda b: (b["y"], b["x"])), tuple_update),
    "a list [batch, lr]": (lambda b, lr: [b, np.float32(lr)], None),  # unpacks as a tuple does
}


@pytest.mark.parametrize("name", RIGHT)
def test_right_answers_pass(name):
    passes(grade, *RIGHT[name])


ONCE, WEIGHTS, JITTED = diagnosing.ONCE, diagnosing.WEIGHTS, diagnosing.JITTED
NUMBERS = (diagnosing.UPDATES, WEIGHTS)
WEAK = ["lr: f32[] (NumPy float64) now, ~f32[]", "weak type", "np.float32"]
STATIC = ["(static value)", "static argument", "keep lr traced"]
BF16_BATCH = ["w after the update at step ", "batch['x'] reached the step as other", "as it came"]
WRONG = {
    # name: (prepare_batch, fixed_step or None, the check, key words of the verdict)
    "unchanged": (lr_as(same), None, ONCE, WEAK),
    "asarray without dtype": (lr_as(jnp.asarray), None, ONCE, ["lr"]),
    "converts only non-floats": (
        lr_as(lambda lr: lr if isinstance(lr, float) else np.float32(lr)),
        None,
        ONCE,
        [],
    ),
    "static lr": (lr_as(float), jax.jit(sgd_update, static_argnames="lr"), ONCE, STATIC),
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
        lr_as(lambda lr: np.float32(round(float(lr), 3))),
        None,
        NUMBERS,
        ["lr reached the step as", "keep"],
    ),
    "bfloat16 rate": (lr_as(lambda lr: jnp.asarray(lr, jnp.bfloat16)), None, NUMBERS, ["bfloat16"]),
    "float16 rate": (lr_as(np.float16), None, NUMBERS, ["float16[]", "lr's value"]),
    "bfloat16 batch": (cast(jnp.bfloat16), None, NUMBERS, [*BF16_BATCH, "(bfloat16["]),
    "float16 batch (within the tolerance)": (cast(np.float16), None, WEIGHTS, ["(float16["]),
    "constant rate": (lr_as(lambda lr: np.float32(0.05)), None, WEIGHTS, []),
    "replayed trajectory": (replayer, hand_back, WEIGHTS, []),
    "step outside jit": (lr_as(np.float32), sgd_update, JITTED, []),
    "look-alike of jit": (lr_as(same), LooksJitted(), JITTED, []),
    "wrong return shape": (lambda b, lr: b, None, diagnosing.RETURNS, []),
    "(lr, batch), the pair swapped": (
        lambda b, lr: (np.float32(lr), b),
        None,
        diagnosing.RETURNS,
        ["the learning rate first", "wrong order"],
    ),
    "a batch kept by id()": (memo_by_id(), None, WEIGHTS, ["step 0's batch", "by id()"]),
    "the update in a host callback": (
        lr_as(np.float32),
        jax.jit(on_the_host),
        diagnosing.COMPILED,
        ["pure_callback"],
    ),  # a weak spot named in stop 42
}
SEEDED = ("unchanged", "rounds the rate", "bfloat16 batch", "float16 batch (within the tolerance)")


@pytest.mark.parametrize(("name", "seed"), rows(WRONG, SEEDED))
def test_wrong_answers_fail_at_the_check_that_names_them(name, seed):
    prepare, step, check, words = WRONG[name]
    fails(grade, prepare, step, check=check, words=words, seed=seed)


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
        fails(grade, switch_off, check=JIT_ON, words="switched off")
    finally:
        jax.config.update("jax_disable_jit", False)
        for context in contexts:
            context.__exit__(None, None, None)
    assert jax.config.jax_disable_jit is False


def test_the_reference_is_private():
    assert not hasattr(diagnosing, "learning_rate")
    assert not hasattr(diagnosing, "reference")
