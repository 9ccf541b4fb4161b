"""The one way the grader tests run a row of their tables.

A wrong-answer row names the answer, the check it must fail, words the verdict must hold
and words its hint must hold; a right-answer row names an answer that must pass. Rows
whose draw varies run under several seeds (``SEEDS``, handed to the grader as ``seed=``).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterable

import pytest

from jitlab.grading import GradingFailure

SEEDS = ("1", "2", "3")


def _seed(seed: object) -> int | None:
    """The draw of ``seed`` (``None``: the grader's own fresh draw)."""
    return None if seed is None else int(seed)  # type: ignore[call-overload]


def fails(
    grade: Callable[..., object],
    *answer: object,
    check: str | tuple[str, ...],
    words: Iterable[str] = (),
    hint: Iterable[str] = (),
    seed: object = None,
) -> GradingFailure:
    """Grade ``answer``: it must fail at ``check`` (a check's name, or a tuple of the names
    it may fail at), with every one of ``words`` in the verdict and of ``hint`` in its hint.
    A name may be cut to words that only one of the grader's declared checks holds."""
    with pytest.raises(GradingFailure) as caught:
        grade(*answer, seed=_seed(seed))
    found = caught.value
    allowed = [_declared(grade, name) for name in ((check,) if isinstance(check, str) else check)]
    assert found.check in allowed, found
    assert all(word in str(found) for word in _words(words)), found
    assert all(word in found.hint for word in _words(hint)), found
    return found


def passes(grade: Callable[..., object], *answer: object, seed: object = None) -> str:
    """Grade ``answer``: every check must pass. Returns what the grader printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        grade(*answer, seed=_seed(seed))
    assert "All checks passed" in out.getvalue(), out.getvalue()
    return out.getvalue()


def _words(words: Iterable[str] | str) -> list[str]:
    return [words] if isinstance(words, str) else list(words)


def rows(table: Iterable[str], seeded: Iterable[str] = (), seeds=SEEDS) -> list[tuple]:
    """(row, seed) pairs: ``seeds`` for the rows in ``seeded`` (a rule only some draws
    expose must fail on each), one fresh draw (``None``) for the rest."""
    seeded = set(seeded)
    return [(name, seed) for name in table for seed in (seeds if name in seeded else (None,))]


def _declared(grade: Callable[..., object], name: str) -> str:
    """The one check ``grade`` declares that holds ``name`` (``name`` itself if it is one)."""
    declared = getattr(grade, "checks", (name,))
    if name in declared:
        return name
    holding = [check for check in declared if name in check]
    assert len(holding) == 1, f"{name!r} names {holding} of {declared}"
    return holding[0]
