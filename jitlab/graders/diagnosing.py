"""Grader for exercise 09 (diagnosing): a training step that compiles twice, for a hidden reason.

The exercise's learning-rate schedule returns a Python float during warm-up and at its
floor, and a NumPy ``float64`` (from ``np.cos``) during the cosine decay. JAX traces the
first as a weakly typed ``f32[]`` and the second as a strong one, so the jitted step
compiles again when warm-up ends. The learner writes ``prepare_batch(batch, lr)``, the
boundary that hands the step the same kind of scalar every time, and may replace the
step (``fixed_step``).

The grader draws a fresh schedule (base rate, warm-up length, floor, number of steps)
and fresh data that always cross from warm-up into decay, so both kinds of scalar
reach ``prepare_batch``. It then checks the fix, not a guess:

- the numbers: the whole trajectory of weights must match a reference that feeds the
  step a float32 learning rate, so a fix that rounds, clamps or replaces the rate fails;
- the compile behaviour: at most one compilation of ``fixed_step`` over the whole run,
  with its cache cleared first, so unchanged code (two compilations), ``jnp.asarray(lr)``
  without a dtype (still weak then strong) and a static ``lr`` (one compilation per
  value) all fail;
- ``fixed_step`` must be jitted and must compile at least once, so the work stays in it.
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
    passed,
    require,
    require_close,
    require_jitted,
)
from jitlab.instruments.counting import count_compiles

FEATURES = 4


def learning_rate(step: int, total: int, *, base: float, warmup: int, floor: float) -> Any:
    """The exercise's schedule with its constants as arguments (same types, same values)."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return max(floor, base * 0.5 * (1.0 + np.cos(np.pi * progress)))


@jax.jit
def _reference_step(w: jax.Array, x: jax.Array, y: jax.Array, lr: jax.Array) -> jax.Array:
    def loss(w: jax.Array) -> jax.Array:
        return jnp.mean((x @ w - y) ** 2)

    return w - lr * jax.grad(loss)(w)


def _problem(rng: np.random.Generator) -> tuple[list[dict[str, np.ndarray]], list[Any]]:
    """Fresh batches and the schedule's raw learning rates, both kinds guaranteed."""
    total = int(rng.integers(12, 25))
    warmup = int(rng.integers(2, 6))
    base = float(rng.uniform(0.02, 0.1))
    floor = base * float(rng.uniform(0.01, 0.05))
    size = int(rng.integers(16, 49))
    true_w = rng.normal(size=FEATURES).astype(np.float32)
    batches = []
    for _ in range(total):
        x = rng.normal(size=(size, FEATURES)).astype(np.float32)
        y = (x @ true_w + 0.1 * rng.normal(size=size)).astype(np.float32)
        batches.append({"x": x, "y": y})
    rates = [learning_rate(s, total, base=base, warmup=warmup, floor=floor) for s in range(total)]
    kinds = {type(r) for r in rates}
    assert float in kinds and np.float64 in kinds, kinds  # the grader's own sanity check
    return batches, rates


def _reference(batches: list[dict[str, np.ndarray]], rates: list[Any]) -> np.ndarray:
    w = jnp.zeros(FEATURES, jnp.float32)
    trajectory = []
    for batch, lr in zip(batches, rates, strict=True):
        w = _reference_step(w, batch["x"], batch["y"], np.float32(lr))
        trajectory.append(np.asarray(w))
    return np.stack(trajectory)


def _run_learner(
    prepare_batch: Callable[..., Any],
    fixed_step: Callable[..., Any],
    batches: list[dict[str, np.ndarray]],
    rates: list[Any],
) -> np.ndarray:
    w = jnp.zeros(FEATURES, jnp.float32)
    trajectory = []
    for batch, lr in zip(batches, rates, strict=True):
        fresh = {key: value.copy() for key, value in batch.items()}
        prepared = call_learner("prepare_batch runs", prepare_batch, fresh, lr)
        if not (isinstance(prepared, tuple) and len(prepared) == 2):
            raise fail(
                "prepare_batch returns (batch, lr)",
                expected="a tuple of two things: the batch and the learning rate",
                seen=f"{type(prepared).__name__}: {prepared!r}"[:200],
                hint="end prepare_batch with `return batch, lr`",
            )
        w = call_learner("fixed_step runs", fixed_step, w, *prepared)
        trajectory.append(np.asarray(w))
    return np.stack(trajectory)


def grade(prepare_batch: Callable[..., Any], fixed_step: Callable[..., Any]) -> None:
    """Grade exercise 09: same numbers as the reference, and one compilation of the step."""
    rng = fresh_rng()
    require_jitted("fixed_step is compiled with jax.jit", fixed_step)
    batches, rates = _problem(rng)
    steps = len(rates)

    clear_cache = getattr(fixed_step, "clear_cache", None)
    if clear_cache is not None:
        clear_cache()  # count from an empty cache, whatever ran in the notebook before
    with count_compiles(fixed_step) as count:
        got = _run_learner(prepare_batch, fixed_step, batches, rates)
    passed("prepare_batch and fixed_step run on fresh batches")

    require_close(
        f"the weights match the reference at every one of {steps} steps",
        got,
        _reference(batches, rates),
        rtol=1e-4,
        atol=1e-6,
        hint="the fix must not change the learning rate's value: convert its type "
        "(to a float32 scalar, or to one kind of Python number), do not round or replace it",
    )
    require(
        "fixed_step does its work when called",
        count.compiles >= 1,
        expected="1 compilation of fixed_step",
        seen="0: fixed_step was never compiled while the run went on",
        hint="fixed_step should be the jitted update itself, not a wrapper around another one",
    )
    last = count.last_reason
    last = last.split("https://")[0]  # 0.10.2 glues a docs link to the weak-type line
    require(
        "one compilation for the whole run",
        count.compiles <= 1,
        expected=f"at most 1 compilation over {steps} steps",
        seen=f"{count.compiles} compilations; JAX said: {last}",
        hint="read the '* at' line of the cache-miss explanation: which argument, and what "
        "differs? Convert that argument to one kind of value in prepare_batch; making it "
        "static compiles once per value",
    )
    all_passed("09 diagnosing")
