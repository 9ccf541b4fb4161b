"""The frameworks grader passes right answers and rejects each wrong one at its check."""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from exercise_cells import namespace
from flax import nnx
from tables import fails, passes, rows

from jitlab.graders import frameworks as fw
from jitlab.grading import JIT_ON
from jitlab.grading.verdict import Check

SOLVED = namespace("frameworks", graders_only=True)
init, train_step, fit = (SOLVED[name] for name in ("init", "train_step", "fit"))
mse, OPTIMIZER = SOLVED["mse"], SOLVED["OPTIMIZER"]
_step = train_step.__wrapped__


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


def numpy_fit(model, learning_rate, batches):
    """The float64 reference written into a learner's fit: right numbers, no jit at all."""
    return jnp.asarray(fw.reference_fit(model, learning_rate, batches))


def test_grader_model_and_reference_compute_what_the_exercise_computes():
    """The grader's Regressor is the exercise's (both copies), another class; the NumPy
    reference gives the losses of nnx.Optimizer + optax.sgd, as slow_fit does."""
    x = jnp.asarray(np.random.default_rng(0).normal(size=(7, 5)), jnp.float32)
    grader_model = fw.Regressor(5, 11, rngs=nnx.Rngs(3))
    for names in (SOLVED, namespace("frameworks", learner_copy=True, graders_only=True)):
        exercise_model = names["Regressor"](5, 11, rngs=nnx.Rngs(3))
        np.testing.assert_allclose(exercise_model(x), grader_model(x), rtol=1e-6)
        assert nnx.graphdef(exercise_model) != nnx.graphdef(grader_model)
    rng = np.random.default_rng(1)
    model = fw.Regressor(3, 9, rngs=nnx.Rngs(0))
    batches = [(rng.normal(size=(12, 3)), rng.normal(size=12)) for _ in range(4)]
    batches = [(x.astype(np.float32), y.astype(np.float32)) for x, y in batches]
    want = fw.reference_fit(model, 0.2, batches)  # before the optimizer changes model
    optimizer = nnx.Optimizer(model, optax.sgd(0.2), wrt=nnx.Param)
    got = []
    for x, y in batches:
        loss, grads = nnx.value_and_grad(mse)(model, jnp.asarray(x), jnp.asarray(y))
        optimizer.update(model, grads)
        got.append(float(loss))
    np.testing.assert_allclose(got, want, rtol=1e-5)


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


BUFFER = np.zeros(4, np.float32)


def buffer_fit(model, learning_rate, batches):  # the grader keeps what each fit returned
    BUFFER[:] = fit(model, learning_rate, batches)
    return BUFFER


def with_step(step, init_fn=init):
    return lambda: (init_fn, step, loop_with(init_fn, step))


RIGHT = {
    "the solution": lambda: (init, train_step, fit),
    "hand-written SGD, a static structure": with_step(leaves_step, leaves_init),
    "nnx.jit": with_step(nnx.jit(_step)),
    "eqx.filter_jit": with_step(eqx.filter_jit(_step)),
    "one array refilled by every fit": lambda: (init, train_step, buffer_fit),
}


@pytest.mark.parametrize("name", RIGHT)
def test_right_answers_pass(name):
    out = passes(fw.grade, *RIGHT[name]())
    assert all(f"✓ {check}" in out for check in fw.grade.checks)


def stub(*args):
    raise NotImplementedError


def split_and(opt_state):
    """An init that returns nnx.split(model) and ``opt_state(model, rate, params)``."""

    def made(model, learning_rate):
        graphdef, params = nnx.split(model)
        return graphdef, params, opt_state(model, learning_rate, params)

    return made


def float_init(model, learning_rate):  # static under eqx.filter_jit, weak under jax.jit
    graphdef, params, opt_state = init(model, learning_rate)
    opt_state.hyperparams["learning_rate"] = learning_rate
    return graphdef, params, opt_state


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


