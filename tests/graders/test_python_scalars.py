"""The grader of exercise 03 passes right answers and rejects each kind of wrong one.

Every test builds its own jitted functions, so no test depends on what another compiled.
Each wrong answer is rejected by the check named in its ``match=``, on every run: the
grader draws every kind of learning rate at least twice, and a repeated value always.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exercise_cells import namespace

from jitlab.graders import python_scalars
from jitlab.grading import GradingFailure


def loss(params, batch):
    inputs, targets = batch
    return jnp.mean((inputs @ params["w"] + params["b"] - targets) ** 2)


def update(state, batch, lr):
    value, grads = jax.value_and_grad(loss)(state["params"], batch)
    params = jax.tree.map(lambda p, g: p - lr * g, state["params"], grads)
    return {"params": params, "avg_loss": 0.9 * state["avg_loss"] + 0.1 * value}


def make_step(**jit_options):
    """A fresh, correct jitted step (a new object per test: a cold cache)."""

    def sgd_step(state, batch, lr):
        return update(state, batch, lr)

    return jax.jit(sgd_step, **jit_options)


def good_init(params):
    return {"params": params, "avg_loss": jnp.zeros((), jnp.float32)}


def to_float32(value):
    return jnp.asarray(value, jnp.float32)


def make_train(step_fn, convert=to_float32, init=good_init):
    def train(params, batches, schedule):
        state = init(params)
        for step, batch in enumerate(batches):
            state = step_fn(state, batch, convert(schedule(step)))
        return state

    return train


def grade_failure(init, sgd_step, train, match: str) -> GradingFailure:
    with pytest.raises(GradingFailure, match=match) as info:
        python_scalars.grade(init, sgd_step, train)
    return info.value


# ------------------------------------------------------------------ right answers


def test_solution_passes(capsys):
    solved = namespace("python_scalars")
    python_scalars.grade(solved["init"], solved["sgd_step"], solved["train"])
    assert "All checks passed" in capsys.readouterr().out


def test_python_float_lr_and_numpy_init_pass():
    # Every lr becomes a Python float (~float32[], one key); init starts from a NumPy
    # float32, which is a strong float32[] like the step's output.
    sgd_step = make_step()

    def init(params):
        return {"params": params, "avg_loss": np.float32(0.0)}

    python_scalars.grade(init, sgd_step, make_train(sgd_step, float, init))


def test_notebook_style_globals_keywords_and_a_jitted_init_pass():
    # Written as a learner writes it in a notebook: train finds sgd_step as a global and
    # calls it by keyword; init is itself jitted; lr becomes a NumPy float32.
    namespace = {"jax": jax, "jnp": jnp, "np": np, "update": update}
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
        "        state = sgd_step(state=state, batch=batches[i], lr=np.float32(schedule(i)))\n"
        "    return state\n",
        namespace,
    )
    python_scalars.grade(namespace["init"], namespace["sgd_step"], namespace["train"])
    assert namespace["sgd_step"] is not None  # the grader put the real function back
    assert type(namespace["sgd_step"]).__name__ != "Recorder"


# ------------------------------------------------------------- learning-rate types


def test_raw_scalars_compile_once_per_kind():
    sgd_step = make_step()
    failure = grade_failure(good_init, sgd_step, make_train(sgd_step, lambda v: v), "once")
    assert failure.seen.startswith("3 compilations"), failure.seen
    assert "lr: " in failure.seen  # the grader names the argument it saw change
    assert "abstract values" in failure.hint and "~int32[]" in failure.hint


def test_asarray_without_dtype_keeps_ints_and_floats_apart():
    sgd_step = make_step()
    failure = grade_failure(good_init, sgd_step, make_train(sgd_step, jnp.asarray), "once")
    assert "lr: " in failure.seen and "abstract values" in failure.hint


def test_converting_inside_jit_is_too_late():
    @jax.jit
    def sgd_step(state, batch, lr):
        return update(state, batch, jnp.asarray(lr, jnp.float32))

    failure = grade_failure(good_init, sgd_step, make_train(sgd_step, lambda v: v), "once")
    assert "too late" in failure.hint


def test_static_lr_compiles_once_per_value():
    sgd_step = make_step(static_argnames="lr")
    failure = grade_failure(good_init, sgd_step, make_train(sgd_step, float), "once")
    assert int(failure.seen.split()[0]) > 3
    assert "a new lr value" in failure.seen
    assert "static" in failure.hint and "abstract values" not in failure.hint


def test_integer_cast_gives_wrong_numbers():
    sgd_step = make_step()
    train = make_train(sgd_step, lambda v: jnp.asarray(v, jnp.int32))
    failure = grade_failure(good_init, sgd_step, train, "final state matches")
    assert "integer dtype" in failure.hint


def test_clearing_the_cache_every_step_is_named():
    sgd_step = make_step()

    def train(params, batches, schedule):
        state = good_init(params)
        for step, batch in enumerate(batches):
            sgd_step.clear_cache()  # "to be safe"
            state = sgd_step(state, batch, to_float32(schedule(step)))
        return state

    failure = grade_failure(good_init, sgd_step, train, "once")
    assert "with an lr value seen before too" in failure.seen
    assert "clear its cache" in failure.hint


def test_mixed_calling_style_is_named():
    sgd_step = make_step()

    def train(params, batches, schedule):
        state = good_init(params)
        for step, batch in enumerate(batches):
            lr = to_float32(schedule(step))
            if step % 2:
                state = sgd_step(state, batch, lr=lr)
            else:
                state = sgd_step(state, batch, lr)
        return state

    failure = grade_failure(good_init, sgd_step, train, "once")
    assert "called as" in failure.seen and "one way" in failure.hint


# ------------------------------------------------------------------ init and state


@pytest.mark.parametrize(
    ("start", "seen"),
    [
        (0.0, "~float32[] from init"),
        (jnp.asarray(0.0), "~float32[] from init"),
        (0, "~int32[] from init"),
    ],
    ids=["python-float", "jnp-asarray", "python-int"],
)
def test_weak_init_is_caught_before_train(start, seen):
    sgd_step = make_step()

    def init(params):
        return {"params": params, "avg_loss": start}

    failure = grade_failure(init, sgd_step, make_train(sgd_step, init=init), "the types")
    assert seen in failure.seen and "float32[] after one step" in failure.seen
    assert "weak" in failure.hint


def test_other_dtype_in_init_is_caught():
    sgd_step = make_step()

    def init(params):
        return {"params": params, "avg_loss": jnp.zeros((), jnp.bfloat16)}

    failure = grade_failure(init, sgd_step, make_train(sgd_step, init=init), "the types")
    assert "bfloat16[] from init" in failure.seen
    assert "weak" not in failure.hint and "dtype" in failure.hint


def test_train_that_builds_its_own_weak_state_compiles_twice():
    # init is right, but train does not use it: its own first state is weak.
    sgd_step = make_step()
    train = make_train(sgd_step, init=lambda params: {"params": params, "avg_loss": 0.0})
    failure = grade_failure(good_init, sgd_step, train, "once")
    assert failure.seen.startswith("2 compilations")
    assert "state['avg_loss']: ~float32[] before, float32[] now" in failure.seen
    assert "init" in failure.hint


def test_init_with_a_none_slot_is_rejected():
    sgd_step = make_step()

    def init(params):
        return {"params": params, "avg_loss": None}

    failure = grade_failure(init, sgd_step, make_train(sgd_step, init=init), "zero average")
    assert "None" in failure.seen


def test_init_that_starts_elsewhere_is_rejected():
    sgd_step = make_step()

    def init(params):
        return {"params": params, "avg_loss": jnp.ones((), jnp.float32)}

    grade_failure(init, sgd_step, make_train(sgd_step, init=init), "zero average")


# ------------------------------------------------------------- where the work runs


def test_numpy_loop_that_never_calls_the_step_is_rejected():
    sgd_step = make_step()

    def train(params, batches, schedule):
        state = {k: np.asarray(v, np.float64) for k, v in params.items()}
        avg = 0.0
        for step, (x, y) in enumerate(batches):
            x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
            residual = x @ state["w"] + state["b"] - y
            lr = float(schedule(step))
            avg = 0.9 * avg + 0.1 * float(np.mean(residual**2))
            state = {
                "w": state["w"] - lr * 2 * x.T @ residual / len(y),
                "b": state["b"] - lr * 2 * residual.mean(),
            }
        return {"params": state, "avg_loss": avg}

    failure = grade_failure(good_init, sgd_step, train, "once per batch")
    assert failure.seen == "0 call(s) of sgd_step"


def test_numpy_path_with_one_decoy_call_is_rejected():
    sgd_step = make_step()

    def train(params, batches, schedule):
        sgd_step(good_init(params), batches[0], to_float32(schedule(0)))  # the decoy
        return python_scalars_reference(params, batches, schedule)

    failure = grade_failure(good_init, sgd_step, train, "once per batch")
    assert failure.seen == "1 call(s) of sgd_step"


def python_scalars_reference(params, batches, schedule):
    """The grader's private reference, reached the way a determined learner would."""
    state = {"params": params, "avg_loss": 0.0}
    for step, batch in enumerate(batches):
        state = python_scalars._reference_step(state, batch, float(schedule(step)))
    return state


