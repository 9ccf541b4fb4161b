"""Grader for the functions-as-arguments exercise: a weight-decay sweep whose training
loop compiles once.

The learner writes ``sgd_step(params, x, y, weight_decay)`` (jitted, returns the new
parameters and the loss before the update) and ``fit(params, batches, weight_decay)``
(calls ``sgd_step`` once per batch, returns the final parameters and the per-batch
losses).

What is checked, on fresh random data and fresh weight-decay values every run:

* ``sgd_step`` is the real ``jax.jit`` type and its numbers match a NumPy reference kept
  inside this module;
* ``sgd_step``, from an emptied cache, compiles exactly once for three different
  weight-decay values (a static ``weight_decay`` is rejected, and the verdict says that
  only ``weight_decay`` changed between the counted calls);
* ``fit`` really runs the learner's step: while the grader calls ``fit``, every name in
  ``fit``'s globals, closure cells and defaults (and its helpers') that holds
  ``sgd_step`` is rebound to a thin recording proxy that forwards to it
  (:func:`jitlab.grading.recording`; JAX's caches and counts are unchanged). The
  grader then requires one call per batch, made with jit on, with the params threaded
  from one call to the next, each batch and the given ``weight_decay`` passed in, and
  ``fit``'s losses and final params equal to what those calls returned. A NumPy loop
  with one decoy call, a loop that never calls the step, a separately jitted copy of
  the step, ``jax.disable_jit()`` inside ``fit`` and a ``weight_decay`` frozen at the
  first fit all fail here, each with its own verdict. (A ``fit`` that is itself jitted
  passes if the step is traced into its program.)
* ``fit`` matches the reference, parameters and losses;
* once ``fit`` has run, three more fits with new data and new weight decays (same
  shapes; the last one with the previous fit's NumPy buffers refilled in place) compile
  **nothing at all**, counted over every function JAX compiles. This rejects a fresh
  ``lambda``, ``functools.partial``, nested ``def`` or ``jax.value_and_grad(...)``
  wrapped by ``jax.jit`` inside the loop, whatever its name;
* every later fit is right for its own weight decay and its own data.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jitlab.grading import Recorder, call_learner, fail, fresh_rng, grader, is_jitted, passed
from jitlab.grading.calls import recording
from jitlab.grading.checks import require, require_close, shorten
from jitlab.grading.kernel import FROM_KERNEL, JIT_ON, JITTED, KernelExercise
from jitlab.instruments.counting import ANY_FUNCTION, count_compiles

FIT = KernelExercise(
    wrapper="fit",
    kernel="sgd_step",
    call="sgd_step(params, x, y, weight_decay)",
    hints={
        JITTED.name: "decorate sgd_step with @jax.jit, once, at top level",
        FROM_KERNEL.name: "return the params and losses that sgd_step computed, not values "
        "computed again elsewhere",
    },
)
LEARNING_RATE = 0.1
"""Must equal ``LEARNING_RATE`` in the exercise's setup cell."""
N_BATCHES = 4

NUMBERS_HINT = (
    "loss = mean((x @ w + b - y)**2) + weight_decay * sum(w**2); the step returns the "
    "loss at the params it was given, and params - LEARNING_RATE * gradient"
)

STEP_RUNS = "sgd_step runs"
STEP_JITTED = FIT.name(JITTED)
STEP_PAIR = "sgd_step returns (new_params, loss)"
STEP_LOSS = "sgd_step: loss before the update"
STEP_W = "sgd_step: new w"
STEP_B = "sgd_step: new b"
STEP_ONCE = "sgd_step compiles once for every weight_decay"
FIT_RUNS = "fit runs"
FIT_PAIR = "fit returns (params, losses)"
FIT_JIT_ON = FIT.name(JIT_ON)
FIT_CALLS = "fit calls the jitted sgd_step once per batch"
FIT_THREADS = "fit passes sgd_step the params, each batch and the weight_decay"
FIT_FROM_STEP = FIT.name(FROM_KERNEL)
FIT_LOSSES = "fit: per-batch losses"
FIT_W = "fit: final w"
FIT_B = "fit: final b"
FIT_NOTHING = "three more fits (new data, new weight_decay) compile nothing"
FIT_STAYS = "fit stays right for every weight_decay"
CHECKS = (
    STEP_RUNS,
    STEP_JITTED,
    STEP_PAIR,
    STEP_LOSS,
    STEP_W,
    STEP_B,
    STEP_ONCE,
    FIT_RUNS,
    FIT_PAIR,
    FIT_JIT_ON,
    FIT_CALLS,
    FIT_THREADS,
    FIT_FROM_STEP,
    FIT_LOSSES,
    FIT_W,
    FIT_B,
    FIT_NOTHING,
    FIT_STAYS,
)