RATE = {"lr": 0.0}  # set by fit only: the grader's own loop over train_step never sets it


def rate_init(model, learning_rate):
    return *nnx.split(model), {"lr": jnp.float32(learning_rate)}  # a rate the step ignores


def rate_step(graphdef, params, opt_state, x, y):
    loss, grads = jax.value_and_grad(lambda p: mse(nnx.merge(graphdef, p), x, y))(params)
    return jax.tree.map(lambda p, g: p - RATE["lr"] * g, params, grads), opt_state, loss


def rate_fit(step):
    looped = loop_with(rate_init, step)
    return lambda model, rate, batches: RATE.update(lr=rate) or looped(model, rate, batches)


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


def memo_fit():  # the losses remembered by the id() of the batches
    cache = {}

    def remembered(model, rate, batches):
        if id(batches) not in cache:
            cache[id(batches)] = fit(model, rate, batches)
        return cache[id(batches)]

    return remembered


def memo_by_rate():  # the losses remembered by learning rate: the sweep's other key forgotten
    cache = {}

    def remembered(model, rate, batches):
        if rate not in cache:
            cache[rate] = fit(model, rate, batches)
        return cache[rate]

    return remembered


def resuming():  # each fit starts from the params the last one ended with
    last = {}

    def resumed(model, learning_rate, batches):
        graphdef, params, opt_state = init(model, learning_rate)
        params, losses = last.get("params", params), []
        for x, y in batches:
            params, opt_state, loss = train_step(graphdef, params, opt_state, x, y)
            losses.append(loss)
        last["params"] = params
        return jnp.stack(losses)

    return resumed


def popping_fit(model, learning_rate, batches):  # the sweep's list emptied by the first fit
    return loop_with(init, train_step)(model, learning_rate, [batches.pop(0) for _ in batches[:]])


def reversing_fit(model, learning_rate, batches):  # the list reversed in place, trained in order
    batches.reverse()
    return loop_with(init, train_step)(model, learning_rate, batches[::-1])


def fits(fit_fn):
    return lambda: (init, train_step, fit_fn)


def inits(init_fn):
    return lambda: (init_fn, train_step, fit)


COMPILED = "fit runs the model"
# fmt: off
OWN_STEP = jax.jit(lambda *a: _step(*a))  # made once: it compiles once, like train_step

