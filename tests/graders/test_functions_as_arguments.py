"""The functions_as_arguments grader passes right answers and rejects plausible wrong ones."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exercise_cells import exercise, namespace
from tables import fails, passes

from jitlab.graders import functions_as_arguments as G

LEARNING_RATE = G.LEARNING_RATE


def loss(params, x, y, weight_decay):
    prediction = x @ params["w"] + params["b"]
    return jnp.mean((prediction - y) ** 2) + weight_decay * jnp.sum(params["w"] ** 2)


def _update(params, x, y, weight_decay):
    value, grads = jax.value_and_grad(loss)(params, x, y, weight_decay)
    return jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads), value


def _loop(step):
    def fit(params, batches, weight_decay):
        losses = []
        for x, y in batches:
            params, value = step(params, x, y, weight_decay)
            losses.append(value)
        return params, jnp.stack(losses)

    return fit


def fresh_step():
    """A new jitted step per test: no test relies on what another compiled."""
    return jax.jit(_update)


def with_step(make_fit, step=None):
    """(step, fit) with a fresh step, and ``make_fit(step)`` as fit."""

    def build():
        chosen = step() if step else fresh_step()
        return chosen, make_fit(chosen)

    return build


# --- right answers ----------------------------------------------------------------------


def solution_file():
    """The solution's own cells, run as a module: fit finds sgd_step in its globals."""
    solution = namespace("functions_as_arguments", skip="count_compiles")
    return solution["sgd_step"], solution["fit"]


def another_answer():
    """Keyword arguments, a while loop over an index, the step as a default argument,
    losses as a NumPy array: different from the reference, inside the contract."""

    @jax.jit
    def step(params, x, y, weight_decay):
        grads = jax.grad(loss)(params, x, y, weight_decay)
        new = {k: params[k] - LEARNING_RATE * grads[k] for k in params}
        return new, loss(params, x, y, weight_decay)

    def fit(params, batches, weight_decay, sgd=step):
        losses, i = [], 0
        while i < len(batches):
            x, y = batches[i]
            params, value = sgd(params=params, x=x, y=y, weight_decay=weight_decay)
            losses.append(np.asarray(value))
            i += 1
        return params, np.array(losses)

    return step, fit


def cast_to_float32(step):
    """The step computes in float32, so jnp.float32(weight_decay) is the same value (a
    held-out learner's right answer that was once rejected as 'stale')."""
    return lambda params, batches, wd: _loop(step)(params, batches, jnp.float32(wd))


def losses_listed(step):
    """The losses as a Python list of scalars: the contract asks for a 1-D array."""
    fit = _loop(step)
    return lambda params, batches, wd: (lambda p, losses: (p, list(losses)))(
        *fit(params, batches, wd)
    )


def losses_cast(dtype):
    """The losses cast to a 16-bit float "to save memory": right to two or three digits."""

    def make(step):
        fit = _loop(step)
        return lambda params, batches, wd: (lambda p, losses: (p, losses.astype(dtype)))(
            *fit(params, batches, wd)
        )

    return make


def scan_body(step):
    """A scan body defined once, outside fit, weight_decay in the carry."""

    def body(carry, batch):
        params, weight_decay = carry
        params, value = step(params, *batch, weight_decay)
        return (params, weight_decay), value

    return body


def scanned_once(step, stack=np.stack):
    """lax.scan, called eagerly, over a body made once: its program is cached."""
    body = scan_body(step)

    def fit(params, batches, weight_decay):
        xs, ys = (stack(part) for part in zip(*batches, strict=True))
        (params, _), losses = jax.lax.scan(body, (params, jnp.float32(weight_decay)), (xs, ys))
        return params, losses

    return fit


def scanned_in_a_jit(step):
    """lax.scan inside a jitted helper made once; the batches stacked in NumPy."""

    @jax.jit
    def run(params, xs, ys, weight_decay):
        return jax.lax.scan(lambda p, b: step(p, *b, weight_decay), params, (xs, ys))

    return lambda p, batches, wd: run(
        p, *(np.stack(part) for part in zip(*batches, strict=True)), wd
    )


RIGHT = {
    "the solution": with_step(_loop),
    "the solution file": solution_file,
    "another answer": another_answer,
    "weight_decay cast to float32": with_step(cast_to_float32),
    "a jitted fit that traces the step": with_step(lambda step: jax.jit(_loop(step))),
    "a lax.scan over a body made once": with_step(scanned_once),
    "a lax.scan in a jitted helper": with_step(scanned_in_a_jit),
    # jnp.stack compiles a convert_element_type per NumPy input shape the first time it
    # meets NumPy arrays, and never for jax arrays: the batches' kind is one at every fit
    "a jnp.stack, then a module-level lax.scan": with_step(
        lambda step: scanned_once(step, jnp.stack)
    ),
}
# sgd_step traced into a program of fit's: the checks of a loop's calls are not made
TRACED = (
    "a jitted fit that traces the step",
    "a lax.scan over a body made once",
    "a lax.scan in a jitted helper",
    "a jnp.stack, then a module-level lax.scan",
)


