# ---
# jupyter:
#   jitlab:
#     fix: the measuring instruments (count compilations, time honestly)
#     half_day:
#       minutes:
#         exercises: 0
#         teaching: 20
#       skip:
#       - The fast path
#       - 'Outside jit: one program per operation'
#       - What `count_compiles` cannot see
#       - Where the time goes
#     instructor_notes:
#     - 'Re-running a cell that defines a jitted function defines a new function object,
#       so its first call traces and compiles again. Run the first-call cell twice live:
#       the ''first'' call stays slow (a little faster the second time only because
#       the process is warm). The re-run cell in the lesson pins this.'
#     - Learners often believe jit compiles at decoration time. Point at the jax.jit(f)
#       row of the stage table, a small fraction of the compile time.
#     - If a laptop shows a smaller first/cached ratio, that is fine; the assertion
#       only needs 10x.
#     - The fast-path section uses JAX's private _cache_miss only as a stopwatch target;
#       say so if someone asks. jax.no_tracing is the public way to see a fast-path
#       miss, and lesson 09 uses it as a guard.
#     keypoints:
#     - The first call traces the Python function into a jaxpr, lowers it to StableHLO
#       and compiles it with XLA; later calls with the same key run the executable,
#       most of them through jit's fast path in C++, which skips the bookkeeping of
#       its Python path (measure how much on your machine).
#     - The key is the function object, the shapes and dtypes (after canonicalisation)
#       and weak types of the arguments, their pytree structure, the static values and
#       the configuration context; where the arrays live (committed or not, on which
#       devices) decides the compilation too. The values inside traced arrays are never
#       part of it.
#     - A compiled executable checks the pytree and each argument's shape and dtype
#       after canonicalisation, so a NumPy float64 array runs as float32; it ignores
#       weak types, and refuses any other change of dtype or shape with a TypeError.
#     - Python side effects (print, appending to a list) run only while tracing.
#     - Outside jit every operation is compiled on its own, once per shape and dtype;
#       jax.disable_jit() runs a jitted function that way too, so it still compiles.
#     - Count compilations for the function under study only (helpers such as jnp.ones
#       compile too), and know the counter's blind spots (inner jitted functions, transforms
#       of a jitted function, pmap, functions defined inside JAX).
#     - JAX dispatches asynchronously; time with jax.block_until_ready on the output,
#       or you time the queue, not the work.
#     minutes:
#       exercises: 0
#       teaching: 30
#     objectives:
#     - Name the four stages of a first call (trace to a jaxpr, lower to StableHLO,
#       compile to an executable, execute) and time each one.
#     - Measure a first call against a cached call, and a cached call on jit's fast
#       path against one on its Python path.
#     - List what goes into the cache key, and say which cache each part belongs to.
#     - Count the compilations of one function only, and know what the counter cannot
#       see.
#     - Time honestly with block_until_ready.
#     prerequisites:
#       other:
#       - NumPy arrays and Python functions
#       - Calling `jax.jit` on a function (the JAX quickstart)
#     questions:
#     - What happens, step by step, the first time a jitted function is called?
#     - What does a second call skip, and what decides whether it can?
#     - What does JAX compile when nothing is jitted?
#     - How do you time and count compilations without fooling yourself?
#     title: What jit caches
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
import logging
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

# %% [markdown]
# ## Four stages
#
# The first call of a jitted function goes through four stages. JAX exposes each one
# through its ahead-of-time API, so we can run them by hand and time them separately:
#
# | stage | API | produces |
# | --- | --- | --- |
# | trace | `jax.jit(f).trace(x)` | a jaxpr: the primitive operations, for abstract inputs |
# | lower | `.lower()` | a StableHLO module for XLA |
# | compile | `.compile()` | an executable for these devices |
# | execute | `compiled(x)` | the result |
#
# Wrapping the function with `jax.jit(f)` is not a stage: it does none of this work, so
# the table below times it too, to show how little it costs.


# %%
def scaled_sine(x):
    return jnp.sin(x) * 2.0 + 1.0


x, stage_ms = jnp.linspace(0.0, 1.0, 8), {}


