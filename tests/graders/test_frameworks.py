"""The frameworks grader passes right answers and rejects each wrong one at its check."""

from __future__ import annotations

import functools
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from tables import fails, passes, rows

from jitlab.course import load_course
from jitlab.graders import frameworks as fw
from jitlab.grading import JIT_ON
from jitlab.grading.verdict import Check


def mse(model, x, y):
    return jnp.mean((model(x) - y) ** 2)


OPTIMIZER = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)


def init(model, learning_rate):
    graphdef, params = nnx.split(model)
    opt_state = OPTIMIZER.init(params)
    opt_state.hyperparams["learning_rate"] = jnp.asarray(learning_rate, jnp.float32)
    return graphdef, params, opt_state


def _step(graphdef, params, opt_state, x, y):
    loss, grads = jax.value_and_grad(lambda p: mse(nnx.merge(graphdef, p), x, y))(params)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


train_step = jax.jit(_step)


def loop_with(init_fn, step):
    """A fit that calls ``step`` once per batch, as the exercise asks."""

    def fit(model, learning_rate, batches):
        graphdef, params, opt_state = init_fn(model, learning_rate)
        losses = []
        for x, y in batches:
            params, opt_state, loss = step(graphdef, params, opt_state, x, y)
            losses.append(loss)
        return jnp.stack(losses)

    return fit


fit = loop_with(init, train_step)


def numpy_fit(model, learning_rate, batches):
    """The float64 reference written into a learner's fit: right numbers, no jit at all."""
    in_numpy = [(np.asarray(x, np.float64), np.asarray(y, np.float64)) for x, y in batches]
    return jnp.asarray(fw.reference_fit(fw.model_weights(model), learning_rate, in_numpy))


# --- the reference and the model agree with the exercise -----------------------------


@pytest.mark.parametrize("learner_copy", [True, False], ids=["exercises", "solutions"])
def test_grader_model_computes_what_the_exercise_model_computes(learner_copy):
    exercise = load_course().lesson("frameworks").exercise
    path = exercise.learner_copy if learner_copy else exercise.source
    source = path.read_text(encoding="utf-8")
    found = re.search(r"^class Regressor\(nnx.Module\):.*?(?=^def )", source, re.S | re.M)
    namespace: dict = {"nnx": nnx}
    exec(found.group(0), namespace)
    exercise_model = namespace["Regressor"](5, 11, rngs=nnx.Rngs(3))
    grader_model = fw.Regressor(5, 11, rngs=nnx.Rngs(3))
    x = jnp.asarray(np.random.default_rng(0).normal(size=(7, 5)), jnp.float32)
    np.testing.assert_allclose(exercise_model(x), grader_model(x), rtol=1e-6)
    assert nnx.graphdef(exercise_model) != nnx.graphdef(grader_model)  # another class


def test_reference_matches_the_exercise_slow_fit():
    """The NumPy reference gives the losses of nnx.Optimizer + optax.sgd, as slow_fit does."""
    rng = np.random.default_rng(1)
    model = fw.Regressor(3, 9, rngs=nnx.Rngs(0))
    weights = fw.model_weights(model)
    batches = [(rng.normal(size=(12, 3)), rng.normal(size=12)) for _ in range(4)]
    batches = [(x.astype(np.float32), y.astype(np.float32)) for x, y in batches]
    optimizer = nnx.Optimizer(model, optax.sgd(0.2), wrt=nnx.Param)
    got = []
    for x, y in batches:
        loss, grads = nnx.value_and_grad(mse)(model, jnp.asarray(x), jnp.asarray(y))
        optimizer.update(model, grads)
        got.append(float(loss))
    in64 = [(x.astype(np.float64), y.astype(np.float64)) for x, y in batches]
    np.testing.assert_allclose(got, fw.reference_fit(weights, 0.2, in64), rtol=1e-5)


# --- right answers ----------------------------------------------------------------


def leaves_init(model, learning_rate):
    graphdef, state = nnx.split(model)
    leaves, treedef = jax.tree.flatten(state)
    return (graphdef, treedef), leaves, {"lr": jnp.asarray(learning_rate, jnp.float32)}


@functools.partial(jax.jit, static_argnums=0)
def leaves_step(structure, leaves, opt_state, x, y):
    """Solved differently: no Optax, a list of arrays, the structure as a static tuple."""
    graphdef, treedef = structure
    loss_of = lambda ls: mse(nnx.merge(graphdef, jax.tree.unflatten(treedef, ls)), x, y)  # noqa: E731
    loss, grads = jax.value_and_grad(loss_of)(leaves)
    return [w - opt_state["lr"] * g for w, g in zip(leaves, grads, strict=True)], opt_state, loss


