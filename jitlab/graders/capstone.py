"""Grader for exercise 11 (capstone): a training loop with several causes at once.

The exercise's naive ``train(params, batches)`` recompiles on every step. It builds
``jax.jit(jax.value_and_grad(lambda ...))`` per step, and its batches vary in length.
Their ``"weights"`` entry is an array, ``None`` or absent. The schedule returns a
Python float during warm-up and a NumPy ``float64`` afterwards, and the loss reads its
weight decay from a global that the script switches on halfway. The learner writes
``bucket_size(n)``, a jitted ``train_step`` and ``train_fast(params, batches)``, which
must return the same final parameters and per-step losses as ``train`` while
compiling ``train_step`` at most once per bucket.

Every run draws fresh parameters and batches (``fresh_rng``), built so that every
cause shows up. The first batch and the batch at ``DECAY_FROM`` share a length, but
they differ in learning-rate type, weights form and weight decay. The checks:

- numbers: every step's loss and the final parameters must match a float64 NumPy
  reference of the naive loop. This rejects padding without a mask (or a mean over the
  padded length), a stale global weight decay, and hard-coded answers;
- work inside jit: ``train_step`` must be jitted and must compile at least once while
  ``train_fast`` runs, with its cache cleared first. This rejects the naive loop
  handed in as it is, and a fresh ``jax.jit(lambda ...)`` per step around the step;
- compile behaviour: at most one compilation of ``train_step`` per bucket used. This
  rejects a per-step ``partial`` of the step function, a static learning rate (one
  compilation per value), a learning rate left as a Python float or a NumPy float64
  (two types), and weights left in three forms;
- steady state: a second run, with fresh data whose lengths fall in the buckets
  already compiled (many of them new lengths), must compile nothing at all, counted
  over every function. This rejects helpers that compile per length, such as an eager
  ``jnp.pad``.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import monitoring

from jitlab.grading import (
    all_passed,
    call_learner,
    fail,
    fresh_rng,
    passed,
    require,
    require_buckets,
    require_close,
    require_jitted,
)
from jitlab.instruments.counting import ANY_FUNCTION, COMPILE_EVENT, count_compiles, miss_reason

# These must equal the constants in the setup cell of exercises/11_capstone.py.
# tests/graders/test_capstone.py checks the reference against the exercise's own loop.
B, F, H = 8, 3, 8
STEPS, WARMUP, DECAY_FROM = 12, 3, 6
BASE_LR, WEIGHT_DECAY = 0.3, 0.02
MIN_LENGTH, MAX_LENGTH = 3, 24
SMALLEST_BUCKET_ALLOWED = 16

Batch = dict[str, Any]


def learning_rate(step: int) -> float:
    """The exercise's schedule, with the same types (Python float, then NumPy float64)."""
    if step < WARMUP:
        return BASE_LR * (step + 1) / WARMUP
    return BASE_LR * np.exp(-0.2 * (step - WARMUP))


def weight_decay(step: int) -> float:
    """What the exercise's ``update_config`` writes into the global at this step."""
    return WEIGHT_DECAY if step >= DECAY_FROM else 0.0


def reference_step(
    params: dict[str, np.ndarray], batch: Batch, lr: float, decay: float
) -> tuple[dict[str, np.ndarray], float]:
    """One step of the naive loop in float64 NumPy, gradients written out by hand."""
    w, b, v = params["w"], params["b"], params["v"]
    x = batch["x"].astype(np.float64)
    y = batch["y"].astype(np.float64)
    weights = batch.get("weights")
    weights = np.ones_like(y) if weights is None else weights.astype(np.float64)
    length = x.shape[1]

    hidden = np.tanh(x @ w + b)  # (batch, time, hidden)
    pooled = hidden.mean(axis=1)
    err = pooled @ v - y
    value = float(np.sum(weights * err**2) / np.sum(weights) + decay * np.sum(w**2))

    d_pred = 2.0 * weights * err / np.sum(weights)
    d_v = pooled.T @ d_pred
    d_pooled = d_pred[:, None] * v[None, :]
    d_z = (d_pooled[:, None, :] / length) * (1.0 - hidden**2)
    d_w = np.einsum("blf,blh->fh", x, d_z) + 2.0 * decay * w
    d_b = d_z.sum(axis=(0, 1))
    new = {"w": w - lr * d_w, "b": b - lr * d_b, "v": v - lr * d_v}
    return new, value


