"""Every private hook of JAX (and of Equinox) that the doctor, or
``jitlab.instruments.explanations``, relies on: one test each, named after the hook.

Where JAX has no public hook for a layer of its caches, the doctor uses the narrowest
private one, guarded, so that a JAX without it degrades the report instead of breaking
the program. Guarded means silent, though: a release that renames a logger would leave the
doctor's report quietly poorer. These tests are what makes it loud. Each checks, on the
running JAX, that one hook is still there *and still means what the doctor reads it as*,
and fails with a message naming the hook. ``jitlab dev matrix`` runs this file under every
release it tests (``jitlab.maintainer.matrix.run_private_hooks``).

The hooks, by layer:

- the fast path: ``jax._src.pjit._infer_params`` and ``_get_fastpath_data`` (wrapped while
  the doctor watches), and ``executable.unsafe_call.ordered_effects`` /
  ``has_unordered_effects`` (why a call has no fast path);
- jitted functions: ``PjitFunction._cache_size`` and ``_fun`` (the guard, the wrapper), and
  an instance attribute ``compile`` on ``jax.stages.Lowered`` (ahead-of-time compilations);
- the tracing cache: the loggers ``jax._src.interpreters.partial_eval`` / ``jax._src.pjit``
  and the wording of their explanation; ``jax._src.config.trace_context_names`` (the
  configuration names in jit's key, copied into ``signature.CONTEXT_NAMES``);
- the persistent cache: the loggers ``jax._src.compiler`` / ``jax._src.compilation_cache``
  and their texts, the event ``/jax/compilation_cache/cache_retrieval_time_sec``, and the
  debug lines of ``jax._src.cache_key``;
- ``jax.monitoring``'s event names and their ``fun_name``, and how many frames it puts
  between JAX's compile and the doctor's listener (``recorder._site_of_event``);
- the jaxpr a jit lowers: ``jax._src.jaxpr_util.maybe_dump_jaxpr_to_file`` (wrapped while
  the doctor watches; the busiest source lines of a slow compilation), read with
  ``jax._src.core.jaxprs_in_params`` and ``jax._src.source_info_util.user_frame``;
- Equinox: ``eqx.filter_jit`` jits its own ``fun_wrapped`` (``equinox/_jit.py``) and calls
  it as ``(dynamic_donate, dynamic_nodonate, static)``.
"""

from __future__ import annotations

import inspect
import json
import logging
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

from jitlab.doctor import classify, watch, wrap
from jitlab.instruments import events, explanations
from jitlab.instruments import signature as sig


def _private(module: str, name: str):
    """``module.name``, or a failure that names the hook."""
    try:
        found = __import__(module, fromlist=[name])
    except ImportError as err:
        pytest.fail(f"private hook {module} is gone ({err})")
    if not hasattr(found, name):
        pytest.fail(f"private hook {module}.{name} is gone")
    return getattr(found, name)


