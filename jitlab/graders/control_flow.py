"""Grader for control_flow: ``clip_by_norm`` and ``descend``, each compiled once for every
value of its data, every number from an emptied cache against a float64 NumPy reference.
The draw, every run:

- limits below and above the norm: jnp.clip per element, an inverted test, g / norm;
- a zero vector: 0 / 0 = NaN; a clipped vector of norm ~1e-9: an eps added to the norm,
  or the squared norm compared with max_norm (recomputed, so that the hint names it);
- a zero vector with a zero limit: max_norm / norm is 0 / 0 (jnp.minimum(1, max_norm / norm));
- a limit equal to the norm: nothing (``>=`` scales by exactly 1, the same numbers);
- a start whose gradient norm is exactly tol (float32-exact): ``>=`` for ``>`` in the rule;
- a start below tol: a loop that steps before it tests;
- a tol of 1.5 to 3, above CLIP_NORM: a rule that reads the clipped gradient's norm;
- two problems that never reach tol: a fixed-count loop, a loop bound off by one;
- ten max_norm, eight lr and tol, all new: a data argument made static.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

from jitlab.grading import Hints, Recorder, fail, grader, why
from jitlab.grading.calls import host_callbacks, python_work
from jitlab.grading.checks import (
    Grading,
    as_numbers,
    learner_line,
)
from jitlab.instruments.counting import count_compiles

MAX_STEPS, CLIP_NORM = 100, 1.0  # the exercise states the same two numbers
_STOP_SLACK = 1e-3  # float32 may see a norm the float64 reference finds a hair above tol
_TRACER_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError)

EARLY, LIMIT = "stops early", f"never reaches tol in {MAX_STEPS} steps"
CONVERGED = "starts converged: norm(curvature * x0) < tol"
AT_TOL = "starts exactly at tol: norm(curvature * x0) == tol"
ABOVE = f"a tol above CLIP_NORM = {CLIP_NORM}: the gradient's own norm decides"
KINDS = (EARLY, EARLY, CONVERGED, EARLY, AT_TOL, ABOVE, LIMIT, LIMIT)  # descend's problems

CLIP_CHECKS = {  # every check once: its name, then its default hint
    (CLIP_JITTED := "clip_by_norm is compiled with jax.jit"): "decorate it with @jax.jit",
    (CLIP_RUNS := "clip_by_norm runs under jit"): "",
    (CLIP_LONG := "clip_by_norm scales long vectors to norm max_norm"): """scale the whole vector by
        max_norm / norm(g), keeping its direction; jnp.clip limits each element instead""",
    (CLIP_TINY := "clip_by_norm scales tiny vectors exactly (no eps)"): """the factor is exactly
        max_norm / norm(g), however small the norm: an eps added to the norm (or a floor such as
        jnp.maximum(norm, eps)) changes it; jnp.where already keeps the zero vector safe""",
    (CLIP_SHORT := "clip_by_norm leaves short vectors alone"): """when norm(g) <= max_norm (the
        limit may equal the norm), return g unchanged""",
    (CLIP_ZERO := "clip_by_norm leaves a zero vector alone"): """a zero vector divided by its norm
        (0) gives NaN: let a comparison of the norm with max_norm pick the factor (jnp.where),
        so the NaN is never the one chosen (jitlab hint 05)""",
    (CLIP_ONCE := "clip_by_norm compiles once for every max_norm"): "",
    (CLIP_INSIDE := "clip_by_norm decides inside the compiled program"): """a host callback runs
        NumPy outside the compiled program: use jnp.where""",
}
DESCEND_CHECKS = {
    (DESCEND_JITTED := "descend is compiled with jax.jit"): "decorate it with @jax.jit",
    (DESCEND_RUNS := "descend runs under jit"): "",
    (DESCEND_PAIR := "descend returns (x, steps)"): """return x and the step count together, e.g.
        the final carry of lax.while_loop, with steps starting at jnp.int32(0)""",
    (DESCEND_STEPS := "descend stops at the right step"): "",
    (DESCEND_X := "descend returns the right x"): """each step is x - lr * clip_by_norm(curvature *
        x, 1.0)""",
    (DESCEND_ONCE := "descend compiles once for every lr and tol"): "",
    (DESCEND_INSIDE := "descend decides inside the compiled program"): """a host callback runs
        NumPy outside the compiled program: use lax.while_loop""",
}
CLIP_KINDS = (CLIP_LONG, CLIP_ZERO, CLIP_LONG, CLIP_SHORT, CLIP_TINY, CLIP_SHORT, CLIP_LONG)
CLIP_KINDS += (CLIP_SHORT, CLIP_LONG, CLIP_SHORT, CLIP_ZERO)  # clip_by_norm's cases
ZERO_LIMIT = len(CLIP_KINDS) - 1  # the last case: a zero vector and max_norm = 0
AT_LIMIT = 3  # max_norm equal to the norm: float32 may take either branch
_TOL = {CLIP_LONG: (1e-4, 1e-6), CLIP_TINY: (1e-4, 0.0), CLIP_SHORT: (1e-5, 1e-6)}
_TOL |= {CLIP_ZERO: (0.0, 1e-6)}  # rtol and atol of each kind of case, in the checks' order
_MISTAKES = {  # the mistakes the step counts and a tracer error point to
    "unscaled": """g came back unscaled although norm(g) > max_norm: the comparison decided
    wrong at this tiny norm; compare jnp.linalg.norm(g) itself with max_norm, with no eps
    added to either side""",
    "squared": """the norm's square, sum(g**2), stands {} where the norm belongs: every case
    matches that mistake. The norm is its square root, jnp.linalg.norm(g); below 1 the square
    is smaller than the norm, above 1 larger""",
    "fixed": """every problem ran all MAX_STEPS steps: a loop with a fixed count (fori_loop to
    MAX_STEPS) never stops early; test the rule before every step""",
    "no iterate": """your x is no iterate of the reference after any number of steps: each
    step is x - lr * clip_by_norm(curvature * x, 1.0) (clip the gradient before stepping)""",
    LIMIT: """the problems that never reach tol took {} steps, not MAX_STEPS = 100: the loop
    bound is off; keep going while steps < MAX_STEPS""",
    AT_TOL: """a gradient whose norm equals tol has converged (the rule is 'at most tol'):
    keep going while norm > tol, not norm >= tol""",
    ABOVE: """the rule reads the norm of the gradient itself, before clipping: a clipped
    gradient's norm is at most CLIP_NORM, so with this tol it stopped at once""",
    CONVERGED: """a start that has already converged needs 0 steps: test the rule before
    every step, including the first (lax.while_loop tests before its body)""",
    "zero limit": """with max_norm = 0 and a zero g, max_norm / norm is 0 / 0 = NaN (a
    jnp.minimum(1.0, max_norm / norm) keeps it): let the comparison of the norm with
    max_norm pick the factor, not arithmetic on the quotient (jitlab hint 05)""",
    "offset": "x is right, but every count is off by {}: start steps at 0, add 1 per step",
    "rule": """check the stopping rule before every step: stop once norm(curvature * x) <=
    tol, or after MAX_STEPS steps""",
    "while": """you already use lax.while_loop; inside its functions every value is traced,
    so Python's `and`, `or`, `not` and `if` cannot decide: write (norm > tol) & (steps <
    MAX_STEPS), with `&`""",
    "lax": """inside lax control flow ({}) every value is traced: use jnp.where, `&` and `|`
    instead of Python's `if`/`and`/`or`""",
    "jit": """replace the Python `if` with jnp.where or lax.cond, and the `while` with
    lax.while_loop, so the decision is made inside the compiled program""",
}
HINTS = Hints(_MISTAKES, CLIP_CHECKS, DESCEND_CHECKS)
SQUARED = {  # where a squared norm may stand for the norm: the parts of the clip it takes
    "in the comparison with max_norm": "test",
    "in the factor max_norm / norm": "factor",
    "in the comparison and in the factor": "test factor",
}


