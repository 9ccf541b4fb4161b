"""Checks for graders, and verdicts for the runner (see ``checks`` and ``verdict``)."""

from jitlab.grading.checks import (
    GradingFailure,
    all_passed,
    call_learner,
    fail,
    fresh_rng,
    grader,
    is_jitted,
    passed,
    require,
    require_buckets,
    require_close,
    require_compiles,
    require_jit_on,
    require_jitted,
    shorten,
)

__all__ = [
    "GradingFailure",
    "all_passed",
    "call_learner",
    "fail",
    "fresh_rng",
    "grader",
    "is_jitted",
    "passed",
    "require",
    "require_buckets",
    "require_close",
    "require_compiles",
    "require_jit_on",
    "require_jitted",
    "shorten",
]
