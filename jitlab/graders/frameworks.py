"""Grader for the frameworks exercise: a learning-rate sweep over re-created NNX models,
compiled once.

The learner writes three functions around a Flax NNX model and an Optax optimizer:

* ``init(model, learning_rate) -> (graphdef, params, opt_state)``, where ``params`` and
  ``opt_state`` are pytrees of arrays (no module, no optimizer object, no transformation,
  no Python number) and the learning rate lives in ``opt_state``;
* ``train_step(graphdef, params, opt_state, x, y) -> (params, opt_state, loss)``, one
  jitted SGD step whose loss is taken before the update;
* ``fit(model, learning_rate, batches) -> losses``, the per-batch losses of plain SGD,
  the same numbers as the exercise's ``slow_fit``.

Every run draws new model sizes, data, seeds and learning rates (``fresh_rng``), and
checks them against a float64 NumPy reference, which rejects hard-coded losses and a
learning rate frozen at its first value.

The models the grader hands out are a ``Regressor`` with a probe in ``__call__``: called
with a tracer (inside a compiled program) it stages a ``jax.debug.callback`` that counts
each execution of that program; called with a concrete array it counts an eager call.
This is how the grader knows that *its own* calls ran through compiled code:

* ``train_step`` must be a jit wrapper (``jax.jit``, ``nnx.jit``, ``eqx.filter_jit``),
  and in the grader's own loop the model must run in a compiled program at every step
  and never eagerly. This rejects an unjitted step.
* ``fit`` must run every batch through the model in a compiled program (the callback
  also records each batch's sum), and never call it eagerly. This rejects a loop that
  never calls the step, and a NumPy path plus decoy calls (one, or one per batch on the
  same batch).
* Jit switched off: before grading, by ``@grader``'s canary; by the learner's code
  (``jax.disable_jit()`` inside ``fit``, ``jax_disable_jit`` set in ``init`` or ``fit``),
  by the probe, which notes whether jit was off at each eager call of the model. Both
  fail the check "jit is on", saying that jit was switched off.

The exercise states the part of the contract this relies on: ``train_step`` rebuilds the
model and calls it (through ``mse``), and the model never runs outside a compiled
program.

Compile behaviour: after a first run, runs with re-created models (same sizes, new
seeds) and new learning rates must compile nothing, counted over every function JAX
compiles: first in the grader's own loop (``init`` plus ``train_step``), then through
``fit``. This rejects an Optax transformation built per run (its closures are a new
static key, whether passed as a static argument or inside the graphdef), a learning
rate made static, and a step rebuilt per call. A Python float for the learning rate is
rejected earlier, by the pytree-of-arrays check, as is an ``nnx.Module`` or
``nnx.Optimizer`` handed back where arrays are wanted, with a verdict that says so.
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

from jitlab.grading import JIT_ON, call_learner, fail, fresh_rng, grader, passed, require
from jitlab.grading.checks import JIT_OFF_HINT, require_close
from jitlab.instruments.counting import ANY_FUNCTION, count_compiles, miss_reason

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
CHECKS = (
    INIT_RUNS,
    INIT_RETURNS,
    PARAMS_ARRAYS,
    OPT_STATE_ARRAYS,
    STEP_JITTED,
    STEP_RUNS,
    STEP_RETURNS,
    STEP_COMPILED,
    STEP_NUMBERS,
    STEP_ONCE,
    FIT_RUNS,
    FIT_COMPILED,
    FIT_NUMBERS,
    FIT_ONCE,
)

N_BATCHES = 4
"""Steps per run; the probe expects one compiled execution of the model per step."""

NUMBERS_HINT = (
    "plain SGD on mse(model, x, y) = mean((model(x) - y)**2): the step returns the loss at "
    "the params it was given, and params - learning_rate * gradient"
)

_PROBE: dict[str, Any] = {"compiled": 0, "eager": 0, "jit_off": 0, "sums": []}


def _count_execution(batch_sum: Any = 0.0) -> None:
    _PROBE["compiled"] += 1
    _PROBE["sums"].append(float(batch_sum))


class Regressor(nnx.Module):
    """The exercise's model, with a probe that counts where each call runs.

    Must compute what the exercise's ``Regressor`` computes (a test checks it).
    """

    def __init__(self, features: int, hidden: int, *, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(features, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        if isinstance(x, jax.core.Tracer):
            # Runs each time the compiled program runs, with the batch it was given.
            jax.debug.callback(_count_execution, jnp.sum(x))
        else:
            _PROBE["eager"] += 1
            # Seen at the call: jax.disable_jit() inside the learner's function is gone
            # again by the time the grader's own canary runs.
            _PROBE["jit_off"] += bool(jax.config.jax_disable_jit)
        return self.out(nnx.relu(self.hidden(x)))[:, 0]


@contextlib.contextmanager
def _probe() -> Iterator[dict[str, Any]]:
    """Count the model's compiled executions (and their batches) and its eager calls, and
    how many of those ran with jit switched off."""
    jax.effects_barrier()
    _PROBE.update(compiled=0, eager=0, jit_off=0, sums=[])
    seen: dict[str, Any] = {}
    try:
        yield seen
    finally:
        jax.effects_barrier()
        seen.update(_PROBE)


# --- the reference -----------------------------------------------------------------


def model_weights(model: nnx.Module) -> dict[str, np.ndarray]:
    """The model's parameters as float64 NumPy arrays, copied before the learner runs."""
    pure = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    return {
        "w1": np.array(pure["hidden"]["kernel"], dtype=np.float64),
        "b1": np.array(pure["hidden"]["bias"], dtype=np.float64),
        "w2": np.array(pure["out"]["kernel"], dtype=np.float64)[:, 0],
        "b2": float(np.asarray(pure["out"]["bias"])[0]),
    }


