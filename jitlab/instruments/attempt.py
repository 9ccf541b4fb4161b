"""Run a call that may fail, and keep what happened, for a *Predict* prompt.

An experiment whose answer is "it raises" cannot name the exception before the learner
predicts: an ``except TracerBoolConversionError:`` in view gives it away. ``attempt``
calls the function and keeps its value or the exception it raised; the answer cell,
folded on the site, asserts the exact type (``assert type(tried.error) is ...``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Attempt:
    """What one call did: returned ``value``, or raised ``error`` (then ``value`` is None)."""

    value: Any = None
    error: Exception | None = None

    @property
    def raised(self) -> bool:
        return self.error is not None

    def __str__(self) -> str:
        if self.error is None:
            return f"returned {self.value!r}"
        first_line = (str(self.error).strip().splitlines() or [""])[0]
        return f"raised {type(self.error).__qualname__}: {first_line}"


def attempt(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Attempt:
    """Call ``fn(*args, **kwargs)``; keep its value, or the ``Exception`` it raised.

    Only ``Exception`` is caught: a ``KeyboardInterrupt`` still stops the cell.
    """
    try:
        return Attempt(value=fn(*args, **kwargs))
    except Exception as err:  # the experiment's outcome, asserted by type in the answer
        return Attempt(error=err)
