"""The grader of exercise 13 passes right answers and rejects the wrong ones, by name."""

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

from jitlab.course import load_course
from jitlab.graders import frameworks
from jitlab.grading import JIT_ON, GradingFailure
from jitlab.grading.verdict import Check

ROOT = load_course().root


def mse(model, x, y):
    return jnp.mean((model(x) - y) ** 2)


# --- the reference solution -------------------------------------------------------
OPTIMIZER = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)


def init(model, learning_rate):
    graphdef, params = nnx.split(model)
    opt_state = OPTIMIZER.init(params)
    opt_state.hyperparams["learning_rate"] = jnp.asarray(learning_rate, jnp.float32)
    return graphdef, params, opt_state


def _step(graphdef, params, opt_state, x, y):
    def loss_of(p):
        return mse(nnx.merge(graphdef, p), x, y)

    loss, grads = jax.value_and_grad(loss_of)(params)
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


def grade_failure(init_fn, step, fit_fn) -> GradingFailure:
    with pytest.raises(GradingFailure) as caught:
        frameworks.grade(init_fn, step, fit_fn)
    return caught.value


def numpy_fit(model, learning_rate, batches):
    """The float64 reference written into a learner's fit: right numbers, no jit at all."""
    weights = frameworks.model_weights(model)
    in_numpy = [(np.asarray(x, np.float64), np.asarray(y, np.float64)) for x, y in batches]
    return jnp.asarray(frameworks.reference_fit(weights, learning_rate, in_numpy))


# --- the reference and the model agree with the exercise -----------------------------


def _exercise_regressor(folder: str) -> type:
    source = (ROOT / folder / "13_frameworks.py").read_text(encoding="utf-8")
    class_source = re.search(r"^class Regressor\(nnx.Module\):.*?(?=^def )", source, re.S | re.M)
    namespace: dict = {"nnx": nnx}
    exec(class_source.group(0), namespace)
    return namespace["Regressor"]


@pytest.mark.parametrize("folder", ["exercises", "solutions"])
def test_grader_model_computes_what_the_exercise_model_computes(folder):
    exercise_model = _exercise_regressor(folder)(5, 11, rngs=nnx.Rngs(3))
    grader_model = frameworks.Regressor(5, 11, rngs=nnx.Rngs(3))
    x = jnp.asarray(np.random.default_rng(0).normal(size=(7, 5)), jnp.float32)
    np.testing.assert_allclose(exercise_model(x), grader_model(x), rtol=1e-6)
    assert nnx.graphdef(exercise_model) != nnx.graphdef(grader_model)  # another class


def test_reference_matches_the_exercise_slow_fit():
    """The NumPy reference gives the losses of nnx.Optimizer + optax.sgd, as slow_fit does."""
    rng = np.random.default_rng(1)
    model = frameworks.Regressor(3, 9, rngs=nnx.Rngs(0))
    weights = frameworks.model_weights(model)
    batches = [
        (rng.normal(size=(12, 3)).astype(np.float32), rng.normal(size=12).astype(np.float32))
        for _ in range(4)
    ]
    optimizer = nnx.Optimizer(model, optax.sgd(0.2), wrt=nnx.Param)
    got = []
    for x, y in batches:
        loss, grads = nnx.value_and_grad(mse)(model, jnp.asarray(x), jnp.asarray(y))
        optimizer.update(model, grads)
        got.append(float(loss))
    want = frameworks.reference_fit(
        weights, 0.2, [(x.astype(np.float64), y.astype(np.float64)) for x, y in batches]
    )
    np.testing.assert_allclose(got, want, rtol=1e-5)


# --- right answers ----------------------------------------------------------------


def test_solution_passes(capsys):
    frameworks.grade(init, train_step, fit)
    out = capsys.readouterr().out
    assert "All checks passed" in out
    assert all(f"✓ {check}" in out for check in frameworks.grade.checks)


