"""Grader for the control flow exercise: gradient clipping and an early-stopping loop,
each compiled once for every value of its data.

The learner turns two NumPy-style functions with a Python ``if`` and ``while`` on
values into jitted functions:

- ``clip_by_norm(g, max_norm)``: scale ``g`` down to norm ``max_norm`` when it is longer;
- ``descend(x0, curvature, lr, tol)``: clipped gradient descent on
  ``0.5 * sum(curvature * x**2)`` until the gradient's norm is at most ``tol`` or
  ``MAX_STEPS`` steps were taken; returns ``(x, steps)``.

The grader calls the learner's jitted functions itself, after emptying their caches, so
every number it checks comes out of the learner's compiled program. What it rejects:

- a hard-coded answer: every run draws new sizes, vectors, limits and tolerances;
- a Python ``if``/``while`` left on a traced value: the tracer error becomes a verdict
  that names the fix, and a Python ``and`` inside a ``lax.while_loop`` condition is told
  to use ``&``;
- the decision taken outside ``jit``: a plain Python wrapper fails ``require_jitted``
  (the real ``jax.jit`` type, not a look-alike), and NumPy code reached through a host
  callback (``jax.pure_callback``/``io_callback``) fails "decides inside the compiled
  program";
- a data value made static (``static_argnames="max_norm"``, ``"tol"`` or ``"lr"``): one
  compilation is allowed for all calls, and the verdict names the argument whose change
  alone compiled again (found by the grader's own calls, not from JAX's guess);
- wrong rules, on inputs drawn on purpose every run: a zero gradient (must come back
  unchanged, not NaN), limits on both sides of the norm, a start that has already
  converged (0 steps: a loop that steps before testing fails), problems that stop early
  and problems that run into ``MAX_STEPS``, clipping that matters and clipping that
  does not. Numbers and step counts are compared with a float64 NumPy reference kept
  inside this module.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jitlab.grading import call_learner, fail, fresh_rng, grader, passed, require, require_close
from jitlab.grading.checks import require_compiles, require_jitted, shorten
from jitlab.grading.kernel import host_callbacks, recompiled_by
from jitlab.instruments.counting import count_compiles

MAX_STEPS = 100
"""``descend`` takes at most this many steps (the exercise states the same number)."""

CLIP_NORM = 1.0
"""``descend`` clips every gradient to this norm before stepping."""

CLIP_CALLS = 10
DESCEND_PROBLEMS = 7

# Relative slack when deciding whether a step count is right: float32 arithmetic can put
# a gradient norm that the float64 reference finds a hair above ``tol`` a hair below it.
_STOP_SLACK = 1e-3

_TRACER_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError)

CLIP_JITTED = "clip_by_norm is compiled with jax.jit"
CLIP_RUNS = "clip_by_norm runs under jit"
CLIP_SHORT = "clip_by_norm leaves short vectors alone"
CLIP_ZERO = "clip_by_norm leaves a zero vector alone"
CLIP_LONG = "clip_by_norm scales long vectors to norm max_norm"
CLIP_ONCE = "clip_by_norm compiles once for every max_norm"
CLIP_INSIDE = "clip_by_norm decides inside the compiled program"
CLIP_CHECKS = (CLIP_JITTED, CLIP_RUNS, CLIP_LONG, CLIP_SHORT, CLIP_ZERO, CLIP_ONCE, CLIP_INSIDE)

DESCEND_JITTED = "descend is compiled with jax.jit"
DESCEND_RUNS = "descend runs under jit"
DESCEND_PAIR = "descend returns (x, steps)"
DESCEND_STEPS = "descend stops at the right step"
DESCEND_X = "descend returns the right x"
DESCEND_ONCE = "descend compiles once for every lr and tol"
DESCEND_INSIDE = "descend decides inside the compiled program"
DESCEND_CHECKS = (
    DESCEND_JITTED,
    DESCEND_RUNS,
    DESCEND_PAIR,
    DESCEND_STEPS,
    DESCEND_X,
    DESCEND_ONCE,
    DESCEND_INSIDE,
)


# ------------------------------------------------------------------ the reference


def _reference_clip(g: np.ndarray, max_norm: float) -> np.ndarray:
    """``g`` scaled to norm ``max_norm`` if it is longer, else ``g`` (float64)."""
    g = np.asarray(g, np.float64)
    norm = np.linalg.norm(g)
    return g * (max_norm / norm) if norm > max_norm else g


def _reference_trajectory(
    x0: np.ndarray, curvature: np.ndarray, lr: float, tol: float
) -> tuple[list[np.ndarray], list[float], int]:
    """Clipped gradient descent in float64, run for all ``MAX_STEPS`` steps.

    Returns ``(xs, norms, steps)``: ``xs[k]`` is ``x`` after ``k`` steps, ``norms[k]`` the
    norm of its gradient (what the stopping rule looks at before step ``k + 1``), and
    ``steps`` where the rule stops: the first ``k`` with ``norms[k] <= tol``, or
    ``MAX_STEPS``. The iterates past the stop are kept so that a float32 run that stops
    one step later (see ``_acceptable_steps``) can still be compared.
    """
    x = np.asarray(x0, np.float64)
    curvature = np.asarray(curvature, np.float64)
    xs, norms = [x], [float(np.linalg.norm(curvature * x))]
    for _ in range(MAX_STEPS):
        x = x - lr * _reference_clip(curvature * x, CLIP_NORM)
        xs.append(x)
        norms.append(float(np.linalg.norm(curvature * x)))
    steps = next((k for k, n in enumerate(norms) if n <= tol), MAX_STEPS)
    return xs, norms, min(steps, MAX_STEPS)


def _acceptable_steps(norms: list[float], tol: float, steps: int) -> bool:
    """Could a float32 run of the same rule stop after ``steps`` steps?

    It must have had a reason to take each step (norm above ``tol``, within the slack)
    and a reason to stop (norm at most ``tol`` within the slack, or ``MAX_STEPS``).
    """
    if not 0 <= steps <= MAX_STEPS:
        return False
    went_on = all(n > tol * (1 - _STOP_SLACK) for n in norms[:steps])
    return went_on and (steps == MAX_STEPS or norms[steps] <= tol * (1 + _STOP_SLACK))


# ------------------------------------------------------------ calling the learner


def _call(check: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call the learner; a Python branch or loop on a tracer gets a verdict that says so.

    Any other error is left to ``call_learner`` (which calls again and reports it), so
    an unfinished stub still reads "not solved yet".
    """
    try:
        return fn(*args)
    except _TRACER_ERRORS as err:
        raise _tracer_failure(check, err) from err
    except Exception:
        return call_learner(check, fn, *args)


