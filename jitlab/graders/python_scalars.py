"""Grader for exercise 03: an SGD loop whose learning-rate schedule returns mixed scalar types.

The learner writes ``sgd_step(params, batch, lr)`` (jitted) and ``train(params, batches,
schedule)``. The grader draws a fresh linear-regression problem and a fresh schedule whose
learning rates arrive as Python ints, Python floats, NumPy float64 and float32 scalars, and
strong and weak ``jnp`` scalars, in a random order. It checks:

1. ``sgd_step`` is jitted and one step matches a NumPy reference;
2. ``train`` over the whole schedule matches the NumPy reference;
3. ``sgd_step`` compiled exactly once for the whole schedule.

Plausible wrong answers it rejects: passing the schedule's values as they come (one
compilation per kind of scalar), making ``lr`` static (one compilation per value), casting
``lr`` to an integer type (wrong numbers), ``jnp.asarray(lr)`` without a dtype (ints and
floats still differ), converting inside the jitted function (too late: the cache key is
made before the body runs), and doing the work outside ``sgd_step`` (no compilation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jitlab.grading import (
    all_passed,
    call_learner,
    fail,
    fresh_rng,
    require,
    require_close,
    require_jitted,
)
from jitlab.instruments.counting import count_compiles

STEPS = 16
# How the grader's schedule hands out learning rates. The first entry stands for a
# frozen phase ("lr = 0"), which a config file writes as a Python int.
SCALAR_KINDS: dict[str, Callable[[float], Any]] = {
    "Python int": lambda value: 0,
    "Python float": float,
    "NumPy float64": np.float64,
    "NumPy float32": np.float32,
    "jnp.float32": jnp.float32,
    "weak jnp scalar": lambda value: jnp.asarray(float(value)),
}


def make_problem(rng: np.random.Generator) -> dict[str, Any]:
    """A fresh linear-regression problem: initial params, batches, and learning rates."""
    dim = int(rng.integers(3, 9))
    batch_size = int(rng.integers(16, 49))
    true_w = rng.normal(size=dim)
    true_b = rng.normal()
    batches = []
    for _ in range(STEPS):
        inputs = rng.normal(size=(batch_size, dim)).astype(np.float32)
        noise = 0.1 * rng.normal(size=batch_size)
        targets = (inputs @ true_w + true_b + noise).astype(np.float32)
        batches.append((jnp.asarray(inputs), jnp.asarray(targets)))
    params = {
        "w": jnp.asarray(rng.normal(size=dim), jnp.float32),
        "b": jnp.asarray(rng.normal(), jnp.float32),
    }
    # Every kind at least twice, in a random order; values in a usual range for SGD.
    kinds = list(SCALAR_KINDS) * 2
    kinds += list(rng.choice(list(SCALAR_KINDS), size=STEPS - len(kinds)))
    rng.shuffle(kinds)
    lrs = [SCALAR_KINDS[kind](float(rng.uniform(0.01, 0.15))) for kind in kinds]
    return {"params": params, "batches": batches, "lrs": lrs, "kinds": kinds}


def reference_step(params: dict[str, Any], batch: tuple[Any, Any], lr: float) -> dict:
    """One SGD step on the mean squared error of ``x @ w + b``, in float64 NumPy."""
    w = np.asarray(params["w"], np.float64)
    b = float(params["b"])
    x = np.asarray(batch[0], np.float64)
    y = np.asarray(batch[1], np.float64)
    residual = x @ w + b - y
    grad_w = 2.0 * x.T @ residual / len(y)
    grad_b = 2.0 * residual.mean()
    return {"w": w - lr * grad_w, "b": np.float64(b - lr * grad_b)}


def reference_train(params: dict[str, Any], batches: list, lrs: list) -> dict:
    for batch, lr in zip(batches, lrs, strict=True):
        params = reference_step(params, batch, float(lr))
    return params


def _flat(params: Any, check: str) -> np.ndarray:
    """``params`` as one vector [w..., b], or a failed check if it is not {"w", "b"}."""
    if not (isinstance(params, dict) and set(params) == {"w", "b"}):
        raise fail(
            check,
            expected='a dict with the keys "w" and "b", like the params passed in',
            seen=f"{type(params).__name__}"
            + (f" with keys {sorted(params)}" if isinstance(params, dict) else ""),
            hint="return the updated params in the same structure (jax.tree.map keeps it)",
        )
    return np.concatenate([np.ravel(params["w"]), np.ravel(params["b"])])


def grade(sgd_step: Callable[..., Any], train: Callable[..., Any]) -> None:
    """Grade exercise 03 (see the module docstring for what is checked)."""
    rng = fresh_rng()
    problem = make_problem(rng)
    params, batches, lrs = problem["params"], problem["batches"], problem["lrs"]

    require_jitted(
        "sgd_step is wrapped by jax.jit",
        sgd_step,
        hint="keep the @jax.jit decorator on sgd_step",
    )

    # 1. One step, with a plain Python float (acceptable to every reasonable signature).
    lr = float(rng.uniform(0.01, 0.15))
    one = call_learner("sgd_step runs", sgd_step, params, batches[0], lr)
    require_close(
        "one sgd_step matches the reference",
        _flat(one, "sgd_step returns params"),
        _flat(reference_step(params, batches[0], lr), "reference"),
        rtol=1e-4,
        hint="new params = params - lr * jax.grad(loss)(params, batch), for w and for b",
    )

    # 2. The whole schedule, from an empty cache so that every compilation is counted.
    def schedule(step: int) -> Any:
        return lrs[step]

    sgd_step.clear_cache()
    with count_compiles(sgd_step) as n:
        final = call_learner("train runs over the schedule", train, params, batches, schedule)
    require_close(
        "train's final params match the reference",
        _flat(final, "train returns params"),
        _flat(reference_train(params, batches, lrs), "reference"),
        rtol=1e-4,
        hint="use lr = schedule(step) for batch number step (from 0), unrounded: the "
        "learning rates are fractions, so an integer dtype turns them into 0",
    )

    # 3. Compile behaviour.
    kinds = sorted({str(jax.typeof(value)) for value in lrs})
    distinct = len({float(value) for value in lrs})
    if n.compiles == 0:
        hint = (
            "train must call sgd_step for every batch: the update has to happen inside "
            "the jitted step"
        )
    elif n.compiles >= distinct:
        hint = (
            "one compilation per learning-rate value: lr looks static. Keep it a traced "
            "argument; static is for values that select a different program"
        )
    else:
        hint = (
            f"the schedule's values are traced as {len(kinds)} different abstract values "
            f"({', '.join(kinds)}); give them all one dtype and weak flag before calling "
            "sgd_step (inside the jitted function is too late)"
        )
    require(
        f"sgd_step compiled exactly once over {len(lrs)} steps",
        n.compiles == 1,
        expected="1 compilation for the whole schedule",
        seen=f"{n.compiles} compilation(s); last reason: {n.last_reason}",
        hint=hint,
    )
    all_passed("03 Python scalars and weak types")