def test_hand_written_sgd_with_a_static_structure_passes(capsys):
    """Solved differently: no Optax, a list of arrays, the structure as a static tuple."""

    def leaves_init(model, learning_rate):
        graphdef, state = nnx.split(model)
        leaves, treedef = jax.tree.flatten(state)
        return (graphdef, treedef), leaves, {"lr": jnp.asarray(learning_rate, jnp.float32)}

    @functools.partial(jax.jit, static_argnums=0)
    def leaves_step(structure, leaves, opt_state, x, y):
        graphdef, treedef = structure

        def loss_of(ls):
            return mse(nnx.merge(graphdef, jax.tree.unflatten(treedef, ls)), x, y)

        loss, grads = jax.value_and_grad(loss_of)(leaves)
        new = [w - opt_state["lr"] * g for w, g in zip(leaves, grads, strict=True)]
        return new, opt_state, loss

    frameworks.grade(leaves_init, leaves_step, loop_with(leaves_init, leaves_step))
    assert "All checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrap", [nnx.jit, eqx.filter_jit], ids=["nnx.jit", "eqx.filter_jit"])
def test_framework_jit_wrappers_pass(wrap, capsys):
    """nnx.jit and eqx.filter_jit around the same step are jit wrappers too."""
    step = wrap(_step)
    frameworks.grade(init, step, loop_with(init, step))
    assert "All checks passed" in capsys.readouterr().out


# --- wrong answers ----------------------------------------------------------------


def test_unsolved_stubs_are_rejected(capsys):
    def stub(*args):
        raise NotImplementedError

    failure = grade_failure(stub, stub, stub)
    assert failure.check == "init runs"
    assert "not solved yet" in failure.seen
    assert "`jitlab hint frameworks`" in failure.hint
    # The runner shows an untouched stub no green tick (the verdict is "not started"); the
    # only tick printed here is the frame's own canary, before the learner's code runs.
    assert Check(failure.check, passed=False, seen=failure.seen).not_started
    ticks = [line for line in capsys.readouterr().out.splitlines() if "✓" in line]
    assert ticks == [f"✓ {JIT_ON}"]


def test_unsolved_step_is_rejected_with_the_full_hint_command():
    @jax.jit
    def stub_step(graphdef, params, opt_state, x, y):
        raise NotImplementedError

    failure = grade_failure(init, stub_step, loop_with(init, stub_step))
    assert failure.check == "train_step runs"
    assert "not solved yet" in failure.seen
    assert "`jitlab hint frameworks`" in failure.hint


def test_the_inherited_nnx_loop_is_rejected_for_returning_objects():
    """The slow_fit pattern kept: init hands back the module and an nnx.Optimizer."""

    def object_init(model, learning_rate):
        optimizer = nnx.Optimizer(model, optax.sgd(learning_rate), wrt=nnx.Param)
        return None, model, optimizer

    failure = grade_failure(object_init, train_step, fit)
    assert failure.check == "params is a pytree of arrays"
    assert "nnx.Module (Regressor)" in failure.seen
    assert "nnx.split" in failure.hint


def test_an_nnx_optimizer_as_opt_state_is_rejected():
    def optimizer_init(model, learning_rate):
        graphdef, params = nnx.split(model)
        return graphdef, params, nnx.Optimizer(model, OPTIMIZER, wrt=nnx.Param)

    failure = grade_failure(optimizer_init, train_step, fit)
    assert failure.check == "opt_state is a pytree of arrays"
    assert "nnx.Optimizer" in failure.seen
    assert "state, not the optimizer" in failure.hint


def test_a_transformation_inside_opt_state_is_rejected():
    def transformation_init(model, learning_rate):
        graphdef, params = nnx.split(model)
        tx = optax.sgd(learning_rate)
        return graphdef, params, (tx, tx.init(params))

    failure = grade_failure(transformation_init, train_step, fit)
    assert failure.check == "opt_state is a pytree of arrays"
    assert "Optax transformation" in failure.seen and "opt_state[0]" in failure.seen


