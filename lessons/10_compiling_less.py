# ---
# jupyter:
#   jitlab:
#     fix: AOT warm-up with lower().compile(), the persistent compilation cache, lax.scan
#       instead of unrolled loops; what jax.export does and does not save
#     instructor_notes:
#     - 'Start with the latency plot of the serving loop: the spikes are the compilations,
#       and nobody notices them in the total time.'
#     - 'Learners expect the warm-up to make the whole run faster. It does not: the
#       same programs are compiled, only earlier. The win is the worst request, and
#       a TypeError instead of a silent compile for a shape nobody planned.'
#     - The two subprocesses take a few seconds; most of it is importing JAX. Point
#       at the compile times the children report, not at the wall time.
#     - 'Learners read ''a tracing-cache hit'' as ''nothing to do''. Run the four-caches
#       table live and ask, row by row, which step ran: the committed array is the surprise
#       (no trace, but a lowering and a compilation).'
#     - The unrolled-loop timings depend on the laptop and on what else it runs; the
#       equation counts do not. Teach from the counts.
#     - 'The persistent cache is a trusted directory: anyone who can write to it can
#       run code in your process. Do not share it with people you do not trust.'
#     - Exported.serialize() needs the flatbuffers package, which the course does not
#       install; the lesson calls the Exported in the same process.
#     keypoints:
#     - jax.jit(f).lower(ShapeDtypeStruct...).compile() traces, lowers and compiles
#       for shapes you name, before any data exists; the result is a Compiled executable.
#     - A Compiled never compiles again; called with a type it was not built for (float16,
#       one more element) it raises TypeError instead of compiling. It compares dtypes
#       after canonicalisation (lesson 00), so a NumPy float64 array runs where float32
#       was compiled and a Python int where int32 was; a Python float there does not.
#     - A dict of Compiled, one per bucket, built at start-up moves every compilation
#       out of the serving loop; the total work is the same, the worst request is not.
#     - 'jit keeps four caches in memory: the C++ fast path (one for the process, keyed
#       on the function and jit''s options by value; a miss only costs dispatch time),
#       the trace cache (a hit skips your Python), the lowering cache (keyed on the
#       jaxpr and the shardings, committedness included) and the compilation cache (keyed
#       on the lowered module, the compile options and the device assignment). A trace-cache
#       hit can still lower and compile.'
#     - The persistent compilation cache (jax_compilation_cache_dir) keeps executables
#       on disk, keyed on the lowered module, jaxlib, XLA flags, compile options and
#       the devices' topology; a later process whose key matches reads them instead
#       of running XLA. Tracing and lowering still run.
#     - 'Not written to disk: programs that compiled faster than jax_persistent_cache_min_compile_time_secs
#       (1 s by default), entries smaller than jax_persistent_cache_min_entry_size_bytes,
#       and everything compiled by processes other than process 0. Programs with host
#       callbacks are written and read back on this JAX release.'
#     - 'jax.export saves running your Python again and makes the program portable;
#       calling the Exported still traces a small wrapper, lowers and compiles once
#       per concrete size: as many compilations as plain jax.jit.'
#     - 'A Python for loop inside jit is unrolled: trace, lowering and compile time
#       grow with the number of steps. lax.scan (over steps or over stacked layers)
#       and lax.fori_loop keep the program, and its compile time, the same size. Jitted
#       helpers are inlined, and large captured constants are embedded in the program.'
#     minutes:
#       exercises: 20
#       teaching: 50
#     objectives:
#     - Compile ahead of time with jax.jit(f).lower(jax.ShapeDtypeStruct(...)).compile(),
#       with no real data.
#     - Build a dict of executables, one per bucket, at start-up, and serve a stream
#       of requests with zero compilations.
#     - Tell jit's four in-memory caches (fast path, trace, lowering, compilation) apart
#       by counting traces, lowerings and compilations.
#     - Turn on the persistent compilation cache, show with jax.monitoring events that
#       a second process hits it, and name what is not written.
#     - Count what calling a jax.export with a symbolic batch size still traces, lowers
#       and compiles, against plain jax.jit.
#     - Measure trace and compile time against the number of steps of an unrolled Python
#       loop, and keep it flat with lax.scan.
#     prerequisites:
#       lessons:
#       - what_jit_caches
#       - shapes
#     questions:
#     - When a compilation cannot be avoided, can it at least happen before the first
#       request?
#     - Which caches sit in front of XLA, and which step does a hit in each of them
#       skip?
#     - Can a second process reuse what the first one compiled, and what is never written
#       to disk?
#     - What does jax.export with a symbolic batch size save, and what does it not?
#     - Why does a program with a long Python loop take longer to compile, and what
#       keeps it flat?
#     title: Paying for compilation less
#   jupytext:
#     formats: py:percent
#     notebook_metadata_filter: jitlab,kernelspec,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 10 · Paying for compilation less
#
# Lessons 01 to 09 removed compilations nobody wanted. Some are wanted: a server with
# six bucket sizes needs six programs, and a fresh process needs all of them again. This
# lesson moves those compilations to start-up, looks at the four caches jit keeps in
# memory, keeps executables on disk between processes, tries one export for every batch
# size, and ends with compilations that are slow because the program is big, counting
# each time what is saved and what is not.

# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import collections
import contextlib
import functools
import inspect
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import warnings

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from jax import export, monitoring
from jax.experimental.compilation_cache import compilation_cache

# %% [markdown]
# ## A small server
#
# The function under study stands in for a model: it scores a 1-D request of any length.
# Requests are padded to a bucket (a power of two from 16 to 512, as in lesson 01) and the
# real length `n` is a traced argument, so the padding never reaches the answer.


# %%
def score(padded, n):
    valid = jnp.arange(padded.shape[0]) < n
    h = padded.astype(jnp.float32)
    for k in range(4):
        h = jnp.tanh(h * (1.0 + 0.25 * k) + 0.1 * k)
    weights = jax.nn.softmax(jnp.where(valid, 3.0 * h, -jnp.inf))
    return jnp.sum(weights * jnp.where(valid, padded, 0.0))


def score_numpy(x):
    """The same score in NumPy, on the unpadded request: the reference."""
    h = x.astype(np.float64)
    for k in range(4):
        h = np.tanh(h * (1.0 + 0.25 * k) + 0.1 * k)
    weights = np.exp(3.0 * h - np.max(3.0 * h))
    return float(np.sum(weights / weights.sum() * x))


# %%
BUCKETS = (16, 32, 64, 128, 256, 512)


def bucket_for(length: int) -> int:
    return next(b for b in BUCKETS if b >= length)


def pad_to(x: np.ndarray, size: int) -> np.ndarray:
    padded = np.zeros(size, dtype=x.dtype)  # NumPy: padding compiles nothing
    padded[: len(x)] = x
    return padded