# ------------------------------------------------------------------ the reference


def _reference_step(
    w: np.ndarray, b: float, x: np.ndarray, y: np.ndarray, weight_decay: float
) -> tuple[np.ndarray, float, float]:
    """One SGD step of the exercise's model, in float64 NumPy: (new w, new b, loss)."""
    residual = x @ w + b - y
    value = float(np.mean(residual**2) + weight_decay * np.sum(w**2))
    grad_w = 2.0 * x.T @ residual / len(y) + 2.0 * weight_decay * w
    grad_b = 2.0 * float(np.mean(residual))
    return w - LEARNING_RATE * grad_w, b - LEARNING_RATE * grad_b, value


def _reference_fit(
    w: np.ndarray, b: float, batches: list[tuple[np.ndarray, np.ndarray]], weight_decay: float
) -> tuple[np.ndarray, float, np.ndarray]:
    """The whole loop: (final w, final b, per-batch losses)."""
    losses = []
    for x, y in batches:
        w, b, value = _reference_step(w, b, x, y, weight_decay)
        losses.append(value)
    return w, b, np.array(losses)


# ----------------------------------------------------------------- drawing data


def _params(rng: np.random.Generator, features: int) -> tuple[dict[str, Any], np.ndarray, float]:
    w = rng.normal(scale=0.5, size=features).astype(np.float32)
    b = np.float32(rng.normal(scale=0.5))
    return {"w": jnp.asarray(w), "b": jnp.asarray(b)}, w.astype(np.float64), float(b)


def _batches(
    rng: np.random.Generator, count: int, size: int, features: int
) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[tuple[np.ndarray, np.ndarray]]]:
    """``count`` batches as float32 NumPy arrays, and their float64 copies."""
    true_w = rng.normal(size=features)
    batches, in_float64 = [], []
    for _ in range(count):
        x = rng.normal(size=(size, features)).astype(np.float32)
        y = (x @ true_w + 0.3 + 0.1 * rng.normal(size=size)).astype(np.float32)
        batches.append((x, y))
        in_float64.append((x.astype(np.float64), y.astype(np.float64)))
    return batches, in_float64


def _on_device(batches: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[Any, Any]]:
    return [(jnp.asarray(x), jnp.asarray(y)) for x, y in batches]


def _weight_decays(rng: np.random.Generator, count: int) -> list[float]:
    """``count`` different Python floats between 0.01 and 0.5, each at least ~25% from
    the others, so a forgotten penalty or a stale value always shows in the numbers."""
    bins = np.geomspace(0.01, 0.5, 10)
    chosen = rng.choice(bins, size=count, replace=False)
    return [float(v) for v in chosen * rng.uniform(0.9, 1.1, size=count)]


def _unpack_pair(check: str, result: Any, what: str) -> tuple[Any, Any]:
    if not (isinstance(result, tuple | list) and len(result) == 2):
        raise fail(
            check,
            expected=f"a pair {what}",
            seen=f"{type(result).__name__}",
            hint=f"return {what} as a tuple",
        )
    params, second = result
    if not (isinstance(params, dict) and set(params) == {"w", "b"}):
        raise fail(
            check,
            expected='params as a dict with keys "w" and "b"',
            seen=f"{type(params).__name__}: {sorted(params) if isinstance(params, dict) else ''}",
            hint="return params in the same structure you received them",
        )
    return params, second


def _same(a: Any, b: Any) -> bool:
    """Equal content (not identity), leaf by leaf."""
    try:
        leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
        return len(leaves_a) == len(leaves_b) and all(
            np.shape(p) == np.shape(q)
            and np.array_equal(np.asarray(p, np.float64), np.asarray(q, np.float64))
            for p, q in zip(leaves_a, leaves_b, strict=True)
        )
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------- checking a fit


def _check_calls(proxy: Recorder, fit_is_jitted: bool, fit_number: int, first_run: bool) -> None:
    calls, traced = proxy.calls, proxy.traced
    FIT.jit_on(proxy)
    if fit_is_jitted:
        ok = (bool(traced) and not calls) if first_run else True
        expected = "sgd_step traced into fit's program when fit compiles"
    else:
        ok = len(calls) == N_BATCHES and not traced
        expected = f"{N_BATCHES} calls of sgd_step (one per batch) in fit number {fit_number}"
    require(
        FIT_CALLS,
        ok,
        expected=expected,
        seen=f"{len(calls) + len(traced)} call(s) of sgd_step",
        hint="call the jitted sgd_step once per batch inside fit (the grader watches the "
        "name sgd_step in fit's module and closure); a NumPy loop, or another jitted "
        "function, does not count",
    )


