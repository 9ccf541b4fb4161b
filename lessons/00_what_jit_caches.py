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
#     title: What jit caches
#     fix: the measuring instruments (count compilations, time honestly)
#     questions:
#       - What happens, step by step, the first time a jitted function is called?
#       - What does a second call skip, and what decides whether it can?
#       - How do you time and count compilations without fooling yourself?
#     objectives:
#       - Name the five stages (trace, jaxpr, lower, compile, execute) and time each one.
#       - Measure a first call against a cached call on your own machine.
#       - List what goes into the cache key.
#       - Time honestly with block_until_ready, and count compilations of one function only.
#     prerequisites:
#       other:
#         - "NumPy arrays and Python functions"
#         - "Calling `jax.jit` on a function (the JAX quickstart)"
#     minutes: {teaching: 20, exercises: 0}
#     keypoints:
#       - The first call traces the Python function into a jaxpr, lowers it to StableHLO and compiles it with XLA; later calls with the same cache key run the executable directly.
#       - The cache key is the abstract signature of the arguments (shapes, dtypes, weak types, pytree structure, static values), the function object and the configuration context, not the values in the arrays.
#       - Python side effects (print, appending to a list) run only while tracing.
#       - JAX dispatches asynchronously; time with jax.block_until_ready on the output, or you time the queue, not the work.
#       - Count compilations for the function under study only; helpers such as jnp.ones compile too.
#     instructor_notes:
#       - "Demo live: run the first-call/cached-call cell twice; the second time the 'first' call is fast too, because the cache is warm. That surprise is the lesson."
#       - Learners often believe jit compiles at decoration time. Point at the decorator cell, which takes microseconds.
#       - If a laptop shows a smaller first/cached ratio, that is fine; the assertion only needs 10x.
# ---

# %% [markdown]
# # 00 · What jit caches
#
# `jax.jit` turns a Python function into a compiled XLA program, but only when the function
# is called, and only for the kind of arguments it is called with. Everything in this course
# follows from one question: *when does a call find a program already compiled, and when
# must JAX build a new one?* This lesson takes the machine apart and builds the two
# instruments the rest of the course uses: a clock you can trust and a compilation counter.

# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt

# %% [markdown]
# ## Five stages
#
# A jitted call goes through five stages. JAX exposes each one through its ahead-of-time
# API, so we can run them by hand and time them separately:
#
# | stage | API | produces |
# | --- | --- | --- |
# | trace | `jax.jit(f).trace(x)` | a jaxpr: the primitive operations, for abstract inputs |
# | lower | `.lower()` | a StableHLO module for XLA |
# | compile | `.compile()` | an executable for this device |
# | execute | `compiled(x)` | the result |
#
# Decorating does none of this: `jax.jit(f)` only wraps the function.


# %%
def scaled_sine(x):
    return jnp.sin(x) * 2.0 + 1.0


x = jnp.linspace(0.0, 1.0, 8)

with jitlab.stopwatch() as sw_wrap:
    jitted = jax.jit(scaled_sine)
with jitlab.stopwatch() as sw_trace:
    traced = jitted.trace(x)
with jitlab.stopwatch() as sw_lower:
    lowered = traced.lower()
with jitlab.stopwatch() as sw_compile:
    compiled = lowered.compile()
with jitlab.stopwatch() as sw_run:
    result = jax.block_until_ready(compiled(x))

stages = [
    {"stage": "wrap with jax.jit", "ms": 1e3 * sw_wrap.seconds},
    {"stage": "trace -> jaxpr", "ms": 1e3 * sw_trace.seconds},
    {"stage": "lower -> StableHLO", "ms": 1e3 * sw_lower.seconds},
    {"stage": "compile -> executable", "ms": 1e3 * sw_compile.seconds},
    {"stage": "execute", "ms": 1e3 * sw_run.seconds},
]
jitlab.print_table(stages)
assert jnp.allclose(result, scaled_sine(x))
assert sw_compile.seconds > sw_run.seconds, "compiling should cost more than running"

# %% [markdown]
# The trace is a jaxpr: no Python left, only primitives on abstract values `f32[8]`. The
# values in `x` are nowhere in it; only its shape and dtype are.

# %%
print(traced.jaxpr)
assert "sin" in str(traced.jaxpr) and "f32[8]" in str(traced.jaxpr)

# %% [markdown]
# Lowering turns the jaxpr into StableHLO, the compiler's input. The shape is now part of
# the program's type signature: `tensor<8xf32>`.

# %%
hlo = lowered.as_text()
print("\n".join(hlo.splitlines()[:6]))
assert "tensor<8xf32>" in hlo

# %% [markdown]
# A compiled executable accepts exactly the types it was compiled for. Give it nine
# elements instead of eight and it refuses, with a `TypeError`: it has no way to adapt.

# %%
try:
    compiled(jnp.ones(9))
except TypeError as err:
    refusal = err
else:
    raise AssertionError("a Compiled should refuse arguments of another shape")
print(type(refusal).__name__ + ":", str(refusal).splitlines()[0][:120])

# %% [markdown]
# ## First call against cached call
#
# `jitted(x)` does all of the above on its first call and stores the executable in a
# cache. The next call with arguments of the same kind skips straight to *execute*.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How many times slower than a cached call is the first call, on this machine: 2x, 20x
# or 2,000x?</p></div>


# %%
@jax.jit
def polynomial(x):
    return 3.0 * x**3 - 2.0 * x**2 + x - 5.0


