"""The shared recorder of a learner's calls (``jitlab.grading.calls``).

Every test builds its own jitted functions (with names no other test uses), so no test
depends on what another compiled.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.grading import (
    Recorder,
    changed_arguments,
    reachable_functions,
    recording,
    same_content,
    type_changes,
    type_text,
)
from jitlab.instruments.counting import count_compiles


def make_target(name: str):
    """A fresh jitted function named ``name`` (count_compiles matches by name)."""

    def body(x, scale):
        return x * scale + 1.0

    body.__name__ = body.__qualname__ = name
    return jax.jit(body)


def run(fn, *args, **kwargs):
    return fn(*args, **kwargs)


# ------------------------------------------------------------------ where it rebinds


def test_rebinds_a_module_global_and_puts_it_back():
    # As in a notebook: the wrapper finds the jitted function as a global.
    namespace = {"jax": jax}
    exec(
        "@jax.jit\n"
        "def calls_global_kernel(x):\n"
        "    return x + 1\n"
        "def wrapper(x):\n"
        "    return calls_global_kernel(x)\n",
        namespace,
    )
    target = namespace["calls_global_kernel"]
    with recording(namespace["wrapper"], target) as recorder:
        assert isinstance(namespace["calls_global_kernel"], Recorder)
        out = namespace["wrapper"](np.arange(3.0, dtype=np.float32))
    assert namespace["calls_global_kernel"] is target
    assert len(recorder.calls) == 1
    assert recorder.calls[0].out is out
    np.testing.assert_array_equal(recorder.calls[0].outputs[0], [1.0, 2.0, 3.0])


def test_rebinds_a_closure_cell():
    target = make_target("calls_closure_kernel")

    def wrapper(x):
        return target(x, 2.0)

    with recording(wrapper, target) as recorder:
        assert isinstance(wrapper.__closure__[0].cell_contents, Recorder)
        wrapper(jnp.ones(2))
    assert wrapper.__closure__[0].cell_contents is target
    assert [call.arguments for call in recorder.calls][0].keys() == {"x", "scale"}


def test_rebinds_defaults_and_keyword_defaults():
    target = make_target("calls_default_kernel")

    def by_default(x, step=target):
        return step(x, 2.0)

    def by_keyword_default(x, *, step=target):
        return step(x, 3.0)

    def wrapper(x):
        return by_default(x) + by_keyword_default(x)

    with recording(wrapper, target) as recorder:
        wrapper(jnp.ones(2))
    assert by_default.__defaults__ == (target,)
    assert by_keyword_default.__kwdefaults__ == {"step": target}
    assert [float(call.arguments["scale"]) for call in recorder.calls] == [2.0, 3.0]


def test_follows_helpers_through_closures_partials_methods_and_callable_objects():
    target = make_target("calls_nested_kernel")

    def innermost(x):
        return target(x, 5.0)

    class Model:
        def __call__(self, x):
            return innermost(x)

        def apply(self, x):
            return innermost(x)

    model = Model()
    via_object = functools.partial(run, model)  # a callable object, inside a partial
    via_method = functools.partial(run, model.apply)  # a bound method, inside a partial

    def middle(x):
        return via_object(x) + via_method(x)

    def wrapper(x):
        return middle(x)

    with recording(wrapper, target) as recorder:
        wrapper(jnp.ones(3))
    assert len(recorder.calls) == 2
    assert innermost.__closure__[0].cell_contents is target


def test_follows_helpers_through_globals_into_another_module():
    # The wrapper's module imports a helper; the helper's own module holds the kernel.
    helpers = {"jax": jax}
    exec(
        "@jax.jit\n"
        "def calls_other_module_kernel(x):\n"
        "    return x + 1\n"
        "def helper(x):\n"
        "    return calls_other_module_kernel(x)\n",
        helpers,
    )
    notebook = {"helper": helpers["helper"]}
    exec("def wrapper(x):\n    return helper(x) * 2\n", notebook)
    target = helpers["calls_other_module_kernel"]
    with recording(notebook["wrapper"], target) as recorder:
        assert isinstance(helpers["calls_other_module_kernel"], Recorder)
        notebook["wrapper"](jnp.ones(1))
    assert helpers["calls_other_module_kernel"] is target
    assert len(recorder.calls) == 1


def test_depth_bounds_how_far_helpers_are_followed():
    target = make_target("calls_deep_kernel")

    def deep(x):
        return target(x, 1.0)

    def shallow(x):
        return deep(x)

    assert any(fn is deep for fn in reachable_functions(shallow, target))
    assert not any(fn is deep for fn in reachable_functions(shallow, target, depth=0))
    with recording(shallow, target, depth=0) as recorder:
        shallow(jnp.ones(1))
    assert recorder.calls == []


def test_a_target_held_in_a_list_is_not_seen():
    # The documented limit: only names, cells and defaults are rebound.
    target = make_target("calls_listed_kernel")
    kernels = [target]

    def wrapper(x):
        return kernels[0](x, 1.0)

    with recording(wrapper, target) as recorder:
        wrapper(jnp.ones(1))
    assert recorder.calls == [] and kernels[0] is target


def test_everything_is_put_back_after_an_exception():
    target = make_target("calls_raising_kernel")

    def wrapper(x, *, fail, step=target):
        step(x, 1.0)
        if fail:
            raise RuntimeError("learner's bug")
        return target(x, 1.0)

    with pytest.raises(RuntimeError, match="learner's bug"):
        with recording(wrapper, target) as recorder:
            wrapper(jnp.ones(1), fail=True)
    assert wrapper.__closure__[0].cell_contents is target
    assert wrapper.__kwdefaults__["step"] is target
    assert len(recorder.calls) == 1


def test_a_call_that_raises_is_recorded_as_raised():
    target = make_target("calls_bad_argument_kernel")

    def wrapper(x):
        return target(x)  # scale missing

    with recording(wrapper, target) as recorder:
        with pytest.raises(TypeError):
            wrapper(jnp.ones(1))
    assert [call.raised for call in recorder.calls] == [True]
    assert wrapper.__closure__[0].cell_contents is target


def test_a_name_the_learner_rebinds_meanwhile_stays_rebound():
    namespace = {"jax": jax, "jnp": jnp}
    exec(
        "@jax.jit\n"
        "def swapped_kernel(x):\n"
        "    return x * 2\n"
        "def wrapper(x):\n"
        "    global swapped_kernel\n"
        "    out = swapped_kernel(x)\n"
        "    swapped_kernel = jax.jit(lambda x: x * 3)\n"
        "    return out\n",
        namespace,
    )
    target = namespace["swapped_kernel"]
    with recording(namespace["wrapper"], target):
        namespace["wrapper"](jnp.ones(1))
    replaced = namespace["swapped_kernel"]
    assert replaced is not target and not isinstance(replaced, Recorder)


# ------------------------------------------------------------------ what it records


def test_the_proxy_changes_no_count_and_no_output():
    # The same sequence of calls, on two fresh functions with one body: counted alone,
    # and counted through the recorder. Every count and every output must agree.
    def sequence(fn):
        return [
            fn(np.ones(3, np.float32), 2.0),
            fn(np.ones(3, np.float32), 3.0),  # same types: a cache hit
            fn(np.ones(4, np.float32), 2.0),  # new shape
            fn(np.ones(4, np.float32), np.float32(2.0)),  # weak -> strong scale
            fn(x=np.ones(4, np.float32), scale=2.0),  # by keyword
        ]

    plain = make_target("calls_plain_sequence")
    with count_compiles(plain) as alone:
        want = sequence(plain)

    watched = make_target("calls_watched_sequence")

    def wrapper():
        return sequence(watched)

    with (
        count_compiles(watched) as through,
        recording(wrapper, watched, lambda: through.compiles) as recorder,
    ):
        got = wrapper()

    assert (through.traces, through.compiles) == (alone.traces, alone.compiles)
    assert alone.compiles >= 3
    assert [call.compiled for call in recorder.calls] == [True, False, True, True, True]
    assert sum(call.compiled for call in recorder.calls) == through.compiles
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a, b)


def test_calls_while_another_function_is_traced_are_kept_apart():
    target = make_target("calls_inside_trace_kernel")
    fixed = jnp.ones(2)

    def traced_arguments(x):
        return jax.jit(lambda y: target(y, 2.0))(x)

    def concrete_arguments(x):
        # Concrete inputs, but called while the outer function is traced: the output
        # is a tracer, and nothing was dispatched.
        return jax.jit(lambda y: y + target(fixed, 2.0))(x)

    for wrapper in (traced_arguments, concrete_arguments):
        with count_compiles(target) as count, recording(wrapper, target) as recorder:
            wrapper(jnp.ones(2))
        assert recorder.calls == []
        assert len(recorder.traced) == 1
        assert count.compiles == 0  # inlined into the outer program


def test_a_jitted_wrapper_is_looked_through():
    target = make_target("calls_jitted_wrapper_kernel")

    @jax.jit
    def wrapper(x):
        return target(x, 2.0)

    with recording(wrapper, target) as recorder:
        wrapper(jnp.ones(2))
    assert recorder.calls == [] and len(recorder.traced) == 1


def test_jit_switched_off_inside_the_wrapper_is_seen():
    target = make_target("calls_disabled_kernel")

    def wrapper(x):
        with jax.disable_jit():
            off = target(x, 2.0)
        return off + target(x, 2.0)

    with recording(wrapper, target) as recorder:
        wrapper(jnp.ones(2))
    assert [call.jit_on for call in recorder.calls] == [False, True]


def test_inputs_are_copied_before_the_call():
    target = make_target("calls_copied_kernel")

    def wrapper(x):
        out = target(x, 2.0)
        x[...] = -1.0  # the caller's buffer is reused afterwards
        return out

    x = np.arange(3, dtype=np.float32)
    with recording(wrapper, target) as recorder:
        wrapper(x)
    (call,) = recorder.calls
    assert [leaf.path for leaf in call.inputs] == ["x", "scale"]
    np.testing.assert_array_equal(call.inputs[0].value, [0.0, 1.0, 2.0])
    assert call.inputs[1].type == "~float32[]"


def test_attributes_go_to_the_target():
    target = make_target("calls_attribute_kernel")
    proxy = Recorder(target)
    assert proxy.__name__ == "calls_attribute_kernel"
    assert proxy.lower is not None and proxy.target is target


# ------------------------------------------------------------------ describing calls


def test_type_changes_name_what_changed():
    state = {"w": np.ones(3, np.float32), "avg": None}
    now = {**state, "avg": np.float32(0)}
    assert type_text(0.1) == "~float32[]" and type_text(None) == "None"
    assert type_changes(state, now, name="state") == ["state['avg']: None before, float32[] now"]
    lr = type_changes(0.1, np.float32(1), name="lr", labels=("given", "passed"))
    assert lr == ["lr: ~float32[] given, float32[] passed"]
    assert type_changes(state, state, name="state") == []
    assert type_changes({"a": 1.0}, {"b": 1.0}, name="s", limit=1) == [
        "s['b']: absent before, present now",
        "and 1 more",
    ]


def test_type_changes_see_a_list_for_a_tuple():
    pair = (np.ones(2), np.ones(2))
    assert type_changes(pair, list(pair), name="pair")[0].startswith("containers differ")


def test_same_content_compares_values_not_identities():
    a = {"w": np.array([1.0, np.nan]), "b": None}
    assert same_content(a, {"w": jnp.array([1.0, np.nan]), "b": None})
    assert not same_content(a, {"w": np.array([1.0, 2.0]), "b": None})
    assert not same_content(a, {"w": np.array([1.0, np.nan])})
    assert not same_content((1.0, 2.0), [1.0, 2.0])


def test_changed_arguments_names_a_donation_a_popped_list_a_new_key_and_a_resized_array():
    """One wording of what a learner's code changed of the caller's arguments, for every
    grader: the first change, by the argument's name and path, a donation flagged."""
    params, batches = {"w": jnp.ones(3), "b": jnp.zeros(())}, [(np.ones(2), np.ones(2))] * 2
    before = {"params": jax.tree.map(np.array, params), "batches": jax.tree.map(np.array, batches)}
    assert changed_arguments({"params": params, "batches": batches}, before) == ("", False)

    jax.jit(lambda p: p, donate_argnums=0)(params)
    seen, donated = changed_arguments({"params": params}, before)
    assert donated and seen == "params['b'], params['w'] deleted: donated to a jitted function"

    batches.pop()
    seen, donated = changed_arguments({"batches": batches}, before)
    assert not donated and seen.startswith("batches now holds 1 items, not 2 (popped"), seen

    added = {"w": np.ones(3), "b": np.zeros(()), "step": 1}
    assert (
        "params now has the keys ['b', 'step', 'w']"
        in changed_arguments({"params": added}, before).seen
    )
    resized = {"w": np.ones(4), "b": np.zeros(())}
    assert changed_arguments({"params": resized}, before).seen == (
        "params['w'] was changed in place (shape (3,) before, (4,) after)"
    )