def _reference_clip(g: np.ndarray, max_norm: float, *, squared: str = "") -> np.ndarray:
    """The exercise's clip in float64; ``squared`` recomputes a mistake, sum(g**2) in place
    of the norm in the comparison ("test"), the factor ("factor") or both."""
    g = np.asarray(g, np.float64)
    norm = np.linalg.norm(g)
    test, factor = (norm**2 if part in squared else norm for part in ("test", "factor"))
    return g * (max_norm / factor) if test > max_norm else g


def _squared_where(cases: list[tuple[np.ndarray, float]], got: list[Any]) -> str:
    """Where a squared norm stands in every output (a key of ``SQUARED``), "" if nowhere;
    not at ``AT_LIMIT``, where float32's norm may fall on either side of max_norm."""
    outputs = [as_numbers(out) for i, out in enumerate(got) if i != AT_LIMIT]
    for where, parts in SQUARED.items():
        wants = [_reference_clip(g, m, squared=parts) for g, m in cases]
        del wants[AT_LIMIT]
        if all(
            out is not None and out.shape == want.shape and np.allclose(out, want, 1e-4, 0.0)
            for out, want in zip(outputs, wants, strict=True)
        ):
            return where
    return ""


def _reference_trajectory(
    x0: np.ndarray, curvature: np.ndarray, lr: float, tol: float
) -> tuple[list[np.ndarray], list[float], int]:
    """``(xs, norms, steps)`` in float64: x after k steps (to MAX_STEPS + 2: a bound off by one
    finds its iterate), its gradient's norm, and the step where the exercise's rule stops."""
    xs, curvature = [np.asarray(x0, np.float64)], np.asarray(curvature, np.float64)
    for _ in range(MAX_STEPS + 2):
        xs.append(xs[-1] - lr * _reference_clip(curvature * xs[-1], CLIP_NORM))
    norms = [float(np.linalg.norm(curvature * x)) for x in xs]
    return xs, norms, next((k for k in range(MAX_STEPS) if norms[k] <= tol), MAX_STEPS)


