"""Grader for the diagnosing exercise: a training step that compiles twice, for a hidden reason.

The exercise's learning-rate schedule returns a Python float during warm-up and at its
floor, and a NumPy ``float64`` (from ``np.cos``) during the cosine decay. JAX traces the
first as a weakly typed ``f32[]`` and the second as a strong one, so the jitted step
compiles again when warm-up ends. The learner writes ``prepare_batch(batch, lr)``, the
boundary that hands the step the same kind of scalar every time, and may replace the
step (``fixed_step``).

The grader draws a fresh schedule (base rate, warm-up length, floor, number of steps),
fresh data and a fresh starting point for the weights. The schedule always crosses from
warm-up into decay and always ends on its floor, so the learning rate reaches
``prepare_batch`` as a Python float, then a NumPy float64, then a Python float again.
The grader itself calls ``fixed_step(w, *prepare_batch(batch, lr))`` at every step, so
every update it checks comes out of the learner's jitted step. The checks:

- the numbers: every step's weights, and every step's update, must match a reference
  that feeds the step a float32 learning rate, so a fix that rounds, clamps or replaces
  the rate fails; the starting point is drawn fresh, so a ``prepare_batch`` that plays
  the trajectory back cannot know it;
- jit on: a ``prepare_batch`` that switches jit off (``jax.config.update`` or a
  ``jax.disable_jit()`` left open) is named as such;
- the compile behaviour: at most one compilation of ``fixed_step`` over the whole run,
  from a cleared cache. The verdict names the cause from what the grader saw reach the
  step (two kinds of ``lr``, a batch that changes, or one signature compiled once per
  value: a static argument), and quotes JAX's explanation only as a second opinion.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jitlab.grading import call_learner, fail, fresh_rng, grader, passed, require, require_close
from jitlab.grading.checks import JIT_ON as JIT_ON_CHECK
from jitlab.grading.checks import require_jitted, shorten
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


def _learning_rate(step: int, total: int, *, base: float, warmup: int, floor: float) -> Any:
    """The exercise's schedule with its constants as arguments (same types, same values)."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return max(floor, base * 0.5 * (1.0 + np.cos(np.pi * progress)))


def _problem(
    rng: np.random.Generator,
) -> tuple[np.ndarray, list[dict[str, np.ndarray]], list[Any]]:
    """A fresh start, fresh batches and the schedule's raw rates: float, float64, float."""
    warmup = int(rng.integers(2, 6))
    total = warmup + int(rng.integers(10, 19))
    base = float(rng.uniform(0.02, 0.1))
    # At the last step the cosine is below 2.5 % of base (10 or more decay steps), so a
    # floor above 3 % of base is always reached: a Python float comes back at the end.
    floor = base * float(rng.uniform(0.03, 0.06))
    size = int(rng.integers(16, 49))
    true_w = rng.normal(size=FEATURES).astype(np.float32)
    w0 = rng.normal(size=FEATURES).astype(np.float32)
    batches = []
    for _ in range(total):
        x = rng.normal(size=(size, FEATURES)).astype(np.float32)
        y = (x @ true_w + 0.1 * rng.normal(size=size)).astype(np.float32)
        batches.append({"x": x, "y": y})
    rates = [_learning_rate(s, total, base=base, warmup=warmup, floor=floor) for s in range(total)]
    kinds = [type(r) for r in rates]
    # The grader's own sanity check: all three phases are there, on purpose.
    assert kinds[0] is float and np.float64 in kinds and kinds[-1] is float, kinds
    return w0, batches, rates


def _reference(w0: np.ndarray, batches: list[dict[str, np.ndarray]], rates: list[Any]):
    """The trajectory with a float32 learning rate, in NumPy (no jitted reference)."""
    w = w0.astype(np.float32)
    trajectory = []
    for batch, lr in zip(batches, rates, strict=True):
        x, y = batch["x"], batch["y"]
        grad = (2.0 / len(y)) * x.T @ (x @ w - y)
        w = (w - np.float32(lr) * grad.astype(np.float32)).astype(np.float32)
        trajectory.append(w)
    return np.stack(trajectory)


def _leaf_type(leaf: Any) -> str:
    """How JAX sees one argument leaf: '~float32[]' is a weak type (a Python float)."""
    try:
        return str(jax.typeof(leaf))
    except TypeError:
        return type(leaf).__name__


Signature = tuple[str, tuple[tuple[str, str, str], ...]]


def _signature(prepared: tuple[Any, Any]) -> Signature:
    """What reached fixed_step: the structure, then each leaf's name, type and (for a
    scalar) value."""
    paths, treedef = jax.tree_util.tree_flatten_with_path(prepared)
    leaves = []
    for path, leaf in paths:
        key = jax.tree_util.keystr(path)
        name = "lr" + key[3:] if key.startswith("[1]") else "batch" + key[3:]
        value = repr(float(leaf)) if np.ndim(leaf) == 0 and _is_number(leaf) else ""
        leaves.append((name, _leaf_type(leaf), value))
    return str(treedef), tuple(leaves)


def _is_number(leaf: Any) -> bool:
    try:
        float(leaf)
    except (TypeError, ValueError):
        return False
    return True