def reference_fit(
    weights: dict[str, Any], learning_rate: float, batches: list[tuple[np.ndarray, np.ndarray]]
) -> np.ndarray:
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


def _is_framework_object(node: Any) -> bool:
    """A framework object where plain containers of arrays are wanted."""
    return isinstance(node, nnx.Pytree | optax.GradientTransformation)


def _describe(node: Any) -> str:
    if isinstance(node, nnx.Optimizer):
        return f"an nnx.Optimizer ({type(node).__name__})"
    if isinstance(node, nnx.Module):
        return f"an nnx.Module ({type(node).__name__})"
    if isinstance(node, nnx.Pytree):
        return f"an NNX object ({type(node).__name__})"
    if isinstance(node, optax.GradientTransformation):
        return f"an Optax transformation ({type(node).__name__})"
    return f"a {type(node).__name__} ({node!r})"[:120]


def _hint_for(node: Any, what: str) -> str:
    if isinstance(node, nnx.Optimizer):
        return (
            "keep the optimizer's state, not the optimizer: build one Optax transformation at "
            "top level and return its init(params)"
        )
    if isinstance(node, nnx.Pytree):
        return (
            "the exercise wants the model's arrays, not the model (its Python attributes "
            "travel with it): split it with `graphdef, params = nnx.split(model)`, return "
            "params, and rebuild the model inside train_step with nnx.merge(graphdef, params)"
        )
    if isinstance(node, optax.GradientTransformation):
        return (
            "an Optax transformation is a pair of functions, not state: build it once at top "
            "level and keep only what its init returns"
        )
    if isinstance(node, bool | int | float | complex):
        return (
            "a Python number is static under eqx.filter_jit and weakly typed under jax.jit: "
            "store it as an array, e.g. jnp.asarray(learning_rate, jnp.float32)"
        )
    return f"keep only arrays in {what}; values that select code belong in the graphdef"


def _is_array(leaf: Any) -> bool:
    return isinstance(leaf, jax.Array | np.ndarray | np.generic)


