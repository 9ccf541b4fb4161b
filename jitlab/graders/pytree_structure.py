"""Grader for exercise 04 (pytree structure): a weighted loss over untidy batches,
compiled once.

The learner writes ``batch_loss(params, batch)`` (jitted) and ``loss(params, batch)``
(a plain Python function that callers call with whatever batch the loader produced,
positionally or by keyword). Every run draws new shapes and new data, and calls
``loss`` with every kind of batch in every calling style, shuffled.

What it rejects, and how:
- an unfinished stub: ``NotImplementedError`` becomes a failed check;
- ``loss`` that is itself jitted, or is ``batch_loss``: it would compile once per
  structure, so ``loss`` must be a plain function that tidies the batch before jit sees it;
- missing weights filled with zeros (or any other wrong number): each loss is compared
  with a float64 NumPy reference;
- a ``loss`` that edits the caller's dict in place: the batches are checked afterwards;
- work done outside ``jit`` (NumPy or eager ``jnp`` in ``loss``): ``batch_loss`` must
  compile (its cache is cleared first) and ``loss`` must return its JAX array;
- the batch passed through unchanged, ``None`` treated differently from a missing key,
  extra keys kept, or the caller's calling style forwarded: more than one compilation
  of ``batch_loss``, reported with JAX's own explanation and a hint that fits it.
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
    fresh_rng,
    passed,
    require,
    require_close,
    require_jitted,
)
from jitlab.instruments.counting import count_compiles

KINDS = ("no weights", "weights", "weights=None", "extra ids", "weights, keys reordered")
STYLES = ("loss(params, batch)", "loss(params, batch=batch)", "loss(params=..., batch=...)")
EXTRA_CALLS = 9  # on top of one call for every (kind, style) pair


def reference_loss(params: dict[str, Any], batch: dict[str, Any]) -> float:
    """Weighted mean squared error in float64; no weights means weight 1 everywhere."""
    x = np.asarray(batch["x"], dtype=np.float64)
    y = np.asarray(batch["y"], dtype=np.float64)
    pred = x @ np.asarray(params["w"], dtype=np.float64) + float(params["b"])
    weights = batch.get("weights")
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=np.float64)
    return float(np.sum(w * (pred - y) ** 2) / np.sum(w))


def _make_batch(rng: np.random.Generator, kind: str, n: int, f: int, first_id: int) -> dict:
    x = rng.normal(size=(n, f)).astype(np.float32)
    y = rng.normal(loc=rng.normal(), size=n).astype(np.float32)
    weights = rng.uniform(0.1, 2.0, size=n).astype(np.float32)
    if kind == "no weights":
        return {"x": x, "y": y}
    if kind == "weights":
        return {"x": x, "y": y, "weights": weights}
    if kind == "weights=None":
        return {"x": x, "y": y, "weights": None}
    if kind == "extra ids":
        return {"x": x, "y": y, "ids": np.arange(first_id, first_id + n, dtype=np.int32)}
    return {"weights": weights, "y": y, "x": x}


def _call(loss: Callable[..., Any], style: str, params: dict, batch: dict) -> Any:
    check = "loss runs on every kind of batch and calling style"
    if style == STYLES[0]:
        return call_learner(check, loss, params, batch)
    if style == STYLES[1]:
        return call_learner(check, loss, params, batch=batch)
    return call_learner(check, loss, params=params, batch=batch)


def _hint_for(reason: str) -> str:
    if "tuple of length" in reason:
        return (
            "callers use keywords sometimes; whichever way loss was called, call "
            "batch_loss one way only: batch_loss(params, tidy_batch)"
        )
    if "NoneType" in reason:
        return (
            '"weights": None and no "weights" key mean the same thing; give batch_loss '
            "an array of weights in both cases"
        )
    if "key sets" in reason:
        return (
            "do not pass the caller's dict on: build a new dict with exactly the keys "
            "batch_loss needs, the same keys every time"
        )
    if "different input types" in reason:
        return (
            "the filled-in weights must have the same shape and dtype as real weights, "
            'e.g. np.ones_like(batch["y"])'
        )
    return (
        "give batch_loss the same structure every time (same keys, always arrays) and "
        "call it positionally"
    )


def _is_scalar_number(value: Any) -> bool:
    try:
        array = np.asarray(value)
    except Exception:
        return False
    return array.shape == () and array.dtype.kind in "iuf"


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return f"{type(value).__name__}" + (f" of shape {tuple(shape)}" if shape is not None else "")


def grade(loss: Callable[..., Any], batch_loss: Callable[..., Any]) -> None:
    """Grade exercise 04: numbers right for every kind of batch, one compilation."""
    rng = fresh_rng()
    require_jitted("batch_loss is wrapped by jax.jit", batch_loss)
    require(
        "loss is a plain Python function",
        not (hasattr(loss, "lower") and hasattr(loss, "trace")),
        expected="loss to be an ordinary def that tidies the batch, then calls batch_loss",
        seen=f"loss is a jitted function ({getattr(loss, '__name__', type(loss).__name__)})",
        hint="a jitted loss sees every batch structure and compiles for each one; tidy the "
        "batch in plain Python first, then call the jitted batch_loss",
    )

    n, f = int(rng.integers(16, 65)), int(rng.integers(4, 10))
    params = {
        "w": jnp.asarray(rng.normal(size=f), dtype=jnp.float32),
        "b": jnp.float32(rng.normal()),
    }
    plan = [(kind, style) for kind in KINDS for style in STYLES]
    plan += [(str(rng.choice(KINDS)), str(rng.choice(STYLES))) for _ in range(EXTRA_CALLS)]
    order = rng.permutation(len(plan))
    plan = [plan[i] for i in order]
    batches = [_make_batch(rng, kind, n, f, i * n) for i, (kind, _) in enumerate(plan)]
    wanted = [reference_loss(params, b) for b in batches]
    snapshots = [[(key, id(value)) for key, value in b.items()] for b in batches]

    batch_loss.clear_cache()  # count from a cold cache, whatever the notebook ran before
    outputs = []
    with count_compiles(batch_loss) as count:
        for (_, style), batch in zip(plan, batches, strict=True):
            outputs.append(_call(loss, style, params, batch))
    passed("loss runs on every kind of batch and calling style")

    require(
        "loss returns one number per batch",
        all(_is_scalar_number(out) for out in outputs),
        expected="a scalar (shape ()) for each call",
        seen=", ".join(sorted({_describe(out) for out in outputs if not _is_scalar_number(out)})),
        hint="reduce over the batch (a weighted mean of the squared errors) and return it",
    )
    got = np.array([float(out) for out in outputs])
    wrong = [i for i in range(len(plan)) if not np.isclose(got[i], wanted[i], rtol=1e-4)]
    kinds_wrong = sorted({plan[i][0] for i in wrong})
    require_close(
        f"the {len(plan)} losses match the reference",
        got,
        np.array(wanted),
        rtol=1e-4,
        hint=(f"wrong for batches with {', '.join(kinds_wrong)}; " if kinds_wrong else "")
        + "the loss is sum(w * (pred - y)**2) / sum(w), and a batch without weights "
        "counts every example once (weight 1, not 0)",
    )
    changed = [
        plan[i][0]
        for i, batch in enumerate(batches)
        if [(key, id(value)) for key, value in batch.items()] != snapshots[i]
    ]
    require(
        "loss leaves the caller's batch as it was",
        not changed,
        expected="every batch dict unchanged after the call",
        seen=f"changed batches of kind: {', '.join(sorted(set(changed)))}",
        hint="the loader may reuse its dicts; build a new dict for batch_loss instead of "
        "assigning to or popping from the one you were given",
    )
    require(
        "loss does its work inside the jitted batch_loss",
        count.compiles > 0 and all(isinstance(out, jax.Array) for out in outputs),
        expected="batch_loss to compile, and loss to return the JAX array it computes",
        seen=f"{count.compiles} compilation(s) of batch_loss; loss returned "
        + ", ".join(sorted({type(out).__name__ for out in outputs})),
        hint="loss should only tidy the batch and return batch_loss(params, tidy_batch); "
        "do the arithmetic inside batch_loss",
    )
    reason = count.last_reason
    require(
        f"batch_loss compiles once for all {len(plan)} batches",
        count.compiles == 1,
        expected=f"1 compilation ({len(KINDS)} kinds of batch x {len(STYLES)} calling "
        "styles, all with the same shapes)",
        seen=f"{count.compiles} compilations; JAX's reason for the last one: {reason}",
        hint=_hint_for(reason),
    )
    all_passed("04 pytree structure")
