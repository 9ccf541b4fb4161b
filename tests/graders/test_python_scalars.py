"""The python_scalars grader passes right answers and rejects each kind of wrong one.

Every answer builds its own jitted step, so no test depends on what another compiled.
Each wrong answer fails the check in its row, with the key words of its verdict, on every
run: the grader draws every kind of learning rate at least twice, and a repeated value.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exercise_cells import namespace
from tables import fails, passes, rows

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


def make_train(step_fn, convert=to_float32, init=good_init, batch_of=lambda b: b, first=0):
    def train(params, batches, schedule):
        state = init(params)
        for step, batch in enumerate(batches, first):
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


def solution():
    solved = namespace("python_scalars")
    return solved["init"], solved["sgd_step"], solved["train"]


def python_float_lr_and_numpy_init():
    # Every lr a Python float (~float32[], one key); init from a NumPy float32 (strong).
    def init(params):
        return {"params": params, "avg_loss": np.float32(0.0)}

    return init, (step := make_step()), make_train(step, float, init)


NOTEBOOK = """
@jax.jit
def sgd_step(state, batch, lr):
    return update(state, batch, lr)
@jax.jit
def init(params):
    return {'params': params, 'avg_loss': jnp.float32(0)}
def train(params, batches, schedule):
    state = init(params)
    for i in range(len(batches)):
        lr = np.float32(schedule(step=i))
        state = sgd_step(state=state, batch=batches[i], lr=lr)
    return state
