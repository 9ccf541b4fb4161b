"""Grader for exercise 05 (control flow): gradient clipping and an early-stopping loop,
each compiled once for every value of its data.

The learner turns two NumPy-style functions with a Python ``if`` and ``while`` on
values into jitted functions:

- ``clip_by_norm(g, max_norm)``: scale ``g`` down to norm ``max_norm`` when it is longer;
- ``descend(x0, curvature, lr, tol)``: clipped gradient descent on
  ``0.5 * sum(curvature * x**2)`` until the gradient's norm is at most ``tol`` or
  ``MAX_STEPS`` steps were taken; returns ``(x, steps)``.

What it rejects, and how:

- a hard-coded answer: every run draws new sizes, vectors, limits and tolerances;
- a Python ``if``/``while`` left on a traced value: the tracer error becomes a verdict
  that names the fix;
- the decision taken outside ``jit`` (a plain Python wrapper): ``require_jitted``;
- a data value made static (``static_argnames="max_norm"``, ``"tol"`` or ``"lr"``): the
  function's cache is cleared, then a batch of calls with distinct values must compile
  at most once;
- wrong branch semantics (clipping each element, dividing by the norm without
  ``max_norm``, never stopping early, counting steps wrongly): numbers and step counts
  are compared with a float64 NumPy reference.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jitlab.grading import (
    all_passed,
    call_learner,
    fail,
    fresh_rng,
    passed,
    require,
    require_close,
    require_jitted,
)
from jitlab.instruments.counting import count_compiles

MAX_STEPS = 100
"""``descend`` takes at most this many steps (the exercise states the same number)."""

CLIP_NORM = 1.0
"""``descend`` clips every gradient to this norm before stepping."""

CLIP_CALLS = 10
DESCEND_PROBLEMS = 6

# Relative slack when deciding whether a step count is right: float32 arithmetic can put
# a gradient norm that the float64 reference finds a hair above ``tol`` a hair below it.
_STOP_SLACK = 1e-3

_TRACER_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError)


def reference_clip(g: np.ndarray, max_norm: float) -> np.ndarray:
    """``g`` scaled to norm ``max_norm`` if it is longer, else ``g`` (float64)."""
    g = np.asarray(g, np.float64)
    norm = np.linalg.norm(g)
    return g * (max_norm / norm) if norm > max_norm else g


def reference_trajectory(
    x0: np.ndarray, curvature: np.ndarray, lr: float, tol: float
) -> tuple[list[np.ndarray], list[float], int]:
    """Clipped gradient descent in float64, run for all ``MAX_STEPS`` steps.

    Returns ``(xs, norms, steps)``: ``xs[k]`` is ``x`` after ``k`` steps, ``norms[k]`` the
    norm of its gradient (what the stopping rule looks at before step ``k + 1``), and
    ``steps`` where the rule stops: the first ``k`` with ``norms[k] <= tol``, or
    ``MAX_STEPS``. The iterates past the stop are kept so that a float32 run that stops
    one step later (see ``acceptable_steps``) can still be compared.
    """
    x = np.asarray(x0, np.float64)
    curvature = np.asarray(curvature, np.float64)
    xs, norms = [x], [float(np.linalg.norm(curvature * x))]
    for _ in range(MAX_STEPS):
        x = x - lr * reference_clip(curvature * x, CLIP_NORM)
        xs.append(x)
        norms.append(float(np.linalg.norm(curvature * x)))
    steps = next((k for k, n in enumerate(norms) if n <= tol), MAX_STEPS)
    return xs, norms, min(steps, MAX_STEPS)


def acceptable_steps(norms: list[float], tol: float, steps: int) -> bool:
    """Could a float32 run of the same rule stop after ``steps`` steps?

    It must have had a reason to take each step (norm above ``tol``, within the slack)
    and a reason to stop (norm at most ``tol`` within the slack, or ``MAX_STEPS``).
    """
    if not 0 <= steps <= MAX_STEPS:
        return False
    went_on = all(n > tol * (1 - _STOP_SLACK) for n in norms[:steps])
    return went_on and (steps == MAX_STEPS or norms[steps] <= tol * (1 + _STOP_SLACK))


def _call(check: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call the learner; a Python branch or loop on a tracer gets a verdict that says so.

    Any other error is left to ``call_learner`` (which calls again and reports it), so
    an unfinished stub still reads "not solved yet".
    """
    try:
        return fn(*args)
    except _TRACER_ERRORS as err:
        text = str(err)
        because = re.search(r"because it depends on the values? of the arguments? ([^.]+)", text)
        seen = f"{type(err).__name__}: {text.splitlines()[0]}"
        if because:
            seen += f" (it needed the value of {because.group(1)})"
        raise fail(
            check,
            expected="a function that traces: no Python if/while/range() on traced values",
            seen=seen,
            hint="replace the Python `if` with jnp.where or lax.cond, and the `while` "
            "with lax.while_loop",
        ) from err
    except Exception:
        return call_learner(check, fn, *args)


def _last_explanation(count: Any) -> str:
    if not count.explanations:
        return "-"
    lines = [line.strip() for line in count.explanations[-1].splitlines() if line.strip()]
    return lines[-1][:200]


