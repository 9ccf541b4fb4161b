"""Building blocks for the exercises' graders: each check passes or raises
``GradingFailure`` (expected, seen, hint). :func:`grader` hands the grading function a
:class:`Grading`, the one place a run's state lives (the checks passed so far, its random
draw), compiles a fresh canary before and after, so that jit switched off fails by name,
and reports the run complete only once every declared check passed.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from jitlab.grading.verdict import Check, send_check, send_complete


class GradingFailure(AssertionError):
    """A check of the learner's work failed; the message is meant for the learner."""

    def __init__(self, check: str, *, expected: str, seen: str, hint: str = "") -> None:
        self.check, self.expected, self.seen, self.hint = check, expected, seen, hint
        lines = [f"✗ {check}", f"  expected: {expected}", f"  seen:     {seen}"]
        super().__init__("\n".join(lines + ([f"  hint:     {hint}"] if hint else [])))


def fail(check: str, *, expected: str, seen: str, hint: str = "") -> GradingFailure:
    """The exception to raise for a failed check. :func:`grader` reports the one that
    leaves it: a failure a grader catches and words better is never the one shown."""
    return GradingFailure(check, expected=expected, seen=seen, hint=hint)


def fail_unless(check: str, ok: bool, **verdict: str) -> None:
    """Fail ``check`` unless ``ok``, passing nothing: a check made in a loop passes at its end."""
    if not ok:
        raise fail(check, **verdict)


class Hints(dict):
    """A grader's checks and mistakes, by name, to their default hint (triple-quoted texts,
    whitespace joined once). Given to :func:`grader`, a check's own hint is the one
    :meth:`Grading.require` uses unless it is given another."""

    def __init__(self, *tables: dict[str, str]) -> None:
        super().__init__({key: " ".join(text.split()) for t in tables for key, text in t.items()})


def shorten(text: str, limit: int = 240) -> str:
    """``text`` on one line, cut with "…" at a word boundary when longer than ``limit``:
    never mid-token, since a cut ``Static(val=0.001)`` from JAX would mislead."""
    one_line = " ".join(str(text).split())
    if len(one_line) <= limit:
        return one_line
    window = one_line[: limit + 1]  # a word that ends exactly at the limit stays whole
    space = window.rfind(" ")  # else one long token: cut after its last punctuation, if any
    cut = window[:space] if space > 0 else window[: max(window.rfind(c) for c in ",;:([{=") + 1]
    return (cut.rstrip(",;:") + " …").lstrip()


# ----------------------------------------------------------------- the learner's errors


def suggested_name(err: NameError | AttributeError) -> str:
    """The defined name Python suggests for a misspelt one ("" when none is close): read
    from Python's own traceback text ("Did you mean: 'block'?"), which looks at the
    frame where the error was raised (Python 3.12 and later)."""
    import re
    import traceback

    lines = traceback.TracebackException.from_exception(err).format_exception_only()
    found = re.search(r"Did you mean: '([^']+)'\?", "".join(lines))
    return found.group(1) if found else ""