def with_step(step, init_fn=init):
    return init_fn, step, loop_with(init_fn, step)


RIGHT = {
    "the solution": lambda: (init, train_step, fit),
    "hand-written SGD, a static structure": lambda: with_step(leaves_step, leaves_init),
    "nnx.jit": lambda: with_step(nnx.jit(_step)),
    "eqx.filter_jit": lambda: with_step(eqx.filter_jit(_step)),
}


@pytest.mark.parametrize("name", RIGHT)
def test_right_answers_pass(name):
    out = passes(fw.grade, *RIGHT[name]())
    assert all(f"✓ {check}" in out for check in fw.grade.checks)


# --- wrong answers ----------------------------------------------------------------


def stub(*args):
    raise NotImplementedError


@jax.jit
def stub_step(graphdef, params, opt_state, x, y):
    raise NotImplementedError


def object_init(model, learning_rate):  # the slow_fit pattern kept
    return None, model, nnx.Optimizer(model, optax.sgd(learning_rate), wrt=nnx.Param)


def optimizer_init(model, learning_rate):
    graphdef, params = nnx.split(model)
    return graphdef, params, nnx.Optimizer(model, OPTIMIZER, wrt=nnx.Param)


def transformation_init(model, learning_rate):
    graphdef, params = nnx.split(model)
    tx = optax.sgd(learning_rate)
    return graphdef, params, (tx, tx.init(params))


def float_init(model, learning_rate):  # static under eqx.filter_jit, weak under jax.jit
    graphdef, params, opt_state = init(model, learning_rate)
    opt_state.hyperparams["learning_rate"] = learning_rate
    return graphdef, params, opt_state


def empty_init(model, learning_rate):  # optax.sgd(lr).init holds no arrays at all
    graphdef, params = nnx.split(model)
    return graphdef, params, optax.sgd(learning_rate).init(params)


def static_rate_init(model, learning_rate):  # a transformation per rate, in the graphdef
    graphdef, params = nnx.split(model)
    tx = optax.sgd(learning_rate, momentum=0.0)
    return (graphdef, tx), params, tx.init(params)


