"""The control-flow grader passes right answers, however they are written, and rejects
every kind of wrong answer with a verdict that names its real mistake."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exercise_cells import namespace
from jax import lax
from tables import fails, passes, rows

from jitlab.graders import control_flow as cf
from jitlab.grading.checks import JIT_ON

MAX_STEPS, N_CLIP = cf.MAX_STEPS, len(cf.CLIP_KINDS)


def named(fn, name="clip_by_norm", **jit):
    """``fn`` jitted under the exercise's name (the compile counter matches by name)."""
    fn.__name__ = fn.__qualname__ = name
    return jax.jit(fn, **jit)


def clip_with(factor, **jit):
    """A jitted clip_by_norm that scales g by ``factor(norm, max_norm)``."""
    return named(lambda g, max_norm: g * factor(jnp.linalg.norm(g), max_norm), **jit)


def right(norm, max_norm):
    return jnp.where(norm > max_norm, max_norm / norm, 1.0)


def while_descend(clip=None, *, start=0, clip_step=True, cond=None, first_step=False, **jit):
    """descend with lax.while_loop; each keyword plants one mistake."""
    clip = clip or clip_with(right)

    def descend(x0, curvature, lr, tol):
        def keep_going(state):
            norm, steps = jnp.linalg.norm(curvature * state[0]), state[1]
            return cond(norm, tol, steps) if cond else (norm > tol) & (steps < MAX_STEPS)

        def step(state):
            x, steps = state
            g = curvature * x
            return x - lr * (clip(g, 1.0) if clip_step else g), steps + 1

        start_state = (x0, jnp.int32(start))
        return lax.while_loop(keep_going, step, step(start_state) if first_step else start_state)

    return jax.jit(descend, **jit)


# --- right answers ----------------------------------------------------------------------


def test_the_solution_and_answers_written_differently_pass():
    solution = namespace("control_flow")
    assert (solution["MAX_STEPS"], solution["CLIP_NORM"]) == (cf.MAX_STEPS, cf.CLIP_NORM)

    @jax.jit
    def cond_clip(g, max_norm):  # lax.cond and a norm by hand
        norm = jnp.sqrt(jnp.sum(g * g))
        return lax.cond(norm > max_norm, lambda v: v * (max_norm / norm), lambda v: v, g)

    @jax.jit
    def frozen_descend(x0, curvature, lr, tol):  # fori_loop with a frozen state
        def body(_, state):
            x, steps = state
            done = jnp.linalg.norm(curvature * x) <= tol
            new_x = x - lr * cond_clip(curvature * x, 1.0)
            return jnp.where(done, x, new_x), jnp.where(done, steps, steps + 1)

        return lax.fori_loop(0, MAX_STEPS, body, (x0, jnp.int32(0)))

    @jax.jit
    def int16_steps(x0, curvature, lr, tol):
        x, steps = while_descend()(x0, curvature, lr, tol)
        return x, steps.astype(jnp.int16)

    @jax.jit
    def where_on_g(g, max_norm):  # the choice made between two vectors, not two factors
        norm = jnp.linalg.norm(g)
        return jnp.where(norm > max_norm, g * max_norm / jnp.where(norm > 0, norm, 1.0), g)

    for clip, descend in [
        (solution["clip_by_norm"], solution["descend"]),
        (cond_clip, frozen_descend),
        (where_on_g, while_descend(where_on_g)),
        (clip_with(right), int16_steps),
    ]:
        passes(cf.grade_clip, clip)
        passes(cf.grade_descend, descend)


# --- wrong answers ----------------------------------------------------------------------


def decision_outside_jit():  # a decoy jitted call, so that something compiles
    scale = jax.jit(lambda g, factor: g * factor)
    return lambda g, max_norm: (scale(g, 1.0), cf._reference_clip(g, max_norm))[1]


class LooksJitted:  # jax.jit's methods on a plain function
    lower = trace = clear_cache = staticmethod(lambda *args: None)
    __call__ = staticmethod(cf._reference_clip)


