"""Grader for functions_as_arguments: a jitted ``sgd_step(params, x, y, weight_decay)``
and ``fit(params, batches, weight_decay)`` calling it once per batch, so a weight-decay
sweep compiles once. ``fit``'s calls of ``sgd_step`` are recorded: from a Python loop
(each call's arguments and outputs are checked), or traced into a program of fit's own (a
``lax.scan`` over the batches, a jitted ``fit``), which must then compile nothing more;
such an answer's results are checked by their numbers alone, and the two checks of a
loop's calls (FIT_THREADS, FIT_FROM_STEP) are skipped, not shown passed.

What the drawing covers, every run, and the wrong rule it breaks:

==============================================  =======================================
three weight decays through sgd_step            a static weight_decay
seven weight decays, each 25% from the others   a forgotten penalty, a stale value
three more fits, counted over every function    a lambda, partial or nested def jitted
(NumPy batches at every fit, as stated)         inside fit (a new function each time)
the last fit refills the NumPy buffers of the   results memoised by id() of the batches
one before, in place
the caller's list, arrays and params compared   a batch list emptied by pop(), params
after every fit                                 written in place
==============================================  =======================================

The checks named from :mod:`jitlab.grading.kernel`'s templates, as the learner sees them:
- sgd_step is compiled with jax.jit
- fit calls sgd_step with jit on
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jitlab.grading import Hints, Recorder, grader, is_jitted
from jitlab.grading.calls import changed_arguments, recording
from jitlab.grading.checks import (
    Grading,
    GradingFailure,
    as_numbers,
    fail,
    fail_unless,
    lost_digits,
    shorten,
)
from jitlab.grading.kernel import DONATED, JIT_ON, JITTED, KernelExercise, same_value
from jitlab.instruments.counting import ANY_FUNCTION, count_compiles

FIT = KernelExercise("fit", "sgd_step", "sgd_step(params, x, y, weight_decay)")
LEARNING_RATE = 0.1  # must equal LEARNING_RATE in the exercise's setup cell
N_BATCHES = 4
NUMBERS = """loss = mean((x @ w + b - y)**2) + weight_decay * sum(w**2); the step returns the
    loss at the params it was given, and params - LEARNING_RATE * gradient"""
STEP_NUMBERS = ("sgd_step: loss before the update", "sgd_step: new w", "sgd_step: new b")
FIT_NUMBERS = ("fit: per-batch losses", "fit: final w", "fit: final b")
CHECKS = {  # every check once: its name, then its default hint
    (STEP_RUNS := "sgd_step runs"): "",
    (STEP_JITTED := FIT.name(JITTED)): "",
    (STEP_PAIR := "sgd_step returns (new_params, loss)"): "",
    **dict.fromkeys(STEP_NUMBERS, NUMBERS),
    (STEP_ONCE := "sgd_step compiles once for every weight_decay"): """pass weight_decay as an
        ordinary (traced) argument, not a static one, so that every value shares one program""",
    (FIT_RUNS := "fit runs"): "",
    (FIT_PAIR := "fit returns (params, losses)"): "",
    (FIT_JIT_ON := FIT.name(JIT_ON)): "",
    (FIT_KEEPS := "fit leaves the caller's batches and params as they were"): """iterate over
        the batches (for x, y in batches) instead of popping them, and build new params
        instead of assigning into the dict you were given: the caller reads both again""",
    (FIT_CALLS := "fit calls the jitted sgd_step once per batch"): """call the jitted sgd_step,
        by that name, once per batch: in a Python loop in fit, or in the body of a lax.scan
        over the stacked batches; a NumPy loop or another step won't do""",
    (FIT_THREADS := "fit passes sgd_step the params, each batch and the weight_decay"): """thread
        params through the loop; pass each call fit's own weight_decay (an earlier one is stale)""",
    (FIT_FROM_STEP := "fit returns what sgd_step computed"): """return what sgd_step computed,
        not a recomputation""",
    **dict.fromkeys(FIT_NUMBERS, NUMBERS),
    (FIT_NOTHING := "three more fits (new data, new weight_decay) compile nothing"): """a lambda,
        functools.partial, nested def or jax.value_and_grad(...) built in fit (a lax.scan
        body defined inside fit too) is a new function every call, new to jit's cache: build
        the jitted step, and any scan body, once, at top level""",
    (FIT_STAYS := "fit stays right for every weight_decay"): """a value baked in at trace time (a
        global, an attribute, a default) or a result kept from an earlier call goes stale: pass
        weight_decay and the batches as arguments""",
}
HINTS = Hints(CHECKS)


