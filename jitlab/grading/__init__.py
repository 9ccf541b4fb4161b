"""Checks for graders (``checks``, ``kernel``), recording of a learner's calls
(``calls``), their causes (``causes``) and verdicts for the runner (``verdict``).

The names below load on first use: the runner imports ``jitlab.grading.verdict`` and has
no use for JAX, which the others import (about 0.7 s of every ``jitlab check``).
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "calls": "Call Changed Leaf Recorder changed_arguments reachable_functions recording "
    "same_content type_changes type_text",
    "checks": "BUCKETS_FEW BUCKETS_HOLD JIT_ON Grading GradingFailure Hints as_numbers fail "
    "fail_unless grader is_jitted learner_error shorten wrong_cases",
    "causes": "Called Why jit_options key_of why",
}
_HOME = {name: f"jitlab.grading.{mod}" for mod, names in _NAMES.items() for name in names.split()}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'jitlab.grading' has no attribute {name!r}")
    globals()[name] = value = getattr(importlib.import_module(_HOME[name]), name)
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])