def through_callback():
    def numpy_clip(g, max_norm):
        return cf._reference_clip(g, max_norm).astype(np.float32)

    shape = lambda g: jax.ShapeDtypeStruct(g.shape, g.dtype)  # noqa: E731
    return named(lambda g, m: jax.pure_callback(numpy_clip, shape(g), g, m))


def jit_off_around():  # a plain function that calls the jitted one with jit off
    return jax.disable_jit()(clip_with(right))


def python_while():
    clip = clip_with(right)

    @jax.jit
    def descend(x0, curvature, lr, tol):
        x, steps = x0, 0
        while jnp.linalg.norm(curvature * x) > tol and steps < MAX_STEPS:
            x, steps = x - lr * clip(curvature * x, 1.0), steps + 1
        return x, steps

    return descend


def fixed_count():
    clip = clip_with(right)

    @jax.jit
    def descend(x0, curvature, lr, tol):
        def body(_, state):
            return state[0] - lr * clip(curvature * state[0], 1.0), state[1] + 1

        return lax.fori_loop(0, MAX_STEPS, body, (x0, jnp.int32(0)))

    return descend


def descend_callback():
    def numpy_descend(x0, curvature, lr, tol):
        xs, _, steps = cf._reference_trajectory(x0, curvature, float(lr), float(tol))
        return xs[steps].astype(np.float32), np.int32(steps)

    @jax.jit
    def descend(x0, curvature, lr, tol):
        shapes = (jax.ShapeDtypeStruct(x0.shape, x0.dtype), jax.ShapeDtypeStruct((), jnp.int32))
        return jax.pure_callback(numpy_descend, shapes, x0, curvature, lr, tol)

    return descend


def squared_norm_throughout(g, max_norm):
    squared = jnp.sum(g**2)  # "the norm", squared
    return g * jnp.where(squared > max_norm, max_norm / squared, 1.0)


def python_and(norm, tol, steps):
    return norm > tol and steps < MAX_STEPS