def _tracer_failure(check: str, err: Exception) -> Exception:
    text = str(err)
    because = re.search(r"because it depends on the values? of the arguments? ([^.]+)", text)
    where = re.search(r"while tracing the function (\S+) at \S+ for (\w+)", text)
    seen = f"{type(err).__name__}: {text.splitlines()[0]}"
    if where:
        seen += f" (in {where.group(1)}, traced for {where.group(2)}"
        seen += f"; it needed the value of {because.group(1)})" if because else ")"
    elif because:
        seen += f" (it needed the value of {because.group(1)})"
    inside_lax = where is not None and where.group(2) != "jit"
    if inside_lax and where.group(2).startswith("while"):
        hint = (
            "you already use lax.while_loop; inside its functions every value is traced, "
            "so Python's `and`, `or`, `not` and `if` cannot decide. Combine the two "
            "conditions with `&` (or jnp.logical_and): (norm > tol) & (steps < MAX_STEPS)"
        )
    elif inside_lax:
        hint = (
            f"inside lax control flow ({where.group(2)}) every value is traced: replace "
            "Python's `if`/`and`/`or` there with jnp.where, `&` and `|`"
        )
    else:
        hint = (
            "replace the Python `if` with jnp.where or lax.cond, and the `while` with "
            "lax.while_loop, so the decision is made inside the compiled program"
        )
    return fail(
        check,
        expected="a function that traces: no Python if/while/and/range() on traced values",
        seen=seen,
        hint=hint,
    )