def _error_hint(err: BaseException) -> str:
    """What an exception raised by the learner's code most likely means here."""
    import jax

    text = str(err)
    if isinstance(err, jax.errors.TracerArrayConversionError):
        return "NumPy was called on a traced array inside a jitted function: use jax.numpy"
    if isinstance(err, jax.errors.ConcretizationTypeError):
        return (
            "Python needed the value of a traced array (an if, a range, an int()): use "
            "jnp.where or lax.cond, or make that argument static"
        )
    if "has been deleted" in text or "donated" in text:
        return (
            "an array was used again after it was donated to a jitted function "
            "(donate_argnums): its buffer went to the result; use what the call returned"
        )
    if type(err).__name__ == "IndivisibleError":  # jax._src.sharding's, not public
        return (
            "a sharding splits an array axis that the mesh's devices do not divide: check "
            "which axis your PartitionSpec names (P('data') splits the first axis, the batch)"
        )
    if isinstance(err, KeyError):
        return (
            f"a lookup found no entry for {shorten(repr(err.args[0]) if err.args else '', 60)}: "
            "the grader draws new sizes and values every run, so a table must cover every "
            "value the exercise allows (or compute the entry)"
        )
    if isinstance(err, NameError):
        return (
            f"{err.name or 'a name'} is not defined when the grader calls your function on its "
            "own: a global set by another of your functions may not exist yet (and jit would "
            "freeze its value): pass the value in as an argument"
        )
    if isinstance(err, TypeError) and "'NoneType'" in text:
        return (
            "a None reached arithmetic: where the exercise allows None (or a missing key), "
            "replace it with what it stands for before the jitted call"
        )
    if isinstance(err, IndexError):
        return (
            "an index past the end of a list or table: check the loop bound, and the "
            "lookup for the largest value the grader draws"
        )
    arrays = any(a in text for a in ("ArrayImpl", "Array(", "ndarray"))  # what JAX could not hash
    if "Non-hashable static" in text and arrays or "static arguments should be comparable" in text:
        return "an array, or a container of arrays, cannot be a static argument: pass it traced"
    if "unhashable" in text or "Non-hashable static" in text:
        return "a static argument must be hashable: pass a tuple, not a list, dict or array"
    return "run the exercise cell on its own to see the full traceback"


def learner_line(err: BaseException) -> str:
    """Where the learner's code raised ``err``: the last frame of its traceback outside
    Python's and the installed packages' files and jitlab's ("" when there is none)."""
    import linecache
    import sysconfig
    import traceback
    from pathlib import Path

    paths = [sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")]
    skip = (*(str(Path(p).resolve()) for p in paths), str(Path(__file__).resolve().parents[1]))
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if not str(Path(f.filename).resolve()).startswith(skip)]
    if not mine:
        return ""
    frame = mine[-1]
    line = shorten((frame.line or linecache.getline(frame.filename, frame.lineno)).strip(), 80)
    if not Path(frame.filename).is_file():  # a notebook cell: its line says more
        return f"`{line}`" if line else ""
    place = f"{Path(frame.filename).name}:{frame.lineno}"
    return f"`{line}` ({place})" if line else place


def learner_error(
    check: str, err: BaseException, *, expected: str = "", hint: str = ""
) -> GradingFailure:
    """The failed ``check`` for an exception from the learner's code: its type, text and
    line, and a hint for that kind of exception unless the grader gives a likelier one."""
    where = learner_line(err)
    close = suggested_name(err) if isinstance(err, NameError) else ""
    if close:  # a typo: no guess of the grader's is likelier
        hint = f"did you mean `{close}`? `{err.name}` is not defined anywhere your code can see"
    return fail(
        check,
        expected=expected or "the call to finish without an error",
        seen=shorten(f"{type(err).__name__}: {err}", 300) + (f", at {where}" if where else ""),
        hint=hint or _error_hint(err),
    )


# ----------------------------------------------------------------- comparing numbers


def as_numbers(value: Any) -> np.ndarray | None:
    """``value`` as a float64 array, or None when it is not numbers (a string, a dict)."""
    try:
        return np.asarray(value, np.float64)
    except (TypeError, ValueError):
        return None


LOST_DIGITS = " ".join(
    """the numbers are right to about three digits and no more: the formula is right, and
    a value lost its digits on the way (a cast through float16 or bfloat16, an input
    rounded): keep float32 from end to end""".split()
)


def lost_digits(got: Any, want: Any, rtol: float = 1e-3) -> bool:
    """Whether ``got`` misses ``want`` only as a 16-bit float would (within ``rtol``)."""
    pairs = [(as_numbers(g), np.asarray(w, np.float64)) for g, w in zip(got, want, strict=True)]
    return all(
        g is not None and g.shape == w.shape and np.allclose(g, w, rtol=rtol, atol=rtol * 1e-2)
        for g, w in pairs
    )


def wrong_cases(got: Sequence[Any], want: Sequence[Any], *, rtol: float, atol: float) -> list[int]:
    """The indices ``i`` where ``got[i]`` is not ``want[i]``: another shape, not numbers,
    a NaN, or a value outside the tolerance."""
    pairs = [(as_numbers(g), np.asarray(w, np.float64)) for g, w in zip(got, want, strict=True)]
    return [
        i
        for i, (g, w) in enumerate(pairs)
        if g is None or g.shape != w.shape or not np.allclose(g, w, rtol=rtol, atol=atol)
    ]