def timed(step, thunk, runs=1):
    seconds = []
    for _ in range(runs):
        with jitlab.stopwatch() as sw:
            out = jax.block_until_ready(thunk())
        seconds.append(sw.seconds)
    stage_ms[step] = 1e3 * min(seconds)  # the fastest run: a single one can stall
    return out


# %%
jitted = timed("jax.jit(f), not a stage", lambda: jax.jit(scaled_sine))
traced = timed("trace -> jaxpr", lambda: jitted.trace(x))
lowered = timed("lower -> StableHLO", traced.lower)
compiled = timed("compile -> executable", lowered.compile)
result = timed("execute", lambda: compiled(x), runs=5)
jitlab.print_table([{"step": step, "ms": ms} for step, ms in stage_ms.items()])

# %%
assert jnp.allclose(result, scaled_sine(x))
assert stage_ms["compile -> executable"] > 10 * stage_ms["execute"], "it dwarfs running"
assert stage_ms["compile -> executable"] > 10 * stage_ms["jax.jit(f), not a stage"]

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
print("\n".join(lowered.as_text().splitlines()[:6]))
assert "tensor<8xf32>" in lowered.as_text()

# %% [markdown]
# ## What a compiled executable accepts
#
# A `Compiled` object never traces or compiles again: it checks each argument against
# what it was compiled for and refuses a mismatch with a `TypeError`. What counts as a
# mismatch?
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>compiled</code> was built for <code>f32[8]</code>. Which of these does it run:
# a NumPy float64 array of 8, an int32 array of 8, a float32 array of 9? And
# <code>with_int</code>, built for an array and a Python int (a weakly typed int32), on a
# NumPy int64, a strong <code>jnp.int32</code>, a Python float?</p></div>


# %%
with_int = jax.jit(lambda v, n: v * n).trace(jnp.ones(3), 2).lower().compile()
tries = {
    "f32[8] <- NumPy float64[8]": jitlab.attempt(compiled, np.linspace(0.0, 1.0, 8)),
    "f32[8] <- int32[8]": jitlab.attempt(compiled, jnp.arange(8)),
    "f32[8] <- float32[9]": jitlab.attempt(compiled, jnp.ones(9)),
    "f32[8] <- [f32[8]] (a list)": jitlab.attempt(compiled, [x]),
    "weak i32 <- NumPy int64": jitlab.attempt(with_int, jnp.ones(3), np.int64(5)),
    "weak i32 <- strong jnp.int32": jitlab.attempt(with_int, jnp.ones(3), jnp.int32(5)),
    "weak i32 <- Python float": jitlab.attempt(with_int, jnp.ones(3), 5.0),
}

# %% tags=["answer"] jupyter={"source_hidden": true}
for label, t in tries.items():
    print(f"{label:30}", str(t.error).splitlines()[-1] if t.raised else t.value.dtype)
ran = [not t.raised for t in tries.values()]
assert ran == [True, False, False, False, True, True, False], ran
assert all(type(t.error) is TypeError for t in tries.values() if t.raised)
assert tries["f32[8] <- NumPy float64[8]"].value.dtype == jnp.float32  # converted
assert with_int.in_avals[0][1].weak_type and not jnp.int32(5).weak_type

# %% [markdown]
# The check compares the pytree structure and, for every array, the shape and the dtype
# *after canonicalisation*. The float64 array ran: with 64-bit types off, float64 is
# canonicalised to float32
# before the check (lesson 02), and the result is float32. A NumPy int64 likewise became
# an int32, and a strong int32 ran where a weak one was compiled: the executable ignores
# weak types (lesson 03). Any other change of dtype, of shape or of container is
# refused.
#
# A jitted function is more forgiving than its `Compiled`: where the executable refuses,
# `jitted` traces and compiles a new one. That is the whole subject of this course.
#
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


xs = jnp.arange(16.0)
first = jitlab.measure("first call", lambda: polynomial(xs), count=polynomial)
cached = jitlab.measure("cached call", lambda: polynomial(xs), count=polynomial)

# %% tags=["answer"] jupyter={"source_hidden": true}
first_vs_cached = jitlab.compare(first, cached, bench="first call vs cached call")
assert first.traces == 1 and first.compiles == 1 and cached.compiles == 0
assert first_vs_cached.speedup > 10