def test_returning_the_reference_after_real_calls_is_rejected():
    sgd_step = make_step()
    real_train = make_train(sgd_step)

    def train(params, batches, schedule):
        real_train(params, batches, schedule)  # every call made, outputs thrown away
        return python_scalars_reference(params, batches, schedule)

    grade_failure(good_init, sgd_step, train, "returns the state sgd_step returned")


def test_steps_fed_from_a_numpy_state_are_rejected():
    # sgd_step is called once per batch, but each call gets a state the learner computed
    # outside jit, not the state the previous call returned.
    sgd_step = make_step()

    def train(params, batches, schedule):
        state = good_init(params)
        for step, batch in enumerate(batches):
            sgd_step(state, batch, to_float32(schedule(step)))
            numpy_state = python_scalars._reference_step(state, batch, float(schedule(step)))
            state = jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), numpy_state)
        return sgd_step(state, batches[-1], to_float32(0.0))

    grade_failure(good_init, sgd_step, train, "once per batch")


def test_a_new_jit_each_step_is_rejected():
    sgd_step = make_step()

    def train(params, batches, schedule):
        state = good_init(params)
        for step, batch in enumerate(batches):
            state = jax.jit(update)(state, batch, to_float32(schedule(step)))
        return state

    grade_failure(good_init, sgd_step, train, "once per batch")


