"""The python_scalars grader passes right answers and rejects each kind of wrong one.

Every answer builds its own jitted step, so no test depends on what another compiled.
Each wrong answer fails the check in its row, with the key words of its verdict, on every
run: the grader draws every kind of learning rate at least twice, and a repeated value.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exercise_cells import namespace
from tables import fails, rows

from jitlab.graders import python_scalars


def loss(params, batch):
    inputs, targets = batch
    return jnp.mean((inputs @ params["w"] + params["b"] - targets) ** 2)


def update(state, batch, lr):
    value, grads = jax.value_and_grad(loss)(state["params"], batch)
    params = jax.tree.map(lambda p, g: p - lr * g, state["params"], grads)
    return {"params": params, "avg_loss": 0.9 * state["avg_loss"] + 0.1 * value}


def make_step(**jit_options):
    """A fresh, correct jitted step (a new object per answer: a cold cache)."""

    def sgd_step(state, batch, lr):
        return update(state, batch, lr)

    return jax.jit(sgd_step, **jit_options)


def good_init(params):
    return {"params": params, "avg_loss": jnp.zeros((), jnp.float32)}


def to_float32(value):
    return jnp.asarray(value, jnp.float32)


def make_train(step_fn, convert=to_float32, init=good_init, batch_of=lambda batch: batch):
    def train(params, batches, schedule):
        state = init(params)
        for step, batch in enumerate(batches):
            state = step_fn(state, batch_of(batch), convert(schedule(step)))
        return state

    return train


def reference(params, batches, schedule):
    """The grader's private reference, reached the way a determined learner would."""
    state = {"params": params, "avg_loss": 0.0}
    for step, batch in enumerate(batches):
        state = python_scalars._reference_step(state, batch, float(schedule(step)))
    return state


# ------------------------------------------------------------------ right answers


def test_solution_passes(capsys):
    solved = namespace("python_scalars")
    python_scalars.grade(solved["init"], solved["sgd_step"], solved["train"])
    assert "All checks passed" in capsys.readouterr().out


def test_python_float_lr_and_numpy_init_pass():
    # Every lr a Python float (~float32[], one key); init from a NumPy float32 (strong).
    sgd_step = make_step()

    def init(params):
        return {"params": params, "avg_loss": np.float32(0.0)}

    python_scalars.grade(init, sgd_step, make_train(sgd_step, float, init))


def test_notebook_style_globals_keywords_and_a_jitted_init_pass():
    # As in a notebook: train finds sgd_step as a global and calls it, and schedule, by
    # keyword; init is itself jitted; lr becomes a NumPy float32.
    names = {"jax": jax, "jnp": jnp, "np": np, "update": update}
    exec(
        "@jax.jit\n"
        "def sgd_step(state, batch, lr):\n"
        "    return update(state, batch, lr)\n"
        "@jax.jit\n"
        "def init(params):\n"
        "    return {'params': params, 'avg_loss': jnp.float32(0)}\n"
        "def train(params, batches, schedule):\n"
        "    state = init(params)\n"
        "    for i in range(len(batches)):\n"
        "        lr = np.float32(schedule(step=i))\n"
        "        state = sgd_step(state=state, batch=batches[i], lr=lr)\n"
        "    return state\n",
        names,
    )
    python_scalars.grade(names["init"], names["sgd_step"], names["train"])
    assert type(names["sgd_step"]).__name__ != "Recorder"  # the grader put it back


# ------------------------------------------------------------------ wrong answers


def answer(convert=to_float32, init=good_init, step=None, **train_options):
    """A factory of (init, sgd_step, train): a fresh step unless given, and train's
    conversion of lr, its init and its batches as given."""

    def build():
        chosen = step() if step else make_step()
        return init, chosen, make_train(chosen, convert, init, **train_options)

    return build


def bfloat16(batch):
    return tuple(a.astype(jnp.bfloat16) for a in batch)


def converted_inside(state, batch, lr):
    return update(state, batch, jnp.asarray(lr, jnp.float32))


def cleared_every_step():
    step = make_step()

    def train(params, batches, schedule):
        state = good_init(params)
        for i, batch in enumerate(batches):
            step.clear_cache()  # "to be safe"
            state = step(state, batch, to_float32(schedule(i)))
        return state

    return good_init, step, train


def mixed_calling_style():
    step = make_step()

    def train(params, batches, schedule):
        state = good_init(params)
        for i, batch in enumerate(batches):
            lr = to_float32(schedule(i))
            state = step(state, batch, lr=lr) if i % 2 else step(state, batch, lr)
        return state

    return good_init, step, train


def init_of(avg_loss):
    return answer(init=lambda params: {"params": params, "avg_loss": avg_loss})


def train_builds_a_weak_state():
    step = make_step()
    return good_init, step, make_train(step, init=lambda p: {"params": p, "avg_loss": 0.0})


def numpy_loop():
    def train(params, batches, schedule):
        return reference(params, batches, schedule)

    return good_init, make_step(), train


def numpy_with_a_decoy():
    step = make_step()

    def train(params, batches, schedule):
        step(good_init(params), batches[0], to_float32(schedule(0)))
        return reference(params, batches, schedule)

    return good_init, step, train


def reference_after_real_calls():
    step = make_step()
    real = make_train(step)

    def train(params, batches, schedule):
        real(params, batches, schedule)  # every call made, the outputs thrown away
        return reference(params, batches, schedule)

    return good_init, step, train


