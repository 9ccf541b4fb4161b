"""count_compiles counts the function under study, and only it."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest

from jitlab import count_compiles
from jitlab.instruments import events
from jitlab.instruments.counting import CounterLost, function_name
from jitlab.instruments.explanations import EXPLANATION_LOGGERS


def test_three_shapes_through_jnp_ones_are_three_compilations_of_f_not_six():
    @jax.jit
    def f_shapes(x):
        return x * 2

    # Start from empty caches, so what other tests compiled before cannot change the count
    # (jnp.ones(11) compiled earlier in the process would be a cache hit here).
    jax.clear_caches()
    jnp.ones(2)  # the first jnp.ones after a clear also compiles a dtype conversion
    with count_compiles(f_shapes) as n, count_compiles(None) as everything:
        for size in (11, 12, 13):
            f_shapes(jnp.ones(size))
    assert (n.traces, n.compiles) == (3, 3)
    assert everything.compiles == 6  # jnp.ones compiled a broadcast per new size


def test_same_shape_new_values_is_a_cache_hit():
    @jax.jit
    def f_values(x):
        return x + 1

    f_values(jnp.zeros(4))
    with count_compiles(f_values) as n:
        f_values(jnp.arange(4.0))
    assert n.compiles == 0 and n.explanations == []


def test_weak_type_python_scalar_then_strong_scalar_retraces():
    @jax.jit
    def f_weak(x):
        return x * 2

    with count_compiles(f_weak) as n:
        f_weak(3)
        f_weak(3)
        f_weak(jnp.int32(3))
    assert n.compiles == 2
    assert "weak_type=True" in n.explanations[-1]


def test_keyword_then_positional_retraces_and_is_explained():
    @jax.jit
    def f_kw(x):
        return x - 1

    with count_compiles(f_kw) as n:
        f_kw(jnp.ones(2))
        f_kw(x=jnp.ones(2))
    assert n.compiles == 2
    assert "different input pytree" in n.explanations[-1]


def test_explanations_name_the_shapes_and_are_scoped():
    @jax.jit
    def f_explained(x):
        return x

    @jax.jit
    def other(x):
        return x

    with count_compiles(f_explained) as n:
        f_explained(jnp.ones(3))
        f_explained(jnp.ones(5))
        other(jnp.ones(7))
    assert len(n.explanations) == 2
    assert "never seen function" in n.explanations[0]
    assert "f32[5]" in n.explanations[1] and "f32[3]" in n.explanations[1]
    assert all("other" not in text for text in n.explanations)


def test_switching_explanations_on_does_not_itself_retrace():
    @jax.jit
    def f_toggle(x):
        return x

    f_toggle(jnp.ones(3))
    with count_compiles(f_toggle, explain=True) as n:
        f_toggle(jnp.ones(3))
    assert n.traces == 0


def test_stage_times_are_recorded():
    @jax.jit
    def f_times(x):
        return jnp.sin(x)

    with count_compiles(f_times) as n:
        f_times(jnp.ones(3))
    assert n.lowerings == 1
    assert n.trace_seconds > 0 and n.compile_seconds > 0
    assert n.total_seconds >= n.compile_seconds
    assert "1 compilation(s)" in str(n)


def test_listener_is_removed_after_the_block():
    @jax.jit
    def f_after(x):
        return x

    with count_compiles(f_after) as n:
        pass
    f_after(jnp.ones(9))
    assert n.compiles == 0


def _jax_duration_listeners() -> list:
    from jax._src import monitoring  # private: only to count what is registered

    return list(monitoring.get_event_duration_listeners())


def test_counters_and_the_doctor_share_one_jax_listener_and_each_hears_every_event():
    @jax.jit
    def f_shared(x):
        return x * 3

    before = _jax_duration_listeners()
    events.start()
    try:
        mark = len(events.STREAM)
        with count_compiles(f_shared) as outer, count_compiles(f_shared) as inner:
            assert len(_jax_duration_listeners()) == len(before) + 1
            f_shared(jnp.ones(5))
        heard = [e.kind for e in events.STREAM[mark:] if e.name in ("f_shared", "jit(f_shared)")]
    finally:
        events.stop()
    assert outer.compiles == inner.compiles == 1 and heard.count("compile") == 1
    assert _jax_duration_listeners() == before


def test_a_counter_whose_listener_was_removed_says_so_and_so_does_the_one_around_it():
    @jax.jit
    def f_lost(x):
        return x - 1

    from jax._src import monitoring  # private getters: to put back what was registered

    kinds = ("event", "event_duration_secs", "event_time_span", "scalar")
    kept = {
        k: list(getattr(monitoring, f"get_{k.removesuffix('_secs')}_listeners")()) for k in kinds
    }
    try:
        with pytest.raises(CounterLost), count_compiles(f_lost):  # the outer counter
            with pytest.raises(CounterLost), count_compiles(f_lost):
                jax.monitoring.clear_event_listeners()  # public: what a cheat calls
                f_lost(jnp.ones(3))
    finally:
        for kind, listeners in kept.items():  # what other code of this process registered
            for listener in listeners:
                getattr(jax.monitoring, f"register_{kind}_listener")(listener)
    with count_compiles(f_lost) as n:  # the next counter hears again
        f_lost(jnp.ones(4))
    assert n.compiles == 1


def test_function_name_unwraps_jit_and_partial():
    def g(x, a):
        return x * a

    assert function_name(jax.jit(g)) == "g"
    assert function_name(functools.partial(g, a=2)) == "g"
    assert function_name(jax.jit(functools.partial(g, a=2))) == "g"
    assert function_name("name") == "name"


def test_last_reason_is_one_line_saying_what_differed():
    @jax.jit
    def f_reason(x):
        return x

    with count_compiles(f_reason) as n:
        assert n.last_reason == "-"
        f_reason(jnp.ones(3))
        assert n.last_reason == "never seen function (a new function object)"
        f_reason(jnp.ones(4))
    assert "\n" not in n.last_reason
    assert n.last_reason.startswith("different input types")
    assert "f32[4]" in n.last_reason and "f32[3]" in n.last_reason


# What count_compiles cannot see (the module docstring lists these; lesson 00 says them).


def test_an_inner_jitted_function_has_no_events_but_its_explanations_are_kept():
    @jax.jit
    def limit_inner(x):
        return x * 2

    @jax.jit
    def limit_outer(x):
        return limit_inner(x) + 1

    with count_compiles(limit_inner) as inner, count_compiles(limit_outer) as outer:
        limit_outer(jnp.ones(3))
        limit_outer(jnp.ones(4))
    assert (outer.traces, outer.compiles) == (2, 2)
    assert (inner.traces, inner.compiles) == (0, 0)
    assert len(inner.explanations) == 2 and "limit_inner" in inner.explanations[-1]


def test_transforms_of_a_jitted_function_count_as_its_compilations():
    @jax.jit
    def limit_transformed(x):
        return jnp.sin(x).sum()

    with count_compiles(limit_transformed) as n:
        limit_transformed(jnp.ones(3))
        jax.grad(limit_transformed)(jnp.ones(3))
        jax.vmap(limit_transformed)(jnp.ones((2, 3)))
    assert n.traces == 1  # one call of the function itself missed its cache
    assert n.compiles > n.traces  # grad and vmap compiled programs named jit(f) as well


def test_pmap_is_not_seen_by_name():
    def limit_pmapped(x):
        return x * 3

    with count_compiles(limit_pmapped) as n, count_compiles(None) as everything:
        jax.pmap(limit_pmapped)(jnp.ones((1, 3)))
    assert (n.traces, n.compiles) == (0, 0)
    assert everything.compiles >= 1


def test_a_callable_object_is_counted_under_jaxs_unnamed_name():
    class LimitCallable:
        def __call__(self, x):
            return x + 1

    jitted = jax.jit(LimitCallable())
    assert function_name(jitted) == "<unnamed function>"
    with count_compiles(jitted) as n:
        jitted(jnp.ones(2))
    assert n.compiles == 1


def test_explanations_survive_an_application_that_silenced_jax(caplog):
    import logging

    logger = logging.getLogger("jax")
    before = logger.level
    logger.setLevel(logging.ERROR)
    try:

        @jax.jit
        def limit_silenced(x):
            return x

        child = logging.getLogger(EXPLANATION_LOGGERS[0])
        with count_compiles(limit_silenced) as n:
            limit_silenced(jnp.ones(2))
            limit_silenced(jnp.ones(3))
            during = (logger.level, child.level)
        assert n.compiles == 2 and len(n.explanations) == 2
        assert during == (logging.ERROR, logging.WARNING)  # JAX's child opened, not jax
        assert child.level == logging.NOTSET  # and put back
    finally:
        logger.setLevel(before)


def test_functions_defined_inside_jax_get_no_explanation():
    jax.clear_caches()
    with count_compiles(None) as n:  # every function: here only jnp's own helpers
        jnp.ones(1013)
    assert n.compiles >= 1  # jnp.ones compiled a program of its own...
    assert n.explanations == []  # ...which JAX does not explain: it is not user code


@pytest.mark.parametrize("library_function", [jnp.sum, jnp.ravel, jax.nn.relu])
def test_jax_s_own_python_functions_get_no_explanation(library_function):
    jitted = jax.jit(library_function)
    with count_compiles(None) as every, count_compiles(jitted) as n:
        jitted(jnp.ones(6))
        jitted(jnp.ones(7))
    assert n.traces == 2
    assert every.explanations == []  # JAX gave none: the counter dropped nothing


def test_an_unknown_explanation_is_kept_for_the_function_counted_and_no_other():
    """jnp.maximum and jnp.add are ufunc objects without a source file on 0.12: JAX
    explains both as <unknown>; each count keeps its own function's, by identity."""
    maximum, add = jax.jit(jnp.maximum), jax.jit(jnp.add)
    with count_compiles(maximum) as n_max, count_compiles(add) as n_add:
        maximum(jnp.ones(4), 0.0)
        add(jnp.ones(4), 0.0)
        maximum(jnp.ones(5), 0.0)
    assert n_max.traces == 2 and len(n_max.explanations) == 2, n_max.explanations
    assert all("<unknown>" in text for text in n_max.explanations)
    assert "now f32[5] and before f32[4]" in n_max.last_reason
    assert n_add.traces == 1 and len(n_add.explanations) == 1, n_add.explanations
    with count_compiles("maximum") as by_name:  # a name cannot say whose <unknown> it is
        maximum(jnp.ones(6), 0.0)
    assert by_name.traces == 1 and by_name.explanations == []


