"""Grader for functions_as_arguments: a jitted ``sgd_step(params, x, y, weight_decay)``
and ``fit(params, batches, weight_decay)`` that calls it once per batch, so that a
weight-decay sweep compiles once. ``fit``'s calls of ``sgd_step`` are recorded
(:func:`jitlab.grading.recording`); a ``fit`` that is itself jitted passes if the step
is traced into its program.

What the drawing covers, every run, and the wrong rule it breaks:

==============================================  =======================================
three weight decays through sgd_step            a static weight_decay
seven weight decays, each 25% from the others   a forgotten penalty, a stale value
three more fits, counted over every function    a lambda, partial or nested def jitted
                                                inside fit (a new function each time)
the last fit refills the NumPy buffers of the   results memoised by id() of the batches
one before, in place
==============================================  =======================================
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from jitlab.grading import Recorder, call_learner, fail, fresh_rng, grader, is_jitted, passed
from jitlab.grading.calls import recording
from jitlab.grading.checks import require, require_close, shorten
from jitlab.grading.kernel import FROM_KERNEL, JIT_ON, JITTED, KernelExercise, same_value
from jitlab.instruments.counting import ANY_FUNCTION, count_compiles

FIT = KernelExercise("fit", "sgd_step", "sgd_step(params, x, y, weight_decay)")
LEARNING_RATE = 0.1  # must equal LEARNING_RATE in the exercise's setup cell
N_BATCHES = 4
NUMBERS_HINT = (
    "loss = mean((x @ w + b - y)**2) + weight_decay * sum(w**2); the step returns the "
    "loss at the params it was given, and params - LEARNING_RATE * gradient"
)
STEP_RUNS, STEP_JITTED, STEP_PAIR = (
    "sgd_step runs",
    FIT.name(JITTED),
    "sgd_step returns (new_params, loss)",
)
STEP_LOSS, STEP_W, STEP_B = "sgd_step: loss before the update", "sgd_step: new w", "sgd_step: new b"
STEP_ONCE = "sgd_step compiles once for every weight_decay"
FIT_RUNS, FIT_PAIR, FIT_JIT_ON = "fit runs", "fit returns (params, losses)", FIT.name(JIT_ON)
FIT_CALLS = "fit calls the jitted sgd_step once per batch"
FIT_THREADS = "fit passes sgd_step the params, each batch and the weight_decay"
FIT_FROM_STEP = FIT.name(FROM_KERNEL)
FIT_LOSSES, FIT_W, FIT_B = "fit: per-batch losses", "fit: final w", "fit: final b"
FIT_NOTHING = "three more fits (new data, new weight_decay) compile nothing"
FIT_STAYS = "fit stays right for every weight_decay"
CHECKS = (STEP_RUNS, STEP_JITTED, STEP_PAIR, STEP_LOSS, STEP_W, STEP_B, STEP_ONCE, FIT_RUNS)
CHECKS += (FIT_PAIR, FIT_JIT_ON, FIT_CALLS, FIT_THREADS, FIT_FROM_STEP, FIT_LOSSES, FIT_W)
CHECKS += (FIT_B, FIT_NOTHING, FIT_STAYS)


def _reference_step(
    w: np.ndarray, b: float, x: np.ndarray, y: np.ndarray, weight_decay: float
) -> tuple:
    """One SGD step of the exercise's model, in float64 NumPy: (new w, new b, loss)."""
    residual = x @ w + b - y
    value = float(np.mean(residual**2) + weight_decay * np.sum(w**2))
    grad_w = 2.0 * x.T @ residual / len(y) + 2.0 * weight_decay * w
    return w - LEARNING_RATE * grad_w, b - LEARNING_RATE * 2.0 * float(np.mean(residual)), value


def _reference_fit(w: np.ndarray, b: float, batches: list, weight_decay: float) -> tuple:
    """The whole loop: (final w, final b, per-batch losses)."""
    losses = []
    for x, y in batches:
        w, b, value = _reference_step(w, b, x, y, weight_decay)
        losses.append(value)
    return w, b, np.array(losses)


def _problem(rng: np.random.Generator, count: int, size: int, features: int) -> tuple:
    """Fresh params (and their float64 w, b), ``count`` float32 NumPy batches, and their
    float64 copies."""
    w = rng.normal(scale=0.5, size=features).astype(np.float32)
    b = np.float32(rng.normal(scale=0.5))
    true_w, batches = rng.normal(size=features), []
    for _ in range(count):
        x = rng.normal(size=(size, features)).astype(np.float32)
        batches.append((x, (x @ true_w + 0.3 + 0.1 * rng.normal(size=size)).astype(np.float32)))
    in_float64 = [(x.astype(np.float64), y.astype(np.float64)) for x, y in batches]
    params = {"w": jnp.asarray(w), "b": jnp.asarray(b)}
    return params, w.astype(np.float64), float(b), batches, in_float64


