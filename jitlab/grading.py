"""Building blocks for the exercises' graders.

A grader is a function in ``jitlab.graders.<topic>`` that an exercise's grader cell
calls with the learner's code. It draws fresh random inputs (so a hard-coded answer
cannot pass), compares numbers with a reference, and checks compile behaviour with
``count_compiles``. Every check either passes quietly or raises ``GradingFailure``
saying what was expected, what was seen, and what to try.

nbval (with ``--nbval-lax``) only notices a cell that raises, so failures must raise.
The runner wants more than a traceback, so each check is also appended as one JSON line
to the file named by ``$JITLAB_REPORT`` when that is set: that is how ``jitlab check``
prints a short verdict instead of a wall of pytest output.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

REPORT_ENV = "JITLAB_REPORT"


class GradingFailure(AssertionError):
    """A check of the learner's work failed; the message is meant for the learner."""

    def __init__(self, check: str, *, expected: str, seen: str, hint: str = "") -> None:
        self.check = check
        self.expected = expected
        self.seen = seen
        self.hint = hint
        lines = [f"✗ {check}", f"  expected: {expected}", f"  seen:     {seen}"]
        if hint:
            lines.append(f"  hint:     {hint}")
        super().__init__("\n".join(lines))


def _report(record: dict[str, Any]) -> None:
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")


def passed(check: str) -> None:
    """Record and print a passed check."""
    _report({"check": check, "passed": True})
    print(f"✓ {check}")


def fail(check: str, *, expected: str, seen: str, hint: str = "") -> GradingFailure:
    """Record a failed check and return the exception to raise."""
    _report({"check": check, "passed": False, "expected": expected, "seen": seen, "hint": hint})
    return GradingFailure(check, expected=expected, seen=seen, hint=hint)


def require(check: str, ok: bool, *, expected: str, seen: str, hint: str = "") -> None:
    """Pass ``check`` if ``ok``; otherwise raise ``GradingFailure``."""
    if not ok:
        raise fail(check, expected=expected, seen=seen, hint=hint)
    passed(check)


def call_learner(check: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the learner's function; an unfinished stub or a crash becomes a failed check."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise fail(
            check,
            expected=f"{getattr(fn, '__name__', 'your function')} to return a result",
            seen="NotImplementedError: the exercise is not solved yet",
            hint="replace the `raise NotImplementedError` in the exercise cell, then "
            "run `jitlab hint` if you are stuck",
        ) from None
    except GradingFailure:
        raise
    except Exception as err:  # the learner's bug, reported as a verdict, not a traceback
        raise fail(
            check,
            expected="the call to finish without an error",
            seen=f"{type(err).__name__}: {err}".splitlines()[0][:300],
            hint="run the exercise cell on its own to see the full traceback",
        ) from err


def require_close(
    check: str, got: Any, want: Any, *, rtol: float = 1e-5, atol: float = 1e-5, hint: str = ""
) -> None:
    """Pass if ``got`` matches ``want`` in shape and value."""
    got_np, want_np = np.asarray(got), np.asarray(want)
    if got_np.shape != want_np.shape:
        raise fail(
            check,
            expected=f"an array of shape {want_np.shape}",
            seen=f"shape {got_np.shape}",
            hint=hint or "check which axis you reduce over, and that padding is removed",
        )
    if not np.allclose(got_np, want_np, rtol=rtol, atol=atol):
        worst = int(np.argmax(np.abs(got_np - want_np))) if got_np.size else 0
        raise fail(
            check,
            expected=f"{_short(want_np)} (from the reference implementation)",
            seen=f"{_short(got_np)} (largest error at flat index {worst})",
            hint=hint or "compare with the reference on a small input by hand",
        )
    passed(check)


def require_jitted(check: str, fn: Any, *, hint: str = "") -> None:
    """Pass if ``fn`` is a ``jax.jit``-wrapped function (work stays inside the compiler)."""
    ok = hasattr(fn, "lower") and hasattr(fn, "trace")
    require(
        check,
        ok,
        expected="a function wrapped by jax.jit",
        seen=f"{type(fn).__name__} {getattr(fn, '__name__', '')}".strip(),
        hint=hint or "decorate the function with @jax.jit",
    )


def require_buckets(
    bucket_size: Callable[[int], int], *, up_to: int, smallest_allowed: int = 16
) -> None:
    """Pass if ``bucket_size`` is a real bucketing of the lengths 1..``up_to``.

    Two checks: every bucket holds its length and wastes less than half (anything up to
    ``smallest_allowed`` is fine for tiny lengths), which rejects one huge bucket; and
    there are few buckets (about log2 of the longest length), which rejects
    ``bucket_size(n) = n``: that wastes nothing but compiles once per length.
    """
    check = "bucket_size(n) holds n and wastes less than half"
    sizes = set()
    for n in range(1, up_to + 1):
        size = call_learner(check, bucket_size, n)
        limit = max(2 * n, smallest_allowed)
        if not (isinstance(size, int | np.integer) and n <= size <= limit):
            raise fail(
                check,
                expected=f"an int between {n} and {limit} for n={n}",
                seen=repr(size),
                hint="round n up to the next power of two",
            )
        sizes.add(int(size))
    passed(check)
    most = up_to.bit_length() + 1
    require(
        "lengths share a few buckets",
        len(sizes) <= most,
        expected=f"at most {most} distinct bucket sizes for lengths 1..{up_to}",
        seen=f"{len(sizes)} distinct sizes (e.g. {sorted(sizes)[:8]})",
        hint="a bucket per length compiles once per length; round up to powers of two",
    )


def fresh_rng() -> np.random.Generator:
    """A generator seeded from the clock, so every grading run sees new inputs."""
    return np.random.default_rng(time.time_ns() % 2**32)


def _short(array: np.ndarray) -> str:
    flat = array.reshape(-1)
    shown = np.array2string(flat[:6], precision=4, separator=", ")
    return shown if flat.size <= 6 else shown[:-1] + ", ...]"


def all_passed(title: str) -> None:
    """Print the closing line of a grader cell that passed."""
    print(f"\nAll checks passed: {title}")