def _shown(value: Any) -> str:
    array = as_numbers(value)
    if array is None:
        return shorten(repr(value), 120)
    return f"{float(array):.6g}" if array.shape == () else f"{excerpt(array)} (shape {array.shape})"


def first_difference(got: Any, want: Any, *, rtol: float = 0.0, atol: float = 0.0) -> int:
    """The first flat index where two arrays of one shape differ (0 if they do not)."""
    a, b = np.asarray(got).reshape(-1), np.asarray(want).reshape(-1)
    differs = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    return int(np.argmax(differs)) if differs.any() else 0


def excerpt(array: Any, at: int = 0, count: int = 6, *, precision: int = 4) -> str:
    """``count`` entries of ``array`` (flat) from just before index ``at``: both sides of a
    verdict cut where they first differ, so that the difference is on screen, not in "…"."""
    flat = np.asarray(array).reshape(-1)
    start = max(0, min(at - 1, flat.size - count))
    shown = np.array2string(flat[start : start + count], precision=precision, separator=", ")
    head = f"[… {start} entries, " if start else "["
    return head + shown[1:-1] + (", …]" if start + count < flat.size else "]")


def excerpts(got: Any, want: Any, at: int = 0, count: int = 6) -> tuple[str, str]:
    """:func:`excerpt` of both sides, with the digits (4 to 9) it takes for them to differ:
    a float16 rounding must not print as the same numbers twice."""
    for precision in range(4, 10):
        pair = (
            excerpt(got, at, count, precision=precision),
            excerpt(want, at, count, precision=precision),
        )
        if pair[0] != pair[1]:
            break
    return pair


# ----------------------------------------------------------------- jit and compiles


def is_jitted(fn: Any) -> bool:
    """True for the object ``jax.jit`` returns (not a look-alike with the same methods)."""
    import jax

    return type(fn) is type(jax.jit(abs))


def _counted(number: int, what: str) -> str:
    """``what`` as it reads after ``number``: its first word singular for 1."""
    first, space, rest = what.partition(" ")
    if number == 1 and first in ("compilations", "compilation(s)"):
        first = "compilation"
    return first + space + rest


# ------------------------------------------------------------------- the grader frame

JIT_ON = "jit is on and the compile counter hears JAX"
JIT_OFF_HINT = (
    "remove jax.disable_jit() and jax.config.update('jax_disable_jit', True) from your "
    "code: the exercise is about what jit compiles"
)
_HANDS_OFF = "leave jax.monitoring, jax.jit and jitlab alone in your code"


# What the grader's own reading of the learner's objects raises, when the learner's code
# changed them under it: a donated array, a list emptied or grown, a dict resized.
STATE_ERRORS = {
    "has been deleted": """an array was donated to a jitted function (donate_argnums) and so
        deleted, and read again afterwards: donate nothing the caller gave you, or use what
        the call returned""",
    "zip() argument": """a list the grader handed your code changed length (popped, cleared or
        appended to): iterate over what you are given, and leave it as it was""",
    "changed size during iteration": """a dict or set the grader handed your code changed
        size: build a new one instead of adding to or deleting from what you are given""",
}


def state_failure(err: BaseException, pending: Sequence[str]) -> GradingFailure | None:
    """The failure of the first check still ``pending`` for an error the grader met reading
    back what the learner's code changed (:data:`STATE_ERRORS`); None for any other error
    (a bug of the grader's own, which must show as one)."""
    text = str(err)
    found = [" ".join(hint.split()) for key, hint in STATE_ERRORS.items() if key in text]
    if not found or not pending:
        return None
    return fail(
        pending[0],
        expected="the arguments the grader handed your code, usable afterwards",
        seen=shorten(f"{type(err).__name__}: {text}", 200) + " (raised reading them back)",
        hint=found[0],
    )


