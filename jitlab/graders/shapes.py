"""Grader for exercise 01 (shapes): a variable-length RMS that compiles once per bucket.

What it rejects, and how:
- a hard-coded answer: every run draws new lengths and new data;
- work moved outside ``jit``: the jitted ``padded_rms`` must compile exactly once per
  distinct bucket after its cache is cleared, so never calling it shows as 0 compilations;
- one compilation per length (no bucketing, or ``n`` made static): more compilations
  than buckets;
- one huge bucket for everything, or a bucket per length: ``bucket_size(n)`` must waste
  less than half and use about log2(n) distinct sizes;
- padding that leaks into the result: ``padded_rms`` is fed garbage past ``n``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from jitlab.grading import (
    all_passed,
    call_learner,
    fresh_rng,
    require,
    require_buckets,
    require_close,
    require_jitted,
)
from jitlab.instruments.counting import count_compiles

SMALLEST_BUCKET_ALLOWED = 16
CALLS = 50
MAX_LENGTH = 1000


def reference_rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x.astype(np.float64)))))


def grade(
    bucket_size: Callable[[int], int],
    padded_rms: Callable[..., object],
    rms: Callable[[np.ndarray], object],
) -> None:
    """Grade the three functions of exercise 01."""
    rng = fresh_rng()
    require_jitted("padded_rms is compiled with jax.jit", padded_rms)
    require_buckets(bucket_size, up_to=2048, most=12, smallest_allowed=SMALLEST_BUCKET_ALLOWED)

    # Garbage past n must not change the answer.
    # A length with real padding after it (a power of two would have none).
    n = int(rng.choice([m for m in range(5, 60) if int(bucket_size(m)) > m]))
    size = int(bucket_size(n))
    x = rng.normal(size=n).astype(np.float32)
    padded = np.concatenate([x, rng.uniform(100, 1000, size=size - n).astype(np.float32)])
    got = call_learner("padded_rms ignores the padding", padded_rms, padded, n)
    require_close(
        "padded_rms ignores the padding",
        got,
        reference_rms(x),
        rtol=1e-4,
        hint="mask the elements at positions >= n, and divide by n, not by the padded length",
    )

    lengths = rng.integers(1, MAX_LENGTH + 1, size=CALLS)
    buckets = {int(bucket_size(int(m))) for m in lengths}
    padded_rms.clear_cache()
    results, wanted = [], []
    with count_compiles(padded_rms) as count:
        for m in lengths:
            data = rng.normal(loc=rng.normal(), size=int(m)).astype(np.float32)
            results.append(float(call_learner("rms runs", rms, data)))
            wanted.append(reference_rms(data))
    require_close(
        f"rms matches the reference on {CALLS} fresh arrays",
        np.array(results),
        np.array(wanted),
        rtol=1e-4,
    )
    require(
        "rms does its work inside the jitted padded_rms",
        count.compiles > 0,
        expected=f"{len(buckets)} compilation(s) of padded_rms (one per bucket)",
        seen="0: padded_rms was never compiled while rms ran",
        hint="rms should pad its input and call padded_rms, not compute the answer itself",
    )
    require(
        "at most one compilation per bucket",
        count.compiles <= len(buckets),
        expected=f"at most {len(buckets)} compilations for {CALLS} calls "
        f"({len(set(lengths.tolist()))} distinct lengths, {len(buckets)} buckets)",
        seen=f"{count.compiles}; JAX said: {count.last_reason}",
        hint="pass n as an array argument (traced), not a static one, and pad to bucket_size(n)",
    )
    all_passed("01 shapes")