def test_learning_rate_as_a_python_float_is_rejected():
    """Static under eqx.filter_jit (one program per rate), weakly typed under jax.jit."""

    def float_init(model, learning_rate):
        graphdef, params, opt_state = init(model, learning_rate)
        opt_state.hyperparams["learning_rate"] = learning_rate
        return graphdef, params, opt_state

    step = eqx.filter_jit(_step)
    failure = grade_failure(float_init, step, loop_with(float_init, step))
    assert failure.check == "opt_state is a pytree of arrays"
    assert "float" in failure.seen and "['learning_rate']" in failure.seen
    assert "static" in failure.hint


def test_everything_static_is_rejected():
    static_step = jax.jit(_step, static_argnums=(0, 1, 2))
    failure = grade_failure(init, static_step, loop_with(init, static_step))
    assert failure.check == "train_step runs"
    assert "static" in failure.seen.lower()
    assert "traced" in failure.hint


def test_learning_rate_made_static_through_the_graphdef_is_rejected():
    """One transformation per learning rate, carried as a static part of graphdef."""

    def static_rate_init(model, learning_rate):
        graphdef, params = nnx.split(model)
        tx = optax.sgd(learning_rate, momentum=0.0)  # plain SGD, with a state of arrays
        return (graphdef, tx), params, tx.init(params)

    @functools.partial(jax.jit, static_argnums=0)
    def static_rate_step(structure, params, opt_state, x, y):
        graphdef, tx = structure
        loss, grads = jax.value_and_grad(lambda p: mse(nnx.merge(graphdef, p), x, y))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    failure = grade_failure(
        static_rate_init, static_rate_step, loop_with(static_rate_init, static_rate_step)
    )
    assert failure.check == "new models and learning rates compile nothing"
    assert "inject_hyperparams" in failure.hint


def test_learning_rate_left_out_of_opt_state_is_rejected():
    """optax.sgd(lr).init holds no arrays at all: the rate is not in the state."""

    def empty_init(model, learning_rate):
        graphdef, params = nnx.split(model)
        return graphdef, params, optax.sgd(learning_rate).init(params)

    failure = grade_failure(empty_init, train_step, fit)
    assert failure.check == "opt_state is a pytree of arrays"
    assert "no leaves" in failure.seen and "learning rate" in failure.hint


def test_learning_rate_read_from_a_global_is_rejected():
    """Compiles once, but the rate of the first run is baked in: later runs are wrong."""
    current = {"tx": optax.sgd(0.1)}

    def global_init(model, learning_rate):
        graphdef, params = nnx.split(model)
        current["tx"] = optax.sgd(learning_rate)
        return graphdef, params, (current["tx"].init(params), jnp.float32(learning_rate))

    @jax.jit
    def global_step(graphdef, params, opt_state, x, y):
        loss, grads = jax.value_and_grad(lambda p: mse(nnx.merge(graphdef, p), x, y))(params)
        updates, inner = current["tx"].update(grads, opt_state[0], params)
        opt_state = (inner, opt_state[1])
        return optax.apply_updates(params, updates), opt_state, loss

    failure = grade_failure(global_init, global_step, loop_with(global_init, global_step))
    assert failure.check == "train_step: losses match the reference"
    assert "baked in" in failure.hint


def test_unjitted_step_is_rejected():
    failure = grade_failure(init, _step, loop_with(init, _step))
    assert failure.check == "train_step is a jitted function"


def test_jit_disabled_inside_fit_is_rejected():
    def unjitted_fit(model, learning_rate, batches):
        with jax.disable_jit():
            return fit(model, learning_rate, batches)

    failure = grade_failure(init, train_step, unjitted_fit)
    assert failure.check == JIT_ON
    assert "jit was switched off" in failure.seen and "while fit ran" in failure.seen
    assert "disable_jit" in failure.hint