# %% [markdown]
# ### Running the cell again
#
# In a notebook it is tempting to run the cell above a second time and expect a fast
# "first" call. It is not fast: running the cell executes the `def` again, which makes a
# **new function object**, and jit's caches are keyed on the function object (lesson
# 07). The new `polynomial` has never been seen, so it traces and compiles again. The
# function below does what a second run of the cell does.


# %%
def run_the_cell_again():
    """Define ``polynomial`` again, exactly as the cell above does."""

    @jax.jit
    def polynomial(x):
        return 3.0 * x**3 - 2.0 * x**2 + x - 5.0

    return polynomial


with jitlab.count_compiles("polynomial") as rerun:
    polynomial_again = run_the_cell_again()
    rerun_timing = jitlab.time_calls(polynomial_again, xs, repeats=50)

# %%
print(rerun_timing, *rerun.explanations[0].splitlines()[:3], sep="\n")
assert rerun.traces == 1 and rerun.compiles == 1
assert "never seen function" in rerun.explanations[0]
assert rerun_timing.first_over_steady > 10, "the second 'first call' is slow again"

# %% [markdown]
# The second first call may be somewhat faster than the very first one. That is the
# process warming up (imports done, XLA's compiler loaded), not a cache hit: the counter
# heard a full trace and compilation.
#
# ## The fast path
#
# A cached call has two ways to reach the executable. jit's **fast path**, written in
# C++, recognises a call it has seen before and runs the executable without entering
# Python. When it misses, the call falls back to the **Python path**, which looks in the
# tracing cache. A miss there traces, lowers and compiles; a hit can still lower and
# compile, when the arguments' placement is new (a committed array, below). Programs
# with an effect, such as `jax.debug.print`, never take the fast path
# ([lesson 09](../09_diagnosing/#which-calls-skip-the-fast-path)).
#
# `jax.no_tracing()` makes a fast-path miss an error: despite its name, it raises on a
# call that leaves the fast path, whether or not that call would trace.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A function warmed on a <code>jax.Array</code>, called inside
# <code>jax.no_tracing()</code> on a NumPy array of the same shape and dtype: does it
# raise? How many traces and compilations does the counter hear when it is called on
# that NumPy array outside <code>no_tracing</code>?</p></div>


# %%
def plain(v):
    return v * 2.0 + 1.0


plain_jit = jax.jit(plain)
v = jnp.arange(16.0)
host_v = np.arange(16.0, dtype=np.float32)
plain_jit(v)  # warm for a jax.Array


with jax.no_tracing():
    warm_call = jitlab.attempt(plain_jit, v)
    host_call = jitlab.attempt(plain_jit, host_v)
with jitlab.count_compiles(plain) as n_host:
    plain_jit(host_v)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(f"jax.Array: {warm_call}\nNumPy: {host_call}\nNumPy, outside it: {n_host}")
assert not warm_call.raised, warm_call
assert type(host_call.error) is RuntimeError, host_call
assert "'no_tracing' is set" in str(host_call.error)
assert n_host.traces == 0 and n_host.compiles == 0  # the tracing cache hit

# %% [markdown]
# The fast path's key is finer than the tracing cache's: it also holds whether an
# argument is a NumPy array or a `jax.Array`, and the sharding of every array. A miss of
# the fast path costs the Python path, not a compilation. What does the Python
# path cost per call? JAX's private `_cache_miss` is the Python function the fast path
# falls back to; we call it directly only to time it.

# %%
calls = range(2000)
python_path = jitlab.measure(
    "Python path", lambda: [plain_jit._cache_miss(v)[0] for _ in calls], count=plain
)
fast_path = jitlab.measure(
    "fast path", lambda: [plain_jit(v) for _ in calls], count=plain
)

# %%
paths = jitlab.compare(python_path, fast_path, bench="fast path vs Python path")
extra_us = 1e6 * (python_path.seconds - fast_path.seconds) / len(calls)
print(f"the Python path adds {extra_us:.0f} us to every call on this machine")
np.testing.assert_array_equal(python_path.result[0], fast_path.result[0])  # same work
assert python_path.compiles == fast_path.compiles == 0
assert extra_us > 0, extra_us  # the bookkeeping costs on every backend
# On a CPU the executable itself takes microseconds, so the bookkeeping is most of a
# call. On an accelerator both paths also pay for launching the program on the chip,
# the same for both, so the ratio is smaller (see below).
assert paths.speedup > (3 if jax.default_backend() == "cpu" else 1.5), paths.rows()

