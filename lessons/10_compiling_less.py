# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   jitlab:
#     title: Paying for compilation less
#     fix: AOT warm-up with lower().compile(), the persistent compilation cache, jax.export with symbolic shapes
#     questions:
#       - When a compilation cannot be avoided, can it at least happen before the first request?
#       - Can a second process reuse what the first one compiled?
#       - What does jax.export with a symbolic batch size save, and what does it not?
#       - Why does a function that misses the tracing cache sometimes compile in a few milliseconds?
#     objectives:
#       - Compile ahead of time with jax.jit(f).lower(jax.ShapeDtypeStruct(...)).compile(), with no real data.
#       - Build a dict of executables, one per bucket, at start-up, and serve a stream of requests with zero compilations.
#       - Turn on the persistent compilation cache, and show with jax.monitoring events that a second process hits it.
#       - Tell the tracing cache from the compilation cache by counting events.
#       - Export a function once for every batch size with jax.export.symbolic_shape, and measure what calling it still costs.
#     prerequisites:
#       lessons: [what_jit_caches, shapes]
#     minutes: {teaching: 25, exercises: 20}
#     keypoints:
#       - jax.jit(f).lower(ShapeDtypeStruct...).compile() traces, lowers and compiles for shapes you name, before any data exists; the result is a Compiled executable.
#       - A Compiled never compiles again; called with another shape or dtype it raises TypeError instead of silently compiling.
#       - A dict of Compiled, one per bucket, built at start-up moves every compilation out of the serving loop; the total work is the same, the worst request is not.
#       - The persistent compilation cache (jax_compilation_cache_dir) keeps executables on disk; a second process with the same program, JAX version and device gets a cache hit instead of an XLA compile.
#       - "The persistent cache only skips the backend compile: tracing and lowering still run, and jitlab's counter still sees one compile request, answered from disk."
#       - By default only programs that took at least 1 s to compile are written; lower jax_persistent_cache_min_compile_time_secs to cache small ones.
#       - jax.export with a symbolic batch size traces and lowers once for every size, but each new concrete size is still compiled by XLA when called.
#     instructor_notes:
#       - "Start with the latency plot of the serving loop: the spikes are the compilations, and nobody notices them in the total time."
#       - "Learners expect the warm-up to make the whole run faster. It does not: the same programs are compiled, only earlier. The win is the worst request, and a TypeError instead of a silent compile for a shape nobody planned."
#       - "The two subprocesses take a few seconds; most of it is importing JAX. Point at the compile times the children report, not at the wall time."
#       - "The persistent cache is a trusted directory: anyone who can write to it can run code in your process. Do not share it with people you do not trust."
#       - "Exported.serialize() needs the flatbuffers package, which the course does not install; the lesson calls the Exported in the same process."
# ---

# %% [markdown]
# # 10 · Paying for compilation less
#
# Lessons 01 to 09 removed compilations nobody wanted. Some are wanted: a server with
# six bucket sizes needs six programs, and a fresh process needs all of them again. This
# lesson moves those compilations to start-up, keeps them on disk between processes, and
# tries one export for every batch size, counting each time what is saved and what is not.

# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import collections
import contextlib
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

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


BUCKETS = (16, 32, 64, 128, 256, 512)


def bucket_for(length: int) -> int:
    return next(b for b in BUCKETS if b >= length)


def pad_to(x: np.ndarray, size: int) -> np.ndarray:
    padded = np.zeros(size, dtype=x.dtype)  # NumPy: padding compiles nothing
    padded[: len(x)] = x
    return padded


rng = np.random.default_rng(0)
lengths = rng.integers(1, 513, size=60)
requests = [rng.normal(size=int(n)).astype(np.float32) for n in lengths]
buckets_used = sorted({bucket_for(len(x)) for x in requests})
print(
    f"{len(requests)} requests, lengths {lengths.min()}..{lengths.max()}, buckets {buckets_used}"
)
assert buckets_used == list(BUCKETS)

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
score_jit = jax.jit(score)


def serve_all(call, stream):
    """Run every request through `call(padded, n)`.

    Returns the results, each request's seconds, and each request's compilations.
    """
    results, seconds, compiles = [], [], []
    for x in stream:
        with jitlab.count_compiles(None, explain=False) as n:
            start = time.perf_counter()
            out = jax.block_until_ready(
                call(pad_to(x, bucket_for(len(x))), np.int32(len(x)))
            )
            seconds.append(time.perf_counter() - start)
        results.append(float(out))
        compiles.append(n.compiles)
    return results, seconds, compiles