def _may_stop(norms: list[float], tol: float, steps: int, slack: float = _STOP_SLACK) -> bool:
    """Could float32 take each of ``steps`` and then stop, within ``slack`` of ``tol``?"""
    went_on = 0 <= steps <= MAX_STEPS and all(n > tol * (1 - slack) for n in norms[:steps])
    return went_on and (steps == MAX_STEPS or norms[steps] <= tol * (1 + slack))


def _tracer_failure(check: str, err: Exception) -> Exception:
    """A Python ``if``/``while``/``and`` on a tracer: where it was, and the fix there."""
    text, line = str(err), learner_line(err)
    where = re.search(r"tracing the function (\S+) at \S+ for (\w+)", text) or ("", "?", "jit")
    needed = re.search(r"depends on the values? of the arguments? ([^.]+)", text)
    first = re.split(r"\.\s", text)[0]  # outside the f-string: Python 3.11 has no \ there
    seen = f"{type(err).__name__}: {first} in {where[1]} (traced for "
    seen += f"{where[2]})" + (f", which needed the value of {needed[1]}" if needed else "")
    seen += f", at {line}" if line else ""
    kind = "jit" if where[2] == "jit" else "while" if where[2].startswith("while") else "lax"
    expected = "a function that traces: no Python if/while/and on traced values"
    return fail(check, expected=expected, seen=seen, hint=HINTS[kind].format(where[2]))


