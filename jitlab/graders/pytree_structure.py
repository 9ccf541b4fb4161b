"""Grader for the pytree structure exercise: a weighted loss over untidy batches,
compiled once.

``loss(params, batch)`` (plain Python) tidies whatever batch the loader produced and
calls the jitted ``batch_loss(params, batch)`` once. Every run calls ``loss`` with every
kind of batch in every calling style, the loader reusing its dicts and arrays; the
standard kernel checks (:mod:`jitlab.grading.kernel`) run on those calls, and a
recompilation is named by :func:`jitlab.grading.why`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from jitlab.doctor import signature as sig
from jitlab.grading import fresh_rng, grader, passed, why
from jitlab.grading.calls import same_content
from jitlab.grading.checks import require
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
DRAWS = {  # what the drawing covers: the wrong rule each draw breaks, on every run
    "every kind of batch in every calling style, shuffled": "a kind or a style not tidied",
    "weights from 0.1 to 2 (their mean is not 1)": "a plain mean, or weights ignored",
    "every kind's second batch is its first dict and arrays, refilled": "memoising by id()",
    "keys in another order": "(must not matter: dict keys are sorted in the pytree)",
}

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
    LOSS.name(UNCHANGED),
    SCALAR,
    NUMBERS,
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
    ids = np.arange(first_id, first_id + n, dtype=np.int32)
    return {
        "no weights": {"x": x, "y": y},
        "weights": {"x": x, "y": y, "weights": weights},
        "weights=None": {"x": x, "y": y, "weights": None},
        "extra ids": {"x": x, "y": y, "ids": ids},
    }.get(kind, {"weights": weights, "y": y, "x": x})


def _refill(batch: dict, fresh: dict) -> dict:
    """``batch`` again, with ``fresh``'s keys and values, its arrays overwritten in place:
    a loader that reuses its buffers (whatever the learner's code did to them)."""
    for key, value in fresh.items():
        old = batch.get(key)
        if isinstance(old, np.ndarray) and isinstance(value, np.ndarray):
            if old.shape == value.shape and old.dtype == value.dtype and old.flags.writeable:
                old[...] = value
                fresh[key] = old
    batch.clear()
    batch.update(fresh)
    return batch


def _arguments(style: str, params: dict, batch: dict) -> tuple[tuple, dict]:
    """How a caller in ``style`` passes (params, batch) to loss."""
    if style == STYLES[0]:
        return (params, batch), {}
    if style == STYLES[1]:
        return (params,), {"batch": batch}
    return (), {"params": params, "batch": batch}


def _kind(d: sig.Difference) -> str:
    """Which of :data:`_HINTS` a difference between two calls of batch_loss calls for."""
    if d.part == sig.KEYWORD:
        return "style"
    if d.part != sig.STRUCTURE:
        return "weak" if d.part in (sig.WEAK_TYPE, sig.PYTHON_SCALAR) else "types"
    if "None" in (d.now, d.before):
        return "none"
    if "absent" in (d.now, d.before):
        return "weights" if "weights" in d.where else "keys"
    return "containers"


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
    wanted: list[float] = []
    reused: list[bool] = []

    def arguments() -> Any:
        """The loader's batches: every kind's second, fourth... batch is its last one's
        dict and arrays, refilled with new values."""
        last: dict[str, dict] = {}
        for i, (kind, style) in enumerate(plan):
            fresh = _make_batch(rng, kind, n, f, i * n)
            reused.append(sum(k == kind for k, _ in plan[:i]) % 2 == 1)
            batch = _refill(last[kind], fresh) if reused[-1] else fresh
            last[kind] = batch
            wanted.append(_reference_loss(params, batch))
            yield _arguments(style, params, batch)

    run = LOSS.run(loss, batch_loss, arguments(), check=RUNS, refills=True)
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
    LOSS.unchanged(run, what=lambda i: f"a batch of kind {plan[i][0]}")
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
    stale = wrong and all(reused[i] for i in wrong)
    first = wrong[0] if wrong else 0
    require(
        NUMBERS,
        not wrong,
        expected=f"{wanted[first]:.6g} (the reference) for call {first + 1} of loss: a batch "
        f"with {plan[first][0]}, called as {plan[first][1]}",
        seen=f"{got[first]:.6g}; wrong for {len(wrong)} of {len(plan)} calls, batches with "
        + ", ".join(kinds_wrong),
        hint="wrong only for batches the loader reused (the same dict and arrays, refilled "
        "with new values): do not keep results or tidied batches by id() or by object"
        if stale
        else "the loss is sum(w * (pred - y)**2) / sum(w), and a batch without weights "
        "counts every example once (weight 1, not 0)",
    )
    found = why(run.recorder)
    LOSS.compiles(
        ONCE,
        count,
        exactly=1,
        what=f"compilations of batch_loss for {len(plan)} batches",
        hint=found.hint_for(
            _HINTS,
            "give batch_loss the same structure every time (same keys, always arrays) "
            "and call it positionally",
            kind=_kind,
        ),
        cause=found.text,
    )