def fed_from_a_numpy_state():
    step = make_step()

    def train(params, batches, schedule):
        state = good_init(params)
        for i, batch in enumerate(batches):
            step(state, batch, to_float32(schedule(i)))
            numpy_state = python_scalars._reference_step(state, batch, float(schedule(i)))
            state = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), numpy_state)
        return step(state, batches[-1], to_float32(0.0))

    return good_init, step, train


def new_jit_each_step():
    return good_init, make_step(), make_train(lambda *a: jax.jit(update)(*a))


def only_inside_another_jit():
    step = make_step()
    return good_init, step, make_train(lambda *a: jax.jit(lambda s, b, lr: step(s, b, lr))(*a))


def batches_reversed():
    step = make_step()

    def train(params, batches, schedule):
        return make_train(step)(params, batches[::-1], schedule)

    return good_init, step, train


def edits_the_callers_params():
    step = make_step()
    real = make_train(step)

    def train(params, batches, schedule):
        state = real(params, batches, schedule)
        params.update(state["params"])  # "keep the caller up to date"
        return state

    return good_init, step, train


def unjitted_step():
    return good_init, update, make_train(update, float)


def step_of(body):
    return answer(step=lambda: jax.jit(body))


def gradient_ascent(state, batch, lr):
    grads = jax.grad(loss)(state["params"], batch)
    params = jax.tree.map(lambda p, g: p + lr * g, state["params"], grads)
    return {"params": params, "avg_loss": state["avg_loss"]}


def average_after_the_update(state, batch, lr):
    new = update(state, batch, lr)
    after = loss(new["params"], batch)
    return {"params": new["params"], "avg_loss": 0.9 * state["avg_loss"] + 0.1 * after}


def swapped_average(state, batch, lr):
    new = update(state, batch, lr)
    value = loss(state["params"], batch)
    return {"params": new["params"], "avg_loss": 0.1 * state["avg_loss"] + 0.9 * value}


ONCE, TYPES, BATCH = "compiles once", "the types", "once per batch"
RAW, INT = answer(lambda v: v), answer(lambda v: jnp.asarray(v, jnp.int32))
STATIC, INSIDE = (
    answer(float, step=lambda: make_step(static_argnames="lr")),
    answer(lambda v: v, step=lambda: jax.jit(converted_inside)),
)
BF16_LR, BF16_BATCH = answer(lambda v: jnp.asarray(v, jnp.bfloat16)), answer(batch_of=bfloat16)
FINAL, ZERO, JITTED = "final state", "zero average", "compiled with jax.jit"
# fmt: off
WRONG = {  # answer: (the check it fails, words in seen, words in hint)
    "lr kept raw": (RAW, ONCE, ["3 compilations", "lr: "], ["abstract", "~int32[]"]),
    "asarray, no dtype": (answer(jnp.asarray), ONCE, ["lr: "], ["abstract values"]),
    "converted in jit": (INSIDE, ONCE, [], ["too late"]),
    "static lr": (STATIC, ONCE, ["(static value)"], ["static"]),
    "int lr": (INT, FINAL, [], ["an integer"]),
    "bfloat16 lr": (BF16_LR, FINAL, ["state differ"], ["16-bit"]),
    "bfloat16 batch": (BF16_BATCH, BATCH, ["bfloat16[", "passed"], ["cast of the batch"]),
    "cleared cache": (cleared_every_step, ONCE, ["cache was cleared"], ["clear its"]),
    "mixed style": (mixed_calling_style, ONCE, ["lr: keyword now"], ["one way"]),
    "float init": (init_of(0.0), TYPES, ["~float32[] from init", "float32[] after"], ["weak"]),
    "asarray init": (init_of(jnp.asarray(0.0)), TYPES, ["~float32[] from init"], ["weak"]),
    "int init": (init_of(0), TYPES, ["~int32[] from init"], ["weak"]),
    "bf16 init": (init_of(jnp.zeros((), jnp.bfloat16)), TYPES, ["bfloat16[] from"], ["dtype"]),
    "None init": (init_of(None), ZERO, ["None"], []),
    "init at one": (init_of(jnp.ones((), jnp.float32)), ZERO, [], []),
    "weak state in train": (train_builds_a_weak_state, ONCE,
                            ["2 compilations", "state['avg_loss']: f32[] now, ~f32[]"], ["init"]),
    "numpy loop": (numpy_loop, BATCH, ["0 call(s) of sgd_step"], []),
    "numpy + decoy": (numpy_with_a_decoy, BATCH, ["1 call(s) of sgd_step"], []),
    "reference after calls": (reference_after_real_calls, "returns the state", [], []),
    "numpy state": (fed_from_a_numpy_state, BATCH, [], []),
    "new jit": (new_jit_each_step, BATCH, [], []),
    "inside a jit": (only_inside_another_jit, BATCH, [], ["another function was being"]),
    "reversed": (batches_reversed, BATCH, ["another batch"], []),
    "edits params": (edits_the_callers_params, "caller's arguments", [], []),
    "unjitted": (unjitted_step, JITTED, [], []),
    "ascent": (step_of(gradient_ascent), "one sgd_step matches", [], []),
    "late average": (step_of(average_after_the_update), "one sgd_step", [], ["before the"]),
    "swapped average": (step_of(swapped_average), "one sgd_step", ["avg_loss ="], ["0.9 *"]),
}
# fmt: on


DRAWN = ("bfloat16 batch", "bfloat16 lr", "swapped average")  # 3 seeds each


@pytest.mark.parametrize(("answer", "seed"), rows(WRONG, DRAWN))
def test_wrong_answer_is_rejected_and_named(answer, seed):
    make, check, seen, hint = WRONG[answer]
    found = fails(python_scalars.grade, *make(), check=check, hint=hint, seed=seed)
    assert all(words in found.seen for words in seen), found