def test_jit_switched_off_by_config_inside_fit_is_rejected():
    def switching_fit(model, learning_rate, batches):
        jax.config.update("jax_disable_jit", True)
        return fit(model, learning_rate, batches)

    try:
        failure = grade_failure(init, train_step, switching_fit)
    finally:
        jax.config.update("jax_disable_jit", False)
    assert failure.check == JIT_ON
    assert "jit was switched off" in failure.seen and "while fit ran" in failure.seen


def test_jit_switched_off_by_init_is_rejected_in_the_graders_own_loop():
    """init leaves jit off: the grader's own calls of train_step run op by op."""

    def switching_init(model, learning_rate):
        jax.config.update("jax_disable_jit", True)
        return init(model, learning_rate)

    try:
        failure = grade_failure(switching_init, train_step, loop_with(switching_init, train_step))
    finally:
        jax.config.update("jax_disable_jit", False)
    assert failure.check == JIT_ON
    assert "while train_step ran" in failure.seen


def test_model_called_outside_the_step_is_rejected():
    """Every batch goes through the step, but fit also calls the model eagerly."""

    def peeking_fit(model, learning_rate, batches):
        losses = fit(model, learning_rate, batches)
        mse(model, *batches[0])  # outside any compiled program, jit on
        return losses

    failure = grade_failure(init, train_step, peeking_fit)
    assert failure.check == "fit runs the model in a compiled program, once per batch"
    assert "outside any compiled program 1 time(s)" in failure.seen
    assert "disable_jit" not in failure.hint  # jit was on: the hint says what happened


def test_loop_that_never_calls_the_step_is_rejected():
    failure = grade_failure(init, train_step, numpy_fit)
    assert failure.check == "fit runs the model in a compiled program, once per batch"
    assert failure.seen.startswith("0 compiled execution(s)")


def test_numpy_path_with_a_decoy_call_is_rejected():
    def decoy_fit(model, learning_rate, batches):
        graphdef, params, opt_state = init(model, learning_rate)
        x, y = batches[0]
        jax.block_until_ready(train_step(graphdef, params, opt_state, x, y))  # the decoy
        return numpy_fit(model, learning_rate, batches)

    failure = grade_failure(init, train_step, decoy_fit)
    assert failure.check == "fit runs the model in a compiled program, once per batch"
    assert failure.seen.startswith("1 compiled execution(s)")


def test_numpy_path_with_a_decoy_call_per_batch_is_rejected():
    """As many decoy calls as batches, all on the first batch: the others never run."""

    def repeated_decoy_fit(model, learning_rate, batches):
        graphdef, params, opt_state = init(model, learning_rate)
        x, y = batches[0]
        for _ in batches:
            jax.block_until_ready(train_step(graphdef, params, opt_state, x, y))
        return numpy_fit(model, learning_rate, batches)

    failure = grade_failure(init, train_step, repeated_decoy_fit)
    assert failure.check == "fit runs the model in a compiled program, once per batch"
    assert "[1, 2, 3]" in failure.seen and "never reached the model" in failure.seen


def test_hard_coded_losses_are_rejected():
    """The step runs for every batch, but the losses returned are fixed numbers."""

    def hard_coded_fit(model, learning_rate, batches):
        fit(model, learning_rate, batches)
        return jnp.asarray([0.9, 0.8, 0.7, 0.6])

    failure = grade_failure(init, train_step, hard_coded_fit)
    assert failure.check == "fit: losses match the reference"


def test_step_rebuilt_in_every_fit_is_rejected():
    """fit wraps a fresh lambda with jax.jit on every call: a new function each time."""

    def rebuilding_fit(model, learning_rate, batches):
        step = jax.jit(lambda *args: _step(*args))
        return loop_with(init, step)(model, learning_rate, batches)

    failure = grade_failure(init, train_step, rebuilding_fit)
    assert failure.check == "more fits compile nothing"
    assert "new function object" in failure.hint