def require_pytree_of_arrays(check: str, tree: Any, what: str) -> None:
    """Pass if every leaf of ``tree`` is an array and no node is a framework object."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_framework_object)
    for path, leaf in flat:
        if _is_framework_object(leaf) or not _is_array(leaf):
            where = f"{what}{jax.tree_util.keystr(path)}"
            raise fail(
                check,
                expected=f"{what} as a pytree of arrays (dict, tuple, nnx.State, NamedTuple "
                "with jax.Array leaves)",
                seen=f"{_describe(leaf)} at {where}",
                hint=_hint_for(leaf, what),
            )
    require(
        check,
        bool(flat),
        expected=f"{what} holding at least one array",
        seen=f"{what} has no leaves: {tree!r}"[:200],
        hint="params are the model's weights, from nnx.split(model); opt_state holds the "
        "learning rate",
    )


_JIT_TYPE = type(jax.jit(_count_execution))
"""The type of what ``jax.jit`` returns (a C++ class that JAX does not export)."""


def _is_jit_wrapper(fn: Any) -> bool:
    """A real jit wrapper: jax.jit's own type, or a Flax or Equinox jit object."""
    if isinstance(fn, _JIT_TYPE):
        return True
    module = type(fn).__module__ or ""
    return module.startswith(("flax.", "equinox.")) and callable(getattr(fn, "lower", None))