def _compiles_once(
    check: str,
    count: Any,
    *,
    name: str,
    calls: int,
    causes: list[str],
) -> None:
    if causes:
        what = " and ".join(causes)
        because = f"a new {what} alone compiled {name} again"
        hint = (
            f"{what} change{'s' if len(causes) == 1 else ''} on every call: keep "
            f"{'it' if len(causes) == 1 else 'them'} traced (no static_argnames / "
            "static_argnums) and let jnp.where, lax.cond or lax.while_loop decide inside "
            "the program"
        )
    else:
        because = "no single argument's change explains it"
        hint = (
            "every call has the same shapes and dtypes, so one program must serve them "
            "all: keep every argument traced (no static_argnames / static_argnums)"
        )
    jax_says = (
        f'; JAX\'s own guess: "{shorten(count.last_reason, 160)}"' if count.explanations else ""
    )
    require_compiles(
        check,
        count,
        exactly=1,
        what=f"compilations of {name} for {calls} calls of the same shapes",
        hint=hint,
        seen_extra=because + jax_says if count.compiles > 1 else "",
    )


def _require_no_callback(check: str, fn: Any, args: Sequence[Any], name: str) -> None:
    found = host_callbacks(fn, *args)
    require(
        check,
        not found,
        expected=f"{name}'s decision made by the compiled program (jnp/lax operations)",
        seen=f"the program calls back into Python ({', '.join(found)})",
        hint="a host callback runs NumPy outside the compiled program; use jnp.where, "
        "lax.cond and lax.while_loop instead",
    )


# ------------------------------------------------------------------ clip_by_norm


def _clip_cases(rng: np.random.Generator, size: int) -> list[tuple[np.ndarray, float]]:
    """Limits on both sides of the norm (alternating), a zero vector, and a limit that
    equals the norm; every ``max_norm`` different."""
    cases = []
    for i in range(CLIP_CALLS):
        g = rng.normal(0.0, rng.uniform(0.5, 3.0), size=size).astype(np.float32)
        norm = float(np.linalg.norm(g.astype(np.float64)))
        # Even: the limit is below the norm (clip); odd: above it (leave alone).
        factor = rng.uniform(0.2, 0.9) if i % 2 == 0 else rng.uniform(1.1, 3.0)
        cases.append((g, float(norm * factor)))
    # Odd positions are "short": a zero vector, and one whose norm is exactly the limit.
    cases[1] = (np.zeros(size, np.float32), float(rng.uniform(0.5, 2.0)))
    g = cases[3][0]
    cases[3] = (g, float(np.linalg.norm(g.astype(np.float64))))
    return cases


