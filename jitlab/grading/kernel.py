"""The kernel exercise: a plain Python *wrapper* that calls a jitted *kernel*.

Each standard check is declared once here (name, expectation, default hint); a grader
supplies inputs, reference and hints, and runs ``jitted``, ``plain``, ``no_callbacks``,
``run`` (the counted, recorded calls from an emptied cache), then ``jit_on``,
``calls_kernel``, ``unchanged`` and ``compiles`` on the run.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from jitlab.grading.calls import (
    Call,
    Changed,
    Recorder,
    changed_arguments,
    copy_leaf,
    host_callbacks,
    python_work,
    recording,
)
from jitlab.grading.checks import JIT_OFF_HINT, Grading, GradingFailure, fail, is_jitted, shorten
from jitlab.instruments.counting import CompileCount, count_compiles


class Declared(NamedTuple):
    """One standard check: name, expectation and default hint, as templates over
    ``{wrapper}``, ``{kernel}`` and ``{call}`` (how the wrapper calls the kernel)."""

    name: str
    expected: str
    hint: str


JITTED = Declared(
    "{kernel} is compiled with jax.jit",
    "a function wrapped by jax.jit",
    "decorate {kernel} with @jax.jit and do its arithmetic there with jnp, not NumPy",
)
PLAIN = Declared(
    "{wrapper} is a plain Python function",
    "{wrapper} without @jax.jit: the boundary where the kernel's arguments are prepared",
    "remove @jax.jit from {wrapper}; only {kernel} is jitted",
)
NO_CALLBACKS = Declared(
    "{kernel} computes inside its compiled program",
    "the whole computation inside the compiled program",
    "compute with jax.numpy inside the jitted function, not through a callback",
)
JIT_ON = Declared(
    "{wrapper} calls {kernel} with jit on",
    "jit switched on at every call of {kernel}",
    JIT_OFF_HINT,
)
CALLS_KERNEL = Declared(
    "{wrapper} calls {kernel} at every call",
    "every call of {wrapper} to call {kernel} itself and return its result",
    "return {call} itself; do not compute the answer another way beside a call to {kernel}",
)
UNCHANGED = Declared(
    "{wrapper} leaves the caller's arguments unchanged",
    "the caller's arrays and containers as they were",
    "work on new arrays and a new container; never write into, assign to or pop from "
    "what you were given",
)


DONATED = """donate nothing the caller gave you (no donate_argnums on its arrays): a donated
    buffer goes to the result, and the caller's array is deleted""".replace("\n    ", " ")


def recompiled_by(
    fn: Callable[..., Any], base: Sequence[Any], variants: Mapping[str, Sequence[Any]]
) -> list[str]:
    """The arguments whose new value alone compiled ``fn`` again: each variant of the
    argument list ``base`` differs from it in the one argument it is named after."""
    try:
        fn(*base)
        causes = []
        for name, args in variants.items():
            with count_compiles(fn, explain=False) as count:
                fn(*args)
            if count.compiles:
                causes.append(name)
        return causes
    except Exception:
        return []


@dataclasses.dataclass
class Run:
    """The wrapper's calls in one counted, recorded block: for call ``i`` the caller's
    objects (a loader may refill them later), a copy taken just before, the output, the
    kernel calls it dispatched, and what it changed of its arguments."""

    recorder: Recorder
    count: CompileCount
    given: list[tuple[tuple, dict]] = dataclasses.field(default_factory=list)
    copies: list[Any] = dataclasses.field(default_factory=list)
    outputs: list[Any] = dataclasses.field(default_factory=list)
    calls: list[list[Call]] = dataclasses.field(default_factory=list)
    changed: list[Changed] = dataclasses.field(default_factory=list)

    @property
    def kernel_calls(self) -> list[Call]:  # every dispatch of the kernel, in order
        return self.recorder.calls