rng = np.random.default_rng(0)
requests = [
    rng.normal(size=int(n)).astype(np.float32) for n in rng.integers(1, 513, 60)
]
assert sorted({bucket_for(len(x)) for x in requests}) == list(BUCKETS)

# %% [markdown]
# ## The problem: compiling in the serving loop
#
# The plain way: `jax.jit(score)`, and let each bucket compile when its first request
# arrives. Each request is timed on its own, because a server cares about its worst
# request as much as its total.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Sixty requests over six buckets. How many compilations, and which requests pay for
# them?</p></div>


# %%
def serve_all(call, stream):
    """Run every request through `call(padded, n)`: the results, each request's
    seconds, and each request's compilations (JAX's helpers included)."""
    results, seconds, compiles = [], [], []
    for x in stream:
        with jitlab.count_compiles(None, explain=False) as n, jitlab.stopwatch() as sw:
            results.append(float(call(pad_to(x, bucket_for(len(x))), np.int32(len(x)))))
        seconds.append(sw.seconds)
        compiles.append(n.compiles)
    return results, seconds, compiles


# %%
score_jit = jax.jit(score)
lazy = jitlab.measure(
    "lazy: compile on first request",
    lambda: serve_all(score_jit, requests),
    count=score,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
lazy_results, lazy_seconds, lazy_compiles = lazy.result
first_of_each_bucket = sorted(
    next(i for i, x in enumerate(requests) if bucket_for(len(x)) == b) for b in BUCKETS
)
print(lazy.counts)
print("requests that compiled:", [i for i, c in enumerate(lazy_compiles) if c])
print(
    f"worst request {1e3 * max(lazy_seconds):.0f} ms, "
    f"median {1e6 * statistics.median(lazy_seconds):.0f} us"
)
assert lazy.compiles == len(BUCKETS), lazy.counts.explanations
assert [i for i, c in enumerate(lazy_compiles) if c] == first_of_each_bucket
expected = [score_numpy(x) for x in requests]
np.testing.assert_allclose(lazy_results, expected, rtol=1e-4, atol=1e-6)

# %% [markdown]
# Six compilations, one per bucket, each paid by whichever request happened to be first
# in its bucket. The other requests take microseconds. In the total the compilations
# hide; in the worst request they are everything.
#
# ## Compiling ahead of time, with no data
#
# `jax.jit(f).lower(*args)` traces and lowers; `.compile()` runs XLA and returns a
# `jax.stages.Compiled`. The arguments can be `jax.ShapeDtypeStruct`s: a shape and a
# dtype, no values. That is all tracing ever looks at, so a server can compile for
# every bucket before the first request exists.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Which stages run in <code>lower</code>, and which in <code>compile</code>?</p></div>

# %%
fresh_score = jax.jit(score)
fresh_score.clear_cache()  # jit's cache is keyed on `score` itself: start cold
spec_64 = jax.ShapeDtypeStruct((64,), jnp.float32)
spec_n = jax.ShapeDtypeStruct((), jnp.int32)
with jitlab.count_compiles(score) as at_lower:
    lowered = fresh_score.lower(spec_64, spec_n)
with jitlab.count_compiles(score) as at_compile:
    compiled_64 = lowered.compile()

# %% tags=["answer"] jupyter={"source_hidden": true}
print("lower:  ", at_lower, f"({at_lower.lowerings} lowering)")
print("compile:", at_compile, "->", type(compiled_64).__name__)
assert (at_lower.traces, at_lower.lowerings, at_lower.compiles) == (1, 1, 0)
assert (at_compile.traces, at_compile.compiles) == (0, 1)
assert isinstance(compiled_64, jax.stages.Compiled)

# %% [markdown]
# ## A Compiled never compiles again
#
# A jitted function meets a new shape by compiling. A `Compiled` has no Python function
# to trace any more, so it can only check the arguments against the types it was built
# for.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>compiled_64</code> was built for <code>float32[64]</code> and
# <code>int32[]</code>. Which of these calls run, and which raise: the right types, a
# NumPy float64 array, a Python <code>int</code> for <code>n</code>, a float16 array, an
# array of length 65?</p></div>

# %%
sample = rng.normal(size=64).astype(np.float32)
calls = {
    "float32[64], np.int32": (sample, np.int32(40)),
    "float64[64] (NumPy), np.int32": (sample.astype(np.float64), np.int32(40)),
    "float32[64], Python int": (sample, 40),
    "float16[64], np.int32": (sample.astype(np.float16), np.int32(40)),
    "float32[65], np.int32": (np.zeros(65, np.float32), np.int32(40)),
}
with jitlab.count_compiles(None) as during_calls:
    tried = {label: jitlab.attempt(compiled_64, *args) for label, args in calls.items()}

# %% tags=["answer"] jupyter={"source_hidden": true}
for label, outcome in tried.items():
    print(f"{label:30} {outcome}"[:100])
print(str(tried["float32[65], np.int32"].error).splitlines()[-1])
errors = [type(t.error) for t in tried.values()]
assert errors == [type(None), type(None), type(None), TypeError, TypeError], errors
assert during_calls.compiles == 0
assert "compiled with float32[64] and called with float32[65]" in str(
    tried["float32[65], np.int32"].error
)
assert tried["float64[64] (NumPy), np.int32"].value.dtype == jnp.float32

# %% [markdown]
# Three calls run and two raise `TypeError`, and none compiles. The float64 NumPy array
# runs because, with x64 off, JAX canonicalises it to float32 before the check (the
# result is float32); a Python `int` passes as `int32`. A float16 array or one more
# element is a different type, and the executable says so instead of quietly building
# another.
#
# <div class="admonition info"><p class="admonition-title">The jitted function shares
# the work</p><p><code>lower().compile()</code> on a jitted function also fills that
# function's own caches (the next section shows which): calling
# <code>fresh_score</code> on <code>float32[64]</code> afterwards traces and compiles
# nothing. But the jitted function, unlike
# the <code>Compiled</code>, still compiles silently for a shape nobody planned.</p></div>

# %%
with jitlab.count_compiles(score) as planned:
    fresh_score(sample, np.int32(40))
with jitlab.count_compiles(score) as unplanned:
    fresh_score(np.zeros(65, np.float32), np.int32(40))
print("planned shape:  ", planned, "\nunplanned shape:", unplanned)
assert planned.compiles == 0 and planned.traces == 0
assert unplanned.compiles == 1

# %% [markdown]
# ## The fix: warm up at start-up
#
# One `Compiled` per bucket, in a dict, built before serving. The serving loop looks up
# the bucket and calls its executable. `jax.no_tracing()` (lesson 09) turns any trace in
# the loop into an error, and `count_compiles(None)` counts every compilation, JAX's
# own helpers included.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How many compilations at start-up, and how many in the loop? Will the whole run be
# faster than the lazy one?</p></div>


# %%
def warm_up(fn, buckets, dtype):
    jitted = jax.jit(fn)
    n = jax.ShapeDtypeStruct((), jnp.int32)
    return {
        b: jitted.lower(jax.ShapeDtypeStruct((b,), dtype), n).compile() for b in buckets
    }


def serve_warm():
    executables = warm_up(score, BUCKETS, jnp.float32)  # start-up
    with jax.no_tracing():  # any trace in the loop raises
        return serve_all(
            lambda padded, n: executables[padded.shape[0]](padded, n), requests
        )


# %%
score_jit.clear_cache()  # forget the lazy run: the warm-up pays in full
warm = jitlab.measure("warm-up: dict of Compiled", serve_warm, count=score)

# %% tags=["answer"] jupyter={"source_hidden": true}
warm_results, warm_seconds, warm_compiles = warm.result
served = jitlab.compare(lazy, warm, bench="serving sixty requests, lazy vs warm-up")
worst = max(lazy_seconds) / max(warm_seconds)
print(
    f"worst request: {1e3 * max(lazy_seconds):.0f} ms lazy, "
    f"{1e3 * max(warm_seconds):.1f} ms warm"
)
jitlab.record("worst request, lazy vs warm-up", speedup=worst)
assert warm.compiles == len(BUCKETS) and sum(warm_compiles) == 0  # all at start-up
np.testing.assert_allclose(warm_results, lazy_results, rtol=1e-6)
assert worst > 3, "the worst lazy request includes a compilation"

# %%
fig, ax = plt.subplots(figsize=(7, 3.2))
ax.semilogy(1e3 * np.array(lazy_seconds), "o-", ms=3, color="C3", label="lazy")
ax.semilogy(1e3 * np.array(warm_seconds), "o-", ms=3, color="C2", label="warm-up")
ax.set(
    xlabel="request",
    ylabel="latency (ms, log scale)",
    title="Six compilations, paid by six unlucky requests",
)
ax.legend()
plt.show()

# %% [markdown]
# The same six programs are compiled either way, so the warm-up does not save work:
# the totals in the table differ by this machine's noise and by one-time costs that
# the first compilations in a process pay (the lazy run came first). What moves is
# *who* pays: with the warm-up, nobody in the loop.
#
# <div class="admonition warning"><p class="admonition-title">Pad with NumPy</p>
# <p>A serving loop with zero compilations needs padding that compiles nothing.
# <code>jnp.pad</code> and <code>jnp.zeros(n)</code> are jitted helpers: each new length
# compiles a small program of JAX's own.</p></div>

# %%
with jitlab.count_compiles(None) as helper:
    for length in (37, 38, 39):
        jnp.pad(jnp.asarray(np.ones(length, np.float32)), (0, 64 - length))
with jitlab.count_compiles(None) as numpy_padding:
    for length in (37, 38, 39):
        pad_to(np.ones(length, np.float32), 64)
print("jnp.pad:", helper, "\nNumPy:  ", numpy_padding)
assert helper.compiles >= 3 and numpy_padding.compiles == 0

# %% [markdown]
# ## Four caches in memory
#
# "Cached" has meant one thing so far: the call traced nothing. But `jit` keeps four
# caches in memory, one in front of each step, and a hit in one can be followed by a
# miss in the next:
#
# 1. the **fast path**, in C++: one cache for the whole process, keyed on the Python
#    function, `jit`'s options (by value) and the arguments' signature. A brand-new
#    `jax.jit(f)` with the same options finds the entry an earlier wrapper left, and the
#    call goes to the executable without entering Python;
# 2. the **trace cache**: the jaxpr for a function, its `jit` options (the parsed
#    options object, which compares by identity: two wrappers trace twice, although
#    an inner cache runs your Python once), the abstract types and pytree structure of
#    the arguments, the static values and the tracing context (lesson 12);
# 3. the **lowering cache**: the StableHLO module for a jaxpr *and the shardings* of
#    the inputs and outputs, which includes whether an input is committed to a device;
# 4. the **compilation cache**: the executable for a lowered module, the compile options
#    and the device assignment.
#
# `count_compiles` hears the last three: `traces`, `lowerings` and `compiles`. Not
# every trace-cache miss comes with JAX's explanation: the second wrapper's trace
# below is explained by nothing, and lesson 12 shows more silent ones.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>glow</code> is called on a <code>jnp</code> array, again, then on the same
# values committed to device 0 with <code>jax.device_put</code>. Then
# <code>glow.lower</code> for the same type, <code>.compile()</code>, and
# <code>.compile()</code> twice with a compile option. Which steps run each time?</p>
# </div>


# %%
@jax.jit
def glow(v):
    return jnp.tanh(v) * 2.0 + 1.0


FAST_COMPILE = {"xla_backend_optimization_level": 0}  # a compile option XLA:CPU takes
x16 = jnp.ones(16, jnp.float32)
glow_rows = []


def counted(label, thunk):
    """Run thunk() and keep a row with what glow traced, lowered and compiled."""
    with jitlab.count_compiles(glow) as n:
        result = thunk()
    glow_rows.append({"call": label, "steps": (n.traces, n.lowerings, n.compiles)})
    return result


# %%
counted("glow(x)", lambda: glow(x16))
counted("glow(x) again", lambda: glow(x16))
counted("glow(x committed)", lambda: glow(jax.device_put(x16, jax.devices()[0])))
lowered_glow = counted(
    "glow.lower(spec)", lambda: glow.lower(jax.ShapeDtypeStruct((16,), jnp.float32))
)
counted(".compile()", lambda: lowered_glow.compile())
counted(".compile(FAST_COMPILE)", lambda: lowered_glow.compile(FAST_COMPILE))
counted(".compile(FAST_COMPILE) again", lambda: lowered_glow.compile(FAST_COMPILE))

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.print_table(glow_rows)  # steps: (traces, lowerings, compiles)
assert [row["steps"] for row in glow_rows] == [
    (1, 1, 1),  # every cache misses
    (0, 0, 0),  # the fast path hits
    (0, 1, 1),  # trace hit; committed is a new sharding: lowered and compiled again
    (0, 0, 0),  # trace and lowering hits: the same module as the first call
    (0, 0, 0),  # compilation cache hit: .compile() hands back the first executable
    (0, 0, 1),  # same module, new compile options: compiled again
    (0, 0, 0),  # ... and cached under those options
]

# %% [markdown]
# Read the third row: the committed array has the same shape, dtype and values, so the
# trace cache hit and nothing was explained (no explanation is written for a hit). Its
# sharding is part of the lowering key, so the jaxpr was lowered and compiled again.
# Lesson 12 shows the other half of the compilation key: the same module on eight
# devices is one lowering and eight compilations, one executable per device assignment.
#
# The fast path and the trace cache are keyed differently. A new wrapper around the
# same function hits the fast path; its first `.trace` (which bypasses the fast path)
# is a trace-cache miss that nothing explains, and your Python still runs only once.

# %%
body_runs = []


def glow_body(v):
    body_runs.append(1)  # runs each time jax executes the Python body
    return jnp.tanh(v) * 2.0 + 1.0


jax.jit(glow_body)(x16)  # warm
with jax.no_tracing():  # raises on any fast-path miss
    jax.jit(glow_body)(x16)  # a brand-new wrapper, same options
with jitlab.count_compiles(glow_body) as two_wrappers:
    jax.jit(glow_body).trace(x16)
    jax.jit(glow_body).trace(x16)
print(two_wrappers, "| body runs:", len(body_runs))
assert (two_wrappers.traces, len(body_runs)) == (2, 1)
assert len(two_wrappers.explanations) == 0  # two misses, neither explained

# %% [markdown]
# Programs with an effect, such as `jax.debug.print` or `jax.debug.callback`, never get
# a fast-path entry at all (see [lesson 09](../09_diagnosing/#which-calls-skip-the-fast-path)).

# %% [markdown]
# ## A cache on disk: the next process starts warm
#
# Everything so far lives in this process. Restart it and every bucket compiles again.
# The *persistent compilation cache* writes each executable to a directory and, before
# compiling, looks there first. Three settings (as `jax.config.update` calls or as
# `JAX_...` environment variables):
#
# | setting | default | what it does |
# | --- | --- | --- |
# | `jax_compilation_cache_dir` | none (off) | where executables are stored |
# | `jax_persistent_cache_min_compile_time_secs` | `1.0` | write only programs that took at least this long to compile |
# | `jax_persistent_cache_min_entry_size_bytes` | `0` | write only entries at least this big; `-1`: no minimum, and no platform override |
#
# The experiment uses two real processes, one after the other. Each child imports JAX,
# builds the same dict of six executables as the warm-up above, and reports the compile
# time *it* measured, plus the `jax.monitoring` events it saw whose names start with
# `/jax/compilation_cache/` and its traces and lowerings of `score`. The cache settings
# arrive as environment variables; the children's code never mentions the cache. On a
# TPU machine the children compile for the CPU platform beside the chip: this notebook
# holds the chip, and libtpu lets one process at a time open it.

# %%
CHILD_SETUP = """
import collections, json, time
start = time.perf_counter()
import jax, jax.numpy as jnp
from jax import monitoring
import_s, events = time.perf_counter() - start, collections.Counter()
def on_event(name, **kwargs):
    if name.startswith("/jax/compilation_cache/"):
        events[name.rsplit("/", 1)[-1]] += 1
def on_duration(name, seconds, fun_name=None, **kwargs):
    if fun_name in ("score", "jit(score)") and "/core/compile/" in name:
        events[name.rsplit("/", 1)[-1]] += 1  # traces, lowerings, compiles
monitoring.register_event_listener(on_event)
monitoring.register_event_duration_secs_listener(on_duration)
"""
CHILD_WORK = """
n, start = jax.ShapeDtypeStruct((), jnp.int32), time.perf_counter()
lowered = [jax.jit(score).lower(jax.ShapeDtypeStruct((b,), jnp.float32), n)
           for b in (16, 32, 64, 128, 256, 512)]
lowered_at = time.perf_counter()
compiled = [low.compile() for low in lowered]
print(json.dumps({"import_s": import_s, "trace_lower_s": lowered_at - start,
                  "compile_s": time.perf_counter() - lowered_at, "events": events}))
"""
CHILD = CHILD_SETUP + inspect.getsource(score) + CHILD_WORK  # the very score served


# %%
def run_child(cache_dir: str) -> dict:
    env = {
        **os.environ,
        "JAX_COMPILATION_CACHE_DIR": cache_dir,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",  # cache even small programs
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }
    if jax.default_backend() == "tpu":  # this process holds the chip: one at a time
        env["JAX_PLATFORMS"] = "cpu"
    child = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    report = json.loads(child.stdout.strip().splitlines()[-1])
    return {**report, "events": collections.Counter(report["events"])}


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The first child starts with an empty cache directory, the second with what the
# first left there. Which events does each report, and how many? Which child spends
# less time compiling?</p></div>

# %%
with tempfile.TemporaryDirectory(prefix="jitlab-l10-") as cache_dir:
    cold = run_child(cache_dir)
    warm_child = run_child(cache_dir)
    entries = sorted(os.listdir(cache_dir))
children = {"cold cache": cold, "warm cache": warm_child}

# %% tags=["answer"] jupyter={"source_hidden": true}
times = ("import_s", "trace_lower_s", "compile_s")
rows = [
    {"child": k, **{t: c[t] for t in times}, **c["events"]} for k, c in children.items()
]
jitlab.print_table(rows)
for row in rows:
    jitlab.record(
        f"six buckets, new process, {row['child']}", first_ms=1e3 * row["compile_s"]
    )
disk_speedup = cold["compile_s"] / warm_child["compile_s"]
jitlab.record("compile, cold vs warm persistent cache", speedup=disk_speedup)
cold_ev, warm_ev = cold["events"], warm_child["events"]
assert (cold_ev["cache_misses"], cold_ev["cache_hits"]) == (6, 0)
assert (warm_ev["cache_misses"], warm_ev["cache_hits"]) == (0, 6)
steps = ("jaxpr_trace_duration", "jaxpr_to_mlir_module_duration")
assert [warm_ev[k] for k in steps] == [6, 6]  # traced and lowered again
assert warm_ev["backend_compile_duration"] == 6  # a compile request for each read
assert len(entries) == len(BUCKETS) and all(e.startswith("jit_score-") for e in entries)
assert disk_speedup > 2  # reading six beats compiling six
assert warm_child["import_s"] > 3 * warm_child["compile_s"]  # import jax dominates

# %% [markdown]
# Six misses, then six hits. (A "miss" event is sent when an entry is *written*, so a
# program below the thresholds produces neither.) The compile step shrinks to reading
# files. Trace and lower do not: the warm child still traced and lowered six times,
# because the cache is keyed on the lowered program, and the key must be computed
# before it can be looked up. In the warm child, `import jax` takes several times longer
# than getting all six executables.
#
# The key is a hash of everything that could change the executable: the lowered module
# (its name included), the jaxlib version, the backend's platform version, the XLA
# flags, the compile options, and the devices' topology (`accelerator_config`). A later
# process hits when all of these match, as the second child did. In a job of several
# processes they do not all match: on this CPU setup each process's topology
# fingerprint differs, so process 1 never reads what process 0 wrote, even from a shared
# directory, and only process 0 writes at all ([lesson 14](../14_processes/) runs such a
# job and shows process 0 hitting its own entries on the next start, process 1 none).
#
# <div class="admonition warning"><p class="admonition-title">Trust the directory</p>
# <p>A cache entry is an executable. Anyone who can write to the cache directory can make
# your process run their code: keep it private.</p></div>
#
# ## A trace-cache miss can be a disk hit
#
# Back in this process. The persistent cache is a fifth cache, behind the four in
# memory: it is asked only when the in-memory compilation cache misses, and its key
# holds the lowered program, not the Python function. So a miss in the trace cache
# (lessons 01 to 08 were all about those) can still be a hit on disk. The listener
# below counts the cache's events around a block.


# %%
@contextlib.contextmanager
def persistent_cache_events():
    seen = collections.Counter()

    def on_event(name, **kwargs):
        if name.startswith("/jax/compilation_cache/"):
            seen[name.removeprefix("/jax/compilation_cache/")] += 1

    monitoring.register_event_listener(on_event)
    try:
        yield seen
    finally:
        monitoring.unregister_event_listener(on_event)


class KeepLines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def persistent_cache_log():
    """What JAX's compiler and persistent cache log in the block, DEBUG included."""
    keep = KeepLines()
    loggers = [
        logging.getLogger(f"jax._src.{n}") for n in ("compiler", "compilation_cache")
    ]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(keep)
        logger.setLevel(logging.DEBUG)
    try:
        yield keep.lines
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(keep)
            logger.setLevel(level)


# %%
CACHE_SETTINGS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)
saved_settings = {name: getattr(jax.config, name) for name in CACHE_SETTINGS}
local_cache = tempfile.TemporaryDirectory(prefix="jitlab-l10-")
jax.config.update("jax_compilation_cache_dir", local_cache.name)