def test_a_callable_object_s_unknown_explanations_are_kept():
    class Offset:
        def __call__(self, x):
            return x + 1

    jitted = jax.jit(Offset())
    with count_compiles(jitted) as n:
        jitted(jnp.ones(2))
        jitted(jnp.ones(3))
    assert n.traces == 2 and len(n.explanations) == 2, n.explanations


def test_counting_every_function_names_what_was_compiled():
    @jax.jit
    def named_in_the_count(x):
        return x + 1

    with count_compiles(None) as n:
        named_in_the_count(jnp.ones(5))
    assert n.compiled["jit(named_in_the_count)"] == 1
    assert sum(n.compiled.values()) == n.compiles


def test_a_jitted_functions_name_is_what_jax_traces_not_its_wrapped():
    """``__wrapped__`` can be set to another function, or to an object whose class
    computes ``__name__`` (strict-mode cheats): the counter reads the function JAX traces."""

    class Named:
        reads = 0

        @property
        def __name__(self):
            Named.reads += 1
            return "f" if Named.reads != 2 else "not_f"

    def f(x):
        return x

    def decoy(x):
        return x

    jitted = jax.jit(f)
    for swapped in (decoy, Named()):
        jitted.__wrapped__ = swapped
        assert function_name(jitted) == "f"
        with count_compiles(jitted) as n:
            jitted(jnp.ones(3))
        assert n.compiles == 1
        jitted.clear_cache()