# %% [markdown]
# The same experiment on the course's other machines, from their committed results
# files (`jitlab dev bench` writes one per machine). On the TPU a cached call of a tiny
# function (`cached call`: one call of `polynomial`, above, waited for) costs far more
# than on a CPU: every call, by either path, launches a program on the chip, so the
# Python path's share shrinks.

# %%
jitlab.show_measured_on_machines("fast path vs Python path", "speedup")
jitlab.show_measured_on_machines("cached call", "total_s")

# %% [markdown]
# Same executable, same answer; the Python path adds its bookkeeping to every call. For
# a small function called in a tight loop, that is most of the time, which is why lesson
# 09 guards a training loop with `jax.no_tracing()`.
#
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
# A call finds a compiled program when its key matches one seen before. The key holds:
#
# - the **function object** (`jax.jit(f)` caches per `f`; a new lambda, or a `def` run
#   again, is a new key),
# - for every array argument, its **shape**, its **dtype** after canonicalisation
#   (lesson 02) and its **weak type** (lesson 03),
# - the **pytree structure** of the arguments, including keyword versus positional
#   (lesson 04),
# - the **values of static arguments** (lessons 05 and 06),
# - the **configuration context**: `jax_enable_x64`, the default matmul precision, the
#   mesh and dozens of other settings (lessons 02 and 12),
# - **where the arrays live**: whether an array is committed to a device, and the
#   sharding of a committed array (lesson 12).
#
# It does *not* hold the values inside traced arrays. Let's check a few rows with the
# course's counter, `jitlab.count_compiles`.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Calling <code>polynomial</code> on three new arrays of the same shape, then on one of a
# new shape, then on the first shape under <code>jax.default_matmul_precision</code>: how
# many compilations?</p></div>

# %%
with jitlab.count_compiles(polynomial) as same_shape:
    for seed in range(3):
        polynomial(jax.random.normal(jax.random.key(seed), (16,)))
with jitlab.count_compiles(polynomial) as new_shape:
    polynomial(jnp.arange(17.0))
with jitlab.count_compiles(polynomial) as new_context:
    with jax.default_matmul_precision("highest"):
        polynomial(jnp.arange(16.0))

# %% tags=["answer"] jupyter={"source_hidden": true}
print(same_shape, new_shape, new_context, *new_shape.explanations, sep="\n")
print(*new_context.explanations)
assert same_shape.compiles == 0, "new values, same shape: cache hit"
assert new_shape.traces == 1 and new_shape.compiles == 1
assert "f32[17]" in new_shape.explanations[0] and "f32[16]" in new_shape.explanations[0]
assert new_context.traces == 1 and new_context.compiles == 1
assert "jax_default_matmul_precision differs" in new_context.explanations[0]

# %% [markdown]
# `count_compiles` listens to `jax.monitoring` events, which name the function being
# traced and compiled, and switches on `jax_explain_cache_misses` for the block so it can
# keep JAX's own explanation of each miss. The explanations above are JAX's text, not
# ours.
#
# ### Where the array lives
#
# An array made by `jnp` is *uncommitted*: JAX may move it to whatever device a
# computation runs on. `jax.device_put(x, device)` *commits* it to that device.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The same values, first uncommitted, then committed to the only device there is:
# how many traces and compilations does the second call cost?</p></div>


# %%
@jax.jit
def placed(v):
    return v * 2.0


uncommitted = jnp.arange(8.0)
committed = jax.device_put(jnp.arange(8.0), jax.devices()[0])
placed(uncommitted)
with jitlab.count_compiles(placed) as n_committed:
    placed(committed)
with jitlab.count_compiles(placed) as n_committed_again:
    placed(committed)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n_committed, "| explanations:", n_committed.explanations)
assert not uncommitted.committed and committed.committed
assert n_committed.traces == 0 and n_committed.compiles == 1
assert n_committed.explanations == []  # JAX explains tracing-cache misses only
assert n_committed_again.compiles == 0