def features(v):
    return jnp.tanh(v) * 2.0 + 1.0


v16 = np.ones(16, np.float32)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The cache directory is set, the thresholds are left at their defaults, and
# <code>features</code> compiles in well under a second. Is anything written?</p></div>

# %%
with (
    persistent_cache_log() as log,  # first: the counter keeps the level it finds
    jitlab.count_compiles(features) as n,
    persistent_cache_events() as events,
):
    jax.jit(features)(v16)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n, dict(events), os.listdir(local_cache.name))
print(*[line for line in log if line.startswith("Not writing")], sep="\n")
assert n.compiles == 1 and os.listdir(local_cache.name) == []
assert events["cache_misses"] == 0 and events["cache_hits"] == 0
assert not [line for line in log if "cache is disabled/not initialized" in line]  # on
assert any("because it took < 1.00 seconds to compile" in line for line in log)

# %% [markdown]
# Nothing: the default `jax_persistent_cache_min_compile_time_secs` of one second keeps
# quick programs out, which is usually what you want. JAX's log says so ("Not writing
# persistent cache entry ... because it took < 1.00 seconds to compile"), but it writes
# that line with no cache directory set too. What shows that the cache was in use is
# the line it did *not* write: with no directory, it says "cache is disabled/not
# initialized" at the lookup. Lower both thresholds, and drop
# every in-memory cache with `jax.clear_caches()` so that the call compiles again.