def reference_train(
    params: dict[str, Any], batches: list[Batch]
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The naive loop's results: final parameters and the loss at every step."""
    current = {k: np.asarray(p, np.float64) for k, p in params.items()}
    losses = []
    for step, batch in enumerate(batches):
        current, value = reference_step(
            current, batch, float(learning_rate(step)), weight_decay(step)
        )
        losses.append(value)
    return current, np.array(losses)


def make_params(rng: np.random.Generator) -> dict[str, Any]:
    return {
        "w": jnp.asarray(rng.normal(size=(F, H)) / np.sqrt(F), jnp.float32),
        "b": jnp.asarray(0.5 * rng.normal(size=H), jnp.float32),
        "v": jnp.asarray(rng.normal(size=H) / np.sqrt(H), jnp.float32),
    }


def make_batch(rng: np.random.Generator, length: int, form: str) -> Batch:
    x = rng.normal(size=(B, length, F)).astype(np.float32)
    y = (np.tanh(x.sum(axis=(1, 2)) / length) + 0.1 * rng.normal(size=B)).astype(np.float32)
    batch: Batch = {"x": x, "y": y}
    if form == "array":
        batch["weights"] = rng.uniform(0.5, 1.5, size=B).astype(np.float32)
    elif form == "None":
        batch["weights"] = None
    return batch


def make_problem(
    rng: np.random.Generator, lengths: list[int] | None = None, steps: int = STEPS
) -> list[Batch]:
    """Fresh batches in which every cause shows up (see the module docstring)."""
    if lengths is None:
        lengths = [int(n) for n in rng.integers(MIN_LENGTH, MAX_LENGTH + 1, size=steps)]
        lengths[0] = int(rng.choice([5, 7, 9, 11, 13]))  # padded in any bucket scheme
    lengths = list(lengths)
    forms = [str(f) for f in rng.choice(["array", "None", "absent"], size=steps)]
    forms[0], forms[1] = "array", "None"
    if steps > DECAY_FROM:
        lengths[DECAY_FROM] = lengths[0]  # same bucket; other lr type, weights, decay
        forms[DECAY_FROM] = "absent"
    return [make_batch(rng, n, form) for n, form in zip(lengths, forms, strict=True)]


def _unpack(
    result: Any, check: str = "train_fast returns (params, losses)"
) -> tuple[dict[str, Any], np.ndarray]:
    ok = isinstance(result, tuple | list) and len(result) == 2
    params = result[0] if ok else None
    if not ok or not isinstance(params, dict) or set(params) != {"w", "b", "v"}:
        raise fail(
            check,
            expected='a pair (params, losses), params a dict with keys "w", "b", "v"',
            seen=f"{type(result).__name__}: {result!r}"[:200],
            hint="return params, np.array(losses), as train does",
        )
    losses = np.asarray(result[1], dtype=np.float64).reshape(-1)
    if losses.shape != (STEPS,):
        raise fail(
            check,
            expected=f"one loss per batch: {STEPS} numbers",
            seen=f"{losses.size} numbers",
            hint="append float(loss) at every step, before moving to the next batch",
        )
    passed(check)
    return params, losses


def _numbers_hint(got: np.ndarray, want: np.ndarray) -> str:
    bad = np.flatnonzero(~np.isclose(got, want, rtol=1e-3, atol=1e-5))
    first = int(bad[0]) if bad.size else 0
    if first >= DECAY_FROM:
        return (
            f"the losses go wrong from step {first}, after weight decay was switched on "
            f"at step {DECAY_FROM}: a global read inside a jitted function is frozen at "
            "trace time. Read CONFIG in train_fast on every step and pass the value in"
        )
    return (
        "the losses are wrong from the first steps: mask the padded time steps "
        "(tanh of a zero row is tanh(b), not 0) and divide by the true length, not the "
        "padded one; weights of one must give the plain mean"
    )


def _diagnose(explanations: list[str]) -> tuple[str, str]:
    """(what JAX said, a hint), for the most telling cause among the explanations."""
    # A fresh jitted function starts with one "never seen"; more means new objects.
    repeated = sum("never seen function" in text for text in explanations) > 1
    causes = [
        (
            lambda t: "Static(val=" in t or "explanation unavailable" in t,
            "a static argument compiles once per value: keep lr and the weight decay "
            "traced (np.float32 scalars), not in static_argnames",
        ),
        (
            lambda t: "never seen function" in t and repeated,
            "a function built inside the loop (jax.jit of a lambda or a partial) is new "
            "every step: define train_step once and pass everything that changes as an "
            "argument",
        ),
        (
            lambda t: "different input pytree" in t,
            "the batch's structure changes: always pass the same keys, with weights of "
            "one when they are missing or None",
        ),
        (
            lambda t: "weak_type" in t,
            "the learning rate arrives as two types: convert it with np.float32(...)",
        ),
    ]
    for matches, hint in causes:
        for text in explanations:
            if matches(text):
                return miss_reason(text), hint
    last = miss_reason(explanations[-1]) if explanations else "-"
    return last, "pad every batch to bucket_size(length) and pass the length as an array"


@contextlib.contextmanager
def _compiled_names() -> Iterator[Counter[str]]:
    """Which functions XLA compiled while the block ran, by the name JAX reports."""
    names: Counter[str] = Counter()

    def listen(event: str, seconds: float, **kwargs: Any) -> None:
        if event == COMPILE_EVENT:
            names[str(kwargs.get("fun_name", "?"))] += 1

    monitoring.register_event_duration_secs_listener(listen)
    try:
        yield names
    finally:
        monitoring.unregister_event_duration_listener(listen)


def _same_bucket_lengths(
    rng: np.random.Generator, bucket_size: Callable[[int], int], buckets: set[int], avoid: set[int]
) -> list[int]:
    """STEPS lengths whose buckets were all compiled in the first run, new ones first."""
    inside = [n for n in range(MIN_LENGTH, MAX_LENGTH + 1) if int(bucket_size(n)) in buckets]
    new = [n for n in inside if n not in avoid] or inside
    lengths = [int(n) for n in rng.choice(new, size=STEPS)]
    lengths[0] = int(rng.choice(inside))
    return lengths


def grade(
    train_fast: Callable[..., Any],
    train_step: Callable[..., Any],
    bucket_size: Callable[[int], int],
) -> None:
    """Grade exercise 11: the naive loop's numbers, one compilation per bucket."""
    rng = fresh_rng()
    require_jitted("train_step is compiled with jax.jit", train_step)
    require_buckets(
        bucket_size,
        up_to=2 * MAX_LENGTH,
        most=(2 * MAX_LENGTH).bit_length() + 1,
        smallest_allowed=SMALLEST_BUCKET_ALLOWED,
    )

    params = make_params(rng)
    batches = make_problem(rng)
    lengths = [b["x"].shape[1] for b in batches]
    buckets = {int(bucket_size(n)) for n in lengths}
    want_params, want_losses = reference_train(params, batches)

    train_step.clear_cache()  # count from a cold cache, whatever the notebook ran before
    with count_compiles(train_step) as count, _compiled_names() as others:
        result = call_learner("train_fast runs on fresh batches", train_fast, params, batches)
    got_params, got_losses = _unpack(result)

    require_close(
        f"the loss at each of the {STEPS} steps matches the original loop",
        got_losses,
        want_losses,
        rtol=1e-3,
        atol=1e-5,
        hint=_numbers_hint(got_losses, want_losses),
    )
    for name in ("w", "b", "v"):
        require_close(
            f"the final params[{name!r}] match the original loop",
            np.asarray(got_params[name]),
            want_params[name],
            rtol=1e-3,
            atol=1e-5,
        )

    other = sum(n for name, n in others.items() if name != f"jit({count.name})")
    require(
        "train_step does the training",
        count.compiles >= 1,
        expected=f"train_step compiled once per bucket ({len(buckets)} buckets)",
        seen=f"0 compilations of train_step; {other} compilations of other functions",
        hint="call train_step itself in the loop. A jax.jit(lambda ...) built per step "
        "around it is a new function each time, and train_step never compiles",
    )
    said, hint = _diagnose(count.explanations)
    require(
        "at most one compilation of train_step per bucket",
        count.compiles <= len(buckets),
        expected=f"at most {len(buckets)} compilations for {STEPS} steps "
        f"({len(set(lengths))} distinct lengths, buckets {sorted(buckets)})",
        seen=f"{count.compiles}; JAX said: {said}",
        hint=hint,
    )

    params2 = make_params(rng)
    batches2 = make_problem(rng, _same_bucket_lengths(rng, bucket_size, buckets, set(lengths)))
    with count_compiles(ANY_FUNCTION) as everything, _compiled_names() as names:
        result2 = call_learner("train_fast runs a second time", train_fast, params2, batches2)
    _, got_losses2 = _unpack(result2, "the second run returns (params, losses) too")
    _, want_losses2 = reference_train(params2, batches2)
    require_close(
        "the second run's losses match the original loop",
        got_losses2,
        want_losses2,
        rtol=1e-3,
        atol=1e-5,
        hint=_numbers_hint(got_losses2, want_losses2),
    )
    compiled = ", ".join(f"{name} x{n}" for name, n in names.most_common(4)) or "-"
    require(
        "a second run in the same buckets compiles nothing",
        everything.compiles == 0,
        expected="0 compilations of any function: every bucket is already compiled",
        seen=f"{everything.compiles} compilations: {compiled}",
        hint="pad in NumPy at the boundary (np.zeros, then assign the slice). Eager jnp "
        "calls on arrays of a new length, such as jnp.pad, compile again for each length",
    )
    all_passed("11 capstone")