@pytest.mark.parametrize("right", RIGHT)
def test_right_answers_pass(right):
    shown = passes(G.grade, *RIGHT[right]())
    for check in (G.FIT_THREADS, G.FIT_FROM_STEP):  # a ✓ only where the check was made
        assert (f"✓ {check}" in shown) is (right not in TRACED), (check, shown)


# --- wrong answers -----------------------------------------------------------------------


def no_decay(params, x, y, weight_decay):
    return _update(params, x, y, 0.0)


def decay_twice(params, x, y, weight_decay):  # weight_decay * w added to grad's own term
    new, value = _update(params, x, y, weight_decay)
    return {**new, "w": new["w"] - LEARNING_RATE * weight_decay * params["w"]}, value


def late_loss(params, x, y, weight_decay):
    new_params, _ = _update(params, x, y, weight_decay)
    return new_params, loss(new_params, x, y, weight_decay)


def lambda_per_batch(step):
    """The inherited code: a new lambda, value_and_grad and jit per batch; the step is
    never called."""

    def slow_fit(params, batches, weight_decay):
        losses = []
        for x, y in batches:
            objective = jax.value_and_grad(lambda p: loss(p, x, y, weight_decay))  # noqa: B023
            value, grads = jax.jit(objective)(params)
            params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
            losses.append(value)
        return params, jnp.stack(losses)

    return slow_fit


def scanned(step):
    """One lax.scan over the stacked batches, its body calling the step (issue 27)."""

    def fit(params, batches, weight_decay):
        xs, ys = (jnp.stack(part) for part in zip(*batches, strict=True))
        body = lambda p, xy: step(p, *xy, weight_decay)  # noqa: E731
        return jax.lax.scan(body, params, (xs, ys))

    return fit


def pops_the_batches(step):
    def fit(params, batches, weight_decay):
        losses = []
        while batches:
            params, value = step(params, *batches.pop(0), weight_decay)
            losses.append(value)
        return params, jnp.stack(losses)

    return fit


def writes_params(step):
    def fit(params, batches, weight_decay):
        new, losses = _loop(step)(params, batches, weight_decay)
        params.update(new)  # "keep the caller's dict up to date"
        return params, losses

    return fit


def global_decay(params, x, y, weight_decay):
    """weight_decay read from a global that only fit would set (a held-out answer)."""
    return _update(params, x, y, CURRENT_WD)  # noqa: F821


def new_jit_per_fit(step):
    inner = _loop(step)

    def fit(params, batches, weight_decay):
        params, losses = inner(params, batches, weight_decay)
        return params, jax.jit(lambda values: values * 1.0)(losses)

    return fit


def partial_per_fit(step):
    def fit(params, batches, weight_decay):
        bound = jax.jit(functools.partial(_update, weight_decay=weight_decay))
        return _loop(lambda p, x, y, _: bound(p, x, y))(params, batches, weight_decay)

    return fit


def numpy_with_a_decoy(step):
    def fit(params, batches, weight_decay):
        step(params, *batches[0], weight_decay)  # the decoy
        numpy_batches = [(np.asarray(x, float), np.asarray(y, float)) for x, y in batches]
        w, b = np.asarray(params["w"], float), float(params["b"])
        losses, w, b = G._reference_fit(w, b, numpy_batches, weight_decay)
        return {"w": w, "b": b}, losses

    return fit


def decoys_per_batch(step):
    def fit(params, batches, weight_decay):
        w, b, losses = np.asarray(params["w"], float), float(params["b"]), []
        for x, y in batches:
            params, _ = step(params, x, y, weight_decay)  # called, then ignored
            x64, y64 = np.asarray(x, float), np.asarray(y, float)
            value, w, b = G._reference_step(w, b, x64, y64, weight_decay)
            losses.append(value)
        return {"w": w, "b": b}, np.array(losses)

    return fit


def params_not_threaded(step):
    def fit(params, batches, weight_decay):
        results = [step(params, x, y, weight_decay) for x, y in batches]  # always params
        return results[-1][0], jnp.stack([value for _, value in results])

    return fit


def decay_frozen_at_first_fit(step):
    frozen: dict[str, float] = {}
    inner = _loop(step)
    return lambda params, batches, wd: inner(params, batches, frozen.setdefault("wd", wd))


def cached_by_identity(step):
    inner, cache = _loop(step), {}

    def fit(params, batches, weight_decay):
        key = tuple(id(x) for x, _ in batches)
        if key not in cache:
            cache[key] = inner(params, batches, weight_decay)
        return cache[key]

    return fit


def skips_the_first_batch(step):
    """range(1, len(batches)): one loss short, stacked (a held-out answer)."""
    inner = _loop(step)
    return lambda params, batches, wd: inner(params, batches[1:], wd)


def resumes_from_the_last_fit(step):
    """Each fit carries on from the params the previous fit ended with (a held-out answer)."""
    inner, last = _loop(step), {}

    def fit(params, batches, weight_decay):
        last["params"], losses = inner(last.get("params", params), batches, weight_decay)
        return last["params"], losses

    return fit


