"""The doctor from Python: signatures, differences, classification, and what it leaves as it
found it. Every test jits its own fresh functions inside its own ``watch()``."""

from __future__ import annotations

import logging
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.doctor import classify, watch, wrap
from jitlab.doctor.recorder import FIRST, MISS

REAL_JIT = jax.jit


@pytest.fixture(autouse=True)
def jit_restored():
    explain = jax.config.jax_explain_cache_misses
    yield
    assert jax.jit is REAL_JIT and not wrap.installed()
    assert jax.config.jax_explain_cache_misses == explain


def test_every_differing_part_is_named():
    with watch() as doctor:

        @partial(jax.jit, static_argnames="mode")
        def everything(batch, scale, mode):
            return batch["x"] * scale

        everything({"x": jnp.ones(3), "w": jnp.ones(3)}, 2.0, mode="train")
        with jax.default_matmul_precision("highest"):
            everything({"x": jnp.ones(4, jnp.int32)}, scale=np.float32(2.0), mode="eval")
    (first, second) = doctor.report().function("everything").misses
    assert (first.kind, second.kind) == (FIRST, MISS)
    named = {(d.part, d.where) for d in second.differences}
    assert named == {
        ("structure", "batch['w']"),
        ("shape", "batch['x']"),
        ("dtype", "batch['x']"),
        ("keyword", "scale"),
        ("weak_type", "scale"),
        ("static", "mode"),
        ("context", "jax_default_matmul_precision"),
    }
    assert second.causes == [
        "shape",
        "dtype",
        "weak_type",
        "pytree_structure",
        "static_argument",
        "context",
    ]
    assert classify.jax_opinion(second.jax_text) == ["context"]  # JAX names one of six


def test_a_new_combination_names_each_equally_close_cause():
    with watch() as doctor:

        @jax.jit
        def combo(x):
            return x + 1

        for dtype, n in ((jnp.float32, 3), (jnp.float32, 4), (jnp.int32, 3), (jnp.int32, 4)):
            combo(jnp.ones(n, dtype))
    last = doctor.report().function("combo").misses[-1]
    assert last.causes == ["shape", "dtype"]  # f32[4] and i32[3] both differ in one part
    assert {last.compared_with, last.also_close[0][0]} == {2, 3}


def test_grad_of_a_jitted_function_is_not_a_recompilation():
    with watch() as doctor:

        @jax.jit
        def potential(x):
            return jnp.sum(x**2)

        potential(jnp.ones(3))
        jax.grad(potential)(jnp.ones(3))
    record = doctor.report().function("potential")
    assert record.compiles == 1 and record.recompiles == []
    assert record.transformed_compiles == 2  # forward inside the call, backward after it


def test_functions_jitted_before_the_watch_are_counted_by_name():
    @jax.jit
    def jitted_before(x):
        return x - 1

    with watch(["jitted_before=1"]) as doctor:
        jitted_before(jnp.ones(2))
        jitted_before(jnp.ones(5))
    report = doctor.report()
    (other,) = [u for u in report.unwatched if u.name == "jitted_before"]
    assert other.compiles == 2
    assert [v.status for v in report.verdicts] == ["exceeded"]


def test_results_are_unchanged():
    def body(x, n):
        return jnp.cumsum(x) * n

    plain = jax.jit(body, static_argnums=1)
    expected = [np.asarray(plain(jnp.arange(k, dtype=jnp.float32), k)) for k in (3, 4)]
    with watch():
        watched = jax.jit(body, static_argnums=1)
        assert watched is not plain and watched.__wrapped__ is body
        got = [np.asarray(watched(jnp.arange(k, dtype=jnp.float32), k)) for k in (3, 4)]
        lowered = watched.lower(jnp.ones(3), 3)  # the real jitted function's methods
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_array_equal(a, b)
    assert "cumsum" in lowered.as_text()


def test_a_jitted_method_binds_as_the_real_one_does():
    with watch():

        class Model:
            scale = 3.0

            @partial(jax.jit, static_argnums=0)
            def apply(self, x):
                return x * self.scale

        assert float(Model().apply(jnp.ones(()))) == 3.0


def test_explanations_stay_off_stderr_unless_someone_listens(capsys):
    with watch() as doctor:

        @jax.jit
        def quiet(x):
            return x * 2

        quiet(jnp.ones(2))
        quiet(jnp.ones(3))
    assert "TRACING CACHE MISS" not in capsys.readouterr().err
    assert "different input types" in doctor.report().function("quiet").misses[1].jax_text

    heard = []

    class Listener(logging.Handler):
        def emit(self, record):
            heard.append(record.getMessage())

    listener = Listener()
    logging.getLogger("jax").addHandler(listener)
    try:
        with watch():

            @jax.jit
            def heard_fn(x):
                return x * 2

            heard_fn(jnp.ones(2))
    finally:
        logging.getLogger("jax").removeHandler(listener)
    assert any("TRACING CACHE MISS" in text for text in heard)


