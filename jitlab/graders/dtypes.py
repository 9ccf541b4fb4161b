"""Grader for exercise 02 (dtypes): score batches of any dtype with one compilation.

The learner writes ``score_core(x, weights)`` (jitted: standardise each column of ``x``
by its batch mean and standard deviation, then ``z @ weights``) and ``score(batch,
weights)``, the plain-Python boundary that a data loader calls with batches of mixed
dtypes.

What is checked, on fresh random inputs every run (so a hard-coded answer cannot pass):

- ``score_core`` is wrapped by ``jax.jit`` (work done in NumPy instead is rejected);
- ``score`` returns the reference numbers (computed in float64 NumPy) for every source
  dtype, within float32 accuracy (a cast to an integer type truncates the float batches,
  a cast to float16 loses digits: both are rejected);
- over one pass of the loader, with ``score_core``'s cache emptied first, ``score_core``
  compiles exactly once: no cast, a cast *inside* ``score_core`` or ``jnp.asarray``
  without a dtype all compile once per source dtype; zero compilations means ``score``
  never called ``score_core`` (the work was done somewhere else).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
NUMBERS_HINT = (
    "compute in float32: a cast to an integer type truncates the float batches, and "
    "float16 keeps only about three significant digits"
)


def reference(batch: np.ndarray, weights: np.ndarray) -> np.ndarray:
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


def grade(score: Callable[..., Any], score_core: Callable[..., Any]) -> None:
    """Grade exercise 02. Raises ``GradingFailure`` at the first failed check."""
    rng = fresh_rng()
    batches, weights = make_loader(rng)

    require_jitted(
        "score_core is jitted",
        score_core,
        hint="keep @jax.jit on score_core and do the arithmetic there with jnp, not NumPy",
    )

    # Empty score_core's cache so the count below starts cold, whatever the learner ran
    # before; then one pass of the loader.
    score_core.clear_cache()
    outputs = []
    with count_compiles(score_core) as counts:
        for batch in batches:
            outputs.append(
                call_learner(f"score runs on a batch of {batch.dtype.name}", score, batch, weights)
            )

    for dtype in SOURCE_DTYPES:
        check = f"numbers match the reference for {np.dtype(dtype).name} batches"
        for out, batch in zip(outputs, batches, strict=True):
            if batch.dtype != dtype:
                continue
            got, want = np.asarray(out, np.float64), reference(batch, weights)
            if got.shape != want.shape or not np.allclose(got, want, rtol=RTOL, atol=ATOL):
                require_close(check, got, want, rtol=RTOL, atol=ATOL, hint=NUMBERS_HINT)
        passed(check)

    seen_dtypes = sorted({b.dtype.name for b in batches})
    if counts.compiles == 0:
        hint = (
            "score must call score_core, and score itself must stay a plain Python function "
            "(no @jax.jit on it): the cast happens in score, the arithmetic in score_core"
        )
    else:
        hint = (
            "in score, before calling score_core, convert every batch to one float dtype "
            "(jnp.asarray takes a dtype); a cast inside score_core comes after the cache "
            "lookup, which already used the dtype the batch arrived with"
        )
    last = counts.last_reason
    require(
        f"score_core compiles once for {len(batches)} batches of {len(seen_dtypes)} dtypes",
        counts.compiles == 1,
        expected="1 compilation",
        seen=f"{counts.compiles} compilation(s) for batches of {', '.join(seen_dtypes)}"
        + (f"; last cache miss: {last}" if last else ""),
        hint=hint,
    )
    all_passed("02 dtypes")
