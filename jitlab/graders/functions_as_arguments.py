"""Grader for exercise 07: a weight-decay sweep whose training loop compiles once.

The learner writes ``sgd_step(params, x, y, weight_decay)`` (jitted, returns the new
parameters and the loss before the update) and ``fit(params, batches, weight_decay)``
(one step per batch, returns the final parameters and the per-batch losses).

What is checked, on fresh random data and fresh weight-decay values every run:

* ``sgd_step`` is a ``jax.jit`` function and its numbers match a NumPy reference;
* ``sgd_step`` compiles at most once for three different weight-decay values (rejects a
  static ``weight_decay``: one executable per value);
* ``fit`` matches the reference, parameters and losses;
* once ``fit`` has run, three more fits with new data and new weight decays (same shapes)
  compile **nothing at all**, counted over every function JAX compiles. This rejects a
  fresh ``lambda``, ``functools.partial``, nested ``def`` or ``jax.value_and_grad(...)``
  wrapped by ``jax.jit`` inside the loop, whatever its name.

Hard-coded outputs cannot pass (the inputs are new each run), and a forgotten or
misplaced weight-decay term fails the number checks.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from jitlab.grading import (
    all_passed,
    call_learner,
    fail,
    fresh_rng,
    passed,
    require,
    require_close,
    require_jitted,
)
from jitlab.instruments.counting import ANY_FUNCTION, count_compiles

LEARNING_RATE = 0.1
"""Must equal ``LEARNING_RATE`` in the exercise's setup cell."""

NUMBERS_HINT = (
    "loss = mean((x @ w + b - y)**2) + weight_decay * sum(w**2); the step returns the "
    "loss at the params it was given, and params - LEARNING_RATE * gradient"
)


def reference_step(
    w: np.ndarray, b: float, x: np.ndarray, y: np.ndarray, weight_decay: float
) -> tuple[np.ndarray, float, float]:
    """One SGD step of the exercise's model, in float64 NumPy: (new w, new b, loss)."""
    residual = x @ w + b - y
    value = float(np.mean(residual**2) + weight_decay * np.sum(w**2))
    grad_w = 2.0 * x.T @ residual / len(y) + 2.0 * weight_decay * w
    grad_b = 2.0 * float(np.mean(residual))
    return w - LEARNING_RATE * grad_w, b - LEARNING_RATE * grad_b, value


def reference_fit(
    w: np.ndarray, b: float, batches: list[tuple[np.ndarray, np.ndarray]], weight_decay: float
) -> tuple[np.ndarray, float, np.ndarray]:
    """The whole loop: (final w, final b, per-batch losses)."""
    losses = []
    for x, y in batches:
        w, b, value = reference_step(w, b, x, y, weight_decay)
        losses.append(value)
    return w, b, np.array(losses)


def _params(rng: np.random.Generator, features: int) -> tuple[dict[str, Any], np.ndarray, float]:
    w = rng.normal(scale=0.5, size=features).astype(np.float32)
    b = np.float32(rng.normal(scale=0.5))
    return {"w": jnp.asarray(w), "b": jnp.asarray(b)}, w.astype(np.float64), float(b)


def _batches(
    rng: np.random.Generator, count: int, size: int, features: int
) -> tuple[list[tuple[Any, Any]], list[tuple[np.ndarray, np.ndarray]]]:
    true_w = rng.normal(size=features)
    on_device, in_numpy = [], []
    for _ in range(count):
        x = rng.normal(size=(size, features)).astype(np.float32)
        y = (x @ true_w + 0.3 + 0.1 * rng.normal(size=size)).astype(np.float32)
        on_device.append((jnp.asarray(x), jnp.asarray(y)))
        in_numpy.append((x.astype(np.float64), y.astype(np.float64)))
    return on_device, in_numpy


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


def _first_line(explanations: list[str]) -> str:
    if not explanations:
        return "(JAX gave no explanation)"
    lines = [line.strip() for line in explanations[0].splitlines() if line.strip()]
    return " / ".join(lines[1:3])[:300]