def _pair(check: str, result: Any, what: str) -> tuple[Any, Any]:
    if not (isinstance(result, tuple | list) and len(result) == 2):
        raise fail(check, expected=f"a pair {what}", seen=type(result).__name__,
                   hint=f"return {what} as a tuple")  # fmt: skip
    params = result[0]
    if not (isinstance(params, dict) and set(params) == {"w", "b"}):
        keys = sorted(params) if isinstance(params, dict) else ""
        raise fail(check, expected='params as a dict with keys "w" and "b"',
                   seen=f"{type(params).__name__}: {keys}",
                   hint="return params in the same structure you received them")  # fmt: skip
    return params, result[1]


def _check_calls(proxy: Recorder, fit_jitted: bool, number: int, first: bool) -> None:
    FIT.jit_on(proxy)
    calls, traced = proxy.calls, proxy.traced
    if fit_jitted:
        ok, expected = (
            not first or (bool(traced) and not calls),
            "sgd_step traced into fit's program",
        )
    else:
        ok, expected = (
            len(calls) == N_BATCHES and not traced,
            f"{N_BATCHES} calls of sgd_step (one per batch) in fit number {number}",
        )
    require(
        FIT_CALLS,
        ok,
        expected=expected,
        seen=f"{len(calls) + len(traced)} call(s) of sgd_step",
        hint="call the jitted sgd_step once per batch inside fit (the grader watches the "
        "name sgd_step in fit's module and closure); a NumPy loop, or another jitted "
        "function, does not count",
    )


def _check_threading(proxy: Recorder, params: dict, batches: list, weight_decay: float) -> None:
    current = params
    for i, (call, (x, y)) in enumerate(zip(proxy.calls, batches, strict=True)):
        arguments = list(call.arguments.values())  # in the step's order, however passed
        if len(arguments) != 4:
            raise fail(FIT_THREADS, expected=f"{FIT.call} with four arguments",
                       seen=f"call {i + 1} passed {len(arguments)} argument(s)",
                       hint=f"call {FIT.call} for each batch")  # fmt: skip
        got_params, got_x, got_y, got_wd = arguments
        problems = ["params that are not the previous step's new params"] * (
            not same_value(got_params, current)
        )
        problems += [f"not batch {i + 1}'s x and y"] * (
            not (same_value(got_x, x) and same_value(got_y, y))
        )
        if not _same_decay(got_wd, weight_decay):
            problems.append(f"weight_decay={shorten(repr(got_wd), 40)} instead of {weight_decay}")
        if problems:
            raise fail(
                FIT_THREADS,
                expected=f"call {i + 1}: the params from call {i} (or fit's params), batch "
                f"{i + 1}, and weight_decay={weight_decay}",
                seen=f"call {i + 1} passed " + "; ".join(problems),
                hint="thread params through the loop, and pass every call the weight_decay "
                "that fit was given (a value kept from an earlier fit is stale)",
            )
        current = call.out[0] if isinstance(call.out, tuple | list) and call.out else None
    passed(FIT_THREADS)


def _same_decay(got: Any, weight_decay: float) -> bool:
    """``got`` is fit's ``weight_decay`` as the step computes with it: float32 (the step
    runs in float32, so ``jnp.float32(weight_decay)`` is the same value; a stale value
    from another fit is 25 % off)."""
    try:
        return bool(np.asarray(got, np.float32) == np.float32(weight_decay))
    except (TypeError, ValueError):
        return False


def _check_from_step(proxy: Recorder, got_params: Any, got_losses: Any) -> None:
    outs = [c.out for c in proxy.calls]
    losses = np.stack([np.asarray(o[1]) for o in outs])
    ok = same_value(np.asarray(got_losses).reshape(-1), losses) and same_value(
        got_params, outs[-1][0]
    )
    FIT.require(FROM_KERNEL, ok, expected="fit's losses and final params as sgd_step returned them",
                seen="they differ from what fit's own calls of sgd_step returned",
                hint="return the params and losses that sgd_step computed, not values "
                "computed again elsewhere")  # fmt: skip


