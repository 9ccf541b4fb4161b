"""What the learner sees after ``✗`` is a check's name: grepping the grader's file, or the
shared checks it uses (``jitlab/grading/checks.py``), for that text finds where it is
checked. A name built from a template (``{kernel} is compiled with jax.jit``) is spelled
out in its grader's docstring."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import jitlab.graders
from jitlab.grading import checks

GRADERS = [m.name for m in pkgutil.iter_modules(jitlab.graders.__path__)]


def grading_functions(module):
    return [
        fn
        for fn in vars(module).values()
        if callable(fn) and hasattr(fn, "checks") and fn.__module__ == module.__name__
    ]


@pytest.mark.parametrize("name", GRADERS)
def test_every_check_is_found_by_grepping_what_the_learner_sees(name):
    module = importlib.import_module(f"jitlab.graders.{name}")
    where = inspect.getsource(module) + inspect.getsource(checks)
    found = grading_functions(module)
    assert found, name
    missing = [check for fn in found for check in fn.checks if check not in where]
    assert not missing, missing
