"""Grader for the pytree structure exercise: a weighted loss over untidy batches,
compiled once.

The learner writes ``batch_loss(params, batch)`` (jitted) and ``loss(params, batch)``
(a plain Python function that callers call with whatever batch the loader produced,
positionally or by keyword). Every run draws new shapes and new data, and calls
``loss`` with every kind of batch in every calling style (each pair at least once,
shuffled), including a batch whose keys arrive in another order.

While ``loss`` runs, every reference to ``batch_loss`` it holds (globals, closure cells,
defaults, and those of the helpers it calls) is rebound to a recorder
(:mod:`jitlab.grading.calls`) that forwards to the real jitted function and keeps each
call's signature, output, whether jit was on, and whether it compiled. What it rejects:

- an unfinished stub: ``NotImplementedError`` becomes "not solved yet";
- ``batch_loss`` that is not what ``jax.jit`` returns, and a ``loss`` that is jitted
  (it would compile once per structure);
- jit switched off while ``loss`` calls ``batch_loss`` (``jax.disable_jit()`` inside
  ``loss``, or the config flag), named as such;
- work done outside ``jit``: every call of ``loss`` must call ``batch_loss`` exactly once
  and return what that call returned, so a NumPy path (with or without one decoy call)
  and the reference fail;
- wrong numbers (missing weights filled with zeros, weights ignored): each loss is
  compared with a float64 NumPy reference computed here;
- a ``loss`` that changes the caller's dict or the arrays in it (say, normalising the
  weights in place): the batches' content is compared with copies taken before;
- more than one compilation of ``batch_loss``: the verdict names what changed between
  the calls that compiled (calling style, keys, ``None``, dtypes), from the recorded
  signatures, and quotes JAX's explanation only as a second opinion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from jitlab.grading import Signature, differences, fresh_rng, grader, passed
from jitlab.grading.calls import same_content
from jitlab.grading.checks import require, require_close
from jitlab.grading.kernel import (
    FROM_KERNEL,
    JIT_ON,
    JITTED,
    PLAIN,
    UNCHANGED,
    KernelExercise,
)

KINDS = ("no weights", "weights", "weights=None", "extra ids", "weights, keys reordered")
STYLES = ("loss(params, batch)", "loss(params, batch=batch)", "loss(params=..., batch=...)")
EXTRA_CALLS = 9  # on top of one call for every (kind, style) pair

LOSS = KernelExercise(
    wrapper="loss",
    kernel="batch_loss",
    call="batch_loss(params, tidy_batch)",
    hints={
        PLAIN.name: "a jitted loss sees every batch structure and compiles for each one; "
        "tidy the batch in plain Python first, then call the jitted batch_loss",
        FROM_KERNEL.name: "return batch_loss(params, tidy_batch) as it is; do the "
        "arithmetic inside batch_loss, not around it",
        UNCHANGED.name: "the loader may reuse its dicts and arrays; build a new dict for "
        "batch_loss (and new arrays) instead of assigning to, popping from, or editing in "
        "place what you were given",
    },
)
RUNS = "loss runs on every kind of batch and calling style"
ONE_CALL = "loss calls batch_loss once per call"
SCALAR = "loss returns one number per batch"
NUMBERS = "the losses match the reference"
ONCE = "batch_loss compiles once for all batches"
CHECKS = (
    *LOSS.names(JITTED, PLAIN),
    RUNS,
    LOSS.name(JIT_ON),
    ONE_CALL,
    LOSS.name(FROM_KERNEL),
    SCALAR,
    NUMBERS,
    LOSS.name(UNCHANGED),
    ONCE,
)


def _reference_loss(params: dict[str, Any], batch: dict[str, Any]) -> float:
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


def _arguments(style: str, params: dict, batch: dict) -> tuple[tuple, dict]:
    """How a caller in ``style`` passes (params, batch) to loss."""
    if style == STYLES[0]:
        return (params, batch), {}
    if style == STYLES[1]:
        return (params,), {"batch": batch}
    return (), {"params": params, "batch": batch}


def _category(phrase: str) -> str:
    """What kind of change one phrase of :func:`differences` describes."""
    if phrase.startswith("called as"):
        return "style"
    if "None" in phrase:
        return "none"
    if ": absent " in phrase or ": present " in phrase:
        return "weights" if "weights" in phrase else "keys"
    if phrase.startswith("containers"):
        return "containers"
    return "weak" if "~" in phrase else "types"


_HINTS = {
    "style": "callers use keywords sometimes; whichever way loss was called, call "
    "batch_loss one way only: batch_loss(params, tidy_batch)",
    "none": '"weights": None and no "weights" key mean the same thing; give batch_loss '
    "an array of weights in both cases",
    "weights": "batches with and without weights reach batch_loss with different keys; "
    "give batch_loss an array of weights in every case (ones where there are none)",
    "keys": "do not pass the caller's dict on: build a new dict with exactly the keys "
    "batch_loss needs, the same keys every time",
    "containers": "pass batch_loss the same container types every time (a dict, not "
    "sometimes a tuple or a list)",
    "types": "the filled-in weights must have the same shape and dtype as real weights, "
    'e.g. np.ones_like(batch["y"])',
    "weak": "the filled-in weights are weakly typed (~), real weights are not: "
    "jnp.full(n, 1.0) or a Python float makes a weak array; give the fill an explicit "
    'dtype, e.g. np.ones_like(batch["y"])',
    "again": "batch_loss compiled again for arguments it had compiled for already: do "
    "not clear its cache, or build a new jitted function, inside loss",
}


def _compile_causes(signatures: list[Signature], compiled: list[bool]) -> tuple[str, list[str]]:
    """What changed at each compilation after the first (against the closest earlier
    signature), and the kinds of cause found, in order of appearance."""
    causes: list[str] = []
    kinds: list[str] = []
    for i in range(1, len(signatures)):
        if not compiled[i]:
            continue
        earlier = signatures[:i]
        if signatures[i] in earlier:
            causes.append(f"call {i + 1}: the same signature as an earlier call")
            kinds.append("again")
            continue
        closest = min(earlier, key=lambda s: len(differences(s, signatures[i], limit=99)))
        found = differences(closest, signatures[i], then_label="earlier")
        causes.append(f"call {i + 1}: " + "; ".join(found))
        kinds.append(_category(found[0]) if found else "again")
    text = "; ".join(causes[:3]) + (f"; and {len(causes) - 3} more" if len(causes) > 3 else "")
    return text, list(dict.fromkeys(kinds))


@grader("pytree_structure", checks=CHECKS)
def grade(loss: Callable[..., Any], batch_loss: Callable[..., Any]) -> None:
    """Grade the exercise: numbers right for every kind of batch, one compilation."""
    rng = fresh_rng()
    LOSS.jitted(batch_loss)
    LOSS.plain(
        loss,
        seen=f"loss is a jitted function ({getattr(loss, '__name__', type(loss).__name__)})",
    )
    n, f = int(rng.integers(16, 65)), int(rng.integers(4, 10))
    params = {
        "w": jnp.asarray(rng.normal(size=f), dtype=jnp.float32),
        "b": jnp.float32(rng.normal()),
    }
    plan = [(kind, style) for kind in KINDS for style in STYLES]
    plan += [(str(rng.choice(KINDS)), str(rng.choice(STYLES))) for _ in range(EXTRA_CALLS)]
    plan = [plan[i] for i in rng.permutation(len(plan))]
    batches = [_make_batch(rng, kind, n, f, i * n) for i, (kind, _) in enumerate(plan)]
    wanted = [_reference_loss(params, b) for b in batches]
    arguments = [_arguments(style, params, b) for (_, style), b in zip(plan, batches, strict=True)]
    run = LOSS.run(loss, batch_loss, arguments, check=RUNS)
    passed(RUNS)
    LOSS.jit_on(run.recorder)
    calls, count = run.kernel_calls, run.count
    counts = sorted({len(made) for made in run.calls})
    hint = "loss should tidy the batch and return batch_loss(params, tidy_batch): one call"
    if not calls and run.recorder.traced:
        hint += "; batch_loss was only called while another function was being traced"
    elif not calls and count.compiles:
        hint += "; batch_loss compiled, but not through a name loss holds"
    require(
        ONE_CALL,
        counts == [1],
        expected=f"1 call of batch_loss for each of the {len(plan)} calls of loss",
        seen=f"{len(calls)} call(s) of batch_loss in all; per call of loss: "
        + ", ".join(str(c) for c in counts),
        hint=hint,
    )
    LOSS.returns_kernel_output(run, same=same_content)
    outputs = run.outputs
    shapes = sorted({str(np.shape(out)) for out in outputs})
    require(
        SCALAR,
        shapes == ["()"],
        expected="a scalar (shape ()) for each call",
        seen="results of shape " + ", ".join(shapes),
        hint="reduce over the batch (a weighted mean of the squared errors) and return it",
    )
    got = np.array([float(np.asarray(out)) for out in outputs])
    wrong = [i for i in range(len(plan)) if not np.isclose(got[i], wanted[i], rtol=1e-4)]
    kinds_wrong = sorted({plan[i][0] for i in wrong})
    require_close(
        NUMBERS,
        got,
        np.array(wanted),
        rtol=1e-4,
        hint=(f"wrong for batches with {', '.join(kinds_wrong)}; " if kinds_wrong else "")
        + "the loss is sum(w * (pred - y)**2) / sum(w), and a batch without weights "
        "counts every example once (weight 1, not 0)",
    )
    LOSS.unchanged(run, what=lambda i: f"a batch of kind {plan[i][0]}")
    causes, kinds = _compile_causes(
        [call.signature for call in calls], [call.compiled for call in calls]
    )
    LOSS.compiles(
        ONCE,
        count,
        exactly=1,
        what=f"compilations of batch_loss for {len(plan)} batches",
        hint=". Also: ".join(_HINTS[kind] for kind in kinds[:2])
        or "give batch_loss the same structure every time (same keys, always arrays) "
        "and call it positionally",
        cause=causes,
    )