def _check_threading(
    proxy: Recorder, params: dict[str, Any], batches: list[Any], weight_decay: float
) -> None:
    current = params
    for i, (call, (x, y)) in enumerate(zip(proxy.calls, batches, strict=True)):
        arguments = list(call.arguments.values())  # in the step's order, however passed
        if len(arguments) != 4:
            raise fail(
                FIT_THREADS,
                expected="sgd_step(params, x, y, weight_decay) with four arguments",
                seen=f"call {i + 1} passed {len(arguments)} argument(s)",
                hint="call sgd_step(params, x, y, weight_decay) for each batch",
            )
        got_params, got_x, got_y, got_wd = arguments
        problems = []
        if not _same(got_params, current):
            problems.append("params that are not the previous step's new params")
        if not (_same(got_x, x) and _same(got_y, y)):
            problems.append(f"not batch {i + 1}'s x and y")
        if not _same(got_wd, weight_decay):
            problems.append(f"weight_decay={shorten(repr(got_wd), 40)} instead of {weight_decay}")
        if problems:
            raise fail(
                FIT_THREADS,
                expected=f"call {i + 1}: the params from call {i} (or fit's params), batch "
                f"{i + 1}, and weight_decay={weight_decay}",
                seen=f"call {i + 1} passed " + "; ".join(problems),
                hint="thread params through the loop, and pass every call the "
                "weight_decay that fit was given (a value kept from an earlier fit is "
                "stale)",
            )
        current = call.out[0] if isinstance(call.out, tuple | list) and call.out else None
    passed(FIT_THREADS)


def _check_from_step(proxy: Recorder, got_params: Any, got_losses: Any) -> None:
    outs = [c.out for c in proxy.calls]
    losses = [o[1] for o in outs]
    ok = _same(np.asarray(got_losses).reshape(-1), np.stack([np.asarray(v) for v in losses]))
    ok = ok and _same(got_params, outs[-1][0])
    FIT.require(
        FROM_KERNEL,
        ok,
        expected="fit's losses and final params to be the values sgd_step returned",
        seen="they differ from what fit's own calls of sgd_step returned",
    )