def _run_learner(
    prepare_batch: Callable[..., Any],
    fixed_step: Callable[..., Any],
    w0: np.ndarray,
    batches: list[dict[str, np.ndarray]],
    rates: list[Any],
) -> tuple[np.ndarray, list[Signature], bool]:
    """Run the learner's boundary and step, the grader making every call of the step.

    Returns the trajectory, the signature that reached the step at each step, and
    whether jit was off at any call of the step."""
    w = jnp.asarray(w0)
    trajectory, signatures, jit_off = [], [], False
    for batch, lr in zip(batches, rates, strict=True):
        fresh = {key: value.copy() for key, value in batch.items()}
        prepared = call_learner(RUNS, prepare_batch, fresh, lr)
        if not (isinstance(prepared, tuple) and len(prepared) == 2):
            raise fail(
                RETURNS,
                expected="a tuple of two things: the batch and the learning rate",
                seen=shorten(f"{type(prepared).__name__}: {prepared!r}", 200),
                hint="end prepare_batch with `return batch, lr`",
            )
        signatures.append(_signature(prepared))
        jit_off = jit_off or bool(jax.config.jax_disable_jit)
        w = call_learner(RUNS, fixed_step, w, *prepared)
        trajectory.append(np.asarray(w))
    return np.stack(trajectory), signatures, jit_off


def _steps(indices: list[int]) -> str:
    shown = ", ".join(str(i) for i in indices[:6])
    return shown + (", …" if len(indices) > 6 else "")


def _why(signatures: list[Signature], compiles: int) -> tuple[str, str]:
    """(what the grader saw reach fixed_step, a hint that names that cause)."""
    if len({tree for tree, _ in signatures}) > 1:
        return (
            "the batch reached fixed_step with different structures (keys or containers)",
            "return the batch with the same keys and containers at every step",
        )
    kinds: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    values: dict[str, set[str]] = defaultdict(set)
    for step, (_, leaves) in enumerate(signatures):
        for name, kind, value in leaves:
            kinds[name][kind].append(step)
            if value:
                values[name].add(value)
    for name, seen in kinds.items():
        if len(seen) > 1:
            parts = [f"{kind} at steps {_steps(steps)}" for kind, steps in seen.items()]
            weak = any(kind.startswith("~") for kind in seen)
            return (
                f"{name} reached fixed_step as {len(seen)} types: "
                + "; ".join(parts)
                + (" ('~' marks a weak type: a Python scalar)" if weak else ""),
                f"give fixed_step one kind of {name} at every step: convert it in "
                "prepare_batch (np.float32(lr), say); do not make it static, which "
                "compiles once per value",
            )
    varying = [name for name, seen in values.items() if len(seen) >= compiles]
    if varying:
        name = varying[0]
        return (
            f"every call passed the same argument types, yet fixed_step compiled {compiles} "
            f"times, and {name} took {len(values[name])} different values",
            f"a static argument compiles once per value: keep {name} traced (remove it from "
            "static_argnums / static_argnames) and pass it as a float32 scalar",
        )
    return (
        f"every call passed the same argument types, yet fixed_step compiled {compiles} "
        "times: something that is not an array type changed",
        "look for static_argnums / static_argnames on fixed_step, or a new jitted "
        "function made per call: both compile again with the same argument types",
    )


@grader("diagnosing", checks=CHECKS)
def grade(prepare_batch: Callable[..., Any], fixed_step: Callable[..., Any]) -> None:
    """Grade the exercise: same numbers as the reference, and one compilation of the step."""
    rng = fresh_rng()
    require_jitted(JITTED, fixed_step)
    w0, batches, rates = _problem(rng)
    steps = len(rates)

    fixed_step.clear_cache()  # count from an empty cache, whatever ran in the notebook
    with count_compiles(fixed_step) as count:
        got, signatures, jit_off = _run_learner(prepare_batch, fixed_step, w0, batches, rates)
    passed(RUNS)
    passed(RETURNS)
    if jit_off:
        raise fail(
            JIT_ON_CHECK,
            expected="jit switched on while the grader called fixed_step",
            seen="jit was switched off (jax_disable_jit) after prepare_batch ran: "
            "fixed_step ran op by op, uncompiled",
            hint="remove jax.disable_jit() and jax.config.update('jax_disable_jit', True) "
            "from prepare_batch: the exercise is about what jit compiles",
        )

    want = _reference(w0, batches, rates)
    require_close(
        WEIGHTS,
        got,
        want,
        rtol=1e-4,
        atol=1e-5,
        hint="the fix must not change the learning rate's value: convert its type "
        "(to a float32 scalar, or to one kind of Python number), do not round or replace it",
    )
    got_updates = np.diff(np.vstack([w0, got]), axis=0)
    want_updates = np.diff(np.vstack([w0, want]), axis=0)
    scale = float(np.abs(want_updates).max())
    require_close(
        UPDATES,
        got_updates,
        want_updates,
        rtol=2e-3,
        atol=1e-4 * scale,
        hint="each update is lr times the gradient: keep lr's value exactly, only its type "
        "may change (np.float32(lr) rounds it as JAX would anyway)",
    )
    require(
        COMPILED,
        count.compiles >= 1,
        expected="1 compilation of fixed_step",
        seen="0: fixed_step was never compiled while the grader called it",
        hint="fixed_step should be the jitted update itself, not a wrapper around another one",
    )
    if count.compiles > 1:
        saw, hint = _why(signatures, count.compiles)
    else:
        saw, hint = "", ""
    jax_said = shorten(count.last_reason.split("https://")[0], 160)
    require(
        ONCE,
        count.compiles <= 1,
        expected=f"at most 1 compilation over {steps} steps",
        seen=f"{count.compiles} compilations; {saw} (JAX's own explanation of the last "
        f"miss: {jax_said})",
        hint=hint,
    )
