"""Grader for the frameworks exercise: a learning-rate sweep over re-created NNX models,
compiled once.

The grader's models are a ``Regressor`` with a probe in ``__call__``: traced, it stages a
``jax.debug.callback`` that counts each execution of the compiled program (and the batch's
sum); called eagerly, it counts an eager call and whether jit was off. So the grader knows
that *its* calls ran through compiled code, on every batch, with jit on (the exercise
states that the model never runs outside a compiled program).

What every run draws, on purpose:
  model sizes, data, seeds     fresh (take everything from the model given)
  four learning rates          20 % or more apart: a rate frozen at trace time fails
  re-created models            same sizes, new seeds: new data for the compiled program
  one batches list for all fits  as the exercise's sweep: a memo keyed by id() of the
                               batches hands back an earlier fit's losses
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jitlab.doctor import classify
from jitlab.grading import JIT_ON, call_learner, fail, fresh_rng, grader, learner_error, passed
from jitlab.grading.calls import Recorder, recording
from jitlab.grading.causes import why
from jitlab.grading.checks import JIT_OFF_HINT, excerpt, require, shorten
from jitlab.instruments.counting import ANY_FUNCTION, count_compiles

INIT_RUNS = "init runs"
INIT_RETURNS = "init returns (graphdef, params, opt_state)"
PARAMS_ARRAYS = "params is a pytree of arrays"
OPT_STATE_ARRAYS = "opt_state is a pytree of arrays"
STEP_JITTED = "train_step is a jitted function"
STEP_RUNS = "train_step runs"
STEP_RETURNS = "train_step returns (params, opt_state, loss)"
STEP_COMPILED = "train_step runs the model in a compiled program at every step"
STEP_NUMBERS = "train_step: losses match the reference"
STEP_ONCE = "new models and learning rates compile nothing"
FIT_RUNS = "fit runs"
FIT_COMPILED = "fit runs the model in a compiled program, once per batch"
FIT_NUMBERS = "fit: losses match the reference"
FIT_ONCE = "more fits compile nothing"
STEP_CHECKS = (STEP_RUNS, STEP_RETURNS, STEP_COMPILED, STEP_NUMBERS, STEP_ONCE)
FIT_CHECKS = (FIT_RUNS, FIT_COMPILED, FIT_NUMBERS, FIT_ONCE)
CHECKS = (INIT_RUNS, INIT_RETURNS, PARAMS_ARRAYS, OPT_STATE_ARRAYS, STEP_JITTED, *STEP_CHECKS,
          *FIT_CHECKS)  # fmt: skip
N_BATCHES = 4
RUNS = 2  # runs of the grader's own loop, then as many fits: the second of each compiles nothing
NUMBERS_HINT = (
    "plain SGD on mse(model, x, y) = mean((model(x) - y)**2): the step returns the loss at "
    "the params it was given, and params - learning_rate * gradient"
)
STALE_HINT = (
    "the first run was right, a later one is not: a learning rate baked in at trace time "
    "(a global, a closure, a default) stays the same in later runs; and nothing may be "
    "remembered from an earlier call. Keep the rate in opt_state, as an array"
)

_PROBE: dict[str, Any] = {"compiled": 0, "eager": 0, "jit_off": 0, "sums": []}


def _count_execution(batch_sum: Any) -> None:
    _PROBE["compiled"] += 1
    _PROBE["sums"].append(float(batch_sum))


class Regressor(nnx.Module):
    """The exercise's model (a test checks it computes the same), with the probe."""

    def __init__(self, features: int, hidden: int, *, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(features, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        if isinstance(x, jax.core.Tracer):  # runs at each execution of the program
            jax.debug.callback(_count_execution, jnp.sum(x))
        else:  # jit off is seen here: jax.disable_jit() in fit is over by the canary
            _PROBE["eager"] += 1
            _PROBE["jit_off"] += bool(jax.config.jax_disable_jit)
        return self.out(nnx.relu(self.hidden(x)))[:, 0]


@contextlib.contextmanager
def _probe() -> Iterator[dict[str, Any]]:
    jax.effects_barrier()
    _PROBE.update(compiled=0, eager=0, jit_off=0, sums=[])
    seen: dict[str, Any] = {}
    try:
        yield seen
    finally:
        jax.effects_barrier()
        seen.update(_PROBE)


def model_weights(model: nnx.Module) -> dict[str, Any]:
    """The model's parameters in float64, copied before the learner runs."""
    pure = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    hidden, out = pure["hidden"], pure["out"]
    as64 = {"w1": hidden["kernel"], "b1": hidden["bias"], "w2": out["kernel"][:, 0]}
    return {k: np.array(v, np.float64) for k, v in as64.items()} | {
        "b2": float(np.asarray(out["bias"])[0])
    }


def reference_fit(weights: dict[str, Any], learning_rate: float, batches: list) -> np.ndarray:
    """Plain SGD on the two-layer ReLU regressor, in float64: the loss before each step."""
    w1, b1, w2, b2 = weights["w1"], weights["b1"], weights["w2"], weights["b2"]
    losses = []
    for x, y in batches:
        z = x @ w1 + b1
        h = np.maximum(z, 0.0)
        residual = h @ w2 + b2 - y
        losses.append(np.mean(residual**2))
        d_pred = 2.0 * residual / len(y)
        d_z = np.outer(d_pred, w2) * (z > 0)
        w1, b1 = w1 - learning_rate * (x.T @ d_z), b1 - learning_rate * d_z.sum(axis=0)
        w2, b2 = w2 - learning_rate * (h.T @ d_pred), b2 - learning_rate * d_pred.sum()
    return np.array(losses)


# --- what the learner returns -------------------------------------------------------

SPLIT_HINT = (
    "the exercise wants the model's arrays, not the model (its Python attributes travel "
    "with it): split it with `graphdef, params = nnx.split(model)`, return params, and "
    "rebuild the model inside train_step with nnx.merge(graphdef, params)"
)
NOT_ARRAYS: tuple[tuple[type | tuple[type, ...], str, str], ...] = (
    # (type, how the verdict names it, hint): the first that matches
    (
        nnx.Optimizer,
        "an nnx.Optimizer",
        "keep the optimizer's state, not the optimizer: build one Optax transformation at "
        "top level and return its init(params)",
    ),
    (nnx.Module, "an nnx.Module", SPLIT_HINT),
    (nnx.Pytree, "an NNX object", SPLIT_HINT),
    (
        optax.GradientTransformation,
        "an Optax transformation",
        "an Optax transformation is a pair of functions, not state: build it once at top "
        "level and keep only what its init returns",
    ),
    (
        (bool, int, float, complex),
        "a Python number",
        "a Python number is static under eqx.filter_jit and weakly typed under jax.jit: "
        "store it as an array, e.g. jnp.asarray(learning_rate, jnp.float32)",
    ),
    (object, "", "keep only arrays; values that select code belong in the graphdef"),
)


def _framework_object(node: Any) -> bool:
    return isinstance(node, nnx.Pytree | optax.GradientTransformation)


def require_pytree_of_arrays(check: str, tree: Any, what: str) -> None:
    """Pass if every leaf of ``tree`` is an array and no node is a framework object."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_framework_object)
    for path, leaf in flat:
        if _framework_object(leaf) or not isinstance(leaf, jax.Array | np.ndarray | np.generic):
            _, name, hint = next(row for row in NOT_ARRAYS if isinstance(leaf, row[0]))
            raise fail(
                check,
                expected=f"{what} as a pytree of arrays (dict, tuple, nnx.State, NamedTuple "
                "with jax.Array leaves)",
                seen=f"{name or shorten(repr(leaf), 80)} ({type(leaf).__name__}) at "
                f"{what}{jax.tree_util.keystr(path)}",
                hint=hint,
            )
    require(
        check,
        bool(flat),
        expected=f"{what} holding at least one array",
        seen=shorten(f"{what} has no leaves: {tree!r}", 200),
        hint="params are the model's weights, from nnx.split(model); opt_state holds the "
        "learning rate",
    )


def _is_jit_wrapper(fn: Any) -> bool:
    """jax.jit's own type, or a Flax or Equinox jit object."""
    if isinstance(fn, type(jax.jit(_count_execution))):
        return True
    module = type(fn).__module__ or ""
    return module.startswith(("flax.", "equinox.")) and callable(getattr(fn, "lower", None))


def _unpack(check: str, result: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    if isinstance(result, tuple | list) and len(result) == len(names):
        return tuple(result)
    length = f" of length {len(result)}" if isinstance(result, tuple | list) else ""
    raise fail(
        check,
        expected=f"a tuple ({', '.join(names)})",
        seen=type(result).__name__ + length,
        hint=f"return ({', '.join(names)}), in that order",
    )


def _call_step(train_step: Any, *args: Any) -> Any:
    """train_step(*args); arrays passed as static arguments get a verdict that says so
    (any other error goes through call_learner, which calls again and reports it)."""
    try:
        return train_step(*args)
    except Exception as err:
        if "hashable static" not in str(err) and "comparable using __eq__" not in str(err):
            return call_learner(STEP_RUNS, train_step, *args)
        hint = "params and opt_state hold arrays, and an array cannot be a static argument: "
        raise learner_error(STEP_RUNS, err, hint=hint + "pass them as traced arguments") from err


def _require_compiled(check: str, seen: dict[str, Any], who: str, batches: list) -> None:
    """The model ran in a compiled program on every batch, and never eagerly."""
    if seen["jit_off"]:
        raise fail(
            JIT_ON,
            expected=f"jit switched on while {who} runs",
            seen=f"jit was switched off (jax.disable_jit() or jax_disable_jit) while {who} "
            f"ran: the model ran op by op, outside any compiled program, {seen['jit_off']} "
            "time(s)",
            hint=JIT_OFF_HINT,
        )
    sums, count = np.array(seen["sums"]), f"{seen['compiled']} compiled execution(s)"
    missed = [
        i for i, (x, _) in enumerate(batches) if not np.isclose(sums, jnp.sum(x), 1e-4, 1e-4).any()
    ]
    if seen["eager"]:
        saw = f"the model ran outside any compiled program {seen['eager']} time(s) ({count})"
        hint = "never outside it (not to compute a loss, not to check a result)"
    elif seen["compiled"] < N_BATCHES:
        saw, hint = f"{count} for {N_BATCHES} batches", "losses computed another way do not count"
    else:
        saw = f"{count}, but batch(es) {missed} (counting from 0) never reached the model"
        hint = "repeated calls on one batch do not count"
    require(
        check,
        not (seen["eager"] or seen["compiled"] < N_BATCHES or missed),
        expected=f"the model in a compiled program once for each of {N_BATCHES} batches",
        seen=saw,
        hint=f"{who} must call the model only through the jitted train_step, once per batch; "
        + hint,
    )


def _require_losses(
    check: str, got: Any, want: np.ndarray, run: str, rate: float, hint: str
) -> None:
    """The losses match, or a verdict naming the batch, the run and its learning rate."""
    got = np.asarray(got, np.float64)
    if got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5):
        return
    if got.shape != want.shape:
        seen = f"an array of shape {got.shape}"
    else:
        first = int(np.argmax(~np.isclose(got, want, rtol=1e-4, atol=1e-5)))
        seen = f"loss {got[first]:.6g} at batch {first}: {excerpt(got, first)}"
    raise fail(
        check,
        expected=f"{run} (learning rate {rate:.4g}): one loss per batch, "
        f"{excerpt(want)} (float64 reference)",
        seen=seen,
        hint=hint,
    )


STATIC_HINT = (
    "something static changes from run to run: an Optax transformation built per run (new "
    "closures), or the learning rate held in a static argument or in the graphdef. Build one "
    "transformation at top level with optax.inject_hyperparams and keep the rate in "
    "opt_state as an array"
)
NEW_FUNCTION_HINT = (
    "a new function object per run (a lambda, functools.partial or jax.jit built in init or "
    "fit): build the jitted step once, at top level"
)


def _require_no_compiles(check: str, count: Any, where: str, calls: list) -> None:
    """Nothing compiled; else what did (by name) and why train_step did (the frame's why)."""
    found = why(calls, label=lambda i: f"call {i + 1} of train_step")
    names = ", ".join(f"{name} x{n}" for name, n in count.compiled.most_common(3))
    require(
        check,
        not count.compiles,
        expected="0 compilations: a re-created model of the same size and a new learning "
        "rate are new data for the program already compiled",
        seen=f"{count.compiles} compilation(s) {where}: {names}; "
        + (
            shorten(found.text, 240) + f" (cause: {', '.join(found.causes)})"
            if found
            else "train_step itself did not compile: another function did"
        ),  # fmt: skip
        hint=found.hint_for(
            {classify.STATIC_VALUE: STATIC_HINT, "again": NEW_FUNCTION_HINT}, STATIC_HINT
        )
        if found
        else NEW_FUNCTION_HINT,  # fmt: skip
    )


# --- the grade ----------------------------------------------------------------------


def _batches(rng: np.random.Generator, size: int, features: int) -> list:
    true_w = rng.normal(size=features)
    out = []
    for _ in range(N_BATCHES):
        x = rng.normal(size=(size, features)).astype(np.float32)
        y = (np.tanh(x @ true_w) + 0.1 * rng.normal(size=size)).astype(np.float32)
        out.append((jnp.asarray(x), jnp.asarray(y)))
    return out


def _as64(batches: list) -> list:
    return [(np.asarray(x, np.float64), np.asarray(y, np.float64)) for x, y in batches]


def _grader_loop(init: Any, train_step: Any, model: Any, rate: float, batches: list):
    """The grader's own training loop: init, then train_step on every batch."""
    result = call_learner(INIT_RUNS, init, model, rate)
    graphdef, params, opt_state = _unpack(INIT_RETURNS, result, ("graphdef", "params", "opt_state"))
    losses = []
    for x, y in batches:
        out = _call_step(train_step, graphdef, params, opt_state, x, y)
        params, opt_state, loss = _unpack(STEP_RETURNS, out, ("params", "opt_state", "loss"))
        losses.append(np.asarray(loss))
    return np.array(losses)


@grader("frameworks", checks=CHECKS)
def grade(init: Any, train_step: Any, fit: Any) -> None:
    """Grade the exercise: pytrees of arrays, compiled steps, numbers, and no recompilation."""
    rng = fresh_rng()
    features, hidden, size = (int(n) for n in rng.integers((3, 8, 16), (9, 25, 49)))
    # Rates between 0.02 and 0.3, 20 % or more apart (bins 35 % apart, jittered by 5 %).
    bins = np.geomspace(0.02, 0.3, 10)
    rates = rng.choice(bins, size=2 * RUNS, replace=False) * rng.uniform(0.95, 1.05, 2 * RUNS)
    seeds = [int(s) for s in rng.choice(10_000, size=2 * RUNS, replace=False)]

    def model(run: int) -> Regressor:
        return Regressor(features, hidden, rngs=nnx.Rngs(seeds[run]))

    result = call_learner(INIT_RUNS, init, model(0), float(rates[0]))
    _, params, opt_state = _unpack(INIT_RETURNS, result, ("graphdef", "params", "opt_state"))
    passed(INIT_RUNS)
    passed(INIT_RETURNS)
    require_pytree_of_arrays(PARAMS_ARRAYS, params, "params")
    require_pytree_of_arrays(OPT_STATE_ARRAYS, opt_state, "opt_state")
    require(
        STEP_JITTED,
        _is_jit_wrapper(train_step),
        expected="train_step wrapped by jax.jit (or nnx.jit, eqx.filter_jit)",
        seen=f"{type(train_step).__name__} {getattr(train_step, '__name__', '')}".strip(),
        hint="decorate train_step with @jax.jit, once, at top level",
    )
    shared = _batches(rng, size, features)  # every fit gets this one list, as in a sweep
    calls: list = []  # train_step's calls, in every run: what why compares
    for run in range(2 * RUNS):
        by_fit, later = run >= RUNS, run % RUNS
        rate, learner = float(rates[run]), model(run)
        weights = model_weights(learner)
        batches = shared if by_fit else _batches(rng, size, features)
        with count_compiles(ANY_FUNCTION) as everything, _probe() as seen:
            if by_fit:
                with recording(fit, train_step, lambda: everything.compiles) as step:
                    losses = call_learner(FIT_RUNS, fit, learner, rate, batches)
            else:
                step = Recorder(train_step, lambda: everything.compiles)
                losses = _grader_loop(init, step, learner, rate, batches)
        calls += step.calls
        checks = FIT_CHECKS if by_fit else STEP_CHECKS
        _require_compiled(checks[-3], seen, "fit" if by_fit else "train_step", batches)
        what = f"fit number {later + 1}" if by_fit else f"run {later + 1} of the grader's loop"
        want = reference_fit(weights, rate, _as64(batches))
        _require_losses(checks[-2], losses, want, what, rate, STALE_HINT if later else NUMBERS_HINT)
        if later:
            _require_no_compiles(checks[-1], everything, f"in {what}", calls)
        if later == RUNS - 1:
            for check in checks:
                passed(check)