@grader("functions_as_arguments", checks=CHECKS)
def grade(sgd_step: Any, fit: Any) -> None:
    """Grade the exercise: numbers against a NumPy reference, the step's calls inside
    ``fit``, and compile counts."""
    rng = fresh_rng()
    features = int(rng.integers(3, 9))
    batch_size = int(rng.integers(16, 49))

    # --- sgd_step on its own -------------------------------------------------------
    params, w0, b0 = _params(rng, features)
    numpy_batch, in_float64 = _batches(rng, 1, batch_size, features)
    (x, y), (x64, y64) = _on_device(numpy_batch)[0], in_float64[0]
    # Seven weight decays, all different: 3 for sgd_step, 1 for the first fit, 3 after.
    all_decays = _weight_decays(rng, 7)
    decays, first_fit_decay, later_decays = all_decays[:3], all_decays[3], all_decays[4:]

    # One call first: an unwritten stub says "not solved yet" before anything else.
    call_learner(STEP_RUNS, sgd_step, params, x, y, decays[0])
    FIT.jitted(sgd_step)
    sgd_step.clear_cache()
    with count_compiles(sgd_step) as step_count:
        steps = [call_learner(STEP_RUNS, sgd_step, params, x, y, wd) for wd in decays]
    passed(STEP_RUNS)
    got_values, got_w, got_b, want_values, want_w, want_b = [], [], [], [], [], []
    for wd, result in zip(decays, steps, strict=True):
        new_params, value = _unpack_pair(STEP_PAIR, result, "(new_params, loss)")
        got_values.append(np.asarray(value))
        got_w.append(np.asarray(new_params["w"]))
        got_b.append(np.asarray(new_params["b"]))
        ref_w, ref_b, ref_value = _reference_step(w0, b0, x64, y64, wd)
        want_values.append(ref_value)
        want_w.append(ref_w)
        want_b.append(ref_b)
    passed(STEP_PAIR)
    # One row per weight_decay value, so a wrong penalty shows up as a wrong row.
    require_close(STEP_LOSS, got_values, want_values, rtol=1e-4, hint=NUMBERS_HINT)
    require_close(STEP_W, got_w, want_w, rtol=1e-4, hint=NUMBERS_HINT)
    require_close(STEP_B, got_b, want_b, rtol=1e-4, hint=NUMBERS_HINT)
    FIT.compiles(
        STEP_ONCE,
        step_count,
        exactly=1,
        what="compilation(s) of sgd_step for 3 calls with the same arrays and 3 "
        "different weight_decay values",
        hint="only weight_decay changed between these calls: pass it as an ordinary "
        "(traced) argument, not in static_argnums/static_argnames, so every value shares "
        "one program",
        cause="only weight_decay changed",
    )

    # --- fit: the numbers, and the calls it makes ---------------------------------
    fit_is_jitted = is_jitted(fit)
    if fit_is_jitted:
        fit.clear_cache()
    params, w0, b0 = _params(rng, features)
    numpy_batches, batches64 = _batches(rng, N_BATCHES, batch_size, features)
    batches = _on_device(numpy_batches)
    wd = first_fit_decay
    with recording(fit, sgd_step) as proxy:
        result = call_learner(FIT_RUNS, fit, params, batches, wd)
    passed(FIT_RUNS)
    got_params, got_losses = _unpack_pair(FIT_PAIR, result, "(params, losses)")
    passed(FIT_PAIR)
    _check_calls(proxy, fit_is_jitted, 1, first_run=True)
    if fit_is_jitted:  # the step's outputs were tracers inside fit's trace
        passed(FIT_THREADS)
        passed(FIT_FROM_STEP)
    else:
        _check_threading(proxy, params, batches, wd)
        _check_from_step(proxy, got_params, got_losses)
    want_w, want_b, want_losses = _reference_fit(w0, b0, batches64, wd)
    require_close(FIT_LOSSES, got_losses, want_losses, rtol=1e-4, hint=NUMBERS_HINT)
    require_close(FIT_W, got_params["w"], want_w, rtol=1e-4, hint=NUMBERS_HINT)
    require_close(FIT_B, got_params["b"], want_b, rtol=1e-4, hint=NUMBERS_HINT)

    # --- fit: nothing left to compile ----------------------------------------------
    # The last run refills the NumPy buffers of the one before in place: same objects,
    # new content, so nothing keyed on identity can pass.
    previous: list[tuple[np.ndarray, np.ndarray]] = []
    for number, wd in enumerate(later_decays, start=2):
        params, w0, b0 = _params(rng, features)
        batches, batches64 = _batches(rng, N_BATCHES, batch_size, features)
        if number == 1 + len(later_decays):
            for (old_x, old_y), (new_x, new_y) in zip(previous, batches, strict=True):
                old_x[...], old_y[...] = new_x, new_y
            batches = previous
        previous = batches
        # One fit at a time, so a wrong answer fails after one fit, not three.
        with count_compiles(ANY_FUNCTION) as everything, recording(fit, sgd_step) as proxy:
            result = call_learner(FIT_RUNS, fit, params, batches, wd)
        require(
            FIT_NOTHING,
            everything.compiles == 0,
            expected="0 compilations: every function fit jits was compiled by the first fit",
            seen=f"{everything.compiles} compilation(s) in fit number {number} "
            f"({N_BATCHES} batches, new data and weight_decay, same shapes)"
            + (
                f'; JAX\'s own guess: "{shorten(everything.last_reason, 160)}"'
                if everything.explanations
                else ""
            ),
            hint="a lambda, functools.partial, nested def or jax.value_and_grad(...) built "
            "inside fit is a new function object on every call, and jit's cache never saw "
            "it. Build the jitted step once, at top level, and pass it the values that "
            "change",
        )
        _check_calls(proxy, fit_is_jitted, number, first_run=False)
        got_params, got_losses = _unpack_pair(FIT_PAIR, result, "(params, losses)")
        if not fit_is_jitted:
            _check_threading(proxy, params, batches, wd)
            _check_from_step(proxy, got_params, got_losses)
        want_w, want_b, want_losses = _reference_fit(w0, b0, batches64, wd)
        if not (
            np.allclose(np.asarray(got_losses), want_losses, rtol=1e-4, atol=1e-5)
            and np.allclose(np.asarray(got_params["w"]), want_w, rtol=1e-4, atol=1e-5)
            and np.allclose(np.asarray(got_params["b"]), want_b, rtol=1e-4, atol=1e-5)
        ):
            raise fail(
                FIT_STAYS,
                expected=f"the reference result of fit number {number} "
                f"(weight_decay={wd:.2e}, its own batches)",
                seen=f"losses {np.round(np.asarray(got_losses), 4)[:3]}, where the "
                f"reference has {np.round(want_losses, 4)[:3]}",
                hint="a value baked in at trace time (a global, an attribute, a default), or "
                "a result kept from an earlier call, stays the same in later calls: pass "
                "weight_decay and the batches in as arguments on every call",
            )
    passed(FIT_STAYS)