# %% [markdown]
# The tracing cache does not care, but the compilation does. No trace, but a new
# compilation, and no explanation: JAX explains only misses of the
# tracing cache, and this was a hit there. The committed array's sharding is part of the
# key of the compiled program.
#
# ## Count the function under study, and only it
#
# Helpers such as `jnp.ones` run compiled programs of their own, and a counter that
# hears every compilation hears theirs too.
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

# %% tags=["answer"] jupyter={"source_hidden": true}
print("scoped to total:", scoped, "\nevery function :", everything)
assert scoped.compiles == 3
assert everything.compiles == 6, "jnp.ones compiled a broadcast for each new length"

# %% [markdown]
# `jnp.ones(n)` compiled a broadcast once per new `n`: counting every compilation gave
# twice the truth.
#
# ## Outside jit: one program per operation
#
# Without `jax.jit`, JAX runs a function *op by op*: each `jnp` operation is dispatched
# on its own. `jax.disable_jit()` runs a jitted function the same way.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>scaled_sine</code> (a sine, a multiply, an add) called without jit on lengths
# 37, 37 and 41: how many compilations per call? And the jitted version on a new length
# inside <code>jax.disable_jit()</code>: how many compilations of
# <code>scaled_sine</code> itself, and how many in all?</p></div>

# %%
eager_inputs = [jnp.linspace(0.0, 1.0, n) for n in (37, 37, 41)]
off_input = jnp.linspace(0.0, 1.0, 43)
jax.block_until_ready((eager_inputs, off_input))  # built before counting

eager = [
    jitlab.measure(f"op by op, {len(e)}", lambda e=e: scaled_sine(e), count=None)
    for e in eager_inputs
]

# %%
with (
    jax.disable_jit(),
    jitlab.count_compiles(scaled_sine) as off_function,
    jitlab.count_compiles("sin") as off_sin,
):
    off = jitlab.measure("disable_jit", lambda: jitted(off_input), count=None)

# %% tags=["answer"] jupyter={"source_hidden": true}
eager_per_call = [run.compiles for run in eager]
print("op by op, per call:", eager_per_call, "| disable_jit:", off_function, off.counts)
print("compiled op by op:", dict(eager[0].counts.compiled))
print("compiled under disable_jit:", dict(off.counts.compiled))
assert set(eager[0].counts.compiled) == {"jit(sin)", "jit(multiply)", "jit(add)"}
assert eager_per_call == [3, 0, 3], "a new shape compiles every op again"
assert off_function.compiles == 0 and off_sin.compiles == 1
lifted_and_primitives = {"jit(stage)", "jit(sin)", "jit(mul)", "jit(add)"}
assert set(off.counts.compiled) == lifted_and_primitives and off.compiles == 4

# %% [markdown]
# Each operation is a small compiled program, cached per shape and dtype like any other.
# Outside jit, `jnp.sin` is itself a jitted function, and `jnp.multiply` and `jnp.add`
# jit each call: the first call on a new shape compiles `jit(sin)`, `jit(multiply)` and
# `jit(add)`, the repeat compiles nothing, and the next new shape compiles all three
# again. Under `jax.disable_jit()` their jit is off too. The function's own program is
# never built, and JAX compiles each *primitive* on its own: `sin`, `mul`, `add`, and a
# fourth, `stage`, which lifts the Python scalars `2.0` and `1.0` into arrays (one
# program for both: the same shape and dtype).
#
# ## What `count_compiles` cannot see
#
# The counter hears JAX's monitoring events and its cache-miss log, nothing else. Five
# blind spots follow.
#
# 1. **`traces` counts tracing-cache misses, not runs of your Python.** JAX keeps a
#    second cache of jaxprs behind the tracing cache, so a miss can be answered without
#    running the function body again.

# %%
body_runs = []


def counted_body(v):
    body_runs.append(1)
    return v * 3.0


with jitlab.count_compiles(counted_body) as n_body:
    jax.jit(counted_body)(jnp.ones(4))
    jax.jit(counted_body, donate_argnums=0)(jnp.ones(4))  # another jit of the same f
print(f"{n_body.traces} tracing-cache misses, {len(body_runs)} run of the body")
assert n_body.traces == 2 and len(body_runs) == 1

