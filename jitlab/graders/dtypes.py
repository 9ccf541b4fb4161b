"""Grader for the dtypes exercise: score batches of any dtype with one compilation.

The learner writes ``score_core(x, weights)`` (jitted: standardise each column of ``x``
by its batch mean and standard deviation, then ``z @ weights``) and ``score(batch,
weights)``, the plain-Python boundary that a data loader calls with batches of mixed
dtypes.

What is checked, on fresh random inputs every run (so a hard-coded answer cannot pass):

- ``score_core`` is what ``jax.jit`` returns (a look-alike or a NumPy function is
  refused), it does its work inside the compiled program (no ``pure_callback``), and
  ``score`` is not jitted itself;
- ``score`` returns the reference numbers for every source dtype, within float32
  accuracy. A failure says which dtypes went wrong, so a mistake in the formula (wrong
  for every dtype) is reported as such, not under the first dtype tried; an integer cast
  (the float batches go wrong) and a float16 cast (digits lost) get their own hints;
- ``score`` leaves the caller's batch and weights as they were (content, not ``id``);
- every answer ``score`` returns is what ``score_core`` computed during that call:
  ``score_core`` is watched through :func:`jitlab.grading.recording`, so a NumPy path
  with one decoy call, returning some reference, or ``jax.disable_jit()`` inside
  ``score`` (named as such) fails;
- over one pass of the loader, with ``score_core``'s cache emptied first, ``score_core``
  compiles exactly once. The verdict names the dtypes that reached ``score_core`` (as
  the grader saw them), which is the real cause: no cast, a cast inside ``score_core``,
  or ``jnp.asarray`` without a dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from jitlab.grading import Call, fail, fresh_rng, grader, passed
from jitlab.grading.checks import shorten
from jitlab.grading.kernel import (
    FROM_KERNEL,
    JIT_ON,
    JITTED,
    NO_CALLBACKS,
    PLAIN,
    UNCHANGED,
    KernelExercise,
)

SOURCE_DTYPES: tuple[type, ...] = (
    np.float64,
    np.float32,
    np.int32,
    np.int64,
    np.uint8,
    np.int16,
)
"""What the grader's loader yields: float64 (pandas), float32, int32 and int64 counters,
uint8 pixels, int16 sensor readings."""

BATCHES_PER_DTYPE = 2
RTOL = ATOL = 1e-4  # float32 accuracy, with room; float16 and integer casts miss by far more

SCORE = KernelExercise(
    wrapper="score",
    kernel="score_core",
    call="score_core(x, weights)",
    hints={
        PLAIN.name: "remove @jax.jit from score; the cast happens in score, the arithmetic "
        "in score_core",
        UNCHANGED.name: "work on a converted copy (jnp.asarray makes one); never write into batch",
    },
)
NUMBERS = "score matches the reference for every source dtype"
ONCE = "score_core compiles once for a pass of the loader"
CHECKS = (
    *SCORE.names(JITTED, PLAIN, NO_CALLBACKS),
    NUMBERS,
    *SCORE.names(UNCHANGED, JIT_ON, FROM_KERNEL),
    ONCE,
)


def _reference(batch: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Standardise each column (population standard deviation), then weight and sum."""
    wide = np.asarray(batch, np.float64)
    z = (wide - wide.mean(axis=0)) / wide.std(axis=0)
    return z @ np.asarray(weights, np.float64)


def make_batch(rng: np.random.Generator, dtype: type, shape: tuple[int, int]) -> np.ndarray:
    """One batch of ``dtype`` with values that suit it (and no constant column)."""
    kind = np.dtype(dtype).kind
    if kind == "f":
        values = rng.normal(50.0, 12.0, size=shape)
    elif dtype is np.uint8:
        values = rng.integers(0, 256, size=shape)
    else:
        values = rng.integers(-500, 500, size=shape)
    batch = values.astype(dtype)
    batch[0] = batch[1] + 1  # two rows differ in every column: no column is constant
    return batch