def _by_name(wrapper: Callable[..., Any], args: tuple, kwargs: dict) -> dict[str, Any]:
    """The arguments of one call of ``wrapper`` by its parameters' names ("argument 1"
    where the signature cannot say), to name what a call changed."""
    try:
        return dict(inspect.signature(wrapper).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return {f"argument {i + 1}": arg for i, arg in enumerate(args)} | kwargs


def same_value(a: Any, b: Any) -> bool:
    """``a`` and ``b`` hold the same numbers (exactly; NaN equals NaN), leaf by leaf when
    they have as many leaves, whatever their containers (a tuple and a list are the same)."""
    left, right = jax.tree.leaves(a), jax.tree.leaves(b)
    for x, y in zip(left, right, strict=True) if len(left) == len(right) else [(a, b)]:
        try:
            x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        except (TypeError, ValueError):
            return False
        if x.shape != y.shape or not np.array_equal(x, y, equal_nan=True):
            return False
    return True


@dataclasses.dataclass(frozen=True)
class KernelExercise:
    """A wrapper-and-kernel exercise, named by its functions. ``call`` is how the wrapper
    should call the kernel (``"padded_rms(padded, n)"``); ``hints`` replaces a standard
    check's default hint, by its name template (``{JITTED.name: "keep @jax.jit"}``)."""

    wrapper: str
    kernel: str
    call: str
    hints: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def _text(self, template: str) -> str:
        return template.format(wrapper=self.wrapper, kernel=self.kernel, call=self.call)

    def name(self, check: Declared) -> str:
        """The check's name for this exercise ("padded_rms is compiled with jax.jit")."""
        return self._text(check.name)

    def names(self, *checks: Declared) -> tuple[str, ...]:
        return tuple(self.name(check) for check in checks)

    def require(
        self,
        grading: Grading,
        check: Declared,
        ok: bool,
        *,
        seen: str,
        expected: str = "",
        hint: str = "",
    ) -> None:
        """Pass or fail a standard check, with its declared expectation and hint unless
        the grader found something more specific to say."""
        hint = hint or self.hints.get(check.name) or self._text(check.hint)
        expected = expected or self._text(check.expected)
        grading.require(self.name(check), ok, expected=expected, seen=seen, hint=hint)

    def jitted(self, grading: Grading, kernel: Any) -> None:
        hint = self.hints.get(JITTED.name) or self._text(JITTED.hint)
        grading.require_jitted(self.name(JITTED), kernel, hint=hint)

    def plain(self, grading: Grading, wrapper: Any, *, seen: str = "") -> None:
        seen = seen or (
            f"{self.wrapper} is wrapped by jax.jit: it compiles for every new argument "
            f"signature itself, and {self.kernel} is inlined into it"
        )
        self.require(grading, PLAIN, not is_jitted(wrapper), seen=seen)

    def no_callbacks(self, grading: Grading, kernel: Any, *args: Any) -> None:
        """Fail now if the program ``kernel`` traces for ``args`` has a host callback doing
        the work; the check passes only in :meth:`run` (``callbacks=True``), on the
        programs the counted calls compiled (a function can build another program on a
        later trace)."""

        def trace() -> Any:
            return kernel.trace(*args)

        trace.__name__ = self.kernel  # for a stub's verdict
        grading.call_learner(self.name(NO_CALLBACKS), trace)
        probe = Call((), {}, {}, (), True, callbacks=tuple(host_callbacks(kernel, *args)))
        self.callbacks_ran(grading, [probe])

    def callbacks_ran(
        self, grading: Grading, calls: Sequence[Call], *, passes: bool = False
    ) -> None:
        """Fail if a program these calls compiled calls back into Python; pass the check
        too if ``passes``."""
        found, seen = python_work(calls)
        if found or passes:
            self.require(grading, NO_CALLBACKS, not found, seen=seen)

    def run(
        self,
        grading: Grading,
        wrapper: Callable[..., Any],
        kernel: Any,
        arguments: Sequence[tuple[tuple, dict]],
        *,
        check: str,
        refills: bool = False,
        about: Callable[[int], str] | None = None,
        callbacks: bool = False,
    ) -> Run:
        """Call ``wrapper(*args, **kwargs)`` for every pair in ``arguments`` from an
        emptied kernel cache, counting the kernel's compilations and recording its calls;
        a stub or a crash fails ``check``. ``refills``: ``arguments`` is a generator that
        reuses objects with new content, as a loader may (so each call's arguments are
        compared only right after it). ``about(i)`` names call ``i``'s input in a failure.
        ``callbacks``: then pass or fail the no-callback check on the programs compiled."""
        kernel.clear_cache()  # count from a cold cache, whatever the notebook ran before

        def changed(given: tuple[tuple, dict], copy: tuple[tuple, dict]) -> Changed:
            return changed_arguments(_by_name(wrapper, *given), _by_name(wrapper, *copy))

        with (
            count_compiles(kernel) as count,
            recording(wrapper, kernel, lambda: count.compiles) as recorder,
        ):
            recorder.on_call = lambda call: call.jit_on or self.jit_on(grading, recorder, call)
            run = Run(recorder, count)
            for args, kwargs in arguments:
                run.given.append((args, kwargs))
                run.copies.append(jax.tree.map(copy_leaf, (args, kwargs)))
                before = len(recorder.calls)
                try:
                    out = grading.call_learner(check, wrapper, *args, **kwargs)
                except GradingFailure as failed:
                    if about is None:
                        raise
                    seen = f"{failed.seen} (call {len(run.given)}: {about(len(run.given) - 1)})"
                    verdict = {"expected": failed.expected, "seen": seen, "hint": failed.hint}
                    raise fail(failed.check, **verdict) from failed.__cause__
                if refills:  # the next refill must not race a computation still reading
                    try:
                        jax.block_until_ready(out)
                    except Exception:  # not a pytree JAX can walk: checked as it came
                        pass
                run.outputs.append(out)
                run.calls.append(recorder.calls[before:])
                run.changed.append(changed(run.given[-1], run.copies[-1]))
        if not refills:  # a later call may have changed an earlier call's arguments too
            pairs = zip(run.changed, run.given, run.copies, strict=True)
            run.changed = [c if c.seen else changed(given, copy) for c, given, copy in pairs]
        if callbacks:
            self.callbacks_ran(grading, run.kernel_calls, passes=True)
        return run

    def jit_on(self, grading: Grading, recorder: Recorder, pending: Call | None = None) -> None:
        """Jit was on at every call of the kernel (``jax.disable_jit()`` inside the
        wrapper is over when the grader's canary runs); :meth:`run` checks each
        ``pending`` call before it runs, so that jit switched off fails at once."""
        every = recorder.calls + recorder.traced + ([pending] if pending else [])
        off = sum(not call.jit_on for call in every)
        seen = (
            f"jit was switched off (jax.disable_jit or jax_disable_jit) at {off} of "
            f"{len(every)} calls of {self.kernel}: nothing compiles, so the counts mean nothing"
        )
        self.require(grading, JIT_ON, not off, seen=seen)

    def calls_kernel(
        self, grading: Grading, run: Run, *, first: Callable[[int], str] = str
    ) -> None:
        """Every call of the wrapper dispatched the kernel (at least once), not only
        inside a trace (a ``jax.jit`` of the learner's own inlines it)."""
        never = [i for i, during in enumerate(run.calls) if not during]
        w, k, traced = self.wrapper, self.kernel, len(run.recorder.traced)
        missed = f"{len(never)} of {len(run.calls)} calls of {w}"
        seen = f"{missed} never called {k}" + (
            f" (the first for {first(never[0])})" if never else ""
        )
        hint = (
            f"{w} must call {k} by that name and return its result; an answer computed in "
            f"NumPy, or by a function other than {k}, does not count"
        )
        if traced:
            by = run.recorder.traced[0].within
            seen = (
                f"{missed} did not run {k} itself: {k} was called {traced} time(s), each while "
                f"{by} inside {w} traced it, which inlines it into another program"
            )
            hint = f"call {self.call} directly in {w}, not inside {by} of your own, and "
            hint += "return its result"
        self.require(grading, CALLS_KERNEL, not never, seen=seen, hint=hint)

    def unchanged(
        self, grading: Grading, run: Run, *, what: Callable[[int], str] | None = None
    ) -> None:
        """The caller's arguments have the content they had before each call, the first
        change named (:func:`~jitlab.grading.calls.changed_arguments`), for the input that
        ``what(i)`` describes ("the array of length 7") when the wrapper ran more than once."""
        changed = [i for i, change in enumerate(run.changed) if change.seen]
        first = run.changed[changed[0]] if changed else Changed("", False)
        seen = changed and (
            f"{self.wrapper} changed the caller's arguments in {len(changed)} of "
            f"{len(run.given)} calls (the first: "
            + (f"for {what(changed[0])}, " if what else "")
            + f"{first.seen})"
        )
        hint = DONATED if first.donated else ""
        self.require(grading, UNCHANGED, not changed, seen=seen or "", hint=hint)

    def compiles(
        self,
        grading: Grading,
        check: str,
        count: CompileCount,
        *,
        what: str,
        hint: str,
        cause: str = "",
        at_most: int | None = None,
        exactly: int | None = None,
    ) -> None:
        """The compile count within bounds; over them, the grader's ``cause`` first and
        JAX's explanation of the last miss as a second opinion."""
        bound = exactly if exactly is not None else at_most
        guess = f'JAX\'s closest-key guess: "{shorten(count.last_reason, 160)}"'
        parts = [cause, guess if count.last_reason else ""]
        over = bound is not None and count.compiles > bound
        extra = shorten("; ".join(p for p in parts if p), 400) if over else ""
        bounds = {"at_most": at_most, "exactly": exactly}
        grading.require_compiles(check, count, **bounds, what=what, hint=hint, seen_extra=extra)