WRONG = {  # name: (the answer, the check it fails, key words of its verdict)
    "unsolved stubs": (lambda: (stub, stub, stub), fw.INIT_RUNS, ["not solved", "hint frameworks"]),
    "an unsolved step": (with_step(jax.jit(stub)), "train_step runs", ["not solved", "hint fram"]),
    "the module and an nnx.Optimizer": (  # the slow_fit pattern kept
        inits(lambda m, lr: (None, m, nnx.Optimizer(m, optax.sgd(lr), wrt=nnx.Param))),
        fw.PARAMS_ARRAYS, ["NNX object (Regressor)", "nnx.split"]),
    "an nnx.Optimizer as opt_state": (
        inits(split_and(lambda m, lr, params: nnx.Optimizer(m, OPTIMIZER, wrt=nnx.Param))),
        fw.OPT_STATE_ARRAYS, ["nnx.Optimizer", "state,"]),
    "a transformation in opt_state": (
        inits(split_and(lambda m, lr, p: (optax.sgd(lr), optax.sgd(lr).init(p)))),
        fw.OPT_STATE_ARRAYS, ["Optax", "state[0]"]),
    "a Python float rate": (with_step(eqx.filter_jit(_step), float_init), fw.OPT_STATE_ARRAYS,
                            ["float", "['learning_rate']", "static"]),
    "everything static": (with_step(jax.jit(_step, static_argnums=(0, 1, 2))), "train_step runs",
                          ["cannot be a static argument: pass it traced"]),
    "a rate static in the graphdef": (with_step(static_rate_step, static_rate_init), "new models",
                                      ["static_argument", "inject_hyperparams"]),
    "no rate in opt_state": (  # optax.sgd(lr).init holds no arrays at all
        inits(split_and(lambda m, lr, params: optax.sgd(lr).init(params))),
        fw.OPT_STATE_ARRAYS, ["no leaves", "learning rate"]),
    "a rate read from a global": (with_step(global_step, global_init), "train_step: losses",
                                  ["baked in", "run 2"]),
    "a rate only fit sets": (lambda: (rate_init, s := jax.jit(rate_step), rate_fit(s)),
                             "train_step: losses", ["run 1", "the update is off"]),
    "an unjitted step": (with_step(_step), fw.STEP_JITTED, []),
    "disable_jit inside fit": (fits(without_jit), JIT_ON, ["switched off", "while fit ran"]),
    "jit off by config in fit": (fits(switching(fit)), JIT_ON, ["switched off", "while fit"]),
    "jit off by config in init": (with_step(train_step, switching(init)), JIT_ON,
                                  ["over train_step ran"]),
    "the model called outside the step": (fits(peeking_fit), COMPILED,
                                          ["outside any compiled program 1 time(s)"]),
    "a loop that never calls the step": (fits(numpy_fit), fw.FIT_CALLS, ["0 call(s)"]),
    "numpy and a decoy call": (fits(decoy_fit(1)), fw.FIT_CALLS, ["1 call(s) of train_step"]),
    "numpy and a decoy per batch": (fits(decoy_fit(4)), COMPILED, ["[1, 2, 3]", "never reached"]),
    "hard-coded losses": (fits(lambda *args: fit(*args) * 0 + jnp.asarray([0.9, 0.8, 0.7, 0.6])),
                          "fit: losses", ["run 1 of fit", "wrong for 3 of 3"]),
    "a step rebuilt in every fit": (  # a new lambda jitted on every call
        fits(lambda *args: loop_with(init, jax.jit(lambda *a: _step(*a)))(*args)), fw.FIT_CALLS,
        ["0 call(s)"]),
    "a memo by id() of the batches": (lambda: fits(memo_fit())(), fw.FIT_CALLS,
                                      ["0 call(s)", "returned the losses of run 1"]),
    "an identical step of its own": (  # blind set 9: jit caches by the function: no compile
        fits(lambda *args: loop_with(init, OWN_STEP)(*args)), fw.FIT_CALLS, ["0 call(s)"]),
    "losses as a list": (fits(lambda *args: list(fit(*args))), fw.FIT_RETURNS, ["list"]),
    "the batches popped from the caller's list": (fits(popping_fit), fw.FIT_KEEPS,
                                                  ["0 left in it", "leave the list as it is"]),
    "the caller's list reversed in place": (fits(reversing_fit), fw.FIT_KEEPS,
                                            ["another order", "reverse"]),
    "a memo of losses by learning rate": (lambda: fits(memo_by_rate())(), fw.FIT_CALLS,
                                          ["returned the losses of run 1", "learning rate"]),
    "a fit that resumes from the last one": (lambda: fits(resuming())(), "fit: losses",
                                             ["run 2 of fit", "did not start from the model"]),
}
# fmt: on


@pytest.mark.parametrize(("name", "seed"), rows(WRONG, [n for n in WRONG if "memo" in n]))
def test_wrong_answers_fail_at_the_check_that_names_them(name, seed, capsys):
    answer, check, words = WRONG[name]
    try:
        found = fails(fw.grade, *answer(), check=check, words=words, seed=seed)
    finally:
        jax.config.update("jax_disable_jit", False)
    assert check != COMPILED or "disable_jit" not in found.hint  # jit was on
    if name == "unsolved stubs":  # no green tick but the frame's canary, before the learner
        assert Check(check, passed=False, seen=found.seen).not_started
        assert [line for line in capsys.readouterr().out.splitlines() if "✓" in line] == [
            f"✓ {JIT_ON}"
        ]