def make_loader(rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """A shuffled pass of the loader (same shape, mixed dtypes) and a weight vector."""
    rows, cols = int(rng.integers(24, 65)), int(rng.integers(4, 13))
    dtypes = [d for d in SOURCE_DTYPES for _ in range(BATCHES_PER_DTYPE)]
    order = rng.permutation(len(dtypes))
    batches = [make_batch(rng, dtypes[i], (rows, cols)) for i in order]
    weights = rng.normal(size=cols).astype(np.float32)
    return batches, weights


def _error(got: Any, want: np.ndarray) -> float:
    """How far ``got`` is from ``want`` (inf for a wrong shape or a non-number)."""
    try:
        value = np.asarray(got, np.float64)
    except (TypeError, ValueError):
        return float("inf")
    if value.shape != want.shape:
        return float("inf")
    excess = np.abs(value - want) - (ATOL + RTOL * np.abs(want))
    return float(np.max(excess)) if excess.size else 0.0


def _numbers_hint(wrong: list[str], right: list[str], shape_wrong: bool, reached: list[str]) -> str:
    """The likeliest cause of wrong numbers, from which dtypes went wrong and which
    dtypes the grader saw reach score_core."""
    if shape_wrong:
        return "return one score per row: z @ weights has shape (rows,)"
    narrow = [name for name in reached if name in ("float16", "bfloat16")]
    if narrow:
        return (
            f"score_core received {narrow[0]}, which keeps only about three significant "
            "digits: cast to float32"
        )
    if right and all(np.dtype(name).kind == "f" for name in wrong):
        return (
            "the float batches lose their fractions: cast to float32, not to an integer "
            "type (which truncates)"
        )
    if not right:
        return (
            "the formula is wrong whatever the dtype: standardise each column (axis=0) "
            "with the population standard deviation (jnp.std, ddof=0), then z @ weights"
        )
    return f"compute every batch in float32; the {', '.join(wrong)} batches come out wrong"


@grader("dtypes", checks=CHECKS)
def grade(score: Callable[..., Any], score_core: Callable[..., Any]) -> None:
    """Grade the exercise. Raises ``GradingFailure`` at the first failed check."""
    rng = fresh_rng()
    batches, weights = make_loader(rng)
    SCORE.jitted(score_core)
    SCORE.plain(
        score,
        seen="score is wrapped by jax.jit: it compiles once per dtype itself, and "
        "score_core is inlined into it",
    )
    SCORE.no_callbacks(score_core, np.asarray(batches[0], np.float32), weights)

    run = SCORE.run(score, score_core, [((b, weights), {}) for b in batches], check=NUMBERS)
    batch_copies = [args[0] for args, _ in run.copies]
    reached = sorted({_dtype_of(during[-1]) for during in run.calls if during})
    errors: dict[str, float] = {}
    for out, batch in zip(run.outputs, batch_copies, strict=True):
        name = batch.dtype.name
        errors[name] = max(errors.get(name, 0.0), _error(out, _reference(batch, weights)))
    wrong = [name for name, e in errors.items() if e > 0]
    if wrong:
        right = [name for name, e in errors.items() if e <= 0]
        shape_wrong = any(np.isinf(errors[name]) for name in wrong)
        first = next(i for i, b in enumerate(batch_copies) if b.dtype.name == wrong[0])
        want = _reference(batch_copies[first], weights)
        raise fail(
            NUMBERS,
            expected=f"the reference for every dtype, e.g. for a {wrong[0]} batch: "
            f"{shorten(str(np.round(want, 4).tolist()), 90)} (shape {want.shape})",
            seen=f"wrong for {', '.join(wrong)}"
            + (f"; right for {', '.join(right)}" if right else " (every source dtype)")
            + f"; for that {wrong[0]} batch: {shorten(repr(run.outputs[first]), 90)}",
            hint=_numbers_hint(wrong, right, shape_wrong, reached),
        )
    passed(NUMBERS)
    SCORE.unchanged(run, what=lambda i: f"the {batch_copies[i].dtype.name} batch")
    SCORE.jit_on(run.recorder)
    SCORE.calls_kernel(run)
    SCORE.returns_kernel_output(run)

    signatures = {during[-1].signature for during in run.calls if during}
    if len(reached) > 1:
        why = (
            f"score_core received x as {len(reached)} dtypes ({', '.join(reached)}): "
            "the cast did not happen before the call"
        )
        hint = (
            "in score, before calling score_core, convert every batch to one float dtype "
            "(jnp.asarray takes a dtype); a cast inside score_core comes after the cache "
            "lookup, which already used the dtype x had when it reached score_core"
        )
    elif len(signatures) > 1:
        why = "score_core was called with " + " and ".join(sorted(map(str, signatures)))
        hint = "pass x and weights the same way on every call (same types and dtypes)"
    else:
        why = ""
        hint = "convert every batch to one float dtype in score, before calling score_core"
    SCORE.compiles(
        ONCE,
        run.count,
        exactly=1,
        what=f"compilations for {len(batches)} batches of {len(SOURCE_DTYPES)} source dtypes",
        hint=hint,
        cause=why,
    )


def _dtype_of(call: Call) -> str:
    """The dtype of ``x`` (after JAX canonicalises it) in one call of score_core."""
    import jax

    x = call.args[0] if call.args else call.kwargs.get("x")
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return type(x).__name__
    return jax.dtypes.canonicalize_dtype(dtype).name