@contextlib.contextmanager
def _graded(
    grading: Grading, fn: Any, name: str, checks: dict[str, str], cases: list
) -> Iterator[list]:
    """Around the block judging the outputs, the checks both parts share (``checks``' first and
    last two): jitted, runs every case from an emptied cache, compiles once, no callback."""
    jitted, runs, *_, once, inside = checks
    grading.require_jitted(jitted, fn, hint=HINTS[jitted])

    def call(*args: Any) -> Any:  # a tracer error gets a verdict that names the fix
        try:
            return recorder(*args)
        except _TRACER_ERRORS as err:
            raise _tracer_failure(runs, err) from err

    call.__name__ = name
    fn.clear_cache()
    with count_compiles(fn) as count:
        recorder = Recorder(fn, lambda: count.compiles)
        outputs = [grading.call_learner(runs, call, *case) for case in cases]
    grading.passed(runs)
    yield outputs
    found = why(recorder)
    names = " and ".join(dict.fromkeys(d.where for r in found.recompiles for d in r.differences))
    hint = f"keep {names or 'every argument'} traced (no static_argnames / static_argnums): "
    hint += "calls of one shape share one program; let jnp.where or lax decide in it"
    what = f"compilations of {name} for {len(cases)} calls of the same shapes"
    grading.require_compiles(once, count, exactly=1, what=what, hint=hint, seen_extra=found.text)
    ran, seen = python_work(recorder.calls)
    if not ran:
        ran = grading.call_learner(inside, host_callbacks, fn, *cases[0])
        seen = f"the program calls back into Python ({', '.join(ran)})"
    expected = f"{name}'s decision made by the compiled program (jnp/lax operations)"
    grading.require(inside, not ran, expected, seen)


def _clip_cases(rng: np.random.Generator, size: int) -> list[tuple[np.ndarray, float]]:
    """One case per ``CLIP_KINDS`` entry, every ``max_norm`` new; ``AT_LIMIT``'s is its norm."""
    cases = []
    for i, kind in enumerate(CLIP_KINDS):
        g = rng.normal(0.0, rng.uniform(0.5, 3.0), size=size) * (1e-10 if kind == CLIP_TINY else 1)
        g = g.astype(np.float32) * (kind != CLIP_ZERO)
        factor = rng.uniform(1.1, 3.0) if kind == CLIP_SHORT else rng.uniform(0.2, 0.9)
        norm = np.linalg.norm(g.astype(np.float64)) or 1.0  # a zero vector: any limit
        limit = 0.0 if i == ZERO_LIMIT else norm * (1.0 if i == AT_LIMIT else factor)
        cases.append((g, float(limit)))
    return cases


@grader("control_flow", part="clip_by_norm", checks=tuple(CLIP_CHECKS), hints=HINTS)
def grade_clip(grading: Grading, clip_by_norm: Callable[..., Any]) -> None:
    """Grade ``clip_by_norm(g, max_norm)``: each drawn kind of case against the reference."""
    rng = grading.rng
    cases = _clip_cases(rng, int(rng.integers(5, 40)))
    with _graded(grading, clip_by_norm, "clip_by_norm", CLIP_CHECKS, cases) as got:
        squared = _squared_where(cases, got)  # a mistake recomputed: the hint names it
        for check, (rtol, atol) in _TOL.items():  # in the order of the checks
            for i, ((g, m), out, kind) in enumerate(zip(cases, got, CLIP_KINDS, strict=True)):
                about = f"g of norm {np.linalg.norm(g):.4g} and max_norm={m:.4g}"
                if kind == check:
                    want = _reference_clip(g, m)
                    unscaled = check == CLIP_TINY and np.array_equal(out, g)  # not an eps
                    hint = HINTS["unscaled" if unscaled else check]
                    hint = HINTS["zero limit"] if i == ZERO_LIMIT else hint
                    hint = HINTS["squared"].format(squared) if squared else hint
                    grading.require_close(
                        check, out, want, rtol=rtol, atol=atol, about=about, hint=hint
                    )