# %%
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
jax.clear_caches()
with jitlab.count_compiles(features) as written, persistent_cache_events() as events:
    jax.jit(features)(v16)
print(written, dict(events), os.listdir(local_cache.name))
assert written.compiles == 1 and events["cache_misses"] == 1
assert len(os.listdir(local_cache.name)) == 1

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>jax.clear_caches()</code> again, then the same call. Does
# <code>features</code> trace? Does XLA compile it?</p></div>

# %%
jax.clear_caches()
with jitlab.count_compiles(features) as reread, persistent_cache_events() as events:
    jax.jit(features)(v16)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(reread, dict(events))
print(
    f"compile step: {1e3 * written.compile_seconds:.1f} ms when written, "
    f"{1e3 * reread.compile_seconds:.1f} ms when read"
)
assert reread.traces == 1 and reread.lowerings == 1  # a tracing-cache miss ...
assert "never seen function: features" in " ".join(reread.explanations[-1].split())
assert events["cache_hits"] == 1 and events["cache_misses"] == 0  # ... read from disk
assert reread.compiles == 1  # jitlab still sees the compile request

# %% [markdown]
# A tracing-cache miss (JAX explains it: "never seen function"), then a persistent-cache
# hit. Note what the counter says: `count_compiles` counts JAX's
# `backend_compile_duration` event, which fires for every request for an executable,
# including one served from disk (its time is then the read). The cache's events, not
# the counter, tell a compile from a read.
#
# The same happens when a new function object carries an old program: a lambda created
# in a loop misses the tracing cache every time (lesson 07), but from the second one on,
# the program it lowers to is already on disk.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Three fresh lambdas, each with the body of <code>features</code>. How many traces,
# how many persistent-cache hits? Does the first one hit the entry that
# <code>features</code> wrote?</p></div>