def grader_title(slug: str, part: str = "") -> str:
    """How a grader names itself in its reports: ``01 shapes: positions``."""
    from jitlab.course.manifest import CourseError, lesson_number

    try:
        number = lesson_number(slug) + " "
    except (CourseError, ValueError):
        number = ""
    return f"{number}{slug.replace('_', ' ')}" + (f": {part}" if part else "")


# ---------------------------------------------------------------- shared checks

BUCKETS_HOLD = "bucket_size(n) holds n and wastes less than half"
BUCKETS_FEW = "lengths share a few buckets"


# ---------------------------------------------------------------- one grading run


@dataclasses.dataclass
class Grading:
    """One run of a grader, handed to its grading function by :func:`grader`: every check
    reports through it, and it is the only place the run's state lives (no module global
    carries it). ``declared``: the checks the grader may report; ``hints``: a check's
    default hint; ``rng``: the run's draw, fresh from the system's entropy unless a test
    gives a ``seed`` (never the environment: a learner's ``export`` must not fix it)."""

    title: str
    declared: tuple[str, ...]
    slug: str = ""
    hints: Mapping[str, str] = dataclasses.field(default_factory=dict)
    seed: int | None = None
    reported: list[str] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    @property
    def pending(self) -> list[str]:
        """The declared checks neither passed nor skipped yet, in order."""
        done = (*self.reported, *self.skipped)
        return [check for check in self.declared if check not in done]

    def skip(self, check: str) -> None:
        """Leave out a declared check that this answer gives nothing to check by (07's
        checks of a loop's calls, for a ``lax.scan`` traced once): no ✓ it did not earn."""
        if check not in self.declared:
            raise TypeError(f"grader {self.title!r} skips an undeclared check {check!r}")
        if check not in self.reported:
            self.skipped.append(check)

    def report(self, check: Check) -> None:
        if self.declared and check.name not in self.declared:
            raise TypeError(f"grader {self.title!r} reports an undeclared check {check.name!r}")
        send_check(dataclasses.replace(check, grader=self.title))

    def passed(self, check: str) -> None:
        """Record and print a passed check (once, however often it is checked)."""
        if check not in self.reported:
            self.report(Check(check, True))
            self.reported.append(check)

    def require(self, check: str, ok: bool, expected: str, seen: str, hint: str = "") -> None:
        """Pass ``check`` if ``ok``; otherwise raise ``GradingFailure`` with ``hint``, or the
        check's own hint from the grader's table."""
        if not ok:
            raise fail(check, expected=expected, seen=seen, hint=hint or self.hints.get(check, ""))
        self.passed(check)

    def call_learner(
        self, check: str, fn: Callable[..., Any], *args: Any, lesson: str = "", **kwargs: Any
    ) -> Any:
        """Call the learner's function; an unfinished stub or a crash becomes a failed check
        (a stub's hint names ``lesson``, by default the grader's)."""
        try:
            return fn(*args, **kwargs)
        except NotImplementedError:
            lesson = lesson or self.slug
            raise fail(
                check,
                expected=f"{getattr(fn, '__name__', 'your function')} to return a result",
                seen="NotImplementedError: the exercise is not solved yet",
                hint="replace the `raise NotImplementedError` in the exercise cell"
                + (f"; `jitlab hint {lesson}` if you are stuck" if lesson else ""),
            ) from None
        except GradingFailure:
            raise
        except Exception as err:  # the learner's bug, reported as a verdict, not a traceback
            raise learner_error(check, err) from err

    def require_close(
        self,
        check: str,
        got: Any,
        want: Any,
        *,
        rtol: float = 1e-5,
        atol: float = 1e-5,
        hint: str | Callable[[list[str]], str] = "",
        about: str = "",
        names: Sequence[str] | None = None,
        whose: str = "the output",
    ) -> None:
        """Pass if ``got`` matches ``want`` in shape and value. ``about`` names the input
        ("g of norm 3.2"); ``names`` each flat entry ("params['b']"), and a failure shows up to
        three that differ, ``whose`` they are, and takes ``hint(their names)`` if callable."""
        got_np, want_np = as_numbers(got), np.asarray(want, np.float64)  # no object arrays
        suffix = f" for {about}" if about else ""
        if got_np is None:
            seen = shorten(f"{type(got).__name__}: {got!r}", 120)
            raise fail(
                check,
                expected=f"numbers{suffix}",
                seen=seen,
                hint=(hint(["its type"]) if callable(hint) else hint)
                or "return an array of numbers",
            )
        if got_np.shape != want_np.shape:
            raise fail(
                check,
                expected=f"an array of shape {want_np.shape}{suffix}",
                seen=f"shape {got_np.shape}",
                hint=(hint(["its shape"]) if callable(hint) else hint)
                or "check which axis you reduce over, and that padding is removed",
            )
        close = np.isclose(got_np, want_np, rtol=rtol, atol=atol).reshape(-1)
        bad = np.flatnonzero(~close)
        wrong = [names[i] if names else str(i) for i in bad]
        if not wrong:
            return self.passed(check)
        if names:
            shown = bad[:3]
            flat_got, flat_want = got_np.reshape(-1), want_np.reshape(-1)
            expected = ", ".join(f"{names[i]} = {flat_want[i]:.6g}" for i in shown) + suffix
            seen = ", ".join(f"{names[i]} = {flat_got[i]:.6g}" for i in shown)
            seen += f" ({len(wrong)} of {len(names)} entries of {whose} differ)"
        else:
            worst = int(np.argmax(np.abs(got_np - want_np))) if got_np.size else 0
            first = first_difference(got_np, want_np, rtol=rtol, atol=atol)
            shown_got, shown_want = excerpts(got_np, want_np, first)
            expected = f"{shown_want}{suffix or ' (from the reference implementation)'}"
            seen = f"{shown_got} (first wrong at flat index {first}, largest "
            seen += f"error at {worst})"
        by_hand = "compare with the reference on a small input by hand"
        text = (hint(wrong) if callable(hint) else hint) or by_hand
        raise fail(check, expected=expected, seen=seen, hint=text)

    def require_cases(
        self,
        check: str,
        got: Sequence[Any],
        want: Sequence[Any],
        *,
        about: Callable[[int], str],
        hint: str | Callable[[list[int]], str],
        rtol: float = 1e-5,
        atol: float = 1e-5,
    ) -> None:
        """Pass if every output ``got[i]`` matches the reference ``want[i]`` (see
        :func:`wrong_cases`); else name the first wrong case by its input (``about(i)``, "an
        array of length 7"), show both values and how many cases are wrong. A callable
        ``hint`` gets the wrong indices (to tell "only the reused batches" apart)."""
        wrong = wrong_cases(got, want, rtol=rtol, atol=atol)
        if not wrong:
            return self.passed(check)
        i = wrong[0]
        raise fail(
            check,
            expected=f"{_shown(want[i])} (the reference) for {about(i)}",
            seen=f"{_shown(got[i])}; wrong for {len(wrong)} of {len(got)} cases",
            hint=hint(wrong) if callable(hint) else hint,
        )

    def require_jitted(self, check: str, fn: Any, *, hint: str = "") -> None:
        """Pass if ``fn`` is what ``jax.jit`` returns (work stays inside the compiler)."""
        self.require(
            check,
            is_jitted(fn),
            expected="a function wrapped by jax.jit",
            seen=f"{type(fn).__name__} {getattr(fn, '__name__', '')}".strip(),
            hint=hint or "decorate the function with @jax.jit",
        )

    def require_compiles(
        self,
        check: str,
        count: Any,
        *,
        at_most: int | None = None,
        exactly: int | None = None,
        at_least: int | None = None,
        what: str,
        hint: str,
        seen_extra: str = "",
    ) -> None:
        """Pass if ``count.compiles`` is within the bounds. ``what`` says what was counted
        ("compilations of padded_rms over 50 calls"); ``seen_extra`` what the grader found out
        about why (never JAX's closest-key guess alone, which can name the wrong cause)."""
        n = count.compiles
        tests = {"exactly": n.__eq__, "at least": n.__ge__, "at most": n.__le__}
        given = {"exactly": exactly, "at least": at_least, "at most": at_most}
        bounds = [(words, bound) for words, bound in given.items() if bound is not None]
        stated = " and ".join(f"{words} {bound}" for words, bound in bounds)
        expected = f"{stated} {_counted(bounds[-1][1], what) if bounds else what}"
        seen = f"{n} {_counted(n, what)}" + (f"; {seen_extra}" if seen_extra else "")
        ok = all(tests[words](bound) for words, bound in bounds)
        self.require(check, ok, expected=expected, seen=seen, hint=hint)

    def require_jit_on(self, moment: str) -> None:
        """Fail with the real cause when jit is off, or when the counter no longer hears a
        brand-new function compile."""
        import jax

        from jitlab.instruments.counting import count_compiles

        if jax.config.jax_disable_jit:
            raise fail(
                JIT_ON,
                expected=f"jit switched on {moment}",
                seen="jit is switched off (jax_disable_jit is True): nothing compiles, so the "
                "compile counts mean nothing",
                hint=JIT_OFF_HINT,
            )

        def jitlab_canary(x: Any) -> Any:
            return x * 2.0 + 1.0

        size, jitted = int(np.random.default_rng().integers(3, 64)), jax.jit(jitlab_canary)
        with count_compiles(jitted, explain=False) as count:
            out = jitted(np.arange(size, dtype=np.float32))  # NumPy: no eager op to compile
        right = np.allclose(np.asarray(out), np.arange(size) * 2.0 + 1.0)
        traces, compiles = (count.traces, count.compiles) if right else (-1, -1)
        self.require(
            JIT_ON,
            (traces, compiles) == (1, 1),
            expected=f"a fresh jitted function to be traced and compiled once {moment}",
            seen=f"the counter heard {traces} trace(s) and {compiles} compilation(s): "
            "JAX's monitoring listeners were removed, or jax.jit was replaced",
            hint=_HANDS_OFF,
        )

    def require_buckets(
        self,
        bucket_size: Callable[[int], int],
        *,
        up_to: int,
        most: int,
        smallest_allowed: int = 16,
    ) -> dict[int, int]:
        """The learner's bucket of every length 1..``up_to``, each asked once (a crash names
        its length), if each holds its length and wastes less than half (or is at most
        ``smallest_allowed``), in at most ``most`` sizes. The exercise must state ``most``: a
        bucket per length wastes nothing, and only a bound rejects it."""
        self.call_learner(BUCKETS_HOLD, bucket_size, 1)  # a stub says so first
        sizes: dict[int, Any] = {}
        try:
            for n in range(1, up_to + 1):
                sizes[n] = bucket_size(n)
        except Exception as err:
            n = len(sizes) + 1
            expected = f"bucket_size({n}) to return a size, as for every n from 1 to {up_to}"
            hint = f"bucket_size must answer every n from 1 to {up_to}, and n={n} failed: "
            raise learner_error(
                BUCKETS_HOLD, err, expected=expected, hint=hint + _error_hint(err)
            ) from err
        for n, size in sizes.items():
            limit = max(2 * n - 1, smallest_allowed)
            whole = isinstance(size, int | np.integer) and not isinstance(size, bool)
            fail_unless(
                BUCKETS_HOLD,
                whole and n <= int(size) <= limit,
                expected=f"an int from {n} to {limit} for n={n}",
                seen=repr(size),
                hint=_bucket_hint(n, size, limit),
            )
        self.passed(BUCKETS_HOLD)
        distinct = sorted({int(size) for size in sizes.values()})
        steps = {b - a for a, b in zip(distinct, distinct[1:], strict=False)}
        extra = len(distinct) - most
        hint = f"{len(distinct)} distinct sizes, {extra} more than the {most} allowed"
        if len(steps) == 1:
            hint += f": sizes that step by {steps.pop()} grow in number with the longest length"
        hint += "; sizes that double (powers of two) stay few and waste less than half"
        if all(int(size) == n for n, size in sizes.items()):
            hint = "a bucket per length compiles once per length; round up to powers of two"
        self.require(
            BUCKETS_FEW,
            len(distinct) <= most,
            expected=f"at most {most} distinct bucket sizes for lengths 1..{up_to}",
            seen=f"{len(distinct)} distinct sizes (the first: {distinct[:8]})",
            hint=hint,
        )
        return {n: int(size) for n, size in sizes.items()}

    def require_padded(
        self,
        check: str,
        got: Sequence[int | None],
        lengths: Sequence[int],
        bucket: Callable[[int], int],
        *,
        largest: int,
        size: Callable[[int | None], str],
        hint: str,
    ) -> None:
        """Each call padded x of length ``lengths[i]`` to ``bucket`` of it (``got[i]``; None
        when no array came): read on every run, whatever the compile count, since padding
        everything to the ``largest`` bucket compiles once and still breaks the contract
        (said so in the hint). ``size`` words a size ("an array of 16"); calls that do not pair
        with ``lengths`` (warm-ups) are compared as the sets of sizes used."""
        want = [bucket(n) for n in lengths]
        used = sorted({g for g in got if g is not None})
        if len(got) == len(want):
            wrong = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
            n, i = (lengths[wrong[0]], wrong[0]) if wrong else (lengths[0], 0)
            expected = f"x of length {n} padded to bucket_size({n}): {size(want[i])}"
            seen = f"{size(got[i])} ({len(wrong)} of {len(got)} calls padded to another size)"
        else:
            wrong = sorted(set(used) ^ set(want))
            expected = f"x padded to the buckets of its lengths, {sorted(set(want))}"
            seen = f"x padded to {used}"
        if wrong and used == [largest]:
            hint = (
                f"every x was padded to {size(largest)}, the largest bucket: that compiles "
                f"once, but every short x pays for the longest; {hint}"
            )
        self.require(check, not wrong, expected, seen, hint)