def _problems(rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray, float, float]]:
    """One problem per entry of ``KINDS``; every ``lr`` and ``tol`` differs. Large starts
    make the first gradients longer than ``CLIP_NORM`` (clipping matters)."""
    size, problems = int(rng.integers(4, 13)), []
    for kind in KINDS:
        x0 = rng.normal(0.0, 2.0, size=size)
        curvature = rng.uniform(0.5, 2.0, size=size).astype(np.float32)
        lr = rng.uniform(0.01, 0.03) if kind == LIMIT else rng.uniform(0.3, 0.9)
        tol = np.float32(10 ** rng.uniform(-3, -1) if kind != ABOVE else rng.uniform(1.5, 3))
        if kind == ABOVE:  # a few clipped steps from 4 to 8 times tol down to tol
            x0 = x0 * (rng.uniform(4, 8) * tol / np.linalg.norm(curvature * x0))
        elif kind in (LIMIT, CONVERGED):  # gradient norm 10 (100 steps move it <= 6), or tol / 2
            x0 = x0 * ((10.0 if kind == LIMIT else 0.5 * tol) / np.linalg.norm(curvature * x0))
        elif kind == AT_TOL:  # one entry, curvature 1: its float32 norm is tol exactly
            x0, curvature[:] = np.zeros(size), 1.0
            x0[rng.integers(size)] = tol * rng.choice([-1, 1])
        problems.append((x0.astype(np.float32), curvature, float(lr), float(tol)))
    return problems


def _steps_hint(got: list[int], want: list[int], x_at: list[set[int]]) -> str:
    """The mistake the step counts and the learner's x point to, most specific first.
    ``x_at[i]``: the numbers of steps whose reference iterate the learner's x equals."""
    wrong = {kind for kind, s, w in zip(KINDS, got, want, strict=True) if s != w}
    rows = zip(got, want, x_at, KINDS, strict=True)
    offsets = {s - w for s, w, at, kind in rows if w in at and kind != LIMIT}
    if all(s == MAX_STEPS for s in got):
        return HINTS["fixed"]
    if wrong == {ABOVE}:
        return HINTS[ABOVE]
    if wrong in ({LIMIT}, {AT_TOL}):  # before "no iterate": a bound past the trajectory's end
        took = sorted({s for kind, s in zip(KINDS, got, strict=True) if kind == LIMIT})
        return HINTS[wrong.pop()].format(took)
    if not all(x_at):
        return HINTS["no iterate"]
    if len(offsets) == 1 and 0 not in offsets:
        return HINTS["offset"].format(*offsets)
    return HINTS[CONVERGED] if CONVERGED in wrong else HINTS["rule"]


@grader("control_flow", part="descend", checks=tuple(DESCEND_CHECKS), hints=HINTS)
def grade_descend(grading: Grading, descend: Callable[..., Any]) -> None:
    """Grade ``descend(x0, curvature, lr, tol)``: a pair, steps the rule allows, x after them."""
    problems = _problems(grading.rng)
    with _graded(grading, descend, "descend", DESCEND_CHECKS, problems) as results:
        for result in results:
            pair = isinstance(result, tuple | list) and len(result) == 2
            shape = np.shape(result[1]) if pair else None
            seen = f"steps of shape {shape}" if pair else f"a {type(result).__name__}"
            grading.require(
                DESCEND_PAIR, shape == (), "a pair (x, steps), steps a scalar integer", seen
            )
        refs = [_reference_trajectory(*p) for p in problems]
        got, want = [int(np.asarray(r[1])) for r in results], [ref[2] for ref in refs]
        xs = [np.asarray(x, np.float64) for x, _ in results]
        x_at, ok = [], []  # the steps whose reference iterate x equals; s allowed
        for x, s, (its, norms, _), p, kind in zip(xs, got, refs, problems, KINDS, strict=True):
            x_at.append({k for k, r in enumerate(its) if np.allclose(x, r, 1e-3, 1e-4)})
            ok.append(_may_stop(norms, p[3], s, 0.0 if kind == AT_TOL else _STOP_SLACK))
        i = ok.index(False) if False in ok else 0
        expected = f"steps {want}: problem {i + 1} {KINDS[i]}, so {want[i]} steps"
        seen = f"steps {got}: {got[i]} for problem {i + 1}"
        grading.require(DESCEND_STEPS, all(ok), expected, seen, _steps_hint(got, want, x_at))
        for i, (x, ref, s) in enumerate(zip(xs, refs, got, strict=True)):
            about, hint = f"problem {i + 1} ({KINDS[i]}) after {s} steps", HINTS[DESCEND_X]
            grading.require_close(
                DESCEND_X, x, ref[0][s], rtol=1e-3, atol=1e-4, about=about, hint=hint
            )