class _Heard(logging.Filter):
    """Keeps (logger, text) of every record the loggers it is put on see."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[str, str]] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append((record.name, record.getMessage()))
        return False


@pytest.fixture
def explanations_heard():
    """Every record of the explanation loggers while jax_explain_cache_misses is on."""
    heard = _Heard()
    loggers = [logging.getLogger(n) for n in explanations.EXPLANATION_LOGGERS]
    for logger in loggers:
        logger.addFilter(heard)
    before = jax.config.jax_explain_cache_misses
    jax.config.update("jax_explain_cache_misses", True)
    try:
        yield heard.records
    finally:
        jax.config.update("jax_explain_cache_misses", before)
        for logger in loggers:
            logger.removeFilter(heard)


# ---------------------------------------------------------------------------------------
# The fast path


def test_hook_pjit_infer_params(monkeypatch):
    hook = "jax._src.pjit._infer_params"
    infer = _private("jax._src.pjit", "_infer_params")
    params = list(inspect.signature(infer).parameters)
    assert len(params) == 4, f"{hook} takes {params}, the doctor passes (fun, ji, args, kwargs)"
    from jax._src import pjit

    seen = []

    def spy(fun, ji, args, kwargs):
        seen.append(fun)
        return infer(fun, ji, args, kwargs)

    monkeypatch.setattr(pjit, "_infer_params", spy)

    def double(x):
        return 2 * x

    x = jnp.ones(3)
    jax.jit(double)(x)
    assert any(fun is double for fun in seen), (
        f"{hook}: jit's Python path (cache_miss) no longer calls it through the module "
        f"with the user's function (saw {seen})"
    )


def test_hook_pjit_get_fastpath_data(monkeypatch):
    hook = "jax._src.pjit._get_fastpath_data"
    fastpath = _private("jax._src.pjit", "_get_fastpath_data")
    from jax._src import pjit

    said = []

    def spy(executable, *rest, **kw):
        out = fastpath(executable, *rest, **kw)
        call = getattr(executable, "unsafe_call", None)
        said.append((out is None, call))
        return out

    monkeypatch.setattr(pjit, "_get_fastpath_data", spy)

    def pure(x):
        return x + 1

    def printing(x):
        jax.debug.print("x={x}", x=x, ordered=True)
        return x + 1

    x = jnp.ones(3)
    outcomes = []
    for fun in (pure, printing):
        said.clear()
        jax.jit(fun)(x)
        jax.effects_barrier()
        # the call's own comes last: helpers compiled while it traced report first
        assert said, f"{hook}: jit's Python path no longer calls it after running"
        outcomes.append(said[-1])
    (pure_none, _), (effect_none, call) = outcomes
    assert not pure_none, f"{hook}: no fast-path data for a pure program"
    assert effect_none, f"{hook}: fast-path data for a program with an ordered effect"
    effect = getattr(call, "ordered_effects", None) or getattr(call, "has_unordered_effects", None)
    assert effect, (
        f"{hook}: executable.unsafe_call.ordered_effects / has_unordered_effects do not "
        "name the effect (the doctor's reason 'an effect in the program')"
    )


# ---------------------------------------------------------------------------------------
# Jitted functions


def test_hook_jitted_cache_size_and_fun():
    def inc(x):
        return x + 1

    jitted = jax.jit(inc)
    for name in wrap._DELEGATED:
        assert hasattr(jitted, name), f"private hook PjitFunction.{name} is gone"
    assert jitted._fun is inc, "PjitFunction._fun is not the jitted function"
    assert jitted._cache_size() == 0, "PjitFunction._cache_size() before any call"
    jitted(jnp.ones(2))
    jitted(jnp.ones(3))
    assert jitted._cache_size() == 2, (
        "PjitFunction._cache_size() does not count compiled programs (no_recompiles reads it)"
    )


def test_hook_lowered_compile_instance_attribute():
    lowered = jax.jit(lambda x: x * 3).lower(jnp.ones(2))
    real = lowered.compile
    try:
        lowered.compile = lambda *a, **k: real(*a, **k)
    except AttributeError:
        pytest.fail(
            "jax.stages.Lowered.compile can no longer be replaced on the instance: the "
            "doctor counts ahead-of-time compilations by name only"
        )
    assert lowered.compile()(jnp.ones(2)).tolist() == [3.0, 3.0]


# ---------------------------------------------------------------------------------------
# The tracing cache


def test_hook_explanation_loggers(explanations_heard):
    hook = f"the explanation loggers {explanations.EXPLANATION_LOGGERS}"

    def shapely(x):
        return x.sum()

    jitted = jax.jit(shapely)
    jitted(jnp.ones(2))
    jitted(jnp.ones(3))
    misses = [(n, t) for n, t in explanations_heard if explanations.MISS_MARK in t]
    assert len(misses) == 2, f"{hook} logged {explanations_heard}, not two misses"
    first, second = (t for _, t in misses)
    assert "never seen function" in first, f"{hook}: the first miss is not 'never seen'"
    assert explanations.explained_function(first) == "shapely", first
    assert explanations.explained_function(second) == "shapely", second
    assert explanations.closest_key_difference(second), (
        f"{hook}: no {explanations.CLOSEST_KEY!r} in the second miss: {second}"
    )


def test_hook_explanation_wording(explanations_heard):
    """The words the doctor reads JAX's explanation by (its second opinion) are still the
    words JAX writes, for a shape, a dtype, a weak type, a pytree and a context change."""

    def f(x):
        return x

    jitted = jax.jit(f)
    jitted(jnp.ones(2, jnp.float32))
    jitted(jnp.ones(3, jnp.float32))  # shape
    jitted(jnp.ones(2, jnp.int32))  # dtype (the closest key is f32[2]: the dtype alone)
    jitted(jnp.float32(1.0))
    jitted(1.0)  # weak type
    jitted((jnp.ones(2),))  # pytree
    with jax.numpy_rank_promotion("raise"):
        jitted(jnp.ones(2, jnp.float32))  # context
    texts = [t for _, t in explanations_heard if explanations.MISS_MARK in t]
    opinions = [classify.jax_opinion(t) for t in texts]
    want = [["function"], ["shape"], ["dtype"], ["shape"], ["weak_type"]]
    want += [["pytree_structure"], ["context"]]
    assert opinions == want, "JAX's explanation wording changed (classify.jax_opinion):\n" + (
        "\n".join(texts)
    )


def test_hook_trace_context_names():
    names = _private("jax._src.config", "trace_context_names")
    listed = names() if callable(names) else names
    exposed = {n for n in listed if isinstance(n, str) and hasattr(jax.config, n)}
    missing = sorted(exposed - set(sig.CONTEXT_NAMES) - {"jax_explain_cache_misses"})
    assert not missing, (
        "jax._src.config.trace_context_names lists configuration names in jit's key that "
        f"signature.CONTEXT_NAMES lacks (a change of one would be 'unknown'): {missing}"
    )


def test_hook_source_info_exclusion(explanations_heard):
    """JAX names a miss's call site as the first frame outside itself; the doctor's
    wrapper registers itself with jax.extend.source_info_util so that the user's line is
    named (from jax 0.12 on the explanation starts ``TRACING CACHE MISS at FILE:LINE``)."""
    with watch():

        @jax.jit
        def placed(x):
            return x

        placed(jnp.ones(2))
        line = inspect.currentframe().f_lineno - 1
    texts = [t for _, t in explanations_heard if explanations.MISS_MARK in t]
    assert texts and f"{__file__.rsplit('/', 1)[-1]}:{line}" in texts[0].splitlines()[0], (
        "jax.extend.source_info_util.register_exclusion: the miss is not placed at the "
        f"user's line {line}: {texts[:1]}"
    )


# ---------------------------------------------------------------------------------------
# jax.monitoring


def test_hook_monitoring_event_names():
    heard: list[tuple[str, str]] = []

    def listen(event: str, seconds: float, **kwargs) -> None:
        heard.append((event, str(kwargs.get("fun_name"))))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:

        def named_for_events(x):
            return x - 1

        jax.jit(named_for_events)(jnp.ones(2))
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    for event, name in (
        (events.TRACE_EVENT, "named_for_events"),
        (events.LOWER_EVENT, "jit(named_for_events)"),
        (events.COMPILE_EVENT, "jit(named_for_events)"),
    ):
        assert (event, name) in heard, (
            f"jax.monitoring event {event} with fun_name={name!r} not heard: "
            f"{[h for h in heard if 'named_for_events' in h[1]]}"
        )


def test_hook_monitoring_frames_to_the_user():
    """``recorder._site_of_event`` starts its walk a fixed number of frames up from the
    listener (JAX's monitoring dispatch); a compilation nobody watches is placed at the
    user's line only while that number holds."""
    events.start()
    mark = len(events.STREAM)
    try:
        jnp.ones(7, jnp.int16) + jnp.int16(1)
        line = inspect.currentframe().f_lineno - 1
    finally:
        events.stop()
    compiles = [e for e in events.STREAM[mark:] if e.kind == "compile" and e.site]
    here = f"{__file__.rsplit('/', 1)[-1]}:{line}"
    assert compiles and all(here in e.site[0] for e in compiles), (
        "jax.monitoring's frames between a compilation and its listener changed "
        f"(recorder._site_of_event): sites {[e.site for e in compiles]}, expected {here}"
    )


# ---------------------------------------------------------------------------------------
# The persistent cache (its own process: the cache is configured once per process)

_PERSISTENT_PROGRAM = textwrap.dedent(
    """
    import json, logging, sys
    import jax, jax.numpy as jnp

    folder, loggers, key_logger = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    records, durations = [], []

    class Heard(logging.Filter):
        def filter(self, record):
            records.append((record.name, record.getMessage()))
            return False

    heard = Heard()
    for name in loggers + [key_logger]:
        logging.getLogger(name).addFilter(heard)
    logging.getLogger(key_logger).setLevel(logging.DEBUG)
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **kw: durations.append(event)
    )
    jax.config.update("jax_explain_cache_misses", True)
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)

    def kept(x):
        return x * 2 + 1

    jax.jit(kept)(jnp.ones(5))
    jax.clear_caches()
    jax.jit(kept)(jnp.ones(5))  # read back from the disk
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1e6)

    def too_quick(x):
        return x * 3 + 1

    jax.jit(too_quick)(jnp.ones(5))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 10**12)

    def too_small(x):
        return x * 4 + 1

    jax.jit(too_small)(jnp.ones(5))
    print(json.dumps({"records": records, "durations": durations}))
    """
)


@pytest.fixture(scope="module")
def persistent(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("pcache")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _PERSISTENT_PROGRAM,
            str(folder),
            json.dumps(list(events.PERSISTENT_LOGGERS)),
            events.KEY_LOGGER,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def _parsed(persistent: dict) -> list[tuple[str, str, str]]:
    """(logger, module, what the doctor makes of it) for every persistent-cache text."""
    out = []
    for logger, text in persistent["records"]:
        found = events.persistent_event(text)
        if found is not None:
            out.append((logger, found.name, found.text))
    return out


def test_hook_persistent_cache_miss_and_write_texts(persistent):
    hook = f"the persistent-cache loggers {events.PERSISTENT_LOGGERS}"
    parsed = _parsed(persistent)
    assert ("jit_kept", "miss") in [(m, w) for _, m, w in parsed], (
        f"{hook}: no 'PERSISTENT COMPILATION CACHE MISS for jit_kept' read: {persistent}"
    )
    assert ("jit_kept", "written") in [(m, w) for _, m, w in parsed], (
        f"{hook}: no 'Writing jit_kept to persistent compilation cache' read: {persistent}"
    )


def test_hook_persistent_cache_not_written_texts(persistent):
    hook = f"the persistent-cache loggers {events.PERSISTENT_LOGGERS}"
    said = {m: w for _, m, w in _parsed(persistent) if w.startswith("not written")}
    assert "jax_persistent_cache_min_compile_time_secs" in said.get("jit_too_quick", ""), (
        f"{hook}: the 'took < N seconds to compile' text is not read: {persistent}"
    )
    assert any("jax_persistent_cache_min_entry_size_bytes" in w for w in said.values()), (
        f"{hook}: the 'size is less than threshold' text is not read: {persistent}"
    )


def test_hook_persistent_cache_hit_event(persistent):
    assert events.PERSISTENT_HIT_EVENT in persistent["durations"], (
        f"jax.monitoring event {events.PERSISTENT_HIT_EVENT} (a persistent-cache hit) "
        "not heard when a program was read back from the disk"
    )


def test_hook_cache_key_debug_lines(persistent):
    parts = {
        found.group(1)
        for logger, text in persistent["records"]
        if logger == events.KEY_LOGGER and (found := events._KEY_PART.search(text))
    }
    assert {"computation", "compile_options"} <= parts, (
        f"private logger {events.KEY_LOGGER}: its 'get_cache_key hash of serialized PART' "
        f"debug lines name {sorted(parts)}"
    )


# ---------------------------------------------------------------------------------------
# Equinox


def test_hook_equinox_filter_jit_convention():
    eqx = pytest.importorskip("equinox")

    class Scaled(eqx.Module):
        weight: jax.Array
        rate: float = eqx.field(static=True)

    def forward(model, x):
        return model.weight * x * model.rate

    with watch() as doctor:
        jitted = eqx.filter_jit(forward)
        jitted(Scaled(jnp.ones(2), 0.1), jnp.ones(2))
        jitted(Scaled(jnp.ones(2), 0.2), jnp.ones(2))
    record = next((f for f in doctor.report().functions if f.name == "forward"), None)
    here = __file__.rsplit("/", 1)[-1]
    assert record is not None and record.location.split(":")[0].endswith(here), (
        "eqx.filter_jit no longer jits its own fun_wrapped in equinox/_jit.py with the "
        "user's function in a calling frame (signature.identify)"
    )
    (_, second) = record.misses
    # a field marked static is node metadata: the pytree structure, in jit's key
    assert [(d.part, d.where) for d in second.differences] == [("structure", "model.rate")], (
        "eqx.filter_jit's call (dynamic_donate, dynamic_nodonate, static) is no longer "
        f"read (signature._equinox_view): {second.differences}"
    )


def test_hook_jaxpr_util_maybe_dump_jaxpr_to_file(monkeypatch):
    """JAX hands each jaxpr it lowers to jaxpr_util.maybe_dump_jaxpr_to_file(name, jaxpr),
    looked up on the module at every lowering; its equations carry source lines that
    user_frame reads back to the user's line."""
    from jitlab.doctor import ops

    _private("jax._src.jaxpr_util", "maybe_dump_jaxpr_to_file")
    _private("jax._src.core", "jaxprs_in_params")
    _private("jax._src.source_info_util", "user_frame")
    monkeypatch.setattr(ops, "WANTED", {"hooked_unrolled"})
    ops.install()
    try:

        def hooked_unrolled(x):
            for _ in range(7):
                x = jnp.sin(x)
            return x

        jax.jit(hooked_unrolled)(jnp.ones(3))
        lowered = ops.take("hooked_unrolled")
    finally:
        ops.uninstall()
    assert lowered is not None, "maybe_dump_jaxpr_to_file was not called with the jaxpr"
    line = inspect.getsourcelines(hooked_unrolled)[1] + 2
    (where, count), *_ = ops.busiest_lines(lowered)
    assert where.endswith(f"test_private_hooks.py:{line}") and count == 7, (where, count)


def test_a_missing_hook_fails_with_its_name():
    with pytest.raises(pytest.fail.Exception, match=r"jax\._src\.pjit\._no_such_hook"):
        _private("jax._src.pjit", "_no_such_hook")