def _reference_step(w: Any, b: float, x: Any, y: Any, weight_decay: float) -> tuple:
    """One SGD step of the exercise's model, in float64 NumPy: (loss, new w, new b)."""
    residual = x @ w + b - y
    value = float(np.mean(residual**2) + weight_decay * np.sum(w**2))
    grad_w = 2.0 * x.T @ residual / len(y) + 2.0 * weight_decay * w
    return value, w - LEARNING_RATE * grad_w, b - LEARNING_RATE * 2.0 * float(np.mean(residual))


def _decay_hint(w: Any, b: float, x: Any, y: Any, decays: list, got: list) -> str:
    """When every new w is the reference's with another weight-decay term (c * wd * w in
    the gradient, c not 2), say so ("" otherwise: the mistake is elsewhere)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    data = 2.0 * x.T @ (x @ w + b - y) / len(y)  # the gradient of the mean squared error
    found = []
    for wd, new in zip(decays, got, strict=True):
        new = as_numbers(new)
        if new is None or new.shape != w.shape or not w.any():
            return ""  # the shape's own verdict, or no decay to see
        term, decay = (w - new) / LEARNING_RATE - data, wd * w
        c = float(term @ decay / (decay @ decay))
        if np.linalg.norm(term - c * decay) > 1e-3 * (np.linalg.norm(term) + 1e-3):
            return ""
        found.append(c)
    c = float(np.median(found))
    if abs(c - 2.0) < 0.2:
        return ""
    whole = "differentiate the whole loss, the penalty included"
    fix = "jax.grad of the loss already holds it: add nothing more" if c > 2 else whole
    return (f"the update's weight-decay term is {c:.2g} * weight_decay * w, not the gradient "
            f"of weight_decay * sum(w**2), 2 * weight_decay * w: {fix}")  # fmt: skip


def _reference_fit(w: Any, b: float, batches: list, weight_decay: float) -> tuple:
    """The whole loop: (per-batch losses, final w, final b)."""
    losses = []
    for x, y in batches:
        value, w, b = _reference_step(w, b, x, y, weight_decay)
        losses.append(value)
    return np.array(losses), w, b


def _problem(rng: np.random.Generator, count: int, size: int, features: int) -> tuple:
    """Fresh params, their w and b in float64 (so the reference is), ``count`` float32 batches."""
    w, b = rng.normal(scale=0.5, size=features).astype(np.float32), rng.normal(scale=0.5)
    true_w, xs = rng.normal(size=features), rng.normal(size=(count, size, features))
    xs = xs.astype(np.float32)
    ys = (xs @ true_w + 0.3 + 0.1 * rng.normal(size=(count, size))).astype(np.float32)
    params = {"w": jnp.asarray(w), "b": jnp.asarray(b, jnp.float32)}
    return params, w.astype(np.float64), float(np.float32(b)), list(zip(xs, ys, strict=True))


def _pair(check: str, result: Any, what: str) -> tuple[Any, Any, Any]:
    """(second, w, b) of ``result``, a pair whose first item is params as the step got them."""
    pair = isinstance(result, tuple | list) and len(result) == 2
    params = result[0] if pair else None
    ok = pair and isinstance(params, dict) and set(params) == {"w", "b"}
    keys = sorted(params) if isinstance(params, dict) else ""
    seen = f"{type(params).__name__}: {keys}" if pair else type(result).__name__
    expected = f'a pair {what}, its params a dict with keys "w" and "b"'
    hint = f"return {what} as a tuple, params in the structure you were given"
    fail_unless(check, ok, expected=expected, seen=seen, hint=hint)
    return result[1], params["w"], params["b"]


def _snapshot(tree: Any) -> Any:
    """Copies of ``tree``'s arrays in new containers: what the caller handed fit."""
    return jax.tree.map(np.array, tree)


def _require_kept(
    grading: Grading, params: dict, batches: list, before: tuple[Any, Any], number: int
) -> None:
    """The caller's params and batch list hold what they held before fit number ``number``."""
    seen, donated = changed_arguments(
        {"batches": batches, "params": params}, {"batches": before[1], "params": before[0]}
    )
    expected = f"the caller's batches and params as they were, after fit number {number}"
    grading.require(FIT_KEEPS, not seen, expected, seen, DONATED if donated else HINTS[FIT_KEEPS])