WRONG = {  # name: (a factory of the wrong answer, the check it fails: the grader by its name)
    "python if": (lambda: clip_with(lambda n, m: m / n if n > m else 1.0), cf.CLIP_RUNS),
    "static max_norm": (lambda: clip_with(right, static_argnames="max_norm"), cf.CLIP_ONCE),
    "static argnum": (lambda: clip_with(right, static_argnums=1), cf.CLIP_ONCE),
    "decoy outside jit": (decision_outside_jit, cf.CLIP_JITTED),
    "look-alike": (LooksJitted, cf.CLIP_JITTED),
    "jit off around": (jit_off_around, cf.CLIP_JITTED),
    "host callback": (through_callback, cf.CLIP_INSIDE),
    "elementwise": (lambda: named(lambda g, m: jnp.clip(g, -m, m)), cf.CLIP_LONG),
    "g / norm": (lambda: clip_with(lambda n, m: jnp.where(n > m, 1 / n, 1.0)), cf.CLIP_LONG),
    "inverted": (lambda: clip_with(lambda n, m: jnp.where(n < m, m / n, 1.0)), cf.CLIP_LONG),
    "scales up": (lambda: clip_with(lambda n, m: m / jnp.maximum(n, 1e-30)), cf.CLIP_SHORT),
    "0 / 0": (lambda: clip_with(lambda n, m: jnp.minimum(n, m) / n), cf.CLIP_ZERO),
    # inf-safe for a zero vector, but 0 / 0 at a zero limit: the edge the contract allows
    "minimum at a zero limit": (
        lambda: clip_with(lambda n, m: jnp.minimum(1.0, m / n)),
        cf.CLIP_ZERO,
    ),
    # the squared norm, sum(g**2), where the norm belongs: recomputed, and named
    "sum(g**2) > max_norm": (
        lambda: named(lambda g, m: g * jnp.where(jnp.sum(g**2) > m, m / jnp.linalg.norm(g), 1.0)),
        cf.CLIP_TINY,
    ),
    "sum(g**2) as the norm": (lambda: named(squared_norm_throughout), cf.CLIP_LONG),
    "max_norm / sum(g**2)": (
        lambda: clip_with(lambda n, m: jnp.where(n > m, m / n**2, 1.0)),
        cf.CLIP_LONG,
    ),
    "python while": (python_while, cf.DESCEND_RUNS),
    "python and": (lambda: while_descend(cond=python_and), cf.DESCEND_RUNS),
    "fixed count": (fixed_count, cf.DESCEND_STEPS),
    "counts from 1": (lambda: while_descend(start=1), cf.DESCEND_STEPS),
    "steps before testing": (lambda: while_descend(first_step=True), cf.DESCEND_STEPS),
    "unclipped": (lambda: while_descend(clip_step=False), cf.DESCEND_STEPS),
    "only x": (lambda: named(lambda *a: while_descend()(*a)[0], "descend"), cf.DESCEND_PAIR),
    "descend's host callback": (descend_callback, cf.DESCEND_INSIDE),
}
CLIP_EDGES = {  # clip factors only the drawn edge cases expose, graded with three seeds each
    "eps 1e-6": lambda n, m: jnp.where(n > m, m / (n + 1e-6), 1.0),
    "eps 1e-12": lambda n, m: jnp.where(n > m, m / (n + 1e-12), 1.0),
    "floor": lambda n, m: jnp.where(n > m, m / jnp.maximum(n, 1e-8), 1.0),
    "eps in test": lambda n, m: jnp.where(n > m + 1e-6, m / n, 1.0),
    "squared norm": lambda n, m: jnp.where(n * n > m, m / n, 1.0),  # unscaled below 1
}
STOP_EDGES = {  # stopping rules (norm, tol, steps) likewise
    ">= tol": lambda n, t, s: (n >= t) & (s < MAX_STEPS),
    "<= MAX_STEPS": lambda n, t, s: (n > t) & (s <= MAX_STEPS),
    "< MAX_STEPS - 1": lambda n, t, s: (n > t) & (s < MAX_STEPS - 1),
    "clipped norm": lambda n, t, s: (jnp.minimum(n, 1.0) > t) & (s < MAX_STEPS),  # tol > 1
}
EDGES = {k: (partial(clip_with, f), cf.CLIP_TINY) for k, f in CLIP_EDGES.items()}
EDGES |= {k: (partial(while_descend, cond=c), cf.DESCEND_STEPS) for k, c in STOP_EDGES.items()}
WORDS = {  # what a verdict must hold, where more than its check
    "python if": ["TracerBoolConversionError", "max_norm", "jnp.where"],
    "static max_norm": [f"{N_CLIP} compilations", "max_norm: ", "(static value)", "keep max_norm"],
    "static argnum": ["keep max_norm traced"],
    "host callback": ["pure_callback"],
    "elementwise": ["jnp.clip"],
    "0 / 0": ["NaN"],
    "minimum at a zero limit": ["max_norm=0", "0 / 0", "jnp.minimum"],
    "python while": ["lax.while_loop"],
    "python and": ["while_cond", "you already use lax.while_loop", "`&`"],
    "fixed count": ["never stops early"],
    "counts from 1": ["x is right, but every count is off by 1"],
    "steps before testing": ["already converged", "problem 3 starts converged"],
    "unclipped": ["clip the gradient before stepping"],
    "descend's host callback": ["pure_callback"],
    "eps 1e-6": ["eps", "for g of norm", "e-1"],
    "eps 1e-12": ["eps"],
    "floor": ["jnp.maximum"],
    "eps in test": ["no eps added to either side"],
    "squared norm": ["the norm's square, sum(g**2), stands in the comparison with max_norm"],
    "sum(g**2) > max_norm": ["the norm's square, sum(g**2), stands in the comparison with"],
    "sum(g**2) as the norm": ["stands in the comparison and in the factor"],
    "max_norm / sum(g**2)": ["stands in the factor max_norm / norm"],
    ">= tol": ["problem 5 starts exactly at tol", "1 for problem 5", "not norm >= tol"],
    "<= MAX_STEPS": ["took [101] steps", "loop bound is off", f"{MAX_STEPS} steps"],
    "< MAX_STEPS - 1": ["took [99] steps", "loop bound is off"],
}


SQUARED = ("sum(g**2) > max_norm", "sum(g**2) as the norm", "max_norm / sum(g**2)")


