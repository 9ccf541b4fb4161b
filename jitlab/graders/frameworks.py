"""Grader for the frameworks exercise: a learning-rate sweep over re-created NNX models,
compiled once. The grader's ``Regressor`` carries a probe: traced, it stages a
``jax.debug.callback`` that counts each execution of the compiled program (and the batch's
sum); called eagerly, it counts an eager call and whether jit was off. So the grader knows
that *its* calls ran through compiled code, on every batch, with jit on.

What every run draws, on purpose:
  model sizes, data, seeds     fresh (take everything from the model given)
  four learning rates          20 % or more apart: a rate frozen at trace time fails
  re-created models            same sizes, new seeds: new data for the compiled program
  one batches list for all fits  as the exercise's sweep: a memo keyed by id() of the
                               batches hands back an earlier fit's losses; a fit that pops,
                               reverses or sorts the list is named
  a third fit at the first      a memo of losses keyed by the learning rate
  fit's rate, a new model
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jitlab.doctor import classify
from jitlab.grading import as_numbers, fail, fail_unless
from jitlab.grading.calls import Recorder, copy_leaf, recording
from jitlab.grading.causes import why
from jitlab.grading.checks import (
    JIT_OFF_HINT,
    JIT_ON,
    Grading,
    Hints,
    grader,
    is_jitted,
    shorten,
)
from jitlab.instruments.counting import ANY_FUNCTION, count_compiles

# The grader's own loop over train_step, then fit, each run twice; a phase's checks end with:
# the model ran compiled on every batch, the losses, run 2 compiled nothing.
INIT = (INIT_RUNS := "init runs", "init returns (graphdef, params, opt_state)")
STEP = (
    STEP_RUNS := "train_step runs",
    "train_step returns (params, opt_state, loss)",
    "train_step runs the model in a compiled program at every step",
    "train_step: losses match the reference",
    "new models and learning rates compile nothing",
)
FIT = (
    FIT_RUNS := "fit runs",
    FIT_RETURNS := "fit returns an array of losses, one per batch",
    FIT_CALLS := "fit calls train_step, by its name, once per batch",
    FIT_KEEPS := "fit leaves the caller's list of batches as it was",
    "fit runs the model in a compiled program, once per batch",
    "fit: losses match the reference",
    "more fits compile nothing",
)
CHECKS = (
    *INIT,
    PARAMS_ARRAYS := "params is a pytree of arrays",
    OPT_STATE_ARRAYS := "opt_state is a pytree of arrays",
    STEP_JITTED := "train_step is a jitted function",
    *STEP,
    *FIT,
)
N_BATCHES = 4
LOOP = "the grader's loop over train_step"
HINTS = {  # no key is a signature part or a cause but these two, for Why.hint_for
    classify.STATIC_VALUE: """something static changes from run to run: an Optax
        transformation built per run, or the rate in a static argument or the graphdef. Build
        one at top level with optax.inject_hyperparams, the rate an array in opt_state""",
    "again": """a new function object per run (a lambda, functools.partial or jax.jit built in init
        or fit): build the jitted step once, at top level""",
    "numbers": """plain SGD on mse(model, x, y) = mean((model(x) - y)**2): the step returns the loss
        at the params it was given, and params - learning_rate * gradient""",
    "update": """the first loss is right (at the params the step was given), the later ones are
        not, so the update is off: a learning rate other than this run's (one read from a global
        or a closure is frozen at trace time; one stored in bfloat16 or float16 is rounded: keep
        it float32), or not params - learning_rate * gradient""",
    "stale": """an earlier run was right, and this one's first loss (at the params given) is
        right too, but not the later ones: a rate baked in at trace time (a global, a closure, a
        default) stays the same. Keep the rate in opt_state, as an array""",
    "resumed": """an earlier run was right, and this one's first loss (at the params given) is
        not: the run did not start from the model it was given. Params or state kept from an
        earlier run (a global, a default argument) carry over: start every run from
        init(model, learning_rate)""",
    "kept": """nothing may be kept from an earlier fit: a memo of losses (by the learning rate,
        by the batches) hands back another model's numbers. Train the model you are given,
        every time""",
    "batches": """loop over the batches (for x, y in batches) and leave the list as it is: the
        sweep hands the same list to every fit, and pop, reverse or sort in place change what
        the next fit trains on""",
    # a leaf that is no array, as the verdict names it (KIND_OF), and its hint
    "an nnx.Optimizer": """keep the optimizer's state, not the optimizer: build one Optax
        transformation at top level and return its init(params)""",
    "an NNX object": """the exercise wants the model's arrays, not the model: `graphdef, params =
        nnx.split(model)`, return params, and rebuild it in train_step with nnx.merge""",
    "an Optax transformation": """a pair of functions, not state: build it once at top level and
        keep only what its init returns""",
    "a Python number": """static under eqx.filter_jit, weakly typed under jax.jit: store it as a
        float32 array instead (jitlab hint 13)""",
    "": "keep only arrays; values that select code belong in the graphdef",
}
HINTS = Hints(HINTS)
KIND_OF = (  # the first that matches
    (nnx.Optimizer, "an nnx.Optimizer"),
    (nnx.Pytree, "an NNX object"),
    (optax.GradientTransformation, "an Optax transformation"),
    ((bool, int, float, complex), "a Python number"),
    (object, ""),
)
FRAMEWORK = nnx.Pytree | optax.GradientTransformation

_PROBE: dict[str, Any] = {"eager": 0, "jit_off": 0, "sums": []}  # a sum per compiled execution


def _count_execution(batch_sum: Any) -> None:
    _PROBE["sums"].append(float(batch_sum))


def _probed() -> dict[str, Any]:
    """The probe's counts since the last call (its callbacks flushed first); counts anew."""
    jax.effects_barrier()
    seen = dict(_PROBE)
    _PROBE.update(eager=0, jit_off=0, sums=[])
    return seen


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


def _numbers_hint(got: list, want: list) -> Callable[[list[int]], str]:
    """The hint for the wrong runs: the losses of an earlier run handed back; after a right
    run, one that started elsewhere (its first loss, at the params given, is wrong) or with a
    stale rate (its first loss is right); an update that is off; or the formula."""

    def hint(wrong: list[int]) -> str:
        first, losses = wrong[0], [as_numbers(g) for g in got]
        now = losses[first]
        same = [i for i in range(first) if now is not None and np.shape(losses[i]) == now.shape]
        same = [i for i in same if np.allclose(losses[i], now, rtol=1e-6, atol=0)]
        if same:
            return f"run {first + 1} returned the losses of run {same[0] + 1}: {HINTS['kept']}"
        ok = now is not None and now.size and np.isclose(now.flat[0], want[first][0])
        if first:  # an earlier run was right
            return HINTS["stale" if ok else "resumed"]
        return HINTS["update" if ok else "numbers"]

    return hint


def reference_fit(model: nnx.Module, learning_rate: float, batches: list) -> np.ndarray:
    """Float64 SGD from the model's weights as they are now: the loss before each update."""
    b1, w1, (b2,), w2 = [np.array(a, np.float64) for a in jax.tree.leaves(nnx.state(model))]
    w2, losses = w2[:, 0], []
    for x, y in batches:
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        h = np.maximum(z := x @ w1 + b1, 0.0)
        residual = h @ w2 + b2 - y
        losses.append(np.mean(residual**2))
        d_pred = 2.0 * residual / len(y)
        d_z = np.outer(d_pred, w2) * (z > 0)
        w1, b1 = w1 - learning_rate * (x.T @ d_z), b1 - learning_rate * d_z.sum(axis=0)
        w2, b2 = w2 - learning_rate * (h.T @ d_pred), b2 - learning_rate * d_pred.sum()
    return np.array(losses)


def _batches(rng: np.random.Generator, size: int, features: int) -> list:
    true_w, shape = rng.normal(size=features), (N_BATCHES, size)
    xs = rng.normal(size=(*shape, features)).astype(np.float32)
    ys = (np.tanh(xs @ true_w) + 0.1 * rng.normal(size=shape)).astype(np.float32)
    return [(jnp.asarray(x), jnp.asarray(y)) for x, y in zip(xs, ys, strict=True)]


def require_pytree_of_arrays(grading: Grading, check: str, tree: Any, what: str) -> None:
    """Pass if every leaf of ``tree`` is an array and no node is a framework object."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda n: isinstance(n, FRAMEWORK))
    for path, leaf in flat:
        if not isinstance(leaf, jax.Array | np.ndarray | np.generic):  # framework objects included
            name = next(name for kind, name in KIND_OF if isinstance(leaf, kind))
            raise fail(
                check,
                expected=f"{what} as a pytree of arrays (dict, tuple, nnx.State, NamedTuple "
                "with jax.Array leaves)",
                seen=f"{name or shorten(repr(leaf), 80)} ({type(leaf).__name__}) at "
                f"{what}{jax.tree_util.keystr(path)}",
                hint=HINTS[name],
            )
    grading.require(
        check,
        bool(flat),
        expected=f"{what} holding at least one array",
        seen=shorten(f"{what} has no leaves: {tree!r}", 200),
        hint="params are the model's weights, from nnx.split(model); opt_state holds the "
        "learning rate",
    )


def _call(grading: Grading, checks: tuple[str, ...], fn: Any, *args: Any) -> tuple[Any, ...]:
    """``fn(*args)``; a crash fails checks[0], a result not the tuple checks[1] names fails it."""
    result, names = grading.call_learner(checks[0], fn, *args), checks[1].partition("(")[2][:-1]
    sequence = isinstance(result, tuple | list)
    fail_unless(
        checks[1],
        sequence and len(result) == len(names.split(", ")),
        expected=f"a tuple ({names})",
        seen=type(result).__name__ + (f" of length {len(result)}" if sequence else ""),
        hint=f"return ({names}), in that order",
    )
    return tuple(result)


def _grader_loop(
    grading: Grading, init: Any, train_step: Any, model: Any, rate: float, batches: list
):
    """Init, then train_step per batch, as fit should (call_learner's hints name static arrays)."""
    graphdef, params, opt_state = _call(grading, INIT, init, model, rate)
    losses = []
    for x, y in batches:
        params, opt_state, loss = _call(
            grading, STEP, train_step, graphdef, params, opt_state, x, y
        )
        losses.append(np.asarray(loss))
    return np.array(losses)


def _require_fit_calls(losses: Any, step: Recorder, earlier: list) -> None:
    """fit returned an array of one loss per batch, and called train_step once per batch
    (a jit of its own of an identical step is not train_step; ``earlier`` fits' losses handed
    back are a memo's)."""
    shape = np.shape(losses) if isinstance(losses, np.ndarray | jax.Array) else None
    seen = f"{type(losses).__name__}" + (f" of shape {shape}" if shape is not None else "")
    fail_unless(FIT_RETURNS, shape == (N_BATCHES,), expected=f"an array of shape ({N_BATCHES},)",
                seen=seen, hint="stack the losses into one array: jnp.stack(losses)")  # fmt: skip
    seen = f"{len(step.calls)} call(s) of train_step for {N_BATCHES} batches"
    seen += f", and {len(step.traced)} while another function traced it" * bool(step.traced)
    hint = """call train_step itself, by that name, once per batch: a jitted function of
        your own, even one that does the same, is not the step that was asked for"""
    same = [i for i, e in enumerate(earlier) if np.shape(e) == shape and np.array_equal(e, losses)]
    hint = f"fit returned the losses of run {same[0] + 1} of fit: {HINTS['kept']}" if same else hint
    fail_unless(FIT_CALLS, len(step.calls) == N_BATCHES, expected=f"{N_BATCHES} calls",
                seen=seen, hint=" ".join(hint.split()))  # fmt: skip


def _require_batches_kept(grading: Grading, batches: list, given: tuple) -> None:
    """The caller's list holds the batches it held, in their order, after fit."""
    same = len(batches) == len(given) and all(a is b for a, b in zip(batches, given, strict=True))
    reordered = sorted(map(id, batches)) == sorted(map(id, given))
    seen = "the same batches in another order" if reordered else f"{len(batches)} left in it"
    expected = f"the list of {len(given)} batches as fit was given it, in its order"
    grading.require(FIT_KEEPS, same, expected, f"fit changed the list: {seen}", HINTS["batches"])


def _require_compiled(check: str, seen: dict[str, Any], who: str, batches: list) -> None:
    """Jit was on; the model ran in a compiled program on every batch, and never eagerly."""
    fail_unless(
        JIT_ON,
        not seen["jit_off"],
        expected=f"jit switched on while {who} runs",
        seen=f"jit was switched off (jax.disable_jit() or jax_disable_jit) while {who} ran: "
        f"the model ran op by op {seen['jit_off']} time(s)",
        hint=JIT_OFF_HINT,
    )
    sums, count = seen["sums"], f"{len(seen['sums'])} compiled execution(s)"
    missed = [
        i for i, (x, _) in enumerate(batches) if not np.isclose(sums, jnp.sum(x), 1e-4, 1e-4).any()
    ]
    if seen["eager"]:
        saw = f"the model ran outside any compiled program {seen['eager']} time(s) ({count})"
        hint = "never outside it (not to compute a loss, not to check a result)"
    elif not sums:
        saw = f"{count} for {N_BATCHES} batches: the model passed in never ran"
        hint = "rebuild the model you were given (nnx.split(model) in init), not one of your own"
    elif len(sums) < N_BATCHES:
        saw, hint = f"{count} for {N_BATCHES} batches", "losses computed another way do not count"
    elif missed:
        saw = f"{count}, but batch(es) {missed} (counting from 0) never reached the model"
        hint = "repeated calls on one batch do not count"
    else:
        return
    raise fail(
        check,
        expected=f"the model in a compiled program once for each of {N_BATCHES} batches",
        seen=saw,
        hint=f"call the model only inside the jitted train_step, once per batch; {hint}",
    )


def _require_no_compiles(grading: Grading, check: str, count: Any, run: str, calls: list) -> None:
    """Nothing compiled; else what did (by name) and why train_step did (the frame's why)."""
    found = why(calls, label=lambda i: f"call {i + 1} of train_step")
    names = ", ".join(f"{name} x{n}" for name, n in count.compiled.most_common(3))
    cause = f"{shorten(found.text)} (cause: {', '.join(found.causes)})"
    grading.require(
        check,
        not count.compiles,
        expected="0 compilations: a re-created model of the same size and a new learning "
        "rate are new data for the program already compiled",
        seen=f"{count.compiles} compilation(s) in {run}: {names}; "
        + (cause if found else "train_step itself did not compile: another function did"),
        hint=found.hint_for(HINTS, HINTS[classify.STATIC_VALUE]) if found else HINTS["again"],
    )


@grader("frameworks", checks=CHECKS, hints=HINTS)
def grade(grading: Grading, init: Any, train_step: Any, fit: Any) -> None:
    """Grade the exercise: pytrees of arrays, compiled steps, numbers, and no recompilation."""
    rng = grading.rng
    features, hidden, size = (int(n) for n in rng.integers((3, 8, 16), (9, 25, 49)))
    bins = np.geomspace(0.02, 0.3, 10)  # 35 % apart, jittered by 5 %: rates 20 % or more apart
    rates = (rng.choice(bins, 4, replace=False) * rng.uniform(0.95, 1.05, 4)).tolist()
    rates.append(rates[2])  # the third fit: the first fit's rate, a new model
    seeds = rng.choice(10_000, size=5, replace=False).tolist()

    first = Regressor(features, hidden, rngs=nnx.Rngs(seeds[0]))
    _, params, opt_state = _call(grading, INIT, init, first, rates[0])
    for check in INIT:
        grading.passed(check)
    require_pytree_of_arrays(grading, PARAMS_ARRAYS, params, "params")
    require_pytree_of_arrays(grading, OPT_STATE_ARRAYS, opt_state, "opt_state")
    framework = type(train_step).__module__.startswith(("flax.", "equinox."))  # their jits
    grading.require(
        STEP_JITTED,
        is_jitted(train_step) or framework and callable(getattr(train_step, "lower", None)),
        expected="train_step wrapped by jax.jit (or nnx.jit, eqx.filter_jit)",
        seen=f"{type(train_step).__name__} {getattr(train_step, '__name__', '')}".strip(),
        hint="decorate train_step with @jax.jit, once, at top level",
    )
    shared = _batches(rng, size, features)  # every fit gets this one list, as in a sweep
    given = tuple(shared)  # what it holds: what every fit trains on, and leaves in it
    calls: list = []  # train_step's calls, in every run: what why compares
    for checks, runs, who in ((STEP, (0, 1), LOOP), (FIT, (2, 3, 4), "fit")):
        got, want, counts = [], [], []
        for run in runs:
            rate, learner = rates[run], Regressor(features, hidden, rngs=nnx.Rngs(seeds[run]))
            batches = shared if checks is FIT else _batches(rng, size, features)
            want.append(reference_fit(learner, rate, list(given) if checks is FIT else batches))
            _probed()
            with count_compiles(ANY_FUNCTION) as count:
                if checks is FIT:
                    with recording(fit, train_step, lambda: count.compiles) as step:
                        losses = grading.call_learner(FIT_RUNS, fit, learner, rate, batches)
                else:
                    step = Recorder(train_step, lambda: count.compiles)
                    losses = _grader_loop(grading, init, step, learner, rate, batches)
            got.append(jax.tree.map(copy_leaf, losses))  # as returned, kept
            counts.append(count)
            if checks is FIT:
                _require_batches_kept(grading, shared, given)
                _require_fit_calls(losses, step, got[:-1])
            _require_compiled(checks[-3], _probed(), who, batches)
            calls += step.calls
        for check in checks[:-2]:
            grading.passed(check)
        about = [f"run {i + 1} of {who} (learning rate {rates[r]:.4g})" for i, r in enumerate(runs)]
        grading.require_cases(
            checks[-2], got, want, about=about.__getitem__, hint=_numbers_hint(got, want), rtol=1e-4
        )
        for i, counted in enumerate(counts[1:], start=2):
            _require_no_compiles(grading, checks[-1], counted, f"run {i} of {who}", calls)