with jitlab.count_compiles(score) as lazy, jitlab.stopwatch() as lazy_clock:
    lazy_results, lazy_seconds, lazy_compiles = serve_all(score_jit, requests)

compiling_requests = [i for i, c in enumerate(lazy_compiles) if c]
first_of_each_bucket = sorted(
    next(i for i, x in enumerate(requests) if bucket_for(len(x)) == b) for b in BUCKETS
)
print(lazy)
print(
    f"serving: {lazy_clock.seconds:.2f} s; worst request {1e3 * max(lazy_seconds):.0f} ms, "
    f"median {1e6 * statistics.median(lazy_seconds):.0f} us"
)
print("requests that compiled:      ", compiling_requests)
print("first request of each bucket:", first_of_each_bucket)
assert lazy.compiles == len(BUCKETS), lazy.explanations
assert compiling_requests == first_of_each_bucket
np.testing.assert_allclose(
    lazy_results, [score_numpy(x) for x in requests], rtol=1e-4, atol=1e-6
)

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

print("lower:  ", at_lower, f"({at_lower.lowerings} lowering)")
print("compile:", at_compile)
print(type(lowered).__name__, "->", type(compiled_64).__name__)
print(compiled_64.args_info[0])
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
attempts = {
    "float32[64], np.int32": (sample, np.int32(40)),
    "float64[64] (NumPy), np.int32": (sample.astype(np.float64), np.int32(40)),
    "float32[64], Python int": (sample, 40),
    "float16[64], np.int32": (sample.astype(np.float16), np.int32(40)),
    "float32[65], np.int32": (np.zeros(65, np.float32), np.int32(40)),
}
outcomes = []
for label, args in attempts.items():
    with jitlab.count_compiles(None) as n:
        try:
            compiled_64(*args)
            outcome = "runs"
        except TypeError as err:
            outcome = "TypeError"
            message = str(err)
    outcomes.append(
        {"arguments": label, "outcome": outcome, "compilations": n.compiles}
    )
jitlab.print_table(outcomes)
print("\n" + message.splitlines()[0][:90] + "...")
print(message.splitlines()[-1])

assert [row["outcome"] for row in outcomes] == [
    "runs",
    "runs",
    "runs",
    "TypeError",
    "TypeError",
]
assert all(row["compilations"] == 0 for row in outcomes)
assert "compiled with float32[64] and called with float32[65]" in message

# %% [markdown]
# Three calls run and two raise `TypeError`, and none compiles. The float64 NumPy array
# runs because, with x64 off, JAX canonicalises it to float32 before the check; a Python
# `int` passes as `int32`. A float16 array or one more element is a different type, and
# the executable says so instead of quietly building another.
#
# <div class="admonition info"><p class="admonition-title">The jitted function shares
# the work</p><p>On jax 0.10.2, <code>lower().compile()</code> on a jitted function also
# fills that function's own cache: calling <code>fresh_score</code> on
# <code>float32[64]</code> afterwards compiles nothing. But the jitted function, unlike
# the <code>Compiled</code>, still compiles silently for a shape nobody planned.</p></div>

# %%
with jitlab.count_compiles(score) as planned:
    fresh_score(sample, np.int32(40))
with jitlab.count_compiles(score) as unplanned:
    fresh_score(np.zeros(65, np.float32), np.int32(40))
print("planned shape:  ", planned)
print("unplanned shape:", unplanned)
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
score_jit.clear_cache()  # forget the lazy run: the warm-up pays in full


def warm_up(fn, buckets, dtype):
    jitted = jax.jit(fn)
    return {
        b: jitted.lower(
            jax.ShapeDtypeStruct((b,), dtype), jax.ShapeDtypeStruct((), jnp.int32)
        ).compile()
        for b in buckets
    }


with jitlab.count_compiles(score) as startup, jitlab.stopwatch() as startup_clock:
    executables = warm_up(score, BUCKETS, jnp.float32)


def call_bucket(padded, n):
    return executables[padded.shape[0]](padded, n)


with (
    jitlab.count_compiles(None) as in_loop,
    jitlab.stopwatch() as warm_clock,
    jax.no_tracing(),
):
    warm_results, warm_seconds, warm_compiles = serve_all(call_bucket, requests)

print("start-up:", startup, f"in {startup_clock.seconds:.2f} s")
print("serving: ", in_loop, f"in {warm_clock.seconds:.3f} s")
assert startup.compiles == len(BUCKETS)
assert in_loop.compiles == 0 and in_loop.traces == 0 and sum(warm_compiles) == 0
np.testing.assert_allclose(warm_results, lazy_results, rtol=1e-6)