@pytest.mark.parametrize(
    ("text", "causes"),
    [
        ("never seen function:\n    f id=1 defined at a.py:1", ["function"]),
        (
            "Tracing context doesn't match, e.g. due to config or context manager.\n"
            "  * jax_default_matmul_precision differs: now highest and before None",
            ["context"],
        ),
        ("different input pytree:\n  * at input path [0][1], now ...", ["pytree_structure"]),
        ("different input types:\n  * at x, now f32[4] and before f32[3]", ["shape"]),
        ("different input types:\n  * at x, now i32[3] and before f32[3]", ["dtype"]),
        (
            "different input types:\n  * at s, now f32[]{weak_type=False} and before "
            "f32[]{weak_type=True}https://docs.jax.dev/en/latest/101/type_promotion.html",
            ["weak_type"],
        ),
        (
            "different input types:\n  * at x, now f32[4@rows,2]({Explicit: ('rows',)}) and "
            "before f32[4,2]({Explicit: ('rows',)})",
            ["shardings"],
        ),
        (  # JAX 0.12.0.1's text for a replicated array on an Explicit mesh, after a plain one
            "different input types:\n  * at x, now i32[4]({Explicit: ('device',)}) and before "
            "i32[4]({})",
            ["shardings"],
        ),
        (
            "different input types:\n  * at x, now i32[]({Explicit: ('device',)}) and before "
            "i32[3]({})",
            ["shape"],
        ),
        ("all previously seen cache keys differ. ...\n  cache miss explanation unavailable", []),
        (None, []),
    ],
)
def test_reading_jax_explanations(text, causes):
    assert classify.jax_opinion(text) == causes


def _compile_counter(name):
    seen = []

    def listen(event, seconds, **kwargs):
        if event.endswith("backend_compile_duration") and kwargs.get("fun_name") == name:
            seen.append(seconds)

    return seen, listen


def test_watching_keeps_nothing_alive_so_caching_is_unchanged():
    """A bound method jitted per call compiles every time, because jit's cache entry dies
    with the method object. If the doctor kept those objects alive, the cache would hit
    and the doctor would change what it measures."""

    class Model:
        def forward_unwatched(self, x):
            return x * 2

        def forward_watched(self, x):
            return x * 2

    model = Model()
    counts = {}
    for name, watching in (("forward_unwatched", False), ("forward_watched", True)):
        seen, listen = _compile_counter(f"jit({name})")
        jax.monitoring.register_event_duration_secs_listener(listen)
        try:
            if watching:
                with watch() as doctor:
                    for _ in range(3):
                        jax.jit(getattr(model, name))(jnp.ones(3))
            else:
                for _ in range(3):
                    jax.jit(getattr(model, name))(jnp.ones(3))
        finally:
            jax.monitoring.unregister_event_duration_listener(listen)
        counts[name] = len(seen)
    assert counts["forward_watched"] == counts["forward_unwatched"] == 3
    assert doctor.report().causes("forward_watched") == {"function": 2}


def test_a_function_jitted_under_watch_can_be_freed():
    import weakref

    with watch():

        def scratch(x):
            return x + 1

        ref = weakref.ref(scratch)
        jax.jit(scratch)(jnp.ones(2))
        jax.jit(scratch)(jnp.ones(3))
        del scratch
        assert ref() is None  # freed by reference counting, no garbage collection needed


def test_two_classes_with_one_name_are_two_structures():
    """A namedtuple class made per call: the same name every time, another type every
    time. JAX compares node types by identity; so must the doctor."""
    import collections

    Once = collections.namedtuple("Once", ["x"])

    def per_call(x):
        return collections.namedtuple("PerCall", ["x"])(x)

    with watch() as doctor:

        @jax.jit
        def read_x(batch):
            return batch.x + 1

        for _ in range(2):
            read_x(Once(jnp.ones(2)))  # one class: one compilation
        for _ in range(2):
            read_x(per_call(jnp.ones(2)))  # a new class each call
    record = doctor.report().function("read_x")
    assert record.compiles == 3
    assert [m.causes for m in record.recompiles] == [["pytree_structure"], ["pytree_structure"]]
    (difference,) = record.recompiles[-1].differences
    assert difference.where == "batch" and "another class, same name" in difference.now


def test_a_subtree_that_replaces_none_is_one_difference():
    """None, then a dict of three arrays: one structure difference at the node, not one
    more per new leaf (lesson 11's momentum state)."""
    with watch() as doctor:

        @jax.jit
        def carry(state):
            return state["avg"] + 1

        carry({"avg": jnp.zeros(()), "velocity": None})
        carry({"avg": jnp.zeros(()), "velocity": {"a": jnp.ones(2), "b": jnp.ones(3)}})
    (miss,) = doctor.report().function("carry").recompiles
    assert [(d.part, d.where) for d in miss.differences] == [("structure", "state['velocity']")]