@functools.partial(jax.jit, static_argnums=0)
def static_rate_step(structure, params, opt_state, x, y):
    graphdef, tx = structure
    loss, grads = jax.value_and_grad(lambda p: mse(nnx.merge(graphdef, p), x, y))(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


CURRENT = {"tx": optax.sgd(0.1)}


def global_init(model, learning_rate):  # compiles once; the first run's rate baked in
    graphdef, params = nnx.split(model)
    CURRENT["tx"] = optax.sgd(learning_rate)
    return graphdef, params, (CURRENT["tx"].init(params), jnp.float32(learning_rate))


@jax.jit
def global_step(graphdef, params, opt_state, x, y):
    loss, grads = jax.value_and_grad(lambda p: mse(nnx.merge(graphdef, p), x, y))(params)
    updates, inner = CURRENT["tx"].update(grads, opt_state[0], params)
    return optax.apply_updates(params, updates), (inner, opt_state[1]), loss


def switching(fn):
    def switch(*args):
        jax.config.update("jax_disable_jit", True)
        return fn(*args)

    return switch


def without_jit(*args):
    with jax.disable_jit():
        return fit(*args)


def peeking_fit(model, learning_rate, batches):
    losses = fit(model, learning_rate, batches)
    mse(model, *batches[0])  # outside any compiled program, jit on
    return losses


def decoy_fit(calls):
    def decoys(model, learning_rate, batches):
        graphdef, params, opt_state = init(model, learning_rate)
        for _ in range(calls):  # all on the first batch
            jax.block_until_ready(train_step(graphdef, params, opt_state, *batches[0]))
        return numpy_fit(model, learning_rate, batches)

    return decoys


def hard_coded_fit(model, learning_rate, batches):
    fit(model, learning_rate, batches)
    return jnp.asarray([0.9, 0.8, 0.7, 0.6])


def rebuilding_fit(model, learning_rate, batches):  # a new lambda jitted on every call
    return loop_with(init, jax.jit(lambda *args: _step(*args)))(model, learning_rate, batches)


def memo_fit():  # the losses remembered by the id() of the batches
    cache = {}

    def remembered(model, rate, batches):
        if id(batches) not in cache:
            cache[id(batches)] = fit(model, rate, batches)
        return cache[id(batches)]

    return remembered


def fits(fit_fn):
    return lambda: (init, train_step, fit_fn)


COMPILED = fw.FIT_COMPILED
WRONG = {
    # name: (the answer, the check it fails, key words of its verdict)
    "unsolved stubs": (lambda: (stub, stub, stub), fw.INIT_RUNS, ["not solved", "hint frameworks"]),
    "an unsolved step": (lambda: with_step(stub_step), fw.STEP_RUNS, ["not solved", "hint fram"]),
    "the module and an nnx.Optimizer": (
        lambda: (object_init, train_step, fit),
        fw.PARAMS_ARRAYS,
        ["nnx.Module (Regressor)", "nnx.split"],
    ),  # fmt: skip
    "an nnx.Optimizer as opt_state": (
        lambda: (optimizer_init, train_step, fit),
        fw.OPT_STATE_ARRAYS,
        ["nnx.Optimizer", "state,"],
    ),
    "a transformation in opt_state": (
        lambda: (transformation_init, train_step, fit),
        fw.OPT_STATE_ARRAYS,
        ["Optax", "state[0]"],
    ),
    "a Python float rate": (
        lambda: with_step(eqx.filter_jit(_step), float_init),
        fw.OPT_STATE_ARRAYS,
        ["float", "['learning_rate']", "static"],
    ),  # fmt: skip
    "everything static": (
        lambda: with_step(jax.jit(_step, static_argnums=(0, 1, 2))),
        fw.STEP_RUNS,
        ["traced"],
    ),
    "a rate static in the graphdef": (
        lambda: with_step(static_rate_step, static_rate_init),
        fw.STEP_ONCE,
        ["static_value", "inject_hyperparams"],
    ),  # fmt: skip
    "no rate in opt_state": (
        lambda: (empty_init, train_step, fit),
        fw.OPT_STATE_ARRAYS,
        ["no leaves", "learning rate"],
    ),
    "a rate read from a global": (
        lambda: with_step(global_step, global_init),
        fw.STEP_NUMBERS,
        ["baked in", "run 2"],
    ),
    "an unjitted step": (lambda: with_step(_step), fw.STEP_JITTED, []),
    "disable_jit inside fit": (fits(without_jit), JIT_ON, ["switched off", "while fit ran"]),
    "jit off by config in fit": (fits(switching(fit)), JIT_ON, ["switched off", "while fit"]),
    "jit off by config in init": (
        lambda: with_step(train_step, switching(init)),
        JIT_ON,
        ["while train_step ran"],
    ),
    "the model called outside the step": (
        fits(peeking_fit),
        COMPILED,
        ["outside any compiled program 1 time(s)"],
    ),
    "a loop that never calls the step": (fits(numpy_fit), COMPILED, ["0 compiled execution(s)"]),
    "numpy and a decoy call": (fits(decoy_fit(1)), COMPILED, ["1 compiled execution(s)"]),
    "numpy and a decoy per batch": (fits(decoy_fit(4)), COMPILED, ["[1, 2, 3]", "never reached"]),
    "hard-coded losses": (fits(hard_coded_fit), fw.FIT_NUMBERS, ["batch 0"]),
    "a step rebuilt in every fit": (
        fits(rebuilding_fit),
        fw.FIT_ONCE,
        ["<lambda>", "new function"],
    ),
    "a memo by id() of the batches": (
        lambda: (init, train_step, memo_fit()),
        COMPILED,
        ["0 compiled execution(s)"],
    ),
}


@pytest.mark.parametrize(("name", "seed"), rows(WRONG, [n for n in WRONG if "memo" in n]))
def test_wrong_answers_fail_at_the_check_that_names_them(name, seed, capsys):
    answer, check, words = WRONG[name]
    try:
        found = fails(fw.grade, *answer(), check=check, seed=seed)
    finally:
        jax.config.update("jax_disable_jit", False)
    text = f"{found.expected} {found.seen} {found.hint}"
    assert all(word in text for word in words), text
    assert check != COMPILED or "disable_jit" not in found.hint  # jit was on
    if name == "unsolved stubs":  # no green tick but the frame's canary, before the learner
        assert Check(check, passed=False, seen=found.seen).not_started
        assert [line for line in capsys.readouterr().out.splitlines() if "✓" in line] == [
            f"✓ {JIT_ON}"
        ]
