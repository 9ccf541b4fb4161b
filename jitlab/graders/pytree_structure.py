"""Grader for pytree_structure: the plain ``loss(params, batch)`` tidies any batch and
returns the jitted ``batch_loss(params, tidy_batch)``, compiled once for every kind of batch
in every calling style (:class:`~jitlab.grading.kernel.KernelExercise`'s checks).
What every run draws, and the wrong rule it breaks (in brackets: what must not matter):
  every kind of batch in every calling style, shuffled        a kind or a style not tidied
  weights from 0.1 to 2 (their mean is not 1)                 a plain mean, or weights ignored
  a kind's second batch: its first dict and arrays, refilled  memoising by id()
  its third: that dict again, holding new arrays              memoising the arrays by id(dict)
  keys in another order                                       (dict keys are sorted in the pytree)

The checks named from :mod:`jitlab.grading.kernel`'s templates, as the learner sees them:
- batch_loss is compiled with jax.jit
- loss is a plain Python function
- loss calls batch_loss with jit on
- loss leaves the caller's arguments unchanged
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from jitlab.grading import Hints, grader, why
from jitlab.grading.checks import LOST_DIGITS, Grading, lost_digits
from jitlab.grading.kernel import JIT_ON, JITTED, PLAIN, UNCHANGED, KernelExercise
from jitlab.instruments import signature as sig

KINDS = ("no weights", "weights", "weights=None", "extra ids", "weights, keys reordered")
UNWEIGHTED = ("no weights", "weights=None", "extra ids")
STYLES = {  # a calling style: how it passes (params, batch) to loss
    "loss(params, batch)": lambda p, b: ((p, b), {}),
    "loss(params, batch=batch)": lambda p, b: ((p,), {"batch": b}),
    "loss(params=..., batch=...)": lambda p, b: ((), {"params": p, "batch": b}),
}
EXTRA_CALLS = 9  # on top of one call for every (kind, style) pair
RUNS, ONE_CALL, SCALAR, NUMBERS, ONCE = (
    "loss runs on every kind of batch and calling style",
    "loss calls batch_loss once per call",
    "loss returns one number per batch",
    "the losses match the reference",
    "batch_loss compiles once for all batches",
)
HINTS = Hints(  # by check (the kernel's by its name template), mistake, or signature part
    {
        UNCHANGED.name: "the loader reuses dicts and arrays: never edit in place, assign to or pop",
        ONE_CALL: "call batch_loss by that name once and return it: batch_loss(params, tidy)",
        "memo": """only batches that came in a dict the loader had used before (refilled)
            skipped batch_loss, and got an earlier call's loss: a result kept by id() (of
            the batch, or of params) goes stale; remember nothing between calls, call
            batch_loss on every call""",
        "traced": "batch_loss ran only while another function was being traced: call it directly",
        SCALAR: "reduce over the batch (a weighted mean of the squared errors) and return it",
        NUMBERS: "the loss is sum(w * (pred - y)**2) / sum(w); no weights means 1s, not 0s",
        "stale": """wrong only for batches that came in a dict the loader had used before:
            keep nothing by id() or object, tidy every batch on every call""",
        "ones": """wrong only for the batches without weights: fill in one weight per row,
            np.ones_like(batch["y"]); a scalar 1.0 makes sum(w) 1, a sum and not a mean""",
        ONCE: "give batch_loss the same keys, always arrays, and call it positionally",
        "style": "call batch_loss one way only, whichever way loss was called",
        "none": '"weights": None and no "weights" key are the same: pass an array in both',
        "weights": "give batch_loss an array of weights in every case (ones where none)",
        "keys": "build a new dict with exactly the keys batch_loss needs, the same every time",
        "containers": "pass batch_loss the same containers every time (a dict, not a tuple)",
        "types": 'the filled-in weights need the dtype of real ones: np.ones_like(batch["y"])',
        "weak": 'the fill is weakly typed (~), real weights are not: np.ones_like(batch["y"])',
        "again": "same arguments compiled again: do not clear its cache or jit anew in loss",
    }
)
PARTS = {sig.KEYWORD: "style", sig.WEAK_TYPE: "weak", sig.PYTHON_SCALAR: "weak"}  # else types
LOSS = KernelExercise("loss", "batch_loss", "batch_loss(params, tidy_batch)", HINTS)
CHECKS = (*LOSS.names(JITTED, PLAIN), RUNS, LOSS.name(JIT_ON), ONE_CALL)
CHECKS += (LOSS.name(UNCHANGED), SCALAR, NUMBERS, ONCE)


def _reference_loss(params: dict[str, Any], batch: dict[str, Any]) -> float:
    """Weighted mean squared error in float64; no weights means weight 1 everywhere."""
    x, y = np.asarray(batch["x"], np.float64), np.asarray(batch["y"], np.float64)
    w = np.ones_like(y) if batch.get("weights") is None else batch["weights"].astype(np.float64)
    pred = x @ np.asarray(params["w"], np.float64) + float(params["b"])
    return float(np.sum(w * (pred - y) ** 2) / np.sum(w))


def _make_batch(rng: np.random.Generator, kind: str, n: int, f: int, first_id: int) -> dict:
    x = rng.normal(size=(n, f)).astype(np.float32)
    y = rng.normal(loc=rng.normal(), size=n).astype(np.float32)
    weights = rng.uniform(0.1, 2.0, size=n).astype(np.float32)
    return {
        "no weights": {"x": x, "y": y},
        "weights": {"x": x, "y": y, "weights": weights},
        "weights=None": {"x": x, "y": y, "weights": None},
        "extra ids": {"x": x, "y": y, "ids": np.arange(first_id, first_id + n, dtype=np.int32)},
    }.get(kind, {"weights": weights, "y": y, "x": x})


def _refill(batch: dict, fresh: dict, *, in_place: bool = True) -> dict:
    """``batch`` again, with ``fresh``'s keys and values, its arrays overwritten in place
    (``in_place``) or replaced by ``fresh``'s: a loader that reuses its dicts and buffers
    (whatever the learner's code did to them)."""
    for key, value in fresh.items():
        old = batch.get(key)
        if in_place and isinstance(old, np.ndarray) and isinstance(value, np.ndarray):
            if old.shape == value.shape and old.dtype == value.dtype and old.flags.writeable:
                old[...] = value
                fresh[key] = old
    batch.clear()
    batch.update(fresh)
    return batch


def _kind(d: sig.Difference) -> str:
    """Which of the hints a difference between two calls of batch_loss calls for."""
    if d.part != sig.STRUCTURE:
        return PARTS.get(d.part, "types")
    if "None" in (d.now, d.before):
        return "none"
    if "absent" in (d.now, d.before):
        return "weights" if "weights" in d.where else "keys"
    return "containers"


def _repeats(outputs: list[Any], i: int) -> bool:
    """Call ``i`` of loss returned the very number an earlier call returned."""
    try:
        return any(np.array_equal(outputs[i], earlier) for earlier in outputs[:i])
    except (TypeError, ValueError):
        return False


@grader("pytree_structure", checks=CHECKS, hints=HINTS)
def grade(grading: Grading, loss: Callable[..., Any], batch_loss: Callable[..., Any]) -> None:
    """Grade the exercise: numbers right for every kind of batch, one compilation."""
    rng = grading.rng
    LOSS.jitted(grading, batch_loss)
    LOSS.plain(grading, loss)
    n, f = int(rng.integers(16, 65)), int(rng.integers(4, 10))
    params = {"w": jnp.asarray(rng.normal(size=f), jnp.float32), "b": jnp.float32(rng.normal())}
    plan = [(kind, style) for kind in KINDS for style in STYLES]
    plan += [(str(rng.choice(KINDS)), str(rng.choice(list(STYLES)))) for _ in range(EXTRA_CALLS)]
    plan = [plan[i] for i in rng.permutation(len(plan))]
    seen_before = [sum(k == kind for k, _ in plan[:i]) for i, (kind, _) in enumerate(plan)]
    reused = [times > 0 for times in seen_before]  # odd: arrays refilled; even: new arrays
    wanted: list[float] = []

    def arguments() -> Any:
        """The loader's batches: a kind's later batches come in its first dict, its arrays
        refilled in place (the second, fourth...) or new (the third, fifth...)."""
        last: dict[str, dict] = {}
        for i, (kind, style) in enumerate(plan):
            fresh = _make_batch(rng, kind, n, f, i * n)
            in_place = seen_before[i] % 2 == 1
            batch = _refill(last[kind], fresh, in_place=in_place) if reused[i] else fresh
            last[kind] = batch
            wanted.append(_reference_loss(params, batch))
            yield STYLES[style](params, batch)

    about = lambda i: f"a batch with {plan[i][0]}, called as {plan[i][1]}"  # noqa: E731
    run = LOSS.run(grading, loss, batch_loss, arguments(), check=RUNS, refills=True, about=about)
    grading.passed(RUNS)
    LOSS.jit_on(grading, run.recorder)
    counts, never = sorted({len(made) for made in run.calls}), sum(not m for m in run.calls)
    seen = f"{len(run.kernel_calls)} call(s) of batch_loss in all, per call of loss: {counts}"
    seen += f"; {never} of {len(plan)} calls of loss never called batch_loss" * bool(never)
    hint = HINTS["traced" if never and run.recorder.traced else ONE_CALL]
    skipped = [i for i, made in enumerate(run.calls) if not made]
    if skipped and all(reused[i] and _repeats(run.outputs, i) for i in skipped):
        hint = HINTS["memo"]  # recomputed: every skip a reused dict, answered by an old loss
    expected = f"1 call of batch_loss for each of the {len(plan)} calls of loss"
    grading.require(ONE_CALL, counts == [1], expected, seen, hint)
    LOSS.unchanged(grading, run, what=lambda i: f"a batch of kind {plan[i][0]}")
    shapes = ", ".join(sorted({str(np.shape(out)) for out in run.outputs}))
    grading.require(SCALAR, shapes == "()", "a scalar (shape ()) for each call", f"shape {shapes}")
    got = np.array([float(np.asarray(out)) for out in run.outputs])
    wrong = list(np.flatnonzero(~np.isclose(got, wanted, rtol=1e-4)))
    i, kinds = (wrong or [0])[0], ", ".join(sorted({plan[j][0] for j in wrong}))
    first = f"call {i + 1} of loss: {about(i)}"
    seen = f"{got[i]:.6g}; wrong for {len(wrong)} of {len(plan)} calls, batches with {kinds}"
    unweighted = wrong and all(plan[j][0] in UNWEIGHTED for j in wrong)
    hint = HINTS["stale"] if wrong and all(reused[j] for j in wrong) else ""
    hint = hint or (HINTS["ones"] if unweighted else "")
    near = wrong and lost_digits(got[wrong], np.take(wanted, wrong))
    hint = hint or (LOST_DIGITS if near else "")
    grading.require(NUMBERS, not wrong, f"{wanted[i]:.6g} (the reference) for {first}", seen, hint)
    found = why(run.recorder)
    hint = found.hint_for(HINTS, HINTS[ONCE], kind=_kind)
    what = f"compilations of batch_loss for {len(plan)} batches"
    LOSS.compiles(grading, ONCE, run.count, exactly=1, what=what, hint=hint, cause=found.text)
