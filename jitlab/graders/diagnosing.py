"""Grader for the diagnosing exercise: a step that compiles twice, for a hidden reason.

The schedule returns a Python float (warm-up, floor) and a NumPy float64 (the cosine decay):
two cache keys. ``prepare_batch`` must hand the step one kind of scalar, with its value, and
the batch as it came. The grader calls ``fixed_step(w, *prepare_batch(batch, lr))`` itself,
through a recorder, so every update it checks comes out of the learner's jitted step.

What every run draws, on purpose:
  a fresh schedule            Python float, then float64, then float again (the floor)
  a fresh start w0, fresh data  a replayed trajectory cannot know them
  the reference's lr          float32(lr): a rounded, clamped or bfloat16 rate fails
  one dict and arrays, refilled at every step   a freed batch's id() comes back: a memo by id()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jitlab.doctor import classify
from jitlab.grading import fail, grader, why
from jitlab.grading.calls import Recorder, python_work, type_text
from jitlab.grading.checks import (
    JIT_OFF_HINT,
    JIT_ON,
    Grading,
    excerpts,
    shorten,
)
from jitlab.instruments.counting import count_compiles

FEATURES = 4
JITTED = "fixed_step is compiled with jax.jit"
RUNS = "prepare_batch and fixed_step run on fresh batches"
RETURNS = "prepare_batch returns (batch, lr)"
WEIGHTS = "the weights match the reference at every step"
UPDATES = "every step's update has the schedule's learning rate"
COMPILED = "fixed_step does its work when called"
ONCE = "one compilation for the whole run"
CHECKS = (JITTED, RUNS, RETURNS, WEIGHTS, UPDATES, COMPILED, ONCE)
CAUSE_HINTS = {
    classify.WEAK_TYPE: "give fixed_step one kind of number at every step: convert lr in "
    "prepare_batch (np.float32(lr), say)",
    classify.STATIC_VALUE: "a static argument compiles once per value: keep lr traced (remove "
    "it from static_argnums / static_argnames) and pass it as a float32 scalar",
    classify.PYTREE: "return the batch with the same keys and containers at every step",
}


def _problem(rng: np.random.Generator) -> tuple[np.ndarray, list[dict], list[Any], np.ndarray]:
    """A fresh start, fresh batches, the schedule's raw rates (float, float64, float) and the
    reference's w after each step: NumPy, with a float32 learning rate."""
    warmup, decay = int(rng.integers(2, 6)), int(rng.integers(10, 19))
    base = float(rng.uniform(0.02, 0.1))
    # 10+ decay steps end below 2.5 % of base: a floor above 3 % returns a float at the end
    floor = base * float(rng.uniform(0.03, 0.06))
    cosine = [base * 0.5 * (1.0 + np.cos(np.pi * s / decay)) for s in range(decay)]
    rates = [base * (s + 1) / warmup for s in range(warmup)] + [max(floor, c) for c in cosine]
    size = int(rng.integers(16, 49))
    true_w, w0 = rng.normal(size=(2, FEATURES)).astype(np.float32)
    batches, w, want = [], w0, []
    for lr in rates:
        x = rng.normal(size=(size, FEATURES)).astype(np.float32)
        y = (x @ true_w + 0.1 * rng.normal(size=size)).astype(np.float32)
        grad = ((2.0 / size) * x.T @ (x @ w - y)).astype(np.float32)
        w = (w - np.float32(lr) * grad).astype(np.float32)
        batches.append({"x": x, "y": y})
        want.append(w)
    return w0, batches, rates, np.stack(want)


def _float32(leaf: Any) -> np.ndarray | None:
    """``leaf``'s numbers as the step gets them (JAX makes a float64 float32, x64 off)."""
    try:
        return np.asarray(leaf).astype(np.float32)
    except (TypeError, ValueError):
        return None


def _changed(batch: dict, lr: Any, prepared: tuple, earlier: list[dict]) -> str:
    """What of the batch's numbers and lr's value the step does not get as given ("" when
    nothing): a float16 batch stays within any tolerance, and still is other numbers."""
    made = jax.tree.leaves(prepared[0])
    for key, old in batch.items():
        stale = [j for j, b in enumerate(earlier) if any(np.array_equal(n, b[key]) for n in made)]
        if stale:
            return (f"batch[{key!r}] reached the step with the numbers of step {stale[-1]}'s "
                    "batch: the loader's dict and arrays come back refilled, so a batch kept "
                    "by id() from an earlier call is stale")  # fmt: skip
        if not any(np.array_equal(_float32(new), old) for new in made):
            kinds = ", ".join(sorted({type_text(new) for new in made})) or "nothing"
            return f"batch[{key!r}] reached the step as other numbers ({kinds})"
    rate = _float32(prepared[1])  # one value, whatever its shape: (1,) is lr's value too
    if rate is None or not rate.size or not (rate == np.float32(lr)).all():
        seen = shorten(repr(prepared[1]), 60)
        return f"lr reached the step as {type_text(prepared[1])} {seen}, given {lr!r}"
    return ""