"""


def test_right_answers_pass():
    passes(python_scalars.grade, *solution())
    passes(python_scalars.grade, *python_float_lr_and_numpy_init())
    # As in a notebook: train finds sgd_step as a global and calls it, and schedule, by
    # keyword; init is itself jitted; lr becomes a NumPy float32.
    names = {"jax": jax, "jnp": jnp, "np": np, "update": update}
    exec(NOTEBOOK, names)
    passes(python_scalars.grade, names["init"], names["sgd_step"], names["train"])
    assert type(names["sgd_step"]).__name__ != "Recorder"  # the grader put it back


def test_a_step_that_donates_a_state_of_its_own_passes():
    # Donation is fine where init hands the step copies: the caller's params survive.
    step = make_step(donate_argnums=0)

    def init(params):
        return {"params": jax.tree.map(jnp.copy, params), "avg_loss": jnp.zeros((), jnp.float32)}

    passes(python_scalars.grade, init, step, make_train(step, init=init))


# ------------------------------------------------------------------ wrong answers


def answer(convert=to_float32, init=good_init, step=None, train=None, **train_options):
    """A factory of (init, sgd_step, train): a fresh step unless given, and train's
    conversion of lr, its init and its batches as given, or ``train(step)`` itself."""

    def build():
        chosen = step() if step else make_step()
        made = train(chosen) if train else make_train(chosen, convert, init, **train_options)
        return init, chosen, made

    return build


def cleared(step):
    return make_train(lambda *a: (step.clear_cache(), step(*a))[1])  # "to be safe"


def mixed_style(step):
    calls = itertools.count()
    return make_train(lambda s, b, lr: step(s, b, lr=lr) if next(calls) % 2 else step(s, b, lr))


def decoy_then_numpy(step):
    def train(params, batches, schedule):
        step(good_init(params), batches[0], to_float32(schedule(0)))
        return reference(params, batches, schedule)

    return train


def reference_after_real_calls(step):
    real = make_train(step)  # every call made, the outputs thrown away
    return lambda p, b, s: (real(p, b, s), reference(p, b, s))[1]


def fed_from_a_numpy_state(step):
    def train(params, batches, schedule):
        state = good_init(params)
        for i, batch in enumerate(batches):
            step(state, batch, to_float32(schedule(i)))
            numpy_state = python_scalars._reference_step(state, batch, float(schedule(i)))
            state = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), numpy_state)
        return step(state, batches[-1], to_float32(0.0))

    return train


def edits_the_callers_params(step):
    def train(params, batches, schedule):
        state = make_train(step)(params, batches, schedule)
        params.update(state["params"])  # "keep the caller up to date"
        return state

    return train


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


def init_of(avg_loss):
    return answer(init=lambda params: {"params": params, "avg_loss": avg_loss})


def converted_inside(state, batch, lr):
    return update(state, batch, jnp.asarray(lr, jnp.float32))


def resumed(step):
    """A train that goes on from the state the last call left (kept in a default)."""

    def train(params, batches, schedule, kept={}):  # noqa: B006
        state = kept.get("state") or good_init(params)
        for i, batch in enumerate(batches):
            state = step(state, batch, to_float32(schedule(i)))
        kept["state"] = state
        return state

    return train


ONCE, TYPES, BATCH = "compiles once", "the types", "once per batch"
DONATED = answer(step=lambda: make_step(donate_argnums=0))  # init holds the caller's params
RAW, INT = answer(lambda v: v), answer(lambda v: jnp.asarray(v, jnp.int32))
STATIC = answer(float, step=lambda: make_step(static_argnames="lr"))
INSIDE = answer(lambda v: v, step=lambda: jax.jit(converted_inside))
BF16_LR = answer(lambda v: jnp.asarray(v, jnp.bfloat16))
BF16_BATCH = answer(batch_of=lambda batch: tuple(a.astype(jnp.bfloat16) for a in batch))
WEAK_STATE = answer(train=lambda s: make_train(s, init=lambda p: {"params": p, "avg_loss": 0.0}))
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
    "cleared cache": (answer(train=cleared), ONCE, ["cache was cleared"], ["clear its"]),
    "mixed style": (answer(train=mixed_style), ONCE, ["lr: keyword now"], ["one way"]),
    "float init": (init_of(0.0), TYPES, ["~float32[] from init", "float32[] after"], ["weak"]),
    "asarray init": (init_of(jnp.asarray(0.0)), TYPES, ["~float32[] from init"], ["weak"]),
    "int init": (init_of(0), TYPES, ["~int32[] from init"], ["weak"]),
    "jnp.array(0) init": (init_of(jnp.array(0)), TYPES, ["~int32[] from init"],
                          ["weakly typed int32", "an integer"]),  # blind set 2
    "bf16 init": (init_of(jnp.zeros((), jnp.bfloat16)), TYPES, ["bfloat16[] from"], ["dtype"]),
    "None init": (init_of(None), ZERO, ["None"], []),
    "init at one": (init_of(jnp.ones((), jnp.float32)), ZERO, [], []),
    "weak state in train": (WEAK_STATE, ONCE, ["2 compilations",
                            "state['avg_loss']: f32[] now, ~f32[]"], ["init"]),
    "numpy loop": (answer(train=lambda s: reference), BATCH, ["0 call(s) of sgd_step"], []),
    "numpy + decoy": (answer(train=decoy_then_numpy), BATCH, ["1 call(s) of sgd_step"], []),
    "reference after calls": (answer(train=reference_after_real_calls), "returns the state", [],
                              []),
    "numpy state": (answer(train=fed_from_a_numpy_state), BATCH, [], []),
    "new jit": (answer(train=lambda s: make_train(lambda *a: jax.jit(update)(*a))), BATCH, [], []),
    "inside a jit": (answer(train=lambda s: make_train(lambda *a: jax.jit(lambda *b: s(*b))(*a))),
                     BATCH, [], ["another function was being"]),
    "reversed": (answer(train=lambda s: lambda p, b, f: make_train(s)(p, b[::-1], f)), BATCH,
                 ["another batch"], []),
    "edits params": (answer(train=edits_the_callers_params), "caller's arguments", [], []),
    "unjitted": (answer(float, step=lambda: update), JITTED, [], []),
    "steps from 1": (answer(first=1), "train runs", ["schedule(16)"], ["count from 0"]),
    "ascent": (step_of(gradient_ascent), "one sgd_step matches", [], []),
    "late average": (step_of(average_after_the_update), "one sgd_step", [], ["before the"]),
    "swapped average": (step_of(swapped_average), "one sgd_step", ["avg_loss ="], ["0.9 *"]),
    "resumes": (answer(train=resumed), FINAL, ["second call of train"], ["init(params)"]),
    "donated state": (DONATED, "caller's arguments", ["params['w']", "deleted"], ["donate"]),
}
# fmt: on


DRAWN = ("bfloat16 batch", "bfloat16 lr", "swapped average")  # 3 seeds each


@pytest.mark.parametrize(("answer", "seed"), rows(WRONG, DRAWN))
def test_wrong_answer_is_rejected_and_named(answer, seed):
    make, check, seen, hint = WRONG[answer]
    found = fails(python_scalars.grade, *make(), check=check, hint=hint, seed=seed)
    assert all(words in found.seen for words in seen), found