# %%
with jitlab.count_compiles(None) as n, persistent_cache_events() as events:
    for _ in range(3):
        jax.jit(lambda v: jnp.tanh(v) * 2.0 + 1.0)(v16)

# %% tags=["answer"] jupyter={"source_hidden": true}
programs_on_disk = sorted(name.split("-")[0] for name in os.listdir(local_cache.name))
print(n, dict(events), programs_on_disk)
assert n.traces == 3 and n.compiles == 3
assert events["cache_misses"] == 1 and events["cache_hits"] == 2
assert programs_on_disk == ["jit__lambda", "jit_features"]
assert any(
    "PERSISTENT COMPILATION CACHE MISS for 'jit__lambda'" in e for e in n.explanations
)

# %% [markdown]
# Three traces, one compilation by XLA and two reads. The first lambda did *not* reuse
# `features`' entry: the program's name (`jit__lambda` against `jit_features`) is part
# of the lowered module, so it is part of the key. With the cache on and misses
# explained, JAX logs the persistent miss too, and `count_compiles(None)` keeps it.
#
# ## What the disk cache does not keep
#
# Three rules decide whether an executable is written, all seen above: a program that
# compiled faster than `jax_persistent_cache_min_compile_time_secs` is skipped, so is
# an entry smaller than `jax_persistent_cache_min_entry_size_bytes`, and only process 0
# of a job writes (lesson 14). Host callbacks are not among them. Older JAX releases
# never wrote a program with a callback (`jax.debug.print`, `jax.pure_callback`) to the
# cache, and advice saying so is still around.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A program that calls back into Python on every run. Is it written? After
# <code>jax.clear_caches()</code>, is it read back, and does the callback still run?</p>
# </div>

# %%
callback_runs = []


def features_logged(v):
    jax.debug.callback(lambda: callback_runs.append("ran"))
    return jnp.tanh(v) * 2.0 + 1.0


with persistent_cache_events() as first_events:
    jax.jit(features_logged)(v16)
jax.clear_caches()
with persistent_cache_events() as again_events:
    jax.jit(features_logged)(v16)
jax.effects_barrier()  # wait for the callbacks

# %% tags=["answer"] jupyter={"source_hidden": true}
logged_entries = [e for e in os.listdir(local_cache.name) if "features_logged" in e]
print(dict(first_events), dict(again_events), f"callback runs: {len(callback_runs)}")
assert first_events["cache_misses"] == 1 and len(logged_entries) == 1  # written
assert again_events["cache_hits"] == 1  # read back
assert callback_runs == ["ran", "ran"]  # and the callback still runs