def _require_numbers(
    grading: Grading, w0: np.ndarray, got: np.ndarray, want: np.ndarray, changes: list[str]
):
    """Every step's w and update close to the reference's, and fed the numbers given."""
    got_d, want_d = (np.diff(np.vstack([w0, w]), axis=0) for w in (got, want))
    for check, what, mine, theirs, rtol, atol in (
        (WEIGHTS, "w after the update", got, want, 1e-4, 1e-5),
        (UPDATES, "the update (lr * gradient)", got_d, want_d, 2e-3, 1e-4 * np.abs(want_d).max()),
    ):
        bad = ~np.isclose(mine, theirs, rtol=rtol, atol=atol).all(axis=1) | np.array(changes, bool)
        k = int(np.argmax(bad))
        fed = " or were fed other numbers" if changes[k] else ""
        shown_mine, shown_theirs = excerpts(mine[k], theirs[k])
        grading.require(
            check,
            not bad.any(),
            expected=f"{what} at step {k}: {shown_theirs} (float32 lr, the batch as given)",
            seen=f"{shown_mine}; {int(bad.sum())} of {len(mine)} steps differ{fed}",
            hint=f"prepare_batch changed more than lr's type: {changes[k]}. Only lr's kind of "
            "number needs fixing; keep the batch as it came and lr's value"
            if changes[k]
            else "fixed_step must be the update w - lr * grad(mean((x @ w - y)**2)), fed the "
            "batch and lr that prepare_batch returned",
        )


def _require_order(prepared: tuple | list) -> None:
    """A pair whose first item is one number and whose second is a dict is (lr, batch):
    the step would get the rate as its batch and fail at ``batch["x"]``; say so first."""
    first, second = prepared
    try:
        scalar = np.size(first) == 1 and not isinstance(first, dict)
    except (TypeError, ValueError):
        scalar = False
    if scalar and isinstance(second, dict):
        seen = f"({type_text(first)}, dict): the learning rate first, then the batch"
        expected = "the batch first, then the learning rate: the grader calls "
        expected += "fixed_step(w, *prepare_batch(batch, lr)), and fixed_step takes (w, batch, lr)"
        hint = "the pair is in the wrong order: end prepare_batch with `return batch, lr`"
        raise fail(RETURNS, expected=expected, seen=seen, hint=hint)


@grader("diagnosing", checks=CHECKS)
def grade(
    grading: Grading, prepare_batch: Callable[..., Any], fixed_step: Callable[..., Any]
) -> None:
    """Grade the exercise: same numbers as the reference, and one compilation of the step."""
    grading.require_jitted(JITTED, fixed_step)
    w0, batches, rates, want = _problem(grading.rng)
    fixed_step.clear_cache()  # count from an empty cache, whatever ran in the notebook
    w, got, changes = jax.numpy.asarray(w0), [], []
    buffers = {key: value.copy() for key, value in batches[0].items()}
    given: dict[str, np.ndarray] = {}  # one dict, its arrays refilled: ids come back
    with count_compiles(fixed_step) as count:
        step = Recorder(fixed_step, lambda: count.compiles)
        for batch, lr in zip(batches, rates, strict=True):
            for key, value in batch.items():
                buffers[key][...] = value
            given.clear()
            given.update(buffers)
            prepared = grading.call_learner(RUNS, prepare_batch, given, lr)
            if not (isinstance(prepared, tuple | list) and len(prepared) == 2):
                seen = shorten(f"{type(prepared).__name__}: {prepared!r}", 200)
                expected = "two things, the batch and the learning rate (a tuple or a list): "
                expected += "the grader calls fixed_step(w, *prepare_batch(batch, lr))"
                hint = "end prepare_batch with `return batch, lr`"
                raise fail(RETURNS, expected=expected, seen=seen, hint=hint)
            _require_order(prepared)
            changes.append(_changed(batch, lr, prepared, batches[: len(changes)]))
            w = grading.call_learner(RUNS, step, w, *prepared)
            got.append(np.asarray(w))
    grading.passed(RUNS)
    grading.passed(RETURNS)
    expected = "jit switched on while the grader called fixed_step"
    seen = "jit was switched off (jax_disable_jit) after prepare_batch ran: fixed_step ran op by op"
    on = all(call.jit_on for call in step.calls)
    grading.require(JIT_ON, on, expected=expected, seen=seen, hint=JIT_OFF_HINT)
    _require_numbers(grading, w0, np.stack(got), want, changes)
    hint = "fixed_step should be the jitted update itself, not a wrapper around another one"
    never = "fixed_step was never compiled while the grader called it"
    callbacks, seen = python_work(step.calls)
    expected = "the update computed inside fixed_step's compiled program"
    hint_cb = "compute the update with jax.numpy inside fixed_step, not through a callback"
    grading.require(COMPILED, not callbacks, expected=expected, seen=seen, hint=hint_cb)
    grading.require_compiles(
        COMPILED, count, at_least=1, what="compilations of fixed_step", hint=hint, seen_extra=never
    )
    found = why(step, label=lambda i: f"step {i}")
    what, hint = f"compilations over {len(rates)} steps", found.hint_for(CAUSE_HINTS)
    grading.require_compiles(ONCE, count, at_most=1, what=what, hint=hint, seen_extra=found.text)
