"""``pytest --jitlab`` and the ``max_compiles`` marker, run on small test files by pytester."""

from __future__ import annotations

import jax
import pytest

from jitlab.doctor import wrap

pytest_plugins = ["pytester"]
REAL_JIT = jax.jit

TESTS = """
import jax, jax.numpy as jnp, pytest

@jax.jit
def train_step(x):
    return x * 2

@pytest.mark.max_compiles(train_step=1)
def test_two_lengths():
    for n in (2, 3):
        train_step(jnp.ones(n))

@pytest.mark.max_compiles(train_step=1)
def test_one_length():
    for _ in range(3):
        train_step(jnp.ones(5))

@pytest.mark.max_compiles(1)
def test_every_function_once():
    train_step(jnp.ones(7))
    train_step(jnp.ones(7, jnp.int32))
"""


@pytest.fixture(autouse=True)
def jit_restored():
    yield
    assert jax.jit is REAL_JIT and not wrap.installed(), "the plugin left jax.jit replaced"


def test_marker_fails_the_test_that_compiles_more_and_says_why(pytester):
    pytester.makepyfile(test_train=TESTS)
    result = pytester.runpytest_inprocess("--jitlab", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*EXCEEDED: train_step=1: train_step (*test_train.py:3) compiled 2 times*",
            "*array types (shape): 1 miss.*",
            "*See lesson 01 shapes*",
            "*train_step(jnp.ones(n))*",
        ]
    )
    result.stdout.fnmatch_lines(["*EXCEEDED: [*]=1: train_step*", "*array types (dtype): 1 miss.*"])
    assert "test_one_length FAILED" not in result.stdout.str()


def test_jitlab_option_adds_the_report_to_the_summary(pytester):
    pytester.makepyfile(test_train=TESTS)
    result = pytester.runpytest_inprocess("--jitlab", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        [
            "*= jitlab doctor =*",
            "*function / defined at*calls*traces*compiles*",
            " 1 train_step *",
            "*Cache-key timeline*",
        ]
    )


def test_marker_without_the_option_counts_by_name_and_says_how_to_learn_why(pytester):
    pytester.makepyfile(test_train=TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-k", "two_lengths")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*EXCEEDED: train_step=1: train_step (not watched) compiled 2 times*",
            "*run pytest with --jitlab to watch jax.jit and name the causes*",
        ]
    )
    assert "jitlab doctor =" not in result.stdout.str()


SUBSET = """
import jax, jax.numpy as jnp

@jax.jit
def forward(x):
    return x * 2

def test_forward():
    forward(jnp.ones(3))

def test_backward():
    @jax.jit  # jitted inside its test: the project's files name it before it runs
    def backward(x):
        return x - 1

    backward(jnp.ones(3))
"""


@pytest.mark.parametrize(
    ("budgets", "selected", "code", "said"),
    [
        # a CI job that selects (-k) or shards the tests: every test passes, so does the run
        ("{forward = 1, backward = 1}", "forward", 0, "not run: backward=1"),
        ("{forward = 1}", "backward", 0, "not run: forward=1"),
        # a misspelt name is still caught, in a subset as in the whole run
        ("{fowrard = 1}", "forward", 1, "the project defines none (a misspelt name?)"),
        ("{fowrard = 1}", "", 1, "the project defines none (a misspelt name?)"),
    ],
)
def test_file_budgets_in_a_subset_of_the_tests(pytester, budgets, selected, code, said):
    pytester.makepyfile(test_model=SUBSET)
    pytester.makefile(".toml", pyproject=f"[tool.jitlab.doctor]\nmax_compiles = {budgets}\n")
    args = ["--jitlab", "-p", "no:cacheprovider"] + (["-k", selected] if selected else [])
    result = pytester.runpytest_inprocess(*args)
    assert result.ret == code, result.stdout.str()
    text = " ".join(result.stdout.str().split())
    assert said in text
    assert "Budgets (from pyproject.toml [tool.jitlab.doctor]):" in text