@grader("functions_as_arguments", checks=CHECKS)
def grade(sgd_step: Any, fit: Any) -> None:
    """Grade the step against a NumPy reference, its calls inside ``fit``, and the
    compile counts of a weight-decay sweep."""
    rng = fresh_rng()
    features, size = int(rng.integers(3, 9)), int(rng.integers(16, 49))
    bins = np.geomspace(0.01, 0.5, 10)  # seven decays, each ~25% from the others
    decays = [float(v) for v in rng.choice(bins, size=7, replace=False) * rng.uniform(0.9, 1.1, 7)]

    params, w0, b0, batch, batch64 = _problem(rng, 1, size, features)
    (x, y), (x64, y64) = (jnp.asarray(batch[0][0]), jnp.asarray(batch[0][1])), batch64[0]
    call_learner(STEP_RUNS, sgd_step, params, x, y, decays[0])  # a stub says so first
    FIT.jitted(sgd_step)
    sgd_step.clear_cache()
    with count_compiles(sgd_step) as step_count:
        steps = [call_learner(STEP_RUNS, sgd_step, params, x, y, wd) for wd in decays[:3]]
    passed(STEP_RUNS)
    pairs = [_pair(STEP_PAIR, result, "(new_params, loss)") for result in steps]
    passed(STEP_PAIR)
    want = [_reference_step(w0, b0, x64, y64, wd) for wd in decays[:3]]  # a row per decay
    require_close(
        STEP_LOSS, [p[1] for p in pairs], [r[2] for r in want], rtol=1e-4, hint=NUMBERS_HINT
    )
    require_close(
        STEP_W, [p[0]["w"] for p in pairs], [r[0] for r in want], rtol=1e-4, hint=NUMBERS_HINT
    )
    require_close(
        STEP_B, [p[0]["b"] for p in pairs], [r[1] for r in want], rtol=1e-4, hint=NUMBERS_HINT
    )
    FIT.compiles(
        STEP_ONCE,
        step_count,
        exactly=1,
        what="compilation(s) of sgd_step for 3 calls with the same arrays and 3 different "
        "weight_decay values",
        hint="only weight_decay changed between these calls: pass it as an ordinary (traced) "
        "argument, not in static_argnums/static_argnames, so every value shares one program",
        cause="only weight_decay changed",
    )

    fit_jitted = is_jitted(fit)
    if fit_jitted:
        fit.clear_cache()
    previous: list = []
    for number, wd in enumerate(decays[3:], start=1):
        params, w0, b0, batches, batches64 = _problem(rng, N_BATCHES, size, features)
        if number == 1:
            batches = [(jnp.asarray(a), jnp.asarray(b)) for a, b in batches]
        elif number == 4:  # the same NumPy objects as fit 3, refilled: id() cannot tell
            for (old_x, old_y), (new_x, new_y) in zip(previous, batches, strict=True):
                old_x[...], old_y[...] = new_x, new_y
            batches = previous
        previous = batches
        with count_compiles(ANY_FUNCTION) as everything, recording(fit, sgd_step) as proxy:
            result = call_learner(FIT_RUNS, fit, params, batches, wd)
        if number == 1:
            passed(FIT_RUNS)
        else:  # one fit at a time, so a wrong answer fails after one fit, not three
            guess = f'; JAX\'s own guess: "{shorten(everything.last_reason, 160)}"'
            require(
                FIT_NOTHING,
                everything.compiles == 0,
                expected="0 compilations: every function fit jits was compiled by the first fit",
                seen=f"{everything.compiles} compilation(s) in fit number {number} ({N_BATCHES} "
                "batches, new data and weight_decay, same shapes)"
                + (guess if everything.explanations else ""),
                hint="a lambda, functools.partial, nested def or jax.value_and_grad(...) built "
                "inside fit is a new function object on every call, and jit's cache never saw "
                "it. Build the jitted step once, at top level, and pass it the values that change",
            )
        got_params, got_losses = _pair(FIT_PAIR, result, "(params, losses)")
        passed(FIT_PAIR)
        _check_calls(proxy, fit_jitted, number, first=number == 1)
        if not fit_jitted:  # in a jitted fit the step's outputs were tracers
            _check_threading(proxy, params, batches, wd)
            _check_from_step(proxy, got_params, got_losses)
        passed(FIT_THREADS)
        passed(FIT_FROM_STEP)
        want_w, want_b, want_losses = _reference_fit(w0, b0, batches64, wd)
        if number == 1:
            require_close(FIT_LOSSES, got_losses, want_losses, rtol=1e-4, hint=NUMBERS_HINT)
            require_close(FIT_W, got_params["w"], want_w, rtol=1e-4, hint=NUMBERS_HINT)
            require_close(FIT_B, got_params["b"], want_b, rtol=1e-4, hint=NUMBERS_HINT)
            continue
        got = [np.asarray(v) for v in (got_losses, got_params["w"], got_params["b"])]
        if not all(
            np.allclose(g, w, rtol=1e-4, atol=1e-5)
            for g, w in zip(got, (want_losses, want_w, want_b), strict=True)
        ):
            raise fail(
                FIT_STAYS,
                expected=f"the reference result of fit number {number} (weight_decay={wd:.2e}, "
                f"its own batches): losses {np.round(want_losses, 4)[:3]}",
                seen=f"losses {np.round(got[0], 4)[:3]}",
                hint="a value baked in at trace time (a global, an attribute, a default), or a "
                "result kept from an earlier call, stays the same in later calls: pass "
                "weight_decay and the batches in as arguments on every call",
            )
    passed(FIT_STAYS)