def _bucket_hint(n: int, size: Any, limit: int) -> str:
    """What ``bucket_size(n) == size`` shows is wrong, ``limit`` the largest size allowed."""
    if not isinstance(size, int | np.integer) or isinstance(size, bool):
        return f"return an int (int(...)), not a {type(size).__name__}"
    if size < n:
        return f"bucket_size({n}) is {size}, shorter than {n}: round n up, never down"
    if n & (n - 1) == 0 and size == 2 * n:
        return (
            f"bucket_size({n}) is {size}, twice {n}: a length that is a power of two is its own "
            "bucket; the next power of two at or above n is 1 << (n - 1).bit_length()"
        )
    return f"bucket_size({n}) is {size}, past {limit}: round n up to the next power of two"


def grader(
    slug: str, checks: Sequence[str], *, part: str = "", hints: Mapping[str, str] | None = None
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Declare a grading function ``fn(grading, *answer)``: its exercise's slug (``part``
    when it has several), every check it reports, in order, and their default ``hints``.
    The declared function is called with the answer alone (and ``seed=`` in tests); it
    makes the run's :class:`Grading`, runs between two canaries, must pass every check,
    and then reports itself complete as ``01 shapes: positions`` (number from course.yml)."""
    from jitlab.instruments.counting import CounterLost

    declared = (JIT_ON, *checks)

    def wrap(fn: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(fn)
        def run(*answer: Any, seed: int | None = None, **named: Any) -> None:
            title = grader_title(slug, part)
            grading = Grading(title, declared, slug, hints or {}, seed)
            try:
                grading.require_jit_on("before grading")
                try:
                    fn(grading, *answer, **named)
                except CounterLost as lost:
                    expected = "the compile counter to hear JAX while your code runs"
                    raise fail(JIT_ON, expected=expected, seen=str(lost), hint=_HANDS_OFF) from None
                except (RuntimeError, ValueError) as err:  # the learner's state, not the grader
                    named_failure = state_failure(err, grading.pending)
                    if named_failure is None:
                        raise
                    raise named_failure from err
                if grading.pending:
                    raise TypeError(f"grader {title!r} never reported {grading.pending}")
                grading.require_jit_on("after grading (your code ran in between)")
            except GradingFailure as failed:
                grading.report(
                    Check(failed.check, False, failed.expected, failed.seen, failed.hint)
                )
                raise
            send_complete(title, tuple(c for c in declared if c not in grading.skipped))

        run.checks = declared  # type: ignore[attr-defined]
        run.slug, run.part = slug, part  # type: ignore[attr-defined]
        return run

    return wrap