# %% [markdown]
# Side by side. "Worst request" is the slowest of the sixty.

# %%
comparison = [
    {
        "strategy": "lazy: compile on first request",
        "compiles before serving": 0,
        "compiles while serving": lazy.compiles,
        "start-up s": 0.0,
        "serving s": lazy_clock.seconds,
        "worst request ms": 1e3 * max(lazy_seconds),
        "median request us": 1e6 * statistics.median(lazy_seconds),
    },
    {
        "strategy": "warm-up: dict of Compiled",
        "compiles before serving": startup.compiles,
        "compiles while serving": in_loop.compiles,
        "start-up s": startup_clock.seconds,
        "serving s": warm_clock.seconds,
        "worst request ms": 1e3 * max(warm_seconds),
        "median request us": 1e6 * statistics.median(warm_seconds),
    },
]
jitlab.print_table(comparison)
for row in comparison:
    jitlab.record(
        row["strategy"],
        compiles=row["compiles while serving"],
        first_ms=row["worst request ms"],
        steady_us=row["median request us"],
        total_s=row["start-up s"] + row["serving s"],
    )
jitlab.record(
    "worst request, lazy vs warm-up", speedup=max(lazy_seconds) / max(warm_seconds)
)
assert max(lazy_seconds) > 3 * max(warm_seconds), (
    "the worst lazy request includes a compilation"
)

# %%
fig, ax = plt.subplots(figsize=(7, 3.2))
ax.semilogy(1e3 * np.array(lazy_seconds), "o-", ms=3, color="C3", label="lazy")
ax.semilogy(
    1e3 * np.array(warm_seconds), "o-", ms=3, color="C2", label="warm-up at start-up"
)
ax.set_xlabel("request")
ax.set_ylabel("latency (ms, log scale)")
ax.set_title("Six compilations, paid by six unlucky requests")
ax.legend()
ax.grid(alpha=0.3)
fig.tight_layout()
plt.show()

# %% [markdown]
# The same six programs are compiled either way (six and six, counted above), so
# start-up plus serving costs about the same. What moves is *who* pays: with the
# warm-up, nobody in the loop.
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
print("jnp.pad:", helper)
print("NumPy:  ", numpy_padding)
assert helper.compiles >= 3 and numpy_padding.compiles == 0

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
# The experiment uses two real processes. Each child imports JAX, builds the same
# dict of six executables as the warm-up above, and reports the compile time *it*
# measured, plus the `jax.monitoring` events it saw whose names start with
# `/jax/compilation_cache/`. A generic event listener catches every event, so the child
# does not need to know the names in advance; a duration listener counts its traces
# and lowerings. The cache settings arrive as environment variables; the children's
# code never mentions the cache.

# %%
CHILD = (
    textwrap.dedent(
        """
        import collections, json, time
        start = time.perf_counter()
        import jax, jax.numpy as jnp
        import_s = time.perf_counter() - start
        from jax import monitoring

        events = collections.Counter()
        def on_event(name, **kwargs):
            if name.startswith("/jax/compilation_cache/"):
                events[name] += 1
        def on_duration(name, seconds, fun_name=None, **kwargs):
            if fun_name in ("score", "jit(score)") and "/core/compile/" in name:
                events[name.rsplit("/", 1)[-1]] += 1  # traces, lowerings, compile requests
        monitoring.register_event_listener(on_event)
        monitoring.register_event_duration_secs_listener(on_duration)
        """
    )
    + inspect.getsource(score)  # the very function this notebook serves
    + textwrap.dedent(
        """
        length = jax.ShapeDtypeStruct((), jnp.int32)
        start = time.perf_counter()
        lowered = {
            b: jax.jit(score).lower(jax.ShapeDtypeStruct((b,), jnp.float32), length)
            for b in (16, 32, 64, 128, 256, 512)
        }
        trace_lower_s = time.perf_counter() - start
        start = time.perf_counter()
        compiled = {b: low.compile() for b, low in lowered.items()}
        compile_s = time.perf_counter() - start
        print(json.dumps({"import_s": import_s, "trace_lower_s": trace_lower_s,
                          "compile_s": compile_s, "events": events}))
        """
    )
)


def run_child(cache_dir: str) -> dict:
    env = {
        **os.environ,
        "JAX_COMPILATION_CACHE_DIR": cache_dir,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",  # cache even small programs
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }
    start = time.perf_counter()
    child = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    report = json.loads(child.stdout.strip().splitlines()[-1])
    report["process_s"] = time.perf_counter() - start
    return report


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The first child starts with an empty cache directory, the second with what the
# first left there. Which events does each report, and how many?</p></div>