# %% [markdown]
# On this release it is written, read back, and the callback runs from the executable
# read from disk: the lowered program refers to its callbacks by position, and JAX hands
# the current Python functions over when it loads the executable.
#
# Before going on, every setting goes back to where it was, and `reset_cache()` makes
# JAX forget the directory it had opened.

# %%
for name, value in saved_settings.items():
    jax.config.update(name, value)
compilation_cache.reset_cache()
local_cache.cleanup()
assert {name: getattr(jax.config, name) for name in CACHE_SETTINGS} == saved_settings

# %% [markdown]
# The five caches, in the order a call meets them:
#
# | cache | lives | keyed on | a hit skips | a miss shows as |
# | --- | --- | --- | --- | --- |
# | fast path (C++) | in memory, one for the process | the Python function and `jit`'s options by value, the arguments' types, shardings and committedness, static values, configuration | Python: the call goes straight to the executable | nothing counted; a slower call, and `jax.no_tracing()` raises |
# | trace cache | in memory | the function, `jit`'s parsed options object (by identity), abstract types and pytree structure of the arguments, static values, tracing context | running your Python | `traces`, with JAX's explanation or none |
# | lowering cache | in memory | the jaxpr, input and output shardings (committed or not) | lowering to StableHLO | `lowerings`, never explained |
# | compilation cache | in memory | the lowered module, compile options, device assignment | XLA | `compiles` |
# | persistent cache | on disk | a hash of the module (its name included), jaxlib and platform versions, XLA flags, compile options, the devices' topology | XLA, in a later process whose key matches (not another process of the same job here) | `/jax/compilation_cache/` events; `compiles` still counts the read |
#
# `jax.clear_caches()` empties the four in memory; the disk keeps its files until you
# delete them. Each in-memory cache is keyed on what the one before produced, so a hit
# in one never guarantees a hit in the next: a new device assignment hits the trace and
# lowering caches and still compiles (lesson 12).

# %% [markdown]
# ## One export for every batch size
#
# `jax.export` lowers a function to a serialisable `Exported`. Its input shapes may be
# *symbolic*: `export.symbolic_shape("b, 4")` is a batch of any size `b` with 4 features.
# One trace, one lowering, and the StableHLO has `?` where the batch size goes.


# %%
def head(x):
    w = jnp.linspace(-1.0, 1.0, 12, dtype=x.dtype).reshape(4, 3)
    return jnp.tanh(x @ w).sum(axis=1)


batch_spec = jax.ShapeDtypeStruct(export.symbolic_shape("b, 4"), jnp.float32)
with jitlab.count_compiles(head) as at_export:
    exported = export.export(jax.jit(head))(batch_spec)
module = exported.mlir_module()
signature = next(line for line in module.splitlines() if "func public @main" in line)
print("export:", at_export, "|", exported.in_avals, "->", exported.out_avals)
print(signature.strip()[:90])
assert (at_export.traces, at_export.lowerings, at_export.compiles) == (1, 1, 0)
assert "tensor<?x4xf32>" in signature

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The exported function is then called with batches of 3, 5, 7 and 3 rows. How many
# times is <code>head</code> traced, how many traces, lowerings and compilations happen
# in all, and how does that compare with plain <code>jax.jit(head)</code> on the same
# batches?</p></div>

# %%
batches = [np.ones((b, 4), np.float32) for b in (3, 5, 7, 3)]
with jitlab.count_compiles(head) as head_count:
    via_export = jitlab.measure(
        "4 calls over 3 batch sizes, exported.call",
        lambda: [exported.call(b) for b in batches],
        count=None,
    )