@grader("control_flow", part="clip_by_norm", checks=CLIP_CHECKS)
def grade_clip(clip_by_norm: Callable[..., Any]) -> None:
    """Grade ``clip_by_norm(g, max_norm)``: numbers on both sides of the limit and for a
    zero vector, one compilation for ten different limits, no host callback."""
    rng = fresh_rng()
    require_jitted(CLIP_JITTED, clip_by_norm)

    size = int(rng.integers(5, 40))
    cases = _clip_cases(rng, size)

    clip_by_norm.clear_cache()
    with count_compiles(clip_by_norm) as count:
        outputs = [np.asarray(_call(CLIP_RUNS, clip_by_norm, g, m)) for g, m in cases]
    passed(CLIP_RUNS)

    wanted = [_reference_clip(g, m) for g, m in cases]
    short = [i for i in range(len(cases)) if i % 2 == 1 and i != 1]
    require_close(
        CLIP_LONG,
        np.stack(outputs[0::2]),
        np.stack(wanted[0::2]),
        rtol=1e-4,
        atol=1e-6,
        hint="scale the whole vector by max_norm / norm(g), keeping its direction; "
        "jnp.clip limits each element, which is a different thing",
    )

    require_close(
        CLIP_SHORT,
        np.stack([outputs[i] for i in short]),
        np.stack([wanted[i] for i in short]),
        rtol=1e-5,
        atol=1e-6,
        hint="when norm(g) <= max_norm (the limit may equal the norm), return g unchanged",
    )
    require_close(
        CLIP_ZERO,
        outputs[1],
        wanted[1],
        atol=1e-6,
        hint="a zero gradient is shorter than any limit and must come back as zeros; "
        "dividing by its norm (0) gives NaN. Choose the factor with "
        "jnp.where(norm > max_norm, max_norm / norm, 1.0)",
    )
    fresh = rng.normal(0.0, 2.0, size=(2, size)).astype(np.float32)
    causes = recompiled_by(
        clip_by_norm,
        (fresh[0], 0.37),
        {"g": (fresh[1], 0.37), "max_norm": (fresh[0], 0.41)},
    )
    _compiles_once(CLIP_ONCE, count, name="clip_by_norm", calls=len(cases), causes=causes)
    _require_no_callback(CLIP_INSIDE, clip_by_norm, cases[0], "clip_by_norm")


# ------------------------------------------------------------------ descend


def _problems(rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray, float, float]]:
    """Problems that stop early, one that starts converged, and two that run into
    ``MAX_STEPS``; every ``lr`` and ``tol`` different. Large starts make the first
    gradients longer than ``CLIP_NORM`` (clipping matters), later ones shorter."""
    size = int(rng.integers(4, 13))
    problems = []
    for i in range(DESCEND_PROBLEMS):
        x0 = rng.normal(0.0, 2.0, size=size).astype(np.float32)
        curvature = rng.uniform(0.5, 2.0, size=size).astype(np.float32)
        crawl = i >= DESCEND_PROBLEMS - 2
        lr = rng.uniform(0.01, 0.03) if crawl else rng.uniform(0.3, 0.9)
        tol = 10 ** rng.uniform(-3, -1)
        if crawl:
            # Gradient norm 10 at the start; a clipped step moves x by at most lr <= 0.03,
            # so 100 steps change the gradient by at most 6: never below tol.
            grad_norm = float(np.linalg.norm(curvature.astype(np.float64) * x0))
            x0 = (x0 * (10.0 / grad_norm)).astype(np.float32)
        problems.append((x0, curvature, float(lr), float(tol)))
    # Already converged: the gradient's norm starts at half of tol, so 0 steps.
    x0, curvature, lr, tol = problems[2]
    grad_norm = float(np.linalg.norm(curvature.astype(np.float64) * x0))
    problems[2] = ((x0 * (0.5 * tol / grad_norm)).astype(np.float32), curvature, lr, tol)
    return problems


def _check_pairs(results: list[Any]) -> None:
    for result in results:
        if not (isinstance(result, tuple | list) and len(result) == 2):
            shape = len(result) if isinstance(result, tuple | list) else np.shape(result)
            raise fail(
                DESCEND_PAIR,
                expected="a pair (x, steps)",
                seen=f"{type(result).__name__} of length/shape {shape}",
                hint="return x and the step count together, e.g. the final carry of lax.while_loop",
            )
        if np.ndim(result[1]) != 0:
            raise fail(
                DESCEND_PAIR,
                expected="steps as a scalar integer",
                seen=f"steps with shape {np.shape(result[1])}",
                hint="count steps in the loop's carry, starting from jnp.int32(0)",
            )
    passed(DESCEND_PAIR)