def test_the_step_called_only_inside_another_jit_is_rejected():
    sgd_step = make_step()

    def train(params, batches, schedule):
        state = good_init(params)
        for step, batch in enumerate(batches):
            wrapped = jax.jit(lambda s, b, lr: sgd_step(s, b, lr))
            state = wrapped(state, batch, to_float32(schedule(step)))
        return state

    failure = grade_failure(good_init, sgd_step, train, "once per batch")
    assert "while another function was being traced" in failure.hint


def test_batches_out_of_order_are_rejected():
    sgd_step = make_step()

    def train(params, batches, schedule):
        state = good_init(params)
        for step, batch in enumerate(reversed(batches)):
            state = sgd_step(state, batch, to_float32(schedule(step)))
        return state

    failure = grade_failure(good_init, sgd_step, train, "once per batch")
    assert "another batch" in failure.seen


def test_train_that_edits_the_callers_params_is_rejected():
    sgd_step = make_step()
    real_train = make_train(sgd_step)

    def train(params, batches, schedule):
        state = real_train(params, batches, schedule)
        params.update(state["params"])  # "keep the caller up to date"
        return state

    grade_failure(good_init, sgd_step, train, "caller's arguments")


def test_unjitted_step_is_rejected():
    def sgd_step(state, batch, lr):
        return update(state, batch, lr)

    grade_failure(good_init, sgd_step, make_train(sgd_step, float), "compiled with jax.jit")


def test_a_look_alike_of_a_jitted_function_is_rejected():
    class LooksJitted:
        def __call__(self, state, batch, lr):
            return update(state, batch, lr)

        def lower(self, *args):
            raise NotImplementedError

        def trace(self, *args):
            raise NotImplementedError

        def clear_cache(self):
            pass

    fake = LooksJitted()
    grade_failure(good_init, fake, make_train(fake), "compiled with jax.jit")


def test_wrong_update_is_rejected():
    @jax.jit
    def sgd_step(state, batch, lr):
        grads = jax.grad(loss)(state["params"], batch)
        params = jax.tree.map(lambda p, g: p + lr * g, state["params"], grads)
        return {"params": params, "avg_loss": state["avg_loss"]}

    grade_failure(good_init, sgd_step, make_train(sgd_step), "one sgd_step matches")


def test_average_of_the_loss_after_the_update_is_rejected():
    @jax.jit
    def sgd_step(state, batch, lr):
        new = update(state, batch, lr)
        after = loss(new["params"], batch)
        return {"params": new["params"], "avg_loss": 0.9 * state["avg_loss"] + 0.1 * after}

    failure = grade_failure(good_init, sgd_step, make_train(sgd_step), "one sgd_step matches")
    assert "before the update" in failure.hint


# ------------------------------------------------------------------ jit switched off


def test_disable_jit_by_config_inside_train_is_named():
    sgd_step = make_step()
    real_train = make_train(sgd_step)

    def train(params, batches, schedule):
        jax.config.update("jax_disable_jit", True)
        return real_train(params, batches, schedule)

    try:
        failure = grade_failure(good_init, sgd_step, train, "with jit on")
    finally:
        jax.config.update("jax_disable_jit", False)
    assert "switched off" in failure.seen