# %%
with tempfile.TemporaryDirectory(prefix="jitlab-l10-") as cache_dir:
    cold = run_child(cache_dir)
    warm = run_child(cache_dir)
    entries = sorted(os.listdir(cache_dir))

for name, report in (("cold", cold), ("warm", warm)):
    short = {
        k.removeprefix("/jax/compilation_cache/"): v
        for k, v in report["events"].items()
    }
    print(f"{name} child: {short}")
print(f"{len(entries)} files in the cache, e.g. {entries[0][:40]}...")
cold_events, warm_events = (
    collections.Counter(cold["events"]),
    collections.Counter(warm["events"]),
)
assert cold_events["/jax/compilation_cache/cache_misses"] == len(BUCKETS)
assert cold_events["/jax/compilation_cache/cache_hits"] == 0
assert warm_events["/jax/compilation_cache/cache_hits"] == len(BUCKETS)
assert warm_events["/jax/compilation_cache/cache_misses"] == 0
assert (
    warm_events["jaxpr_trace_duration"]
    == warm_events["jaxpr_to_mlir_module_duration"]
    == 6
)
assert warm_events["backend_compile_duration"] == 6  # sent for a hit too (see below)
assert len(entries) == len(BUCKETS) and all(e.startswith("jit_score-") for e in entries)

# %% [markdown]
# Six misses, then six hits. (A "miss" event is sent when an entry is *written*, so a
# program below the thresholds produces neither.) The times each child measured:

# %%
processes = [
    {
        "process": name,
        "import jax s": report["import_s"],
        "trace+lower s": report["trace_lower_s"],
        "compile s": report["compile_s"],
        "whole process s": report["process_s"],
    }
    for name, report in (("cold cache", cold), ("warm cache", warm))
]
jitlab.print_table(processes)
for row in processes:
    jitlab.record(
        f"six buckets in a new process, {row['process']}",
        first_ms=1e3 * row["compile s"],
        total_s=row["whole process s"],
    )
jitlab.record(
    "compile, cold vs warm persistent cache",
    speedup=cold["compile_s"] / warm["compile_s"],
)
assert cold["compile_s"] > 2 * warm["compile_s"], (
    "reading six executables beats compiling six"
)
assert warm["import_s"] > warm["compile_s"], "a warm start is dominated by import jax"

# %% [markdown]
# The compile step shrinks to reading files. Trace and lower do not: the warm child
# still traced and lowered six times (its events say so), because the cache is keyed on
# the lowered program, and the key must be computed before it can be looked up. In the
# warm child, `import jax` now takes longer than getting all six executables.
#
# <div class="admonition warning"><p class="admonition-title">Trust the directory</p>
# <p>A cache entry is an executable. Anyone who can write to the cache directory can make
# your process run their code: keep it private.</p></div>
#
# ## The tracing cache is not the compilation cache
#
# Back in this process. Two caches sit in front of XLA: jit's in-memory cache, keyed on
# the function object and the argument types (lessons 01 to 08 were all about missing
# it), and the persistent cache, keyed on a hash of the lowered program, the compile
# options and flags, the device and the jaxlib version. A miss in the first can still
# be a hit in the second. The listener below counts the cache's events around a block.


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


CACHE_SETTINGS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)
saved_settings = {name: getattr(jax.config, name) for name in CACHE_SETTINGS}
print("before:", saved_settings)
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
with jitlab.count_compiles(features) as n, persistent_cache_events() as events:
    jax.jit(features)(v16)
print(n, dict(events), os.listdir(local_cache.name))
assert n.compiles == 1
assert events["cache_misses"] == 0 and events["cache_hits"] == 0
assert os.listdir(local_cache.name) == []

# %% [markdown]
# Nothing: the default `jax_persistent_cache_min_compile_time_secs` of one second keeps
# quick programs out, which is usually what you want. Lower both thresholds, and drop
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
print(reread, dict(events))
explanation = " ".join(reread.explanations[-1].split())
print(
    "JAX's explanation:",
    explanation[explanation.index("never seen") : explanation.index(" id=")],
)
print(
    f"compile step: {1e3 * written.compile_seconds:.1f} ms when written, "
    f"{1e3 * reread.compile_seconds:.1f} ms when read back"
)
assert reread.traces == 1 and reread.lowerings == 1  # a tracing-cache miss ...
assert "never seen function: features" in explanation
assert (
    events["cache_hits"] == 1 and events["cache_misses"] == 0
)  # ... answered from disk
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
print(n, dict(events))
programs_on_disk = sorted(name.split("-")[0] for name in os.listdir(local_cache.name))
print(programs_on_disk)
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
# Before going on, every setting goes back to where it was, and `reset_cache()` makes
# JAX forget the directory it had opened.

