"""The fixture exercise's grader: ``double`` doubles, jitted, one compilation per shape."""

from __future__ import annotations

import numpy as np

from jitlab.grading import Grading, grader
from jitlab.instruments.counting import count_compiles

CHECKS = ("double is jitted", "double doubles", "one compilation per shape")


@grader("01 doubling", checks=CHECKS)
def grade(grading: Grading, double) -> None:
    from jitlab.grading import is_jitted

    grading.require(
        "double is jitted",
        is_jitted(double),
        expected="a jax.jit function",
        seen=type(double).__name__,
        hint="decorate it with @jax.jit",
    )
    x = grading.rng.normal(size=5).astype(np.float32)
    double.clear_cache()
    with count_compiles(double) as n:
        got = grading.call_learner("double doubles", double, x, lesson="01")
        grading.call_learner("double doubles", double, x + 1, lesson="01")
    grading.require_close("double doubles", got, 2 * x)
    grading.require(
        "one compilation per shape",
        n.compiles == 1,
        expected="1 compilation for two calls of one shape",
        seen=f"{n.compiles}",
        hint="keep the shape the same",
    )