def _threading(
    proxy: Recorder, params: dict, batches: list, weight_decay: float, earlier: Any
) -> tuple[str, str]:
    """What the first call of sgd_step got wrong of (params, batch, weight_decay), and the
    hint for it; ("", "") if nothing. ``earlier``: the params the previous fit returned (a
    fit that starts from them resumes where that fit stopped), None before the first."""
    for i, (call, (x, y)) in enumerate(zip(proxy.calls, batches, strict=True)):
        given = list(call.arguments.values())  # in the step's order, however passed
        if len(given) != 4:
            return f"call {i + 1} passed {len(given)} argument(s)", HINTS[FIT_THREADS]
        wrong = []
        if i == 0 and earlier is not None and not same_value(given[0], params):
            if same_value(given[0], earlier):  # recomputed: the previous fit's final params
                seen = "call 1 passed the params the previous fit returned, not fit's params"
                hint = "fit resumed where the previous fit stopped: start every fit from the "
                hint += "params it is given, and keep nothing from one fit to the next"
                return seen, hint
        if not same_value(given[0], params):
            wrong.append("params that are not the previous step's new params")
        if not (same_value(given[1], x) and same_value(given[2], y)):
            wrong.append(f"not batch {i + 1}'s x and y")
        decay = as_numbers(given[3])  # in float32, as the step computes; a stale one is 25 % off
        if decay is None or decay.size != 1 or np.float32(decay.item()) != np.float32(weight_decay):
            wrong.append(f"weight_decay={shorten(repr(given[3]), 40)} instead of {weight_decay}")
        if wrong:
            return f"call {i + 1} passed " + "; ".join(wrong), HINTS[FIT_THREADS]
        params = call.out[0] if isinstance(call.out, tuple | list) and call.out else None
    return "", ""


def _require_losses(losses: Any, problem: tuple) -> None:
    """``losses`` is a 1-D array of one loss per batch; when it is not, the hint says what
    was returned instead: a list, or an array of another shape or length (the reference
    run over the batches less the first, or less the last, recomputed, names a skipped one)."""
    shape, array = np.shape(losses), isinstance(losses, np.ndarray | jnp.ndarray)
    if array and shape == (N_BATCHES,):
        return
    w0, b0, batches, wd = problem
    hint = "stack the per-batch losses into one array (jnp.stack), not a list"
    if array and len(shape) != 1:
        hint = f"return the losses as one 1-D array, shape ({N_BATCHES},), not {shape}"
    elif array:
        hint = f"{shape[0]} losses for {N_BATCHES} batches: call sgd_step once for every "
        hint += "batch, the first and the last included (for x, y in batches)"
        for skipped, rest in (("the first batch", batches[1:]), ("the last batch", batches[:-1])):
            if len(rest) == shape[0] and np.allclose(
                losses, _reference_fit(w0, b0, rest, wd)[0], rtol=1e-4
            ):
                hint = f"fit skipped {skipped}: its losses are those of the other batches; "
                hint += "loop over every batch (for x, y in batches, or range(len(batches)))"
    seen = f"{type(losses).__name__} of shape {shape}"
    raise fail(FIT_PAIR, expected=f"losses a 1-D array of {N_BATCHES}", seen=seen, hint=hint)