# %%
for name, value in saved_settings.items():
    jax.config.update(name, value)
compilation_cache.reset_cache()
local_cache.cleanup()
restored = {name: getattr(jax.config, name) for name in CACHE_SETTINGS}
print("after: ", restored)
assert restored == saved_settings

# %% [markdown]
# | | tracing cache | persistent compilation cache |
# | --- | --- | --- |
# | lives | in memory, per Python function | on disk, shared by processes |
# | keyed on | the function object, argument shapes, dtypes, pytree structure, static values, config | a hash of the lowered program (its name included), compile options, XLA flags, device, jaxlib version |
# | a hit skips | tracing, lowering and compiling | only the XLA compile |
# | cleared by | `jax.clear_caches()`, `f.clear_cache()`, a new process | deleting the directory |
#
# ## One export for every batch size
#
# `jax.export` lowers a function to a serialisable `Exported`. Its input shapes may be
# *symbolic*: `export.symbolic_shape("b, 4")` is a batch of any size `b` with 4 features.
# One trace, one lowering, and the StableHLO has `?` where the batch size goes.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The exported function is then called with batches of 3, 5, 7 and 3 rows. How many
# times is <code>head</code> traced, and how many compilations happen?</p></div>


# %%
def head(x):
    w = jnp.linspace(-1.0, 1.0, 12, dtype=x.dtype).reshape(4, 3)
    return jnp.tanh(x @ w).sum(axis=1)


batch_spec = jax.ShapeDtypeStruct(export.symbolic_shape("b, 4"), jnp.float32)
with jitlab.count_compiles(head) as at_export:
    exported = export.export(jax.jit(head))(batch_spec)
signature = next(
    line for line in exported.mlir_module().splitlines() if "func public @main" in line
)
print("export:", at_export)
print(exported.in_avals, "->", exported.out_avals)
print(signature.strip()[:90])
assert (at_export.traces, at_export.lowerings, at_export.compiles) == (1, 1, 0)
assert "tensor<?x4xf32>" in signature

# %%
sizes = (3, 5, 7, 3)
with (
    jitlab.count_compiles(head) as head_count,
    jitlab.count_compiles("call_exported") as wrapper,
    jitlab.count_compiles(None) as calls,
):
    outputs = [exported.call(np.ones((b, 4), np.float32)) for b in sizes]
print("head:", head_count)
print("the wrapper:", wrapper)
print("everything:", calls)
jitlab.record(
    "jax.export, 4 calls over 3 batch sizes",
    compiles=calls.compiles,
    total_s=calls.total_seconds,
)
assert [o.shape for o in outputs] == [(b,) for b in sizes]
assert head_count.traces == 0  # the Python function is never traced again
assert calls.compiles == len(set(sizes))  # but every new concrete size is compiled
assert wrapper.compiles == calls.compiles  # ... as the jitted wrapper `call_exported`

# %% [markdown]
# `head` is never traced again, yet three sizes cost three compilations. `Exported.call`
# wraps the stored module in a small jitted function, and XLA compiles for concrete
# shapes: the `?` is filled in (shape refinement) and compiled per size. So an export
# saves the trace and the lowering, and lets a program travel without its Python source
# (`exported.serialize()` gives bytes; it needs the `flatbuffers` package). It does not
# save the XLA compilation per shape; buckets still matter. A fixed dimension stays fixed:

# %%
try:
    exported.call(np.ones((3, 5), np.float32))
except ValueError as err:
    caught = err
else:
    raise AssertionError("expected ValueError for a second dimension of 5")
print(type(caught).__name__, ":", str(caught).splitlines()[0])
assert "Shape mismatch" in str(caught)

# %% [markdown]
# ## Summary
#
# | technique | saves | still costs | fails loudly on an unplanned shape? |
# | --- | --- | --- | --- |
# | `lower(ShapeDtypeStruct).compile()` per bucket at start-up | every compilation in the loop | the same compilations, at start-up | yes, `TypeError` |
# | persistent compilation cache | the XLA compile, in every later process | import, trace and lower; disk reads | no (it is a cache) |
# | `jax.export` with symbolic shapes | tracing and lowering for each size | one XLA compile per concrete size | yes, for a fixed dimension (`ValueError`) |
#
# They combine: warm up a dict of executables at start-up with the persistent cache on,
# and from the second start on a server never runs XLA's compiler. The warm child above
# did exactly that: six hits, no misses.

# %%
jitlab.outro()