@pytest.mark.parametrize(("name", "seed"), rows(WRONG, SQUARED) + rows(EDGES, EDGES))
def test_wrong_answers_fail_their_check(name, seed):
    answer, check = (WRONG | EDGES)[name]
    grade = cf.grade_clip if check.startswith("clip_by_norm") else cf.grade_descend
    found = fails(grade, answer(), check=check, words=WORDS.get(name, ()), seed=seed)
    assert name in WRONG or "no iterate" not in found.hint  # an edge, not a wrong step


@pytest.mark.parametrize(("static", "other"), [("tol", "lr"), ("lr", "tol")])
def test_a_static_float_is_named(static, other):
    found = fails(cf.grade_descend, while_descend(static_argnames=static), check=cf.DESCEND_ONCE)
    assert f"{static}: " in found.seen and "(static value)" in found.seen
    assert f"{other}: " not in found.seen
    assert found.hint.startswith(f"keep {static} traced")


def test_jit_switched_off_while_the_learner_code_runs():
    @jax.jit
    def clip_by_norm(g, max_norm):
        jax.config.update("jax_disable_jit", True)  # while tracing: every later call eager
        return clip_with(right)(g, max_norm)

    try:
        fails(cf.grade_clip, clip_by_norm, check=JIT_ON)
        jax.config.update("jax_disable_jit", True)
        fails(cf.grade_descend, while_descend(), check=JIT_ON)
    finally:
        jax.config.update("jax_disable_jit", False)


# --- the reference and the drawing -------------------------------------------------------


def test_reference_agrees_with_the_numpy_version_in_the_exercise():
    descend_numpy = namespace("control_flow")["descend_numpy"]
    rng = np.random.default_rng(0)
    for _ in range(20):
        x0, curvature = rng.normal(0.0, 2.0, size=6), rng.uniform(0.5, 2.0, size=6)
        lr, tol = float(rng.uniform(0.01, 0.9)), float(10 ** rng.uniform(-3, -1))
        xs, _, steps = cf._reference_trajectory(x0, curvature, lr, tol)
        want_x, want_steps = descend_numpy(x0, curvature, lr, tol)
        assert steps == want_steps
        np.testing.assert_allclose(xs[steps], want_x, rtol=1e-12)


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_the_drawn_inputs_hold_every_edge_case(seed):
    rng = np.random.default_rng(seed)
    problems = cf._problems(rng)
    steps = [cf._reference_trajectory(*p)[2] for p in problems]
    for kind, s, (x0, curvature, _, tol) in zip(cf.KINDS, steps, problems, strict=True):
        assert s == {cf.CONVERGED: 0, cf.AT_TOL: 0, cf.LIMIT: MAX_STEPS}.get(kind, s)
        assert kind != cf.EARLY or 0 < s < MAX_STEPS
        norm = jnp.linalg.norm(jnp.asarray(curvature) * jnp.asarray(x0))
        assert kind != cf.AT_TOL or float(norm) == tol  # exactly, in float32 on XLA
    assert len({p[2] for p in problems}) == len({p[3] for p in problems}) == len(problems)
    cases = cf._clip_cases(rng, 7)
    norms = [np.linalg.norm(g.astype(np.float64)) for g, _ in cases]
    assert norms[1] == 0 and norms[4] < 1e-8 < norms[0] and np.isclose(norms[3], cases[3][1])
    long = [
        n > m for n, (_, m), k in zip(norms, cases, cf.CLIP_KINDS, strict=True) if k == cf.CLIP_LONG
    ]
    assert all(long) and len({m for _, m in cases}) == len(cases)


def test_may_stop_allows_only_the_boundary():
    norms = [10.0, 1.0, 0.1, 0.01000001, 0.001] + [0.0001] * (MAX_STEPS - 4)
    assert cf._may_stop(norms, 0.01, 4)
    assert cf._may_stop(norms, 0.01, 3)  # 0.01000001 is within the slack
    assert not cf._may_stop(norms, 0.01, 3, slack=0.0)
    for wrong in (2, 5, MAX_STEPS, -1):
        assert not cf._may_stop(norms, 0.01, wrong)