def test_a_retrace_that_finds_the_compiled_program_is_not_a_compilation():
    def bump(x):
        return x + 1

    with watch(["bump=1"]) as doctor:
        jax.jit(bump)(3)  # traced and compiled for a weak int32 scalar
        jax.jit(bump)(jnp.asarray(3))  # traced again; the same program is found
    report = doctor.report()
    record = report.function("bump")
    assert (record.compiles, len(record.retraces), record.recompiles) == (1, 1, [])
    assert record.retraces[0].compiles == 0 and record.retraces[0].traces == 1
    assert report.budgets_passed and report.causes("bump") == {}
    assert "1 retrace that found a compiled program" in " ".join(report.text().split())


def test_numbers_agree_for_a_function_also_called_inside_another_jit():
    with watch() as doctor:

        @jax.jit
        def inner(x):
            return x * 2

        @jax.jit
        def outer(x):
            for _ in range(10):
                x = inner(x)
            return x

        outer(jnp.ones(2, jnp.int32))  # inner traced inside outer (int32), ten calls
        inner(jnp.ones(3))  # inner's first compilation: a direct call (float32)
        inner(jnp.ones(4))  # a recompilation: compared with the compilation, not the trace
    record = doctor.report().function("inner")
    assert (record.calls, record.nested_calls) == (2, 10)
    assert record.compiles == 2 and len(record.recompiles) == 1
    assert record.recompiles[0].causes == ["shape"]  # not "dtype" from the int32 trace
    text = doctor.report().text()
    assert "2 compilations, 1 cache miss after the first" in text
    assert "   timeline      1 \n" in text  # two columns: one per compilation


def test_ahead_of_time_compilations_are_compilations_and_calls_compare_with_them():
    with watch(["warm=4"]) as doctor:

        @jax.jit
        def warm(x):
            return x * 2

        for n in (2, 3):
            warm.lower(jax.ShapeDtypeStruct((n,), jnp.int32)).compile()
        warm(jnp.ones(2, jnp.int32))  # found: compiled ahead of time
        warm(np.ones(3, np.uint8))  # a miss: uint8 meets the int32 programs
        lowered_only = warm.lower(jnp.ones(7))  # lowered, never compiled: not a compilation
    assert "tensor<7xf32>" in lowered_only.as_text()
    record = doctor.report().function("warm")
    assert (record.compiles, record.aot_compiles, record.calls) == (3, 2, 2)
    assert [m.causes for m in record.recompiles] == [["dtype"]]
    assert doctor.report().budgets_passed


def evaluate_twice(x):
    """A function named eval..., whose own jitted lambda compiles twice."""
    for n in (2, 3):
        jax.jit(lambda v: v * 2)(jnp.ones(n))
    return jax.jit(evaluation_step)(x)


def evaluation_step(x):
    return x.sum()


def test_a_budget_pattern_matches_names_and_qualified_names_only_when_asked():
    with watch(["eval*=1", "evaluate_twice.*=1", "<lambda>=2"]) as doctor:
        evaluate_twice(jnp.ones(3))
    eval_star, qualified, lam = doctor.report().verdicts
    assert [name for name, _, _ in eval_star.counts] == ["evaluation_step"]  # not the lambda
    assert eval_star.status == "ok"
    assert [(name, n) for name, _, n in qualified.counts] == [("<lambda>", 2)]
    assert qualified.status == "exceeded"  # the qualified name evaluate_twice.<locals>.<lambda>
    assert lam.status == "ok"


def test_the_fast_path_hook_is_measured_and_removed():
    from jax._src import pjit  # the private hook the doctor wraps while it watches

    before = (pjit._infer_params, pjit._get_fastpath_data)
    with watch() as doctor:
        assert pjit._infer_params is not before[0]

        @jax.jit
        def tick(x):
            return x + 1

        x = jnp.ones(2)
        for _ in range(4):
            tick(x)
        tick(np.ones(2, np.float32))  # a first NumPy call runs through Python once
    assert (pjit._infer_params, pjit._get_fastpath_data) == before
    assert not wrap.FASTPATH_UNAVAILABLE
    record = doctor.report().function("tick")
    assert (record.calls, record.warm_calls, record.python_calls) == (5, 4, 1)
    assert record.python_reasons == {"NumPy inputs": 1}


PERSISTENT_INSIDE_COUNT = """
import sys, tempfile, jax, jax.numpy as jnp
jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp())
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
from jitlab.doctor import watch
from jitlab.doctor.report import render
from jitlab.instruments.counting import count_compiles
with count_compiles(None):  # its filter sees the persistent cache's misses first
    with watch() as doctor:
        f = jax.jit(lambda x: x * 2 + 1)
        f(jnp.ones(3)); f(jnp.ones(4))
print(render(doctor.report()))
"""


def test_persistent_misses_reach_the_doctor_inside_a_count_compiles_block():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", PERSISTENT_INSIDE_COUNT],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    assert "persistent cache: 0 hits, 2 misses, 2 written" in " ".join(done.stdout.split())