def grade(sgd_step: Any, fit: Any) -> None:
    """Grade exercise 07: numbers against a NumPy reference, and compile counts."""
    rng = fresh_rng()
    features = int(rng.integers(3, 9))
    batch_size = int(rng.integers(16, 49))
    n_batches = 4

    # --- sgd_step on its own -------------------------------------------------------
    params, w0, b0 = _params(rng, features)
    on_device, in_numpy = _batches(rng, 1, batch_size, features)
    (x, y), (x_np, y_np) = on_device[0], in_numpy[0]
    # Seven weight decays, all different: 3 for sgd_step, 1 for the first fit, 3 after.
    all_decays = _weight_decays(rng, 7)
    decays, first_fit_decay, later_decays = all_decays[:3], all_decays[3], all_decays[4:]

    first = call_learner("sgd_step runs", sgd_step, params, x, y, decays[0])
    require_jitted(
        "sgd_step is wrapped by jax.jit",
        sgd_step,
        hint="decorate sgd_step with @jax.jit, once, at top level",
    )
    steps = [first]
    with count_compiles(sgd_step) as step_count:
        for wd in decays[1:]:
            steps.append(call_learner("sgd_step runs", sgd_step, params, x, y, wd))
    got_values, got_w, got_b, want_values, want_w, want_b = [], [], [], [], [], []
    for wd, result in zip(decays, steps, strict=True):
        new_params, value = _unpack_pair(
            "sgd_step returns (new_params, loss)", result, "(new_params, loss)"
        )
        got_values.append(np.asarray(value))
        got_w.append(np.asarray(new_params["w"]))
        got_b.append(np.asarray(new_params["b"]))
        ref_w, ref_b, ref_value = reference_step(w0, b0, x_np, y_np, wd)
        want_values.append(ref_value)
        want_w.append(ref_w)
        want_b.append(ref_b)
    # One row per weight_decay value, so a wrong penalty shows up as a wrong row.
    require_close(
        "sgd_step: loss before the update", got_values, want_values, rtol=1e-4, hint=NUMBERS_HINT
    )
    require_close("sgd_step: new w", got_w, want_w, rtol=1e-4, hint=NUMBERS_HINT)
    require_close("sgd_step: new b", got_b, want_b, rtol=1e-4, hint=NUMBERS_HINT)
    require(
        "sgd_step does not compile again for a new weight_decay",
        step_count.compiles == 0,
        expected="0 compilations for 2 new weight_decay values (same shapes as the first call)",
        seen=f"{step_count.compiles} compilations; JAX says: "
        f"{_first_line(step_count.explanations)}",
        hint="weight_decay is a number that changes: pass it as an ordinary (traced) "
        "argument, not in static_argnums/static_argnames, so every value shares one program",
    )

    # --- fit: the numbers ----------------------------------------------------------
    params, w0, b0 = _params(rng, features)
    batches, batches_np = _batches(rng, n_batches, batch_size, features)
    wd = first_fit_decay
    got_params, got_losses = _unpack_pair(
        "fit returns (params, losses)",
        call_learner("fit runs", fit, params, batches, wd),
        "(params, losses)",
    )
    want_w, want_b, want_losses = reference_fit(w0, b0, batches_np, wd)
    require_close("fit: per-batch losses", got_losses, want_losses, rtol=1e-4, hint=NUMBERS_HINT)
    require_close("fit: final w", got_params["w"], want_w, rtol=1e-4, hint=NUMBERS_HINT)
    require_close("fit: final b", got_params["b"], want_b, rtol=1e-4, hint=NUMBERS_HINT)

    # --- fit: nothing left to compile ----------------------------------------------
    runs = []
    for wd in later_decays:
        params, w0, b0 = _params(rng, features)
        batches, batches_np = _batches(rng, n_batches, batch_size, features)
        runs.append((params, w0, b0, batches, batches_np, wd))
    results = []
    for params, _, _, batches, _, wd in runs:
        # One fit at a time, so a wrong answer fails after one fit, not three.
        with count_compiles(ANY_FUNCTION) as everything:
            results.append(call_learner("fit runs", fit, params, batches, wd))
        if everything.compiles:
            break
    require(
        "three more fits (new data, new weight_decay) compile nothing",
        everything.compiles == 0,
        expected="0 compilations: every function fit jits was compiled by the first fit",
        seen=f"{everything.compiles} compilations in fit number {1 + len(results)} "
        f"({n_batches} batches); JAX says: {_first_line(everything.explanations)}",
        hint="a lambda, functools.partial, nested def or jax.value_and_grad(...) built "
        "inside fit is a new function object on every call, and jit's cache never saw it. "
        "Build the jitted step once, at top level, and pass it the values that change",
    )
    for (_, w0, b0, _, batches_np, wd), result in zip(runs, results, strict=True):
        got_params, got_losses = _unpack_pair(
            "fit returns (params, losses)", result, "(params, losses)"
        )
        want_w, want_b, want_losses = reference_fit(w0, b0, batches_np, wd)
        if not (
            np.allclose(np.asarray(got_losses), want_losses, rtol=1e-4, atol=1e-5)
            and np.allclose(np.asarray(got_params["w"]), want_w, rtol=1e-4, atol=1e-5)
            and np.allclose(np.asarray(got_params["b"]), want_b, rtol=1e-4, atol=1e-5)
        ):
            raise fail(
                "fit stays right for every weight_decay",
                expected=f"the reference result for weight_decay={wd:.2e}",
                seen=f"losses {np.round(np.asarray(got_losses), 4)[:3]}, where the reference "
                f"has {np.round(want_losses, 4)[:3]}",
                hint="a value baked in at trace time (a global, an attribute, a default) "
                "stays the same in later calls: pass weight_decay in as an argument",
            )
    passed("fit stays right for every weight_decay")
    all_passed("07 functions as arguments")