BY_NAME = with_step(_loop, lambda: jax.jit(_update, static_argnames="weight_decay"))
BY_NUMBER = with_step(_loop, lambda: jax.jit(_update, static_argnums=3))
# fmt: off
WRONG = {  # answer: (the check it fails, words in expected + seen, words in hint)
    "static by name": (BY_NAME, G.STEP_ONCE, ["3 compilation", "only weight_decay changed"],
                       ["weight_decay"]),
    "static by number": (BY_NUMBER, G.STEP_ONCE, ["only weight_decay changed"], []),
    "unjitted step": (lambda: (_update, _loop(_update)), G.STEP_JITTED, [], []),
    "no decay": (with_step(_loop, lambda: jax.jit(no_decay)), "loss before the update", [], []),
    "late loss": (with_step(_loop, lambda: jax.jit(late_loss)), "loss before the update", [], []),
    "decay twice": (with_step(_loop, lambda: jax.jit(decay_twice)), "sgd_step: new w", [],
                    ["3 * weight_decay * w", "add nothing more"]),
    "lambda per batch": (with_step(lambda_per_batch), G.FIT_CALLS, ["0 call(s) of sgd_step"], []),
    "new jit per fit": (with_step(new_jit_per_fit), G.FIT_NOTHING, ["in fit number 2"], []),
    "partial per fit": (with_step(partial_per_fit), G.FIT_CALLS, [], []),
    "a jit around each call": (with_step(lambda step: _loop(lambda *a: jax.jit(step)(*a))),
                               G.FIT_NOTHING, ["in fit number 2"], ["lambda"]),
    "a lax.scan body inside fit": (with_step(scanned), G.FIT_NOTHING, ["in fit number 2", "scan"],
                                   ["lax.scan body"]),
    "pops the batches": (with_step(pops_the_batches), G.FIT_KEEPS,
                         ["batches now holds 0 items, not 4 (popped"], ["instead of popping"]),
    "params written in place": (with_step(writes_params), G.FIT_KEEPS,
                                ["params['b'] was changed in place"], []),
    "a global": (with_step(_loop, lambda: jax.jit(global_decay)), G.STEP_RUNS,
                 ["NameError", "CURRENT_WD"], ["pass the value in as an argument"]),
    "numpy + decoy": (with_step(numpy_with_a_decoy), G.FIT_CALLS, ["1 call(s) of sgd_step"], []),
    "decoys per batch": (with_step(decoys_per_batch), G.FIT_FROM_STEP, [], []),
    "params not threaded": (with_step(params_not_threaded), G.FIT_THREADS,
                            ["previous step's new params"], []),
    "frozen decay": (with_step(decay_frozen_at_first_fit), G.FIT_THREADS, ["weight_decay="],
                     ["stale"]),
    "cached by id()": (with_step(cached_by_identity), G.FIT_CALLS,
                       ["fit number 4", "0 call(s) of sgd_step"], []),
    "losses as a list": (with_step(losses_listed), G.FIT_PAIR, ["list of shape (4,)"],
                         ["jnp.stack"]),
    "skips the first batch": (with_step(skips_the_first_batch), G.FIT_PAIR,
                              ["ArrayImpl of shape (3,)"], ["skipped the first batch"]),
    "resumes from the last fit": (with_step(resumes_from_the_last_fit), G.FIT_THREADS,
                                  ["the params the previous fit returned"],
                                  ["resumed where the previous fit stopped"]),
    "losses as float16": (with_step(losses_cast(jnp.float16)), G.FIT_FROM_STEP,
                          ["three digits (float16)"], ["no cast to a narrower dtype"]),
    "losses as bfloat16": (with_step(losses_cast(jnp.bfloat16)), G.FIT_FROM_STEP,
                           ["three digits (bfloat16)"], ["no cast to a narrower dtype"]),
}
# fmt: on


@pytest.mark.parametrize("wrong", WRONG)
def test_wrong_answer_is_rejected_and_named(wrong):
    make, check, seen, hint = WRONG[wrong]
    fails(G.grade, *make(), check=check, words=seen, hint=hint)


def test_reference_matches_the_jax_model():
    """The grader's NumPy reference agrees with the exercise's loss and step in JAX."""
    rng = np.random.default_rng(1)
    w, x, y = (rng.normal(size=shape).astype(np.float32) for shape in (3, (8, 3), 8))
    got, value = fresh_step()({"w": w, "b": np.float32(0.2)}, x, y, 0.05)
    want = G._reference_step(*(a.astype(float) for a in (w, np.float32(0.2), x, y)), 0.05)
    for got_one, want_one in zip((value, got["w"], got["b"]), want, strict=True):
        np.testing.assert_allclose(got_one, want_one, rtol=1e-5)


@pytest.mark.parametrize("copy", ["learner_copy", "source"])
def test_learning_rate_matches_the_exercise(copy):
    source = getattr(exercise("functions_as_arguments"), copy).read_text("utf-8")
    assert f"\nLEARNING_RATE = {LEARNING_RATE}\n" in source