@grader("functions_as_arguments", checks=tuple(CHECKS), hints=HINTS)
def grade(grading: Grading, sgd_step: Any, fit: Any) -> None:
    """Grade sgd_step against a NumPy reference, its calls in fit, and a sweep's compiles."""
    rng = grading.rng
    features, size = int(rng.integers(3, 9)), int(rng.integers(16, 49))
    bins = np.geomspace(0.01, 0.5, 10)  # seven decays, each ~25% from the others
    decays = [float(v) for v in rng.choice(bins, size=7, replace=False) * rng.uniform(0.9, 1.1, 7)]

    params, w0, b0, [(x, y)] = _problem(rng, 1, size, features)
    want = [_reference_step(w0, b0, x, y, wd) for wd in decays[:3]]  # a row per decay
    x, y = jnp.asarray(x), jnp.asarray(y)
    grading.call_learner(STEP_RUNS, sgd_step, params, x, y, decays[0])  # a stub says so first
    FIT.jitted(grading, sgd_step)
    sgd_step.clear_cache()
    with count_compiles(sgd_step) as step_count:
        steps = [grading.call_learner(STEP_RUNS, sgd_step, params, x, y, wd) for wd in decays[:3]]
    grading.passed(STEP_RUNS)
    got = [_pair(STEP_PAIR, result, "(new_params, loss)") for result in steps]
    grading.passed(STEP_PAIR)
    for i, check in enumerate(STEP_NUMBERS):
        hint = _decay_hint(w0, b0, x, y, decays[:3], [g[1] for g in got]) if i == 1 else ""
        grading.require_close(
            check, [g[i] for g in got], [r[i] for r in want], rtol=1e-4, hint=hint or NUMBERS
        )
    what = "compilation(s) of sgd_step for 3 calls with 3 weight_decay values"
    cause = "only weight_decay changed"
    FIT.compiles(
        grading, STEP_ONCE, step_count, exactly=1, what=what, hint=HINTS[STEP_ONCE], cause=cause
    )

    if fit_jitted := is_jitted(fit):
        fit.clear_cache()
    previous: list = []
    earlier = None  # the params the previous fit returned
    inlined = False  # sgd_step traced into a program of fit's: later fits may not trace it
    for number, wd in enumerate(decays[3:], start=1):
        params, w0, b0, batches = _problem(rng, N_BATCHES, size, features)
        want = _reference_fit(w0, b0, batches, wd)  # before fit sees the batches
        if number == 4:  # the same NumPy objects as fit 3, refilled: id() cannot tell
            for (old_x, old_y), (new_x, new_y) in zip(previous, batches, strict=True):
                old_x[...], old_y[...] = new_x, new_y
            batches = previous
        previous, before = batches, _snapshot((params, batches))
        with count_compiles(ANY_FUNCTION) as everything, recording(fit, sgd_step) as proxy:
            try:
                result = grading.call_learner(FIT_RUNS, fit, params, batches, wd)
            except GradingFailure:
                _require_kept(grading, params, batches, before, number)  # the likelier cause, named
                raise
        grading.passed(FIT_RUNS)
        _require_kept(grading, params, batches, before, number)
        params, batches = jax.tree.map(jnp.asarray, before)  # the grader's own, from here
        if number > 1:  # one fit at a time, so a wrong answer fails after one fit, not three
            what = f"compilation(s) in fit number {number} (new data and weight_decay, same shapes)"
            names = [f"{name} x{n}" for name, n in everything.compiled.most_common(4)]
            cause = f"compiled: {', '.join(names)}" if names else ""
            hint = HINTS[FIT_NOTHING]
            FIT.compiles(
                grading, FIT_NOTHING, everything, exactly=0, what=what, hint=hint, cause=cause
            )
        got = _pair(FIT_PAIR, result, "(params, losses)")
        _require_losses(got[0], (w0, b0, before[1], wd))
        grading.passed(FIT_PAIR)

        FIT.jit_on(grading, proxy)
        calls, traced = proxy.calls, proxy.traced
        seen = f"{len(calls)} call(s) of sgd_step" + bool(traced) * (
            f", and {len(traced)} while {traced[0].within if traced else ''} inside fit traced "
            "it, into a program of fit's own"
        )
        inlined = inlined or bool(traced) and not calls  # a scan's body, or a jitted fit
        if fit_jitted or inlined:  # the step's outputs were tracers: nothing to thread
            ok = bool(traced) and not calls or number > 1 and not calls
            expected = f"{N_BATCHES} calls of sgd_step, or sgd_step traced into fit's program "
            expected += "(a lax.scan, say), every fit the same way"
            grading.require(FIT_CALLS, ok, expected, seen)
            grading.skip(FIT_THREADS)  # tracers in, tracers out: the numbers are checked below
            grading.skip(FIT_FROM_STEP)
        else:
            expected = f"{N_BATCHES} calls of sgd_step (one per batch) in fit number {number}"
            grading.require(FIT_CALLS, len(calls) == N_BATCHES and not traced, expected, seen)
            seen, hint = _threading(proxy, params, batches, wd, earlier)
            expected = f"each call {FIT.call}: the params from the call before (or fit's "
            expected += f"params), its batch, and weight_decay={wd}"
            grading.require(FIT_THREADS, not seen, expected, seen, hint)
            outs = [call.out for call in calls]
            last = outs[-1][0]
            returned = np.stack([np.asarray(o[1]) for o in outs]), last["w"], last["b"]
            mine = (np.asarray(got[0]).reshape(-1), *got[1:])
            ok = same_value(mine, returned)
            expected = "fit's losses and final params as sgd_step returned them"
            seen = "they differ from what fit's own calls of sgd_step returned"
            narrowed = [str(np.asarray(x).dtype) for x in got if np.asarray(x).dtype.itemsize < 4]
            # sgd_step's values, cast to a 16-bit float on the way (bfloat16 keeps 2 to 3
            # digits); a recomputation, close but not narrowed, gets the plain verdict
            if not ok and narrowed and lost_digits(mine, returned, rtol=1e-2):
                seen += f", to about three digits ({', '.join(narrowed)})"
                hint = "return sgd_step's outputs as they are: no cast to a narrower dtype"
                grading.require(FIT_FROM_STEP, ok, expected, seen, hint)
            grading.require(FIT_FROM_STEP, ok, expected, seen)
        about = f"fit number {number} (weight_decay={wd:.2e}, its own batches)"
        for i, check in enumerate(FIT_NUMBERS if number == 1 else (FIT_STAYS,) * 3):
            grading.require_close(check, got[i], want[i], rtol=1e-4, about=about, hint=HINTS[check])
        earlier = _snapshot(result[0])  # the next fit must not start from these params
