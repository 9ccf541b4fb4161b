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
    def loss(w):
        return jnp.mean((batch["x"] @ w - batch["y"]) ** 2)

    return w - lr * jax.grad(loss)(w)


# A fresh jitted function per test, so no test sees another's cache.
def make_step():
    return jax.jit(sgd_update)


def unchanged(batch, lr):
    return batch, lr


def as_float32(batch, lr):
    return batch, np.float32(lr)


# ----------------------------------------------------------------- right answers


def test_reference_solution_passes():
    diagnosing.grade(as_float32, make_step())


def test_python_float_everywhere_also_passes():
    def as_python_float(batch, lr):
        return batch, float(lr)

    diagnosing.grade(as_python_float, make_step())


def test_a_jax_array_and_a_step_with_its_own_signature_pass():
    # Solved differently: the batch becomes a tuple, lr a jnp float32 array, and the
    # step is rewritten for that signature.
    def as_tuple(batch, lr):
        return (batch["x"], batch["y"]), jnp.asarray(lr, dtype=jnp.float32)

    @jax.jit
    def tuple_step(w, batch, lr):
        x, y = batch
        return w - lr * jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)

    diagnosing.grade(as_tuple, tuple_step)


# ----------------------------------------------------------------- wrong answers


@pytest.mark.parametrize("repeat", range(5))
def test_rejects_unchanged_code_and_names_the_two_kinds_of_lr(repeat):
    with pytest.raises(GradingFailure, match="one compilation for the whole run") as info:
        diagnosing.grade(unchanged, make_step())
    assert "lr reached fixed_step as 2 types" in info.value.seen
    assert "~float32[]" in info.value.seen and "weak type" in info.value.seen
    assert "np.float32(lr)" in info.value.hint


def test_rejects_asarray_without_dtype():
    # jnp.asarray keeps a Python float weak and a NumPy float64 strong: still two keys.
    def as_array(batch, lr):
        return batch, jnp.asarray(lr)

    with pytest.raises(GradingFailure, match="one compilation for the whole run") as info:
        diagnosing.grade(as_array, make_step())
    assert "lr reached fixed_step as 2 types" in info.value.seen


def test_rejects_a_rule_that_converts_only_numpy_scalars():
    # np.float64 is a subclass of float: this converts nothing, and the floor at the end
    # brings a Python float back after the NumPy ones.
    def only_non_floats(batch, lr):
        return batch, lr if isinstance(lr, float) else np.float32(lr)

    with pytest.raises(GradingFailure, match="one compilation for the whole run"):
        diagnosing.grade(only_non_floats, make_step())


def test_rejects_static_learning_rate_and_says_static():
    step = jax.jit(sgd_update, static_argnames="lr")

    def as_float(batch, lr):
        return batch, float(lr)

    with pytest.raises(GradingFailure, match="one compilation for the whole run") as info:
        diagnosing.grade(as_float, step)
    assert "every call passed the same argument types" in info.value.seen
    assert "static argument" in info.value.hint and "keep lr traced" in info.value.hint
    assert "lr took" in info.value.seen


def test_rejects_a_batch_whose_structure_changes():
    def note_the_decay(batch, lr):
        if isinstance(lr, np.floating):  # during the decay: one more key
            batch = {**batch, "note": np.float32(0)}
        return batch, np.float32(lr)

    @jax.jit
    def tolerant_step(w, batch, lr):
        return sgd_update(w, {"x": batch["x"], "y": batch["y"]}, lr)

    with pytest.raises(GradingFailure, match="one compilation for the whole run") as info:
        diagnosing.grade(note_the_decay, tolerant_step)
    assert "different structures" in info.value.seen
    assert "same keys" in info.value.hint


@pytest.mark.parametrize("repeat", range(5))
def test_rejects_a_fix_that_rounds_the_rate(repeat):
    def rounded(batch, lr):
        return batch, np.float32(round(float(lr), 3))

    with pytest.raises(GradingFailure, match="learning rate|match the reference"):
        diagnosing.grade(rounded, make_step())


def test_rejects_a_fix_that_changes_the_rate_to_bfloat16():
    def as_bfloat16(batch, lr):
        return batch, jnp.asarray(lr, jnp.bfloat16)

    with pytest.raises(GradingFailure, match="learning rate|match the reference"):
        diagnosing.grade(as_bfloat16, make_step())


def test_rejects_a_constant_rate():
    def constant(batch, lr):
        return batch, np.float32(0.05)

    with pytest.raises(GradingFailure, match="match the reference"):
        diagnosing.grade(constant, make_step())


def test_rejects_a_replayed_trajectory_from_a_start_it_cannot_know():
    # Cheat: prepare_batch runs its own NumPy training from zeros (as the exercise's
    # driver does) and a do-nothing jitted step hands back its answer.
    state = {"w": np.zeros(4, np.float32)}

    def replay(batch, lr):
        x, y = batch["x"], batch["y"]
        grad = (2.0 / len(y)) * x.T @ (x @ state["w"] - y)
        state["w"] = (state["w"] - np.float32(lr) * grad).astype(np.float32)
        return {"answer": state["w"].copy()}, np.float32(lr)

    @jax.jit
    def hand_back(w, batch, lr):
        return batch["answer"]

    with pytest.raises(GradingFailure, match="match the reference"):
        diagnosing.grade(replay, hand_back)


def test_rejects_a_step_outside_jit():
    with pytest.raises(GradingFailure, match="compiled with jax.jit"):
        diagnosing.grade(as_float32, sgd_update)


def test_rejects_a_look_alike_of_a_jitted_function():
    class LooksJitted:
        def __call__(self, *args):
            return sgd_update(*args)

        def lower(self, *args):
            raise AssertionError

        def trace(self, *args):
            raise AssertionError

        def clear_cache(self):
            pass

    with pytest.raises(GradingFailure, match="compiled with jax.jit"):
        diagnosing.grade(as_float32, LooksJitted())


def test_rejects_jit_switched_off_by_config_and_says_so():
    def switch_off(batch, lr):
        jax.config.update("jax_disable_jit", True)
        return batch, np.float32(lr)

    try:
        with pytest.raises(GradingFailure, match=JIT_ON) as info:
            diagnosing.grade(switch_off, make_step())
        assert "switched off" in info.value.seen
    finally:
        jax.config.update("jax_disable_jit", False)


def test_rejects_a_disable_jit_context_left_open_and_says_so():
    contexts = []

    def leave_open(batch, lr):
        if not contexts:
            contexts.append(jax.disable_jit())
            contexts[0].__enter__()
        return batch, np.float32(lr)

    try:
        with pytest.raises(GradingFailure, match=JIT_ON) as info:
            diagnosing.grade(leave_open, make_step())
        assert "switched off" in info.value.seen
    finally:
        for context in contexts:
            context.__exit__(None, None, None)
    assert jax.config.jax_disable_jit is False


def test_rejects_a_wrong_return_shape():
    def only_batch(batch, lr):
        return batch

    with pytest.raises(GradingFailure, match=r"returns \(batch, lr\)"):
        diagnosing.grade(only_batch, make_step())


def test_the_reference_is_private():
    assert not hasattr(diagnosing, "learning_rate")
    assert not hasattr(diagnosing, "reference")
