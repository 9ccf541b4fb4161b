"""The frame's adapter to the doctor's cause engine (``jitlab.grading.causes``).

Every test builds its own jitted function, so no test depends on what another compiled.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.doctor import classify
from jitlab.grading import Grading, GradingFailure, Recorder, jit_options, recording, why
from jitlab.instruments.counting import count_compiles


def recorded(kernel, calls):
    """Call ``kernel`` through a recorder for each (args, kwargs); the recorder."""

    def wrapper(args, kwargs):
        return kernel(*args, **kwargs)

    kernel.clear_cache()
    with (
        count_compiles(kernel, explain=False) as count,
        recording(wrapper, kernel, lambda: count.compiles) as recorder,
    ):
        for args, kwargs in calls:
            wrapper(args, kwargs)
    return recorder


def fresh(name, static=(), **options):
    def body(x, n=1.0, *, scale=1.0):
        return x * n * scale

    body.__name__ = body.__qualname__ = name
    return jax.jit(body, static_argnums=static, **options)


ROWS = np.ones((37, 8), np.float32)

CASES = {
    # name: (calls, the cause id, words the text must contain)
    "shape": (
        [((ROWS,), {}), ((np.ones((29, 8), np.float32),), {})],
        classify.SHAPE,
        "x: f32[29,8] now, f32[37,8] before (shape)",
    ),
    "dtype": (
        [((ROWS,), {}), ((ROWS.astype(np.int32),), {})],
        classify.DTYPE,
        "x: i32[37,8]",
    ),
    "weak type": (
        [((ROWS, np.float32(2)), {}), ((ROWS, 2.0), {})],
        classify.WEAK_TYPE,
        "n: ~f32[]",
    ),
    "keyword": (
        [((ROWS, np.float32(2)), {}), ((ROWS,), {"n": np.float32(3)})],
        classify.PYTREE,
        "n: keyword now, positional before",
    ),
    "pytree": (
        [(({"a": ROWS},), {}), (({"a": ROWS, "b": ROWS},), {})],
        classify.PYTREE,
        "x['b']: an array f32[37,8] now, absent before",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_names_the_cause_and_the_argument(case):
    calls, cause, words = CASES[case]
    body = (lambda x, n=1.0: jax.tree.map(lambda a: a * n, x)) if case == "pytree" else None
    kernel = jax.jit(body) if body else fresh(f"causes_{case.replace(' ', '_')}")
    found = why(recorded(kernel, calls))
    assert found and found.causes == (cause,), found
    assert words in found.text and found.text.startswith("call 2: "), found.text
    assert classify.CAUSES[cause].fix in found.hint


def test_a_static_value_is_read_from_jax_jit_and_named():
    kernel = fresh("causes_static", static=(1,))
    assert jit_options(kernel) == {"static_argnums": (1,), "static_argnames": ("n",)}
    found = why(recorded(kernel, [((ROWS, 2.0), {}), ((ROWS, 3.0), {}), ((ROWS, 2.0), {})]))
    assert found.causes == (classify.STATIC_VALUE,)
    assert len(found.recompiles) == 1  # the third call hit the cache
    assert "n: 3.0 (float) now, 2.0 (float) before (static value)" in found.text


def test_static_arguments_can_be_given_where_jit_cannot_be_read():
    kernel = fresh("causes_given")
    calls = [((ROWS, 2.0), {}), ((ROWS, np.float32(3.0)), {})]
    recorder = recorded(kernel, calls)
    assert why(recorder).causes == (classify.WEAK_TYPE,)
    assert why(recorder, kernel, static_argnums=(1,)).causes == (classify.STATIC_VALUE,)


def test_each_compile_is_compared_with_earlier_compiles_only():
    kernel = fresh("causes_earlier")
    small, big = np.ones((3, 2), np.float32), np.ones((5, 2), np.float32)
    calls = [((small,), {}), ((small,), {}), ((big,), {}), ((small.astype(np.int32),), {})]
    found = why(recorded(kernel, calls), label=lambda i: f"batch {i}")
    assert [(r.index, r.against) for r in found.recompiles] == [(2, 0), (3, 0)]
    assert found.causes == (classify.SHAPE, classify.DTYPE)
    assert "batch 2: x: f32[5,2] now, f32[3,2] before" in found.text
    assert found.hint_for({"dtype": "cast first", "shape": "pad"}) == "pad. Also: cast first"


def test_a_clean_run_compiles_once_and_has_no_cause():
    kernel = fresh("causes_clean")
    found = why(recorded(kernel, [((ROWS,), {})] * 3))
    assert not found and found.text == "" and found.causes == ()


def test_a_cleared_cache_is_a_compile_with_no_difference():
    kernel = fresh("causes_cleared")

    def wrapper(x):
        kernel.clear_cache()
        return kernel(x)

    with (
        count_compiles(kernel, explain=False) as count,
        recording(wrapper, kernel, lambda: count.compiles) as recorder,
    ):
        wrapper(ROWS)
        wrapper(ROWS)
    found = why(recorder)
    assert found.causes == (classify.UNKNOWN,)
    assert "the same signature as call 1" in found.text
    assert found.hint_for({"again": "do not clear the cache"}) == "do not clear the cache"


def test_a_look_alike_of_jit_is_described_too():
    class LooksJitted:
        def __call__(self, x):
            return x

    counter = iter(range(100))
    recorder = Recorder(LooksJitted(), lambda: next(counter))  # every call "compiles"
    recorder(ROWS)
    recorder(ROWS[:3])
    assert why(recorder).causes == (classify.SHAPE,)


# ------------------------------------------------------- exceptions from the learner


def _lookup(table, n):
    return table[n]


def _donated():
    step = jax.jit(lambda x: x + 1, donate_argnums=0)
    x = jnp.ones(3)
    step(x)
    return x + 1  # x was donated


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: _lookup({16: 1}, 224), "KeyError: 224", "no entry for 224"),
        (lambda: _lookup([1, 2], 5), "IndexError", "loop bound"),
        (_donated, "RuntimeError", "donated"),
        (jax.jit(lambda x: 1 if x > 0 else 0), "TracerBoolConversionError", "jnp.where"),
        (lambda: jax.jit(np.asarray)(jnp.ones(2)), "TracerArrayConversionError", "jax.numpy"),
    ],
)
def test_an_exception_names_the_learners_line_and_a_hint_for_it(call, error, words):
    with pytest.raises(GradingFailure) as info:
        Grading("toy", ()).call_learner("it runs", call, *([1.0] if "Bool" in error else []))
    failure = info.value
    assert failure.seen.startswith(error) and words in failure.hint, failure
    assert "test_causes.py:" in failure.seen  # the learner's line, not jax's
