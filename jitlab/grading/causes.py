"""Why a learner's jitted function compiled again, named by the doctor's cause engine.

Each recorded :class:`~jitlab.grading.calls.Call` carries ``key``, the doctor's signature
of its arguments. :func:`why` compares every call that compiled with the closest earlier
one that compiled (the most recent of equals), as the doctor does, and names each
difference and its cause (:func:`jitlab.doctor.classify.causes_of`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from jitlab.doctor import classify
from jitlab.instruments import signature as sig

Key = Callable[[tuple, Mapping[str, Any]], "sig.Signature | None"]


class Called(NamedTuple):
    """A call a grader made of the jitted function itself, for ``why(calls, fn)``."""

    args: tuple
    kwargs: dict
    compiled: bool


def jit_options(fn: Any) -> dict[str, Any]:
    """The static and donated arguments ``jax.jit`` was given for ``fn``, resolved, from
    ``PjitFunction._jit_info`` (JAX 0.12.0.1 has no public accessor); {} for others."""
    info = getattr(fn, "_jit_info", None)
    names = ("static_argnums", "static_argnames", "donate_argnums", "donate_argnames")
    return {name: getattr(info, name) for name in names if getattr(info, name, None)}


def key_of(fn: Any, **options: Any) -> Key:
    """The doctor's signature of a call of ``fn`` (None where it cannot be taken);
    ``options`` (``static_argnums``...) replace what :func:`jit_options` reads."""
    try:
        function = sig.identify(fn)
        spec = sig.static_spec(fn, {**jit_options(fn), **options})
    except Exception:
        return lambda args, kwargs: None

    def take(args: tuple, kwargs: Mapping[str, Any]) -> sig.Signature | None:
        try:
            return sig.take(function, spec, args, kwargs)
        except Exception:  # a learner's odd argument: jit itself will say what is wrong
            return None

    return take


@dataclasses.dataclass(frozen=True)
class Recompile:
    """Call ``index`` compiled again: how it differs from compiling call ``against``."""

    index: int
    against: int
    differences: tuple[sig.Difference, ...]
    causes: tuple[str, ...]

    def text(self, label: Callable[[int], str]) -> str:
        """``call 3: x: f32[29,8] now, f32[37,8] before (shape)``."""
        if not self.differences:
            return (
                f"{label(self.index)}: the same signature as {label(self.against)}, "
                "which had compiled already (its cache was cleared, or jit was built again)"
            )
        found = [f"{d} ({classify.CAUSES[classify.cause_of(d)].title})" for d in self.differences]
        more = [f"{len(found) - 3} more"] if len(found) > 3 else []
        return f"{label(self.index)}: " + "; ".join(found[:3] + more)


@dataclasses.dataclass(frozen=True)
class Why:
    """The causes of every compilation after the first, for a verdict: ``causes`` the
    doctor's ids (``classify.SHAPE``...) in the course's order, ``parts`` the signature
    parts that differed (``sig.KEYWORD``...), ``text`` what changed at the first few,
    ``hint`` the doctor's fix for each cause. False when nothing compiled again."""

    recompiles: tuple[Recompile, ...]
    causes: tuple[str, ...]
    parts: tuple[str, ...]
    text: str
    hint: str

    def __bool__(self) -> bool:
        return bool(self.recompiles)

    def hint_for(
        self,
        hints: Mapping[str, str],
        default: str = "",
        *,
        most: int = 2,
        kind: Callable[[sig.Difference], str] | None = None,
    ) -> str:
        """The grader's own hints for what was found, first ones first: ``hints`` by
        signature part or cause id, or by ``kind(difference)`` when given; "again" for
        a recompilation with no difference. The doctor's fixes when none applies."""
        differences = [d for r in self.recompiles for d in r.differences]
        found = [kind(d) for d in differences] if kind else [*self.parts, *self.causes]
        if any(not r.differences for r in self.recompiles):
            found.append("again")
        chosen = list(dict.fromkeys(hints[k] for k in found if k in hints))[:most]
        return ". Also: ".join(chosen) or default or self.hint


def _closest(key: sig.Signature, earlier: Sequence[tuple[int, sig.Signature]]) -> tuple:
    scored = [(i, sig.differences(key, other)) for i, other in earlier]
    fewest = min(len(d) for _, d in scored)
    return [(i, d) for i, d in scored if len(d) == fewest][-1]  # the most recent of equals


def why(
    calls: Sequence[Any],
    fn: Any = None,
    *,
    label: Callable[[int], str] = lambda i: f"call {i + 1}",
    most: int = 3,
    **options: Any,
) -> Why:
    """Why the calls that compiled after the first did, from recorded ``calls`` (or a
    ``Recorder``), by each call's ``key``; ``fn`` (the jitted function) and ``options``
    (``static_argnums``...) retake the keys from their arguments. ``label`` names call i."""
    take = key_of(fn, **options) if fn is not None else None
    seen: list[tuple[int, sig.Signature]] = []
    found: list[Recompile] = []
    for i, call in enumerate(getattr(calls, "calls", calls)):
        if not call.compiled:
            continue
        key = take(call.args, call.kwargs) if take else getattr(call, "key", None)
        if key is not None and seen:
            against, diffs = _closest(key, seen)
            found.append(Recompile(i, against, tuple(diffs), tuple(classify.causes_of(diffs))))
        if key is not None:
            seen.append((i, key))
    ids = {c for r in found for c in r.causes}
    if len(ids) > 1:
        ids.discard(classify.UNKNOWN)
    causes = tuple(c for c in classify.CAUSES if c in ids)
    parts = tuple(dict.fromkeys(d.part for r in found for d in r.differences))
    text = "; ".join(r.text(label) for r in found[:most])
    if len(found) > most:
        text += f"; and {len(found) - most} more"
    hint = "; ".join(f"{classify.CAUSES[c].title}: {classify.CAUSES[c].fix}" for c in causes)
    return Why(tuple(found), causes, parts, text, hint)