def test_a_library_module_s_own_lookup_does_not_stop_the_count():
    # Equinox's Module defines __getattribute__ (lesson 13 counts a function wrapped in
    # eqx.debug.assert_max_traces): a library's class answers the same name every time
    import equinox as eqx

    def fixed_step(x):
        return x + 1

    guarded = eqx.filter_jit(eqx.debug.assert_max_traces(fixed_step, max_traces=1))
    assert function_name(guarded) == "fixed_step"  # as lesson 13 counts it


def test_a_function_renamed_for_a_call_is_still_counted():
    """JAX names each event by ``__name__`` as it is when the call misses: a rename for
    the call (and back inside the trace) must not hide a compilation. The counter knows
    the function JAX traces by identity, from jit's own tracing frame."""

    @jax.jit
    def f_renamed(x):
        inner.__name__ = jitted.__name__ = "f_renamed"  # back before anyone reads it
        return x * 2

    jitted, inner = f_renamed, f_renamed.__wrapped__
    with count_compiles(f_renamed) as n:
        f_renamed(jnp.ones(2))
        for size, name in ((3, "hidden"), (4, "also_hidden")):
            inner.__name__ = jitted.__name__ = name
            f_renamed(jnp.ones(size))
    assert n.compiles == 3 and n.aliases == {"hidden", "also_hidden"}