def _steps_hint(
    trajectories: list[tuple[list[np.ndarray], list[float], int]],
    results: list[Any],
    got_steps: list[int],
) -> str:
    """Why the step counts differ, from what the learner's own results show."""
    if all(s == MAX_STEPS for s in got_steps):
        return (
            "every problem ran all MAX_STEPS steps: a loop with a fixed count "
            "(fori_loop to MAX_STEPS) never stops early; test the rule before every step"
        )
    # Which reference iterate is the learner's x? If x is no iterate at all, the steps
    # are wrong; if x is right for where the rule stops, only the count is off.
    offsets = []
    for (x, _), s, (xs, _, want) in zip(results, got_steps, trajectories, strict=True):
        x = np.asarray(x, np.float64)
        matches = [k for k, ref in enumerate(xs) if np.allclose(x, ref, rtol=1e-3, atol=1e-4)]
        if not matches:
            return (
                "your x is not an iterate of the reference: each step is "
                "x - lr * clip_by_norm(curvature * x, 1.0) (clip the gradient before "
                "stepping)"
            )
        offsets.append(s - want if want in matches else None)
    others = [o for i, o in enumerate(offsets) if i != 2]
    if got_steps[2] != 0 and all(o == 0 for o in others):
        return (
            "problem 3 starts converged and needs 0 steps: test the rule before every "
            "step, including the first"
        )
    known = {o for o in offsets if o is not None}
    if len(known) == 1 and 0 not in known:
        return (
            f"x is right, but every count is off by {known.pop()}: start steps at 0 and "
            "add 1 for each step taken"
        )
    return (
        "check the stopping rule before every step: stop once norm(curvature * x) <= tol, "
        "or after MAX_STEPS steps"
    )


@grader("control_flow", part="descend", checks=DESCEND_CHECKS)
def grade_descend(descend: Callable[..., Any]) -> None:
    """Grade ``descend(x0, curvature, lr, tol)``: iterates and step counts against the
    reference on problems that stop early, start converged or hit ``MAX_STEPS``, and one
    compilation for seven different learning rates and tolerances."""
    rng = fresh_rng()
    require_jitted(DESCEND_JITTED, descend)
    problems = _problems(rng)

    descend.clear_cache()
    with count_compiles(descend) as count:
        results = [_call(DESCEND_RUNS, descend, *p) for p in problems]
    passed(DESCEND_RUNS)
    _check_pairs(results)

    trajectories = [_reference_trajectory(*p) for p in problems]
    got_steps = [int(np.asarray(steps)) for _, steps in results]
    want_steps = [steps for _, _, steps in trajectories]
    ok = all(
        _acceptable_steps(norms, tol, s)
        for s, (_, norms, _), (_, _, _, tol) in zip(got_steps, trajectories, problems, strict=True)
    )
    require(
        DESCEND_STEPS,
        ok,
        expected=f"steps {want_steps} (stop once norm(curvature * x) <= tol, or at {MAX_STEPS})",
        seen=f"steps {got_steps}",
        hint=_steps_hint(trajectories, results, got_steps),
    )
    require_close(
        DESCEND_X,
        np.stack([np.asarray(x) for x, _ in results]),
        np.stack([xs[s] for (xs, _, _), s in zip(trajectories, got_steps, strict=True)]),
        rtol=1e-3,
        atol=1e-4,
        hint="each step is x - lr * clip_by_norm(curvature * x, 1.0)",
    )

    x0, curvature, _, _ = problems[0]
    causes = recompiled_by(
        descend,
        (x0 * 1.1, curvature, 0.511, 0.0123),
        {
            "x0": (x0 * 1.2, curvature, 0.511, 0.0123),
            "lr": (x0 * 1.1, curvature, 0.533, 0.0123),
            "tol": (x0 * 1.1, curvature, 0.511, 0.0137),
        },
    )
    _compiles_once(DESCEND_ONCE, count, name="descend", calls=len(problems), causes=causes)
    _require_no_callback(DESCEND_INSIDE, descend, problems[0], "descend")