timing = jitlab.time_calls(polynomial, jnp.arange(16.0), repeats=200)
print(timing)
jitlab.record(
    "first call vs cached call",
    compiles=1,
    first_ms=1e3 * timing.first_seconds,
    steady_us=1e6 * timing.median_seconds,
    speedup=timing.first_over_steady,
)
assert timing.first_over_steady > 10

# %% [markdown]
# ## Python runs only while tracing
#
# Tracing runs your Python function once, on stand-in values called *tracers*. Python side
# effects (a `print`, appending to a list) happen then and never again: the cached
# executable contains no Python. That makes a side effect a crude trace counter, and a
# classic source of confusion.

# %%
trace_log = []


@jax.jit
def logged_double(x):
    trace_log.append(f"traced with {x}")  # runs at trace time only
    return 2 * x


for value in (1.0, 2.0, 3.0):
    logged_double(jnp.float32(value))
print(trace_log)
assert len(trace_log) == 1, "three calls with the same kind of argument trace once"
assert "Tracer" in trace_log[0], "the function saw a tracer, not the number 1.0"

# %% [markdown]
# ## What goes into the cache key
#
# A call hits the cache when its key matches one seen before. The key holds:
#
# - the **function object** (`jax.jit(f)` caches per `f`; a new lambda is a new key),
# - for every array argument, its **shape**, **dtype** and **weak type** (lesson 03),
# - the **pytree structure** of the arguments, including keyword versus positional (lesson 04),
# - the **values of static arguments** (lessons 05 and 06),
# - the **configuration context**: `jax_enable_x64`, default matmul precision, the mesh… (lesson 12),
# - and, for a committed array, its **device and sharding** (lesson 12).
#
# It does *not* hold the values inside traced arrays. Let's check two rows of that list
# with the course's counter, `jitlab.count_compiles`.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Calling <code>polynomial</code> on three new arrays of the same shape, then on one of a
# new shape: how many compilations?</p></div>

# %%
with jitlab.count_compiles(polynomial) as same_shape:
    for seed in range(3):
        polynomial(jax.random.normal(jax.random.key(seed), (16,)))
with jitlab.count_compiles(polynomial) as new_shape:
    polynomial(jnp.arange(17.0))

print(same_shape)
print(new_shape)
print(new_shape.explanations[0])
assert same_shape.compiles == 0, "new values, same shape: cache hit"
assert new_shape.traces == 1 and new_shape.compiles == 1
assert "f32[17]" in new_shape.explanations[0] and "f32[16]" in new_shape.explanations[0]

# %% [markdown]
# `count_compiles` listens to `jax.monitoring` events, which name the function being
# traced and compiled, and switches on `jax_explain_cache_misses` for the block so it can
# keep JAX's own explanation of each miss. The explanation above is JAX's text, not ours.
#
# ## Count the function under study, and only it
#
# `jnp.ones(n)` is itself a tiny jitted program, compiled once per new `n`. Count every
# compilation in a loop over three shapes and you get twice the truth.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Three new lengths, each built with <code>jnp.ones</code> and fed to a fresh jitted
# function: how many compilations in all, and how many of the function itself?</p></div>


# %%
@jax.jit
def total(x):
    return jnp.sum(x)


with jitlab.count_compiles(total) as scoped, jitlab.count_compiles(None) as everything:
    for length in (101, 102, 103):
        total(jnp.ones(length))

print("scoped to total:", scoped)
print("every function :", everything)
assert scoped.compiles == 3
assert everything.compiles == 6, "jnp.ones compiled a broadcast for each new length"

# %% [markdown]
# ## Timing honestly: asynchronous dispatch
#
# A jitted call returns as soon as the work is *queued*. The Python clock keeps running
# while the device computes. Stop the clock at the return and you measure dispatch, not
# computation. `jax.block_until_ready` waits for every array in a result (any pytree).
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>For ten 1000x1000 matrix products, what share of the real time does a stopwatch see
# if it stops when the call returns?</p></div>


# %%
@jax.jit
def ten_matmuls(a):
    for _ in range(10):
        a = jnp.tanh(a @ a)
    return a


a = jnp.ones((1000, 1000)) / 1000
jax.block_until_ready(ten_matmuls(a))  # compile first, outside the measurement

start = time.perf_counter()
out = ten_matmuls(a)
returned = time.perf_counter() - start
jax.block_until_ready(out)
finished = time.perf_counter() - start

print(f"call returned after {1e3 * returned:8.2f} ms")
print(f"work finished after {1e3 * finished:8.2f} ms")
jitlab.record("asynchronous dispatch", total_s=finished, speedup=finished / returned)
assert finished > 5 * returned, "the call returns long before the work is done"

# %% [markdown]
# `jitlab.time_calls`, `jitlab.time_once` and `jitlab.median_seconds` all block on the whole
# output, warm up before measuring, repeat, and report the median with its spread. Every
# timing in this course is printed with the machine it came from (the report at the top),
# and no test ever asserts an absolute time: only counts, and ratios with wide margins.
#
# ## Where the time goes
#
# The stage timings above came from one small function. The bar chart puts them on one
# axis: compiling dwarfs running, which is why a compilation in a loop hurts.

# %%
fig, ax = plt.subplots(figsize=(6, 2.6))
ax.barh([row["stage"] for row in stages][::-1], [row["ms"] for row in stages][::-1])
ax.set_xscale("log")
ax.set_xlabel("milliseconds (log scale)")
ax.set_title(
    f"One jitted call, stage by stage ({jitlab.environment()['cpu_model'][:40]})"
)
fig.tight_layout()
plt.show()

# %%
jitlab.outro()