# %% [markdown]
# 2. **A jitted function called inside another one** emits no trace or compile event of
#    its own (it is inlined into the outer program), though its cache-miss explanation
#    is still captured.


# %%
@jax.jit
def inner_step(v):
    return jnp.sin(v)


@jax.jit
def outer_step(v):
    return inner_step(v) * 2.0


with jitlab.count_compiles(inner_step) as n_inner:
    with jitlab.count_compiles(outer_step) as n_outer:
        outer_step(jnp.ones(4))
print("inner:", n_inner, f"({len(n_inner.explanations)} explanation) | outer:", n_outer)
assert n_inner.traces == n_inner.compiles == 0 and len(n_inner.explanations) == 1
assert n_outer.traces == n_outer.compiles == 1

# %% [markdown]
# 3. **Transforms of a jitted function** (`jax.grad(f_jit)`, `jax.vmap(f_jit)`) compile
#    programs named `jit(f)`: the counter adds them to `f`, though `f` was not
#    recompiled in the sense of this course.


# %%
@jax.jit
def loss(v):
    return jnp.sum(v**2)


loss(jnp.ones(4))
with jitlab.count_compiles(loss) as n_grad:
    jax.grad(loss)(jnp.ones(4))
with jitlab.count_compiles(loss) as n_grad_again:
    jax.grad(loss)(jnp.ones(4))
print("jax.grad(loss):", n_grad, "| again:", n_grad_again)
assert n_grad.traces == 0 and n_grad.compiles == 2 and n_grad_again.compiles == 0

# %% [markdown]
# 4. **`jax.pmap`** compiles under the name `_fun`, so counting the mapped function by
#    name sees nothing.


# %%
def per_device(v):
    return v * 2.0


with jitlab.count_compiles(per_device) as n_map, jitlab.count_compiles("_fun") as n_fun:
    jax.pmap(per_device)(jnp.ones((1, 4)))
print("per_device:", n_map, "| '_fun':", n_fun)
assert n_map.compiles == 0 and n_fun.compiles == 1

# %% [markdown]
# 5. **Explanations can be missing, or nameless.** JAX writes explanations to loggers
#    under `"jax"`; an application that silences `"jax"` would lose them. So while it
#    counts, the counter sets JAX's explanation loggers, children of `"jax"` such as
#    `"jax._src.interpreters.partial_eval"`, to WARNING for explanations only, and puts
#    their levels back afterwards. `"jax"` itself it never touches.


# %%
@jax.jit
def quiet(v):
    return v - 1.0


jax_logger = logging.getLogger("jax")
explainer = logging.getLogger("jax._src.interpreters.partial_eval")  # a child of "jax"
jax_logger.setLevel(logging.ERROR)  # what some applications do to silence JAX
with jitlab.count_compiles(quiet) as n_quiet:
    quiet(jnp.ones(4)), quiet(jnp.ones(5))
    levels_while_counting = jax_logger.level, explainer.level
print(n_quiet, f"and {len(n_quiet.explanations)} explanations while silenced")
assert n_quiet.traces == 2 and len(n_quiet.explanations) == 2  # kept while counting
assert levels_while_counting == (logging.ERROR, logging.WARNING)  # the child, not "jax"
assert explainer.level == logging.NOTSET  # put back: it inherits from "jax" again
jax_logger.setLevel(logging.NOTSET)  # JAX's default, back

# %% [markdown]
#    JAX explains a miss only for a function whose source file lies outside JAX and the
#    standard library: its own Python functions (`jnp.sum`, `jnp.ravel`,
#    `jax.nn.relu`) never get one. A function with no source file at all is explained,
#    under the name `<unknown>`. On this release `jnp.maximum` is one (a `jnp.ufunc`
#    object), and so is an object with `__call__`. The name cannot say whose miss it
#    was, so the counter keeps an `<unknown>` explanation when JAX's explaining frame
#    holds the very object it counts.

