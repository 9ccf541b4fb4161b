"""Checks for graders, verdicts for the runner, and recording of a learner's calls to a
jitted function (see ``checks``, ``verdict`` and ``calls``).

The names below load on first use: the runner imports ``jitlab.grading.verdict`` to
read verdicts and has no use for JAX, which ``checks`` and ``calls`` import (about
0.7 s of every ``jitlab check``). Graders, in the kernel, get them as before.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "calls": "Call Leaf Recorder bound_arguments missed_calls reachable_functions recording "
    "same_content type_changes type_text",
    "checks": "BUCKETS_FEW BUCKETS_HOLD JIT_ON GradingFailure Hints call_learner fail "
    "fail_unless fresh_rng grader is_jitted learner_error passed require require_buckets "
    "require_close require_compiles require_jit_on require_jitted shorten",
    "causes": "Called Why jit_options key_of why",
}
_HOME = {
    name: f"jitlab.grading.{module}" for module, names in _NAMES.items() for name in names.split()
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'jitlab.grading' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])


__all__ = sorted(_HOME)