head_jit = jax.jit(head)
via_jit = jitlab.measure(
    "4 calls over 3 batch sizes, jax.jit(head)",
    lambda: [head_jit(b) for b in batches],
    count=head,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
routes = jitlab.compare(
    via_export, via_jit, bench="4 calls over 3 batch sizes, export vs jit"
)
steps = [(r.traces, r.counts.lowerings, r.compiles) for r in (via_export, via_jit)]
print("traces of head by exported.call:", head_count.traces)
np.testing.assert_allclose(
    np.concatenate(via_export.result), np.concatenate(via_jit.result)
)
assert head_count.traces == 0  # head's Python never runs again ...
assert steps == [(3, 3, 3), (3, 3, 3)], steps  # ... and yet 3, 3, 3, as jax.jit
assert (
    not via_export.counts.explanations
)  # the wrapper lives inside jax: never explained

# %% [markdown]
# `head` is never traced again, and yet the calls cost exactly what plain `jax.jit`
# costs: three traces, three lowerings and three compilations for three sizes. What is
# traced is a small wrapper inside JAX (its events are named `call_exported`): it holds
# the stored module, and each new concrete size is lowered again (the `?` is filled in,
# "shape refinement") and compiled by XLA. The time against plain `jit` is printed
# above as a ratio, not asserted: the wrapper has never been faster where we ran it.
#
# So an export does not save the trace, the lowering or the compilation for each size.
# What it buys is elsewhere: the program no longer needs your Python (another process,
# or a later JAX release within export's compatibility window, can call it), it can be
# stored as bytes (`exported.serialize()`, which needs the `flatbuffers` package, not
# installed here), and the Python that built it cannot drift, since it never runs
# again. Buckets still matter. A fixed dimension stays fixed:

# %%
wrong_width = jitlab.attempt(exported.call, np.ones((3, 5), np.float32))
print(wrong_width)
assert type(wrong_width.error) is ValueError, wrong_width
assert "Shape mismatch" in str(wrong_width.error)

# %% [markdown]
# ## Compile time that grows with the program
#
# Not every slow compilation is a recompilation. A program can compile once, as it
# should, and still take seconds, because it is big. The usual cause is a Python loop
# inside `jit`: tracing runs the loop, so the jaxpr gets one copy of the body for every
# step. Here is a stack of layers written two ways: a Python `for` over the layers'
# weights, and `lax.scan` over the same weights stacked on a leading axis.


# %%
def layer(h, w):
    return jnp.tanh(h @ w) + 0.5 * h


def stack_for(h, ws):
    for i in range(ws.shape[0]):  # unrolled while tracing: one body per layer
        h = layer(h, ws[i])
    return h


def stack_scan(h, ws):
    return jax.lax.scan(lambda h, w: (layer(h, w), None), h, ws)[0]


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>1, 16, 32 and 64 layers. How do the number of equations in the jaxpr, the trace
# time and the compile time grow for each version?</p></div>

# %%
h0 = np.full((4, 8), 0.1, np.float32)
growth = []
for layers in (1, 16, 32, 64):
    ws = np.random.default_rng(layers).normal(size=(layers, 8, 8)).astype(np.float32)
    for stack in (stack_for, stack_scan):
        with jitlab.count_compiles(stack) as n:
            traced = jax.jit(stack).trace(h0, ws)  # the three stages, one at a time
            traced.lower().compile()
        row = {
            "layers": layers,
            "kind": stack.__name__,
            "equations": len(traced.jaxpr.eqns),
        }
        growth.append(
            {
                **row,
                "compiles": n.compiles,
                "trace ms": 1e3 * n.trace_seconds,
                "lower+compile ms": 1e3 * (n.lower_seconds + n.compile_seconds),
            }
        )

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.print_table(growth)
eqns = {(r["kind"], r["layers"]): r["equations"] for r in growth}
big = {
    r["kind"]: r["trace ms"] + r["lower+compile ms"]
    for r in growth
    if r["layers"] == 64
}
for kind, ms in big.items():
    jitlab.record(f"one compilation of 64 layers, {kind}", compiles=1, first_ms=ms)
print(f"64 layers: the Python loop took {big['stack_for'] / big['stack_scan']:.1f}x")
assert all(r["compiles"] == 1 for r in growth)  # one compilation each: no recompiling
for_eqns = [eqns["stack_for", n] for n in (16, 32, 64)]
assert (for_eqns[2] - for_eqns[1]) // 32 >= 3  # per layer: a slice, a matmul, a tanh...
assert for_eqns[2] - for_eqns[1] == 2 * (for_eqns[1] - for_eqns[0])  # linear
assert len({eqns["stack_scan", n] for n in (1, 16, 32, 64)}) == 1  # scan: no growth
assert big["stack_for"] > 2 * big["stack_scan"], big
np.testing.assert_allclose(
    jax.jit(stack_for)(h0, ws), jax.jit(stack_scan)(h0, ws), rtol=1e-5
)

# %% [markdown]
# Every version compiled exactly once; nothing here is a cache miss. The Python loop's
# jaxpr grows by the same number of equations for every layer, and trace, lowering and
# compile time grow with it. `lax.scan` traces the body once, whatever the number of
# layers, and its program stays the same size; only the stacked weights get longer.
# `lax.fori_loop` with a fixed number of steps does the same for a loop over steps:


# %%
def steps_fori(h, w, steps):
    return jax.lax.fori_loop(0, steps, lambda i, h: layer(h, w), h)


w8 = np.eye(8, dtype=np.float32)
fori_eqns = [
    len(jax.make_jaxpr(functools.partial(steps_fori, steps=s))(h0, w8).eqns)
    for s in (1, 256)
]
print("fori_loop equations for 1 and 256 steps:", fori_eqns)
assert fori_eqns[0] == fori_eqns[1]

# %% [markdown]
# Two more ways a program gets big without a loop in sight.
#
# **A jitted helper is inlined.** Calling a jitted function from inside another traces
# it once (its own trace cache) and puts a call in the jaxpr; the StableHLO holds it as
# one function called from each place. But there is no separate executable: XLA inlines
# every call, so the compiled program holds one copy of the helper per call, exactly as
# if it were not jitted.

# %%
layer_jit = jax.jit(layer)


def stack_of_jitted(h, ws):
    for i in range(16):
        h = layer_jit(h, ws[i])
    return h


ws16 = np.random.default_rng(16).normal(size=(16, 8, 8)).astype(np.float32)
with jitlab.count_compiles(None) as everything:
    traced = jax.jit(stack_of_jitted).trace(h0, ws16)
    lowered = traced.lower()
    compiled = lowered.compile()
stablehlo, optimised = lowered.as_text(), compiled.as_text()
calls_in_jaxpr = sum(e.primitive.name == "jit" for e in traced.jaxpr.eqns)
print(
    f"{everything}\njaxpr: {calls_in_jaxpr} calls of layer | StableHLO: "
    f"{stablehlo.count('call @')} calls, {stablehlo.count('stablehlo.tanh')} tanh | "
    f"compiled: {optimised.count(' call(')} calls, {optimised.count('tanh(')} tanh"
)
assert everything.compiles == 1  # one executable: layer_jit gets none of its own
assert calls_in_jaxpr == 16 and stablehlo.count("call @") == 16
assert stablehlo.count("stablehlo.tanh") == 1  # one shared function in StableHLO ...
assert optimised.count(" call(") == 0 and optimised.count("tanh(") == 16  # ... inlined

# %% [markdown]
# **A captured array is embedded.** An array read from a closure or a global (lesson 08)
# is not an argument: its values are written into the program, so a large one makes
# the module, the compile and every persistent-cache entry large. JAX warns when the
# captured constants pass `jax_captured_constants_warn_bytes`, 2 GB by default; the cell
# lowers the threshold to 1 MB for a 4 MB table, then puts it back.

# %%
table = np.random.default_rng(2).normal(size=(1024, 1024)).astype(np.float32)  # 4 MB
query = np.ones(1024, np.float32)
saved_warn_bytes = jax.config.jax_captured_constants_warn_bytes
jax.config.update("jax_captured_constants_warn_bytes", 1_000_000)
try:
    with warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always")
        captured = jax.jit(lambda v: table @ v).lower(query)
        passed = jax.jit(lambda t, v: t @ v).lower(table, query)
finally:
    jax.config.update("jax_captured_constants_warn_bytes", saved_warn_bytes)

# %%
captured_text, passed_text = captured.as_text(), passed.as_text()
warned = [str(w.message) for w in caught_warnings if w.category is UserWarning]
ratio = len(captured_text) / len(passed_text)
print(
    f"StableHLO text: {len(captured_text):,} characters captured, "
    f"{len(passed_text):,} passed ({ratio:,.0f}x)"
)
print(warned[0][:100] + " …")
assert ratio > 10_000  # the 4 MB are in the program, as text
assert "func.func public @main(%arg0: tensor<1024xf32>" in captured_text
assert any("A large amount of constants were captured" in w for w in warned)
assert jax.config.jax_captured_constants_warn_bytes == saved_warn_bytes

# %% [markdown]
# The captured table is written into the module: its text is more than ten thousand
# times that of the version that takes the table as an argument (about 19,000 times on
# this release), and the argument list has one entry. Pass large arrays as arguments:
# the program stays small, and a new table does not need a new compilation (lesson 08).
#
# ## Summary
#
# | technique | saves | still costs | fails loudly on an unplanned shape? |
# | --- | --- | --- | --- |
# | `lower(ShapeDtypeStruct).compile()` per bucket at start-up | every compilation in the loop | the same compilations, at start-up | yes, `TypeError` |
# | persistent compilation cache | the XLA compile, in a later process whose key matches (written by process 0 only, for programs above both thresholds) | import, trace and lower; disk reads | no (it is a cache) |
# | `jax.export` with symbolic shapes | running your Python again; the program travels without it | a trace, a lowering and an XLA compile per concrete size, as plain `jax.jit` | yes, for a fixed dimension (`ValueError`) |
# | `lax.scan` / `lax.fori_loop` instead of a Python loop | trace, lowering and compile time that grow with the steps | one compilation of one loop body | (not about shapes) |
#
# They combine: warm up a dict of executables at start-up with the persistent cache on,
# and from the second start on a single-process server never runs XLA's compiler. The
# warm child above did exactly that: six hits, no misses.
#
# ## On an accelerator: compiling costs more, running costs less
#
# Everything above was measured on the machine named at the top. The course also runs
# on a TPU chip, and there the balance moves: the step itself runs far faster, while
# compiling it takes about as long as on a CPU, or longer. A small transformer's
# training step, with one, two and four layers, compiled once each with the persistent
# cache on at its default thresholds:
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How many runs of the step does one compilation cost? Which of the three programs
# does the persistent cache write?</p></div>


# %%
def transformer_params(layers, width=128, seed=0):
    keys = iter(jax.random.split(jax.random.key(seed), 4 * layers))
    shapes = {"qkv": (width, 3 * width), "out": (width, width),
              "up": (width, 4 * width), "down": (4 * width, width)}  # fmt: skip
    return [
        {
            name: 0.02 * jax.random.normal(next(keys), shape)
            for name, shape in shapes.items()
        }
        for _ in range(layers)
    ]


def transformer_block(p, h, heads=4):
    batch, seq, width = h.shape
    split = lambda a: a.reshape(batch, seq, heads, width // heads)  # noqa: E731
    q, k, v = jnp.split(h @ p["qkv"], 3, axis=-1)
    scores = jnp.einsum("bqhd,bkhd->bhqk", split(q), split(k)) / np.sqrt(width // heads)
    mixed = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), split(v))
    h = jax.nn.standardize(h + mixed.reshape(h.shape) @ p["out"], axis=-1)
    return jax.nn.standardize(h + jax.nn.gelu(h @ p["up"]) @ p["down"], axis=-1)


def transformer_loss(params, h):
    for p in params:  # a Python loop: one block per layer in the program
        h = transformer_block(p, h)
    return jnp.mean(h**2)


@jax.jit
def transformer_step(params, h):
    loss, grads = jax.value_and_grad(transformer_loss)(params, h)
    return loss, jax.tree.map(lambda w, g: w - 0.01 * g, params, grads)


# %%
class CacheDecisions(logging.Handler):
    """JAX's own words on each persistent-cache write: whether it wrote the program,
    and the compile time it judged by (read from its debug log)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.seconds, self.written = None, False

    def emit(self, record):
        text = record.getMessage()
        found = re.search(r"'(jit_transformer_step)' .*\(([\d.]+)s\)", text)
        if found:
            self.seconds = float(found[2])
            self.written = "took at least" in text


tokens = jax.random.normal(jax.random.key(1), (4, 32, 128))
decisions = logging.getLogger("jax._src.compiler")
saved_logger = (decisions.level, decisions.propagate)
step_cache = tempfile.TemporaryDirectory(prefix="jitlab-l10-step-")
jax.config.update("jax_compilation_cache_dir", step_cache.name)
steps = []
try:
    decisions.setLevel(logging.DEBUG)
    decisions.propagate = False  # JAX's other debug lines stay out of the page
    for layers in (1, 2, 4):
        params = transformer_params(layers)
        heard = CacheDecisions()
        decisions.addHandler(heard)
        with jitlab.count_compiles(transformer_step) as n:
            transformer_step(params, tokens)
        decisions.removeHandler(heard)
        files = [f for f in os.listdir(step_cache.name) if "transformer_step" in f]
        run_s = jitlab.median_seconds(
            functools.partial(transformer_step, params, tokens), repeats=9
        )
        steps.append({"layers": layers, "compiles": n.compiles,
                      "compile s": n.compile_seconds, "JAX's compile s": heard.seconds,
                      "written": heard.written, "files": len(files),
                      "run ms": 1e3 * run_s})  # fmt: skip
finally:
    decisions.setLevel(saved_logger[0])
    decisions.propagate = saved_logger[1]
    jax.config.update("jax_compilation_cache_dir", None)
    compilation_cache.reset_cache()
    step_cache.cleanup()

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.print_table(steps)
threshold = jax.config.jax_persistent_cache_min_compile_time_secs
for row in steps:
    jitlab.record(
        f"transformer step, {row['layers']} layers: compile vs run",
        compiles=row["compiles"],
        first_ms=1e3 * row["compile s"],
        steady_us=1e3 * row["run ms"],
        speedup=1e3 * row["compile s"] / row["run ms"],
        written=row["written"],
    )
    assert row["compiles"] == 1  # each size compiled once: no recompilation here
    assert row["JAX's compile s"] is not None  # JAX judged this program for the cache
    seconds = row["JAX's compile s"]  # as JAX's log prints it, to two places
    assert seconds >= threshold if row["written"] else seconds <= threshold  # the rule
    assert row["files"] == sum(
        r["written"] for r in steps if r["layers"] <= row["layers"]
    )
    # One compilation costs many runs of the step everywhere; more on an accelerator,
    # where the step runs faster (the table below; wide margins).
    runs_per_compile = 1e3 * row["compile s"] / row["run ms"]
    assert runs_per_compile > (10 if jax.default_backend() == "cpu" else 100), row
assert threshold == 1.0  # the default: only programs slower than a second are written

# %% [markdown]
# The same steps on the course's other machines, from their committed results files
# (`first_ms` is the compile time, `steady_us` the run time, `speedup` how many runs one
# compilation costs, `written` whether the persistent cache wrote it):

# %%
jitlab.print_table(
    {"layers": layers, **row}
    for layers in (1, 2, 4)
    for row in jitlab.measured_on_machines(
        f"transformer step, {layers} layers: compile vs run",
        "first_ms",
        "steady_us",
        "speedup",
        "written",
    )
)

# %% [markdown]
# Read the two tables side by side. Whether the cache writes a program hangs on one
# number, the compile time JAX measured. On a CPU these steps can compile in under the
# one-second bar, and then nothing is written, but the same steps took from under a
# second to a few seconds from one run to another, and were written whenever they took
# a second or more. On the TPU the step runs far faster and hardly grows with
# the layers, while its compilation grows with each layer: for the bigger programs one
# compilation costs many more steps than on a CPU, and they pass the bar and are
# written to disk. So the bigger the model, the more a recompilation costs on the chip,
# in steps above all, and there the persistent cache, with its defaults, starts to pay.
#
# Not every recompilation costs more steps on the chip. For lesson 00's tiny
# `polynomial`, the first call cost fewer cached calls on the TPU than on a CPU, since
# a cached call costs more there (`speedup` is first call over cached call):

# %%
jitlab.show_measured_on_machines("first call vs cached call", "speedup")

# %% tags=["remove-input"]
jitlab.outro()