# %%
jax_sum, jax_maximum = jax.jit(jnp.sum), jax.jit(jnp.maximum)
with (
    jitlab.count_compiles(None) as n_all,  # every explanation JAX gave in the block
    jitlab.count_compiles(jax_sum) as n_sum,
    jitlab.count_compiles(jax_maximum) as n_maximum,
):
    jax_sum(jnp.ones(4)), jax_sum(jnp.ones(5))
    jax_maximum(jnp.ones(4), 0.0), jax_maximum(jnp.ones(5), 0.0)
print("jnp.sum:", n_sum, "| jnp.maximum:", n_maximum, "\n" + n_maximum.explanations[-1])
assert n_sum.traces == 2 and n_sum.explanations == []
assert n_maximum.traces == 2 and len(n_maximum.explanations) == 2
assert all("<unknown>" in text for text in n_maximum.explanations)
assert n_all.explanations == n_maximum.explanations  # JAX gave none for jnp.sum

# %% [markdown]
# So read `traces` as "tracing-cache misses", count the outer function when jitted
# functions nest, and count `jax.grad(f)` and friends as programs of their own. When an
# explanation is missing while the counter listens, the logger's level is not the cause
# (the counter opened it): JAX gave none, for its own Python or for one of the misses it
# never explains (lessons 10 and 12 meet some). Outside the counter, check first that
# nothing silenced `"jax"`.
#
# ## Timing honestly: asynchronous dispatch
#
# A jitted call returns as soon as the work is *queued*. The Python clock keeps running
# while the device computes. Stop the clock at the return and you measure dispatch, not
# computation. `jax.block_until_ready` waits for every array in a result (any pytree).
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>For ten products of 1000x1000 matrices (bigger on a chip), what share of the real
# time does a stopwatch see if it stops when the call returns?</p></div>


# %%
@jax.jit
def ten_matmuls(a):
    for _ in range(10):
        a = jnp.tanh(a @ a)
    return a


n = 1000 if jax.default_backend() == "cpu" else 4096  # the matrices' side (why: below)
a = jnp.ones((n, n)) / n
jax.block_until_ready(ten_matmuls(a))  # compile first, outside the measurement

start = time.perf_counter()
out = ten_matmuls(a)
returned = time.perf_counter() - start
jax.block_until_ready(out)
finished = time.perf_counter() - start

# %% tags=["answer"] jupyter={"source_hidden": true}
print(
    f"{n}x{n}: returned after {1e3 * returned:.2f} ms, "
    f"finished after {1e3 * finished:.2f} ms"
)
jitlab.record(
    "asynchronous dispatch", total_s=finished, speedup=finished / returned, size=n
)
assert finished > 5 * returned, "the call returns long before the work is done"

# %% [markdown]
# A chip finishes ten 1000x1000 products within a few times what the call takes to
# return, too close for this experiment to show, so there the matrices are bigger, for
# the work to dominate the launch. The same experiment on the course's other machines
# (`size` is the matrices' side). On any backend, while the device computes, the Python
# thread is free to prepare and queue the next step (JAX's docs: asynchronous dispatch
# hides Python's overhead), and a stray `print(loss)` or `float(loss)` in a training
# loop makes it wait for the device every step.

# %%
jitlab.show_measured_on_machines("asynchronous dispatch", "size", "total_s", "speedup")

# %% [markdown]
# `jitlab.time_once`, `jitlab.time_calls` and `jitlab.median_seconds` all block on the
# whole output. `time_once` times one call; `time_calls` times the first call, warms up,
# then reports the median of the repeats with its spread; `median_seconds` reports the
# median of a repeated workload. Every
# timing in this course is printed with the machine it came from (the report at the top),
# and no test ever asserts an absolute time: only counts, and ratios of two timings
# from the same run, with a wide margin.
#
# ## Where the time goes
#
# The stage timings above came from one small function. The bar chart puts them on one
# axis: compiling dwarfs running, which is why a compilation in a loop hurts.

# %%
fig, ax = plt.subplots(figsize=(6, 2.6))
ax.barh(list(stage_ms)[::-1], list(stage_ms.values())[::-1])
ax.set_xscale("log")
ax.set_xlabel("milliseconds (log scale)")
cpu = jitlab.environment()["cpu_model"][:40]
ax.set_title(f"One jitted call, stage by stage ({cpu})")
fig.tight_layout()
plt.show()

# %% tags=["remove-input"]
jitlab.outro()