def _require_one_compilation(name: str, count: Any, calls: int, what_varied: str) -> None:
    require(
        f"{name} compiles once for {calls} calls with different {what_varied}",
        count.compiles <= 1,
        expected=f"at most 1 compilation of {name} for {calls} calls with the same shapes",
        seen=f"{count.compiles} compilations; JAX said: {_last_explanation(count)}",
        hint=f"{what_varied} change on every call: keep them traced (no static_argnames / "
        "static_argnums for them) and let jnp.where, lax.cond or lax.while_loop decide "
        "inside the program",
    )


def grade_clip(clip_by_norm: Callable[..., Any]) -> None:
    """Grade ``clip_by_norm(g, max_norm)``: numbers on both sides of the limit, one
    compilation for ten different limits."""
    rng = fresh_rng()
    require_jitted("clip_by_norm is compiled with jax.jit", clip_by_norm)

    size = int(rng.integers(5, 40))
    cases = []
    for i in range(CLIP_CALLS):
        g = rng.normal(0.0, rng.uniform(0.5, 3.0), size=size).astype(np.float32)
        norm = float(np.linalg.norm(g.astype(np.float64)))
        # Alternate: limits below the norm (clip) and above it (leave alone).
        factor = rng.uniform(0.2, 0.9) if i % 2 == 0 else rng.uniform(1.1, 3.0)
        cases.append((g, float(norm * factor)))

    clip_by_norm.clear_cache()
    with count_compiles(clip_by_norm) as count:
        outputs = [
            np.asarray(_call("clip_by_norm runs under jit", clip_by_norm, g, m)) for g, m in cases
        ]
    passed("clip_by_norm runs under jit")

    wanted = [reference_clip(g, m) for g, m in cases]
    require_close(
        "clip_by_norm leaves short vectors alone",
        np.stack(outputs[1::2]),
        np.stack(wanted[1::2]),
        rtol=1e-5,
        atol=1e-6,
        hint="when norm(g) <= max_norm, return g unchanged",
    )
    require_close(
        "clip_by_norm scales long vectors to norm max_norm",
        np.stack(outputs[0::2]),
        np.stack(wanted[0::2]),
        rtol=1e-4,
        atol=1e-6,
        hint="scale the whole vector by max_norm / norm(g), keeping its direction; "
        "jnp.clip limits each element, which is a different thing",
    )
    _require_one_compilation("clip_by_norm", count, CLIP_CALLS, "max_norm values")
    all_passed("05 control flow: clip_by_norm")


def _problems(rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray, float, float]]:
    size = int(rng.integers(4, 13))
    problems = []
    for i in range(DESCEND_PROBLEMS):
        x0 = rng.normal(0.0, 2.0, size=size).astype(np.float32)
        curvature = rng.uniform(0.5, 2.0, size=size).astype(np.float32)
        # Most problems converge early; the last two crawl and run into MAX_STEPS.
        lr = rng.uniform(0.3, 0.9) if i < DESCEND_PROBLEMS - 2 else rng.uniform(0.01, 0.03)
        tol = 10 ** rng.uniform(-3, -1)
        problems.append((x0, curvature, float(lr), float(tol)))
    return problems


def grade_descend(descend: Callable[..., Any]) -> None:
    """Grade ``descend(x0, curvature, lr, tol)``: iterates and step counts against the
    reference on problems that stop early and problems that hit ``MAX_STEPS``, and one
    compilation for six different learning rates and tolerances."""
    rng = fresh_rng()
    require_jitted("descend is compiled with jax.jit", descend)
    problems = _problems(rng)

    descend.clear_cache()
    with count_compiles(descend) as count:
        results = [_call("descend runs under jit", descend, *p) for p in problems]
    passed("descend runs under jit")

    check = "descend returns (x, steps)"
    for result in results:
        if not (isinstance(result, tuple | list) and len(result) == 2):
            shape = len(result) if isinstance(result, tuple | list) else np.shape(result)
            raise fail(
                check,
                expected="a pair (x, steps)",
                seen=f"{type(result).__name__} of length/shape {shape}",
                hint="return x and the step count together, e.g. the final carry of lax.while_loop",
            )
        if np.ndim(result[1]) != 0:
            raise fail(
                check,
                expected="steps as a scalar integer",
                seen=f"steps with shape {np.shape(result[1])}",
                hint="count steps in the loop's carry, starting from jnp.int32(0)",
            )
    passed(check)

    trajectories = [reference_trajectory(*p) for p in problems]
    got_steps = [int(np.asarray(steps)) for _, steps in results]
    want_steps = [steps for _, _, steps in trajectories]
    ok = all(
        acceptable_steps(norms, tol, s)
        for s, (_, norms, _), (_, _, _, tol) in zip(got_steps, trajectories, problems, strict=True)
    )
    require(
        "descend stops at the right step",
        ok,
        expected=f"steps {want_steps} (stop once norm(curvature * x) <= tol, or at {MAX_STEPS})",
        seen=f"steps {got_steps}",
        hint="check the stopping rule before every step, including the first; a loop with "
        "a fixed count (fori_loop to MAX_STEPS) never stops early",
    )
    require_close(
        "descend returns the right x",
        np.stack([np.asarray(x) for x, _ in results]),
        np.stack([xs[s] for (xs, _, _), s in zip(trajectories, got_steps, strict=True)]),
        rtol=1e-3,
        atol=1e-4,
        hint="each step is x - lr * clip_by_norm(curvature * x, 1.0)",
    )
    _require_one_compilation("descend", count, len(problems), "lr and tol values")
    all_passed("05 control flow: descend")