def _unpack(check: str, result: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    """Split a returned tuple, or fail saying what came back instead."""
    if not (isinstance(result, tuple | list) and len(result) == len(names)):
        shown = type(result).__name__
        if isinstance(result, tuple | list):
            shown += f" of length {len(result)}"
        raise fail(
            check,
            expected=f"a tuple ({', '.join(names)})",
            seen=shown,
            hint=f"return ({', '.join(names)}), in that order",
        )
    return tuple(result)


def _static_hint(explanations: list[str]) -> str:
    text = " ".join(explanations)
    if "weak_type=True" in text:
        return (
            "a Python float reached the step (a weak type): store the learning rate as "
            "jnp.asarray(learning_rate, jnp.float32)"
        )
    if "never seen function" in text:
        return (
            "a new function object per run (a lambda, functools.partial or jax.jit built in "
            "init or fit): build the jitted step once, at top level"
        )
    return (
        "something static changes from run to run: an Optax transformation built per run "
        "(new closures), or the learning rate held in a static argument or in the graphdef. "
        "Build one transformation at top level with optax.inject_hyperparams and keep the "
        "rate in opt_state as an array"
    )


def _require_compiled_every_step(
    check: str, seen: dict[str, Any], who: str, batches: list[tuple[Any, Any]]
) -> None:
    """Fail unless the model ran in a compiled program on every batch, and never eagerly.

    A model that ran eagerly while jit was switched off fails ``JIT_ON``, saying so.
    """
    if seen["jit_off"]:
        raise fail(
            JIT_ON,
            expected=f"jit switched on while {who} runs",
            seen=f"jit was switched off (jax.disable_jit() or jax_disable_jit) while {who} "
            f"ran: the model ran op by op, outside any compiled program, {seen['jit_off']} "
            "time(s)",
            hint=JIT_OFF_HINT,
        )
    if seen["eager"]:
        raise fail(
            check,
            expected=f"the model to run inside a compiled program at each of {N_BATCHES} steps",
            seen=f"the model ran outside any compiled program {seen['eager']} time(s) "
            f"({seen['compiled']} compiled execution(s))",
            hint=f"{who} must call the model only through the jitted train_step, never "
            "outside it (not to compute a loss, not to check a result)",
        )
    if seen["compiled"] < N_BATCHES:
        raise fail(
            check,
            expected=f"at least {N_BATCHES} compiled executions of the model, one per batch",
            seen=f"{seen['compiled']} compiled execution(s) for {N_BATCHES} batches",
            hint=f"{who} must call train_step once per batch; losses computed another way "
            "(NumPy, or one decoy call to the step) do not count",
        )
    sums = np.array(seen["sums"])
    missed = [
        index
        for index, (x, _) in enumerate(batches)
        if not np.any(np.isclose(sums, float(np.sum(np.asarray(x))), rtol=1e-4, atol=1e-4))
    ]
    if missed:
        raise fail(
            check,
            expected=f"every one of the {N_BATCHES} batches to go through the compiled model",
            seen=f"{seen['compiled']} compiled execution(s), but batch(es) {missed} "
            "(counting from 0) never reached the model",
            hint=f"{who} must call train_step on each batch; repeated calls on one batch, "
            "or losses computed another way, do not count",
        )


def _require_no_compiles(check: str, count: Any, where: str) -> None:
    if count.compiles:
        raise fail(
            check,
            expected="0 compilations: a re-created model of the same size and a new learning "
            "rate are new data for the program already compiled",
            seen=f"{count.compiles} compilation(s) {where}; JAX says: "
            + (miss_reason(count.explanations[0]) if count.explanations else "-"),
            hint=_static_hint(count.explanations),
        )


def _require_losses(check: str, got: Any, want: np.ndarray, hint: str) -> None:
    """Fail with require_close's message unless close; pass silently (the caller reports)."""
    got_np = np.asarray(got)
    if got_np.shape != want.shape or not np.allclose(got_np, want, rtol=1e-4, atol=1e-5):
        require_close(check, got_np, want, rtol=1e-4, atol=1e-5, hint=hint)


STALE_HINT = (
    "the first run was right, a later one is not: a learning rate baked in at trace time "
    "(a global, a closure, a default) stays the same in later runs. Keep it in opt_state, "
    "as an array"
)


# --- the grade ----------------------------------------------------------------------


def _draw(rng: np.random.Generator) -> dict[str, Any]:
    features, hidden = int(rng.integers(3, 9)), int(rng.integers(8, 25))
    batch_size = int(rng.integers(16, 49))
    true_w = rng.normal(size=features)

    def batches() -> tuple[list[tuple[Any, Any]], list[tuple[np.ndarray, np.ndarray]]]:
        on_device, in_numpy = [], []
        for _ in range(N_BATCHES):
            x = rng.normal(size=(batch_size, features)).astype(np.float32)
            y = (np.tanh(x @ true_w) + 0.1 * rng.normal(size=batch_size)).astype(np.float32)
            on_device.append((jnp.asarray(x), jnp.asarray(y)))
            in_numpy.append((x.astype(np.float64), y.astype(np.float64)))
        return on_device, in_numpy

    # Six distinct rates between 0.02 and 0.3, each at least 20% from the others (bins
    # 35% apart, jittered by 5%): three runs of the grader's own loop, then three fits.
    bins = np.geomspace(0.02, 0.3, 10)
    rates = rng.choice(bins, size=6, replace=False) * rng.uniform(0.95, 1.05, size=6)
    seeds = rng.choice(10_000, size=6, replace=False)
    return {
        "features": features,
        "hidden": hidden,
        "batches": batches,
        "rates": [float(r) for r in rates],
        "seeds": [int(s) for s in seeds],
    }


def _model(draw: dict[str, Any], seed: int) -> Regressor:
    return Regressor(draw["features"], draw["hidden"], rngs=nnx.Rngs(seed))


def _clip(text: str, limit: int = 240) -> str:
    """Shorten an error line at a clause boundary, never inside a value.

    JAX's first line can also end inside a value's repr (``State({``), which is cut too.
    """
    balanced = all(text.count(o) == text.count(c) for o, c in ("()", "[]", "{}"))
    if len(text) <= limit and balanced:
        return text
    cut = max(text.rfind(". ", 0, limit), text.rfind(">, ", 0, limit) + 1)
    return (text[: cut + 1] if cut > 0 else text[:limit]).rstrip(" ,") + " …"


def _static_arrays_error(err: Exception) -> bool:
    """The error jax.jit raises when an array is passed as a static argument."""
    text = str(err)
    return "Non-hashable static arguments" in text or "comparable using __eq__" in text


def _call_train_step(train_step: Any, *args: Any) -> Any:
    """Call train_step; arrays passed as static arguments get a verdict that says so.

    Any other error is left to ``call_learner`` (which calls again and reports it), so an
    unfinished stub reads "not solved yet" with the full ``jitlab hint`` command.
    """
    try:
        return train_step(*args)
    except Exception as err:
        if not _static_arrays_error(err):
            return call_learner(STEP_RUNS, train_step, *args)
        raise fail(
            STEP_RUNS,
            expected="the call to finish without an error",
            seen=_clip(f"{type(err).__name__}: {err}".splitlines()[0]),
            hint="params and opt_state hold arrays, and an array cannot be a static "
            "argument: pass them as ordinary (traced) arguments; only graphdef, which holds "
            "no arrays, may be static",
        ) from err


def _grader_loop(init: Any, train_step: Any, model: Regressor, rate: float, batches: list):
    """The grader's own training loop: init, then train_step on every batch."""
    result = call_learner(INIT_RUNS, init, model, rate)
    graphdef, params, opt_state = _unpack(INIT_RETURNS, result, ("graphdef", "params", "opt_state"))
    losses = []
    for x, y in batches:
        out = _call_train_step(train_step, graphdef, params, opt_state, x, y)
        params, opt_state, loss = _unpack(STEP_RETURNS, out, ("params", "opt_state", "loss"))
        losses.append(np.asarray(loss))
    return np.array(losses)


@grader("frameworks", checks=CHECKS)
def grade(init: Any, train_step: Any, fit: Any) -> None:
    """Grade the exercise: pytrees of arrays, compiled steps, numbers, and no recompilation.

    Jit switched off before grading is caught by ``@grader``'s canary; switched off by the
    learner's code, by the probe in the model (see :func:`_require_compiled_every_step`).
    """
    rng = fresh_rng()
    draw = _draw(rng)
    rates, seeds = draw["rates"], draw["seeds"]

    # --- init: what goes into the step -----------------------------------------------
    result = call_learner(INIT_RUNS, init, _model(draw, seeds[0]), rates[0])
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

    # --- train_step, in the grader's own loop: three runs ------------------------------
    for run in range(3):
        model = _model(draw, seeds[run])
        weights = model_weights(model)
        on_device, in_numpy = draw["batches"]()
        with count_compiles(ANY_FUNCTION) as everything, _probe() as seen:
            losses = _grader_loop(init, train_step, model, rates[run], on_device)
        _require_compiled_every_step(STEP_COMPILED, seen, "train_step", on_device)
        want = reference_fit(weights, rates[run], in_numpy)
        _require_losses(STEP_NUMBERS, losses, want, STALE_HINT if run else NUMBERS_HINT)
        if run:
            where = f"in run {run + 1} (init plus {N_BATCHES} steps)"
            _require_no_compiles(STEP_ONCE, everything, where)
    for check in (STEP_RUNS, STEP_RETURNS, STEP_COMPILED, STEP_NUMBERS, STEP_ONCE):
        passed(check)

    # --- fit: three runs -----------------------------------------------------------------
    for run in range(3, 6):
        model = _model(draw, seeds[run])
        weights = model_weights(model)
        on_device, in_numpy = draw["batches"]()
        with count_compiles(ANY_FUNCTION) as everything, _probe() as seen:
            losses = call_learner(FIT_RUNS, fit, model, rates[run], on_device)
        _require_compiled_every_step(FIT_COMPILED, seen, "fit", on_device)
        want = reference_fit(weights, rates[run], in_numpy)
        _require_losses(FIT_NUMBERS, losses, want, STALE_HINT if run > 3 else NUMBERS_HINT)
        if run > 3:
            _require_no_compiles(FIT_ONCE, everything, f"in fit number {run - 2}")
    for check in (FIT_RUNS, FIT_COMPILED, FIT_NUMBERS, FIT_ONCE):
        passed(check)
