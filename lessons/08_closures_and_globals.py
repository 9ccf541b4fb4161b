# ---
# jupyter:
#   jitlab:
#     fix: pass what changes as an argument (traced, or static if it selects a program)
#     instructor_notes:
#     - Learners expect either a recompilation or an error. Have them write down the
#       predicted result of the stale-global cell before running it; the silent wrong
#       answer is the moment of the lesson.
#     - 'The shape-dependent staleness is the one to demo live: call with the old shape
#       again after the new one and ask why two calls of the same function disagree.'
#     - 'If asked about `jax.clear_caches()` (or `f.clear_cache()`): it does drop the
#       stale program, but it is a workaround that throws away compilations; the fix
#       is an argument.'
#     - The transitional flag `jax_use_simplified_jaxpr_constants` changes where large
#       constants go; it must be set before JAX starts (environment variable), and the
#       lesson asserts its default.
#     keypoints:
#     - A global or closed-over value is read once, while tracing, and frozen into the
#       program as a constant.
#     - Changing it later does not retrace; the cached program silently returns the
#       old answer.
#     - The new value appears only when something else forces a retrace, and only for
#       that cache entry, so the bug comes and goes.
#     - A closed-over array is embedded in the compiled program (the JAX 0.12 default),
#       so the program and its compile time grow with the array.
#     - A jitted closure built anew on every call is a new function every time, so it
#       traces and compiles every time.
#     - 'The fix: pass what changes as an argument: traced for values (one compilation
#       for all of them), static only for choices that select a different program.'
#     minutes:
#       exercises: 15
#       teaching: 25
#     objectives:
#     - Predict what a jitted function returns after a global it reads has changed.
#     - Explain why a stale global shows up only for some input shapes.
#     - Measure the program size and compile time of a closed-over array against an
#       argument.
#     - Count the compilations of a jitted closure that is rebuilt on every call.
#     - Rewrite such code so every changing value is an argument, traced or static.
#     prerequisites:
#       lessons:
#       - what_jit_caches
#       - static_arguments
#       - functions_as_arguments
#     questions:
#     - If a jitted function reads a global and the global changes, does JAX recompile?
#     - What does it cost to close over a large array instead of passing it in?
#     - Why does a jitted function built by a factory compile on every call?
#     title: Closures and globals
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
# # 08 · Closures and globals
#
# A jitted function sees its arguments as tracers, but everything else it touches (a
# module-level setting, a variable from an enclosing function, a big array of weights) is
# an ordinary Python value at trace time. JAX reads it once, while tracing, and writes it
# into the program as a constant. This lesson shows the two consequences: results that go
# stale without any recompilation, and constants that bloat the compiled program.

# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import functools
import statistics

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

# %% [markdown]
# ## A global read inside `jit`
#
# `scale_by_global` multiplies its input by a module-level `SCALE`. We call it once with
# `SCALE = 2.0`, then set `SCALE = 10.0` and call it again with the same array.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>After <code>SCALE = 10.0</code>, how many compilations does the second call cost, and
# what does it return for <code>[0, 1, 2]</code>?</p></div>

# %%
SCALE = 2.0


@jax.jit
def scale_by_global(x):
    return x * SCALE


x3 = jnp.arange(3.0)
before = scale_by_global(x3)
SCALE = 10.0
with jitlab.count_compiles(scale_by_global) as n_after_change:
    after = scale_by_global(x3)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(
    "before:", before, "| after SCALE = 10:", after, "| NumPy:", np.arange(3.0) * SCALE
)
print(n_after_change)
assert n_after_change.traces == 0 and n_after_change.compiles == 0, n_after_change
np.testing.assert_allclose(after, [0.0, 2.0, 4.0])  # the OLD scale, silently

# %% [markdown]
# <div class="admonition warning"><p class="admonition-title">The chapter is wrong here</p>
# <p>The source chapter says that a changed global "can trigger recompilation". With
# JAX 0.12 it does not: changing the global changes nothing JAX looks at when it
# decides whether its cache holds a program for this call.
# The cache key is built from the function, the arguments' shapes, dtypes, weak types,
# shardings and tree structure, the values of static arguments, and the settings in
# the tracing context, dozens of them (lesson 12 prints the list from the running JAX).
# A global is none of those. The call above hit the cache and returned
# <code>2 * x</code>, the answer for the old value, with no error and no warning.</p></div>
#
# Where did the old value go? Into the program. `.trace(x)` on a jitted function returns
# the trace JAX already holds for that argument type (it does not trace again), and its
# jaxpr shows `SCALE` as a literal `2.0`:

# %%
with jitlab.count_compiles(scale_by_global) as n_inspect:
    cached_jaxpr = scale_by_global.trace(x3).jaxpr.pretty_print(use_color=False)
print(cached_jaxpr)
assert n_inspect.traces == 0, n_inspect
assert "2.0" in cached_jaxpr and "10.0" not in cached_jaxpr

# %% [markdown]
# The chapter's own example is a global that shapes the program, "determining the size
# of an intermediate array". Surely *that* retraces?
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>repeat_global</code> tiles its input <code>REPEATS</code> times. After
# <code>REPEATS</code> goes from 2 to 3, what shape comes out for a 3-element input?</p></div>

# %%
REPEATS = 2


@jax.jit
def repeat_global(x):
    return jnp.tile(x, REPEATS)


first_shape = repeat_global(x3).shape
REPEATS = 3
with jitlab.count_compiles(repeat_global) as n_repeats:
    tiled = repeat_global(x3)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(first_shape, "then", tiled.shape, "| NumPy now:", np.tile(x3, REPEATS).shape)
assert n_repeats.compiles == 0 and tiled.shape == (6,), (n_repeats, tiled.shape)

# %% [markdown]
# No. Even a global that decides an output's *shape* is read once; the cached program
# still produces six elements. Whatever the global controls, a value or the structure,
# JAX does not notice that it changed.
#
# ## When does the new value finally show up?
#
# Only when something else makes JAX trace again, for instance an argument of a shape it
# has not seen. The fresh trace reads the global as it is *now*. The old cache entry is
# not touched.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>With <code>SCALE</code> still at 10, we call the function on four elements, then on
# the old three elements again. How many compilations, and which scale does each call
# use?</p></div>

# %%
x4 = jnp.arange(4.0)
with jitlab.count_compiles(scale_by_global) as n_new_shape:
    out4 = scale_by_global(x4)  # a new shape: traced now
    out3 = scale_by_global(x3)  # the old shape: the program traced before

# %% tags=["answer"] jupyter={"source_hidden": true}
print("f32[4]:", out4, "| f32[3]:", out3, "|", n_new_shape)
print(n_new_shape.explanations[-1])
assert n_new_shape.compiles == 1, n_new_shape.explanations
np.testing.assert_allclose(out4, 10.0 * np.arange(4.0))  # the new value, f32[4] only
np.testing.assert_allclose(out3, 2.0 * np.arange(3.0))  # still the old value for f32[3]
assert not any("SCALE" in text for text in n_new_shape.explanations)

# %% [markdown]
# One function, one global, two answers, depending on which shapes happened to arrive
# before and after the change. That is what makes this bug intermittent in real code: a
# test with a fresh batch size passes, production with a familiar batch size is wrong.
# Note that JAX's own cache-miss explanation talks about the shape only: no diagnostic
# mentions `SCALE`, because JAX never considered it.
#
# ## Closing over a large array
#
# The same mechanism applies to arrays. A function that closes over a weight vector
# (here built by a small factory, called once) gets the weights as a constant. Its twin
# takes the weights as an argument. Both compute the same dot product.

# %%
N = 1_000_000
rng = np.random.default_rng(0)
weights = jnp.asarray(rng.standard_normal(N), dtype=jnp.float32)
x_big = jnp.asarray(rng.standard_normal(N), dtype=jnp.float32)


def make_dot_closure(w):
    def dot_closure(x):
        return jnp.dot(x, w)

    return jax.jit(dot_closure)


@jax.jit
def dot_argument(x, w):
    return jnp.dot(x, w)


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>With a million float32 weights (4 MB), how large is each lowered program, and how
# many bytes of arguments does each compiled executable take?</p></div>

# %%
dot_closure = make_dot_closure(weights)
lowered = {"closure": dot_closure.lower(x_big)}
lowered["argument"] = dot_argument.lower(x_big, weights)
compiled = {label: program.compile() for label, program in lowered.items()}

# %% tags=["answer"] jupyter={"source_hidden": true}
text = {label: len(program.as_text()) for label, program in lowered.items()}
in_bytes = {k: c.memory_analysis().argument_size_in_bytes for k, c in compiled.items()}
for label in lowered:
    print(
        f"{label:8}: {text[label]:>10,} StableHLO chars, {in_bytes[label]:,} bytes in"
    )
# x's bytes as this backend lays it out in memory: x_big.nbytes on a CPU; a TPU pads a
# million float32 to whole tiles of 1024 (lesson 01 reads its layout), so a little more.
x_laid = jax.jit(lambda v: v).lower(x_big).compile().memory_analysis()
x_in = x_laid.argument_size_in_bytes
if jax.default_backend() == "cpu":
    assert x_in == x_big.nbytes
assert text["closure"] > 1_000 * text["argument"], text  # the 4 MB, written out
assert in_bytes["closure"] == x_in  # only x goes in
assert in_bytes["argument"] == 2 * x_in  # x and the weights (same shape)
program_lines = compiled["closure"].as_text().splitlines()
# kept by XLA: a constant of N floats (f32[N]{0} on a CPU, f32[N]{0:T(1024)} on a TPU)
assert any(f"f32[{N}]{{0" in line and " constant(" in line for line in program_lines)
np.testing.assert_allclose(dot_closure(x_big), dot_argument(x_big, weights), rtol=1e-4)

# %% [markdown]
# The lowered module of the closure spells out all four megabytes of weights as a
# `stablehlo.constant`, and XLA keeps them in the compiled program: the executable takes
# only `x` as an input, so the weights live inside it for as long as the cache entry
# lives. The argument version is a few hundred characters whatever the size.
#
# Does JAX hoist big constants out into hidden arguments? JAX 0.12 has the machinery,
# behind a transitional flag, `jax_use_simplified_jaxpr_constants`, which is off by
# default and has to be set before JAX starts (`JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1`;
# a `jax.config.update` at run time did not change the lowering here). With it on,
# constants above `jax_embedded_constants_max_bytes` (32 bytes) become extra
# executable arguments. The flag's own help text says "DO NOT RELY ON THIS FLAG"; the
# default, measured above, embeds. The next cell pins that default, so CI notices if a
# JAX release flips it.

# %%
print(
    "jax_use_simplified_jaxpr_constants =",
    jax.config.jax_use_simplified_jaxpr_constants,
)
assert not jax.config.jax_use_simplified_jaxpr_constants, "the default changed"

# %% [markdown]
# ### What the constant costs at compile time
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>As the closed-over array grows from 10 thousand to 8 million floats, how does the
# compile time of each version change?</p></div>

# %%
sizes = [10_000, 100_000, 400_000, 8_000_000]  # not N: that shape is already compiled
closure_runs, argument_runs = [], []
for size in sizes:
    w = jnp.asarray(rng.standard_normal(size), dtype=jnp.float32)
    x = jnp.ones(size, dtype=jnp.float32)
    closure, label = make_dot_closure(w), f"{4 * size / 1e6:g} MB"
    run = jitlab.measure(
        f"closure over {label}", functools.partial(closure, x), count=closure
    )
    closure_runs.append(run)
    run = jitlab.measure(
        f"{label} as argument",
        functools.partial(dot_argument, x, w),
        count=dot_argument,
    )
    argument_runs.append(run)

# %% tags=["answer"] jupyter={"source_hidden": true}
largest = jitlab.compare(closure_runs[-1], argument_runs[-1])
closure_ms = [1e3 * run.counts.compile_seconds for run in closure_runs]
argument_ms = [1e3 * run.counts.compile_seconds for run in argument_runs]
assert [run.compiles for run in closure_runs + argument_runs] == [1] * 8
# The argument version's compile time does not depend on the size, so its median over
# all sizes is the fairest yardstick (and is robust to one noisy measurement).
ratio = closure_ms[-1] / statistics.median(argument_ms)
print(f"XLA compile: the closure over 32 MB takes {ratio:.1f}x the argument version")
assert ratio > 3, (closure_ms, argument_ms)  # wide margin: about 20x where written

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(sizes, closure_ms, marker="o", label="weights as closure")
ax.plot(sizes, argument_ms, marker="s", label="weights as argument")
ax.set(xscale="log", xlabel="number of float32 weights", ylabel="XLA compile time (ms)")
ax.set_title("Closed-over constants are compiled into the program")
ax.legend()
plt.show()

# %% [markdown]
# Compile time with the weights as an argument stays flat: the program is the same size
# whatever the data. With the closure, XLA has a constant to process and store, and the
# cost grows with it. Every new closure (a new weight vector, a new model checkpoint)
# pays it again.
#
# ## A jitted closure built on every call
#
# A common way to "configure" a jitted function is a factory: `make_scorer(scale)` returns
# a jitted inner function with `scale` closed over. If the factory is called each time
# a score is needed, every call creates a new function object, and JAX's cache is keyed on
# the function.


# %%
def make_scorer(scale):
    @jax.jit
    def scorer_closure(x):
        return jnp.tanh(x * scale).sum()

    return scorer_closure


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Six calls of <code>make_scorer(s)(x)</code>, with <code>s</code> taking only three
# distinct values. How many compilations?</p></div>

# %%
x8 = jnp.linspace(0.1, 1.0, 8)
scales = [0.5, 0.5, 0.5, 1.0, 2.0, 2.0]
with jitlab.count_compiles("scorer_closure") as n_factory:
    for s in scales:
        make_scorer(s)(x8)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n_factory, f"for {len(scales)} calls, {len(set(scales))} distinct scales")
print(n_factory.explanations[-1])
assert n_factory.traces == n_factory.compiles == len(scales), n_factory
# The mechanism: every miss is a function JAX has never seen.
assert all("never seen function" in text for text in n_factory.explanations)
# The guess about the call site appears from the second call on (on a re-run of this
# cell, from the first: JAX remembers call sites for the whole process).
assert all("re-defined repeatedly" in text for text in n_factory.explanations[1:])

# %% [markdown]
# Six calls, six traces, six compilations: even the repeated `0.5` compiles again,
# because each `scorer_closure` is a brand-new function object ("never seen
# function"). From the second call on JAX adds a guess ("seen another function defined
# on the same line; maybe the function is being re-defined repeatedly"). The "line" is
# the *call site*, `make_scorer(s)(x8)`: JAX noticed that this line traced a never-seen
# function before (lesson 07 shows the guess also fires for two unrelated functions
# called from one helper). Here the guess is right. The results are right too, at the
# price of a compilation per call. (Lesson 07 showed the same effect with
# `jax.jit(lambda ...)` in a loop.)
#
# ## The fix: pass what changes as an argument
#
# A value that changes between calls belongs in the argument list. Then it is part of
# what JAX looks at on every call, and nothing can go stale. We run the three designs
# through the same sequence of scale changes, checking every result against NumPy.

# %%
SCALE = 1.0


@jax.jit
def score_global(x):
    return jnp.tanh(x * SCALE).sum()


@jax.jit
def score_argument(x, scale):
    return jnp.tanh(x * scale).sum()


def via_global(x, s):
    global SCALE
    SCALE = s  # what the surrounding code does: update the setting, then call
    return score_global(x)


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Eight calls, the scale changing each time. For the global, the per-call closure
# and the argument: how many compilations, and how many correct results?</p></div>

# %%
sequence = [1.0, 1.5, 0.25, 3.0, 0.75, 2.0, 0.5, 4.0]
x_np = np.linspace(0.1, 1.0, 8, dtype=np.float32)
designs = {
    "global": (via_global, score_global),
    "closure per call": (lambda x, s: make_scorer(s)(x), "scorer_closure"),
    "argument": (score_argument, score_argument),
}


def run_sequence(call):
    """The eight calls `call(x, s)`, one per scale, as one workload."""
    return lambda: [call(x_np, s) for s in sequence]


runs = {
    label: jitlab.measure(
        f"changing scale via {label}", run_sequence(call), count=counted
    )
    for label, (call, counted) in designs.items()
}

# %% tags=["answer"] jupyter={"source_hidden": true}
wanted = [np.tanh(x_np * s).sum() for s in sequence]
correct = {
    k: int(np.isclose(r.result, wanted, rtol=1e-5).sum()) for k, r in runs.items()
}
print("correct results of 8:", correct, "| global:", runs["global"].counts)
per_call = jitlab.compare(runs["closure per call"], runs["argument"])
assert [run.compiles for run in runs.values()] == [1, len(sequence), 1]
assert correct == {"global": 1, "closure per call": 8, "argument": 8}  # global: 1st
assert per_call.speedup > 2, per_call  # the counts are the claim; a wide margin

# %% [markdown]
# The global gives one compilation and seven wrong answers out of eight. The closure
# built per call gives right answers and a compilation per call. The argument gives both:
# one compilation, every answer right. A traced `scale` is a value *inside* the program,
# read afresh from the argument on every call.
#
# ## Static, when the value selects a different program
#
# Not every setting is a number to compute with. A choice such as "normalise with the L1
# or the L2 norm" changes which operations the program contains; it belongs in a
# *static* argument (lesson 06), which gives one cached program per choice, and is never
# stale either, because static values are part of the cache key. A float that takes a new
# value on every call is the wrong thing to make static.


# %%
def normalise(x, scale, *, kind):
    norm = jnp.abs(x).sum() if kind == "l1" else jnp.sqrt((x * x).sum())
    return scale * x / norm


normalise_kind_static = jax.jit(normalise, static_argnames="kind")
normalise_all_static = jax.jit(normalise, static_argnames=("kind", "scale"))
kinds = ["l1", "l2"] * (len(sequence) // 2)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Eight calls alternating <code>kind="l1"</code> and <code>kind="l2"</code>, with a
# different scale each time. How many compilations with <code>kind</code> static and
# <code>scale</code> traced? And with <code>scale</code> made static as well?</p></div>

# %%
calls = list(zip(sequence, kinds, strict=True))
with jitlab.count_compiles(normalise_kind_static) as n_kind:
    outs_kind = [normalise_kind_static(x_np, s, kind=k) for s, k in calls]
with jitlab.count_compiles(normalise_all_static) as n_all:
    outs_all = [normalise_all_static(x_np, s, kind=k) for s, k in calls]

# %% tags=["answer"] jupyter={"source_hidden": true}
print("kind static:", n_kind, "| kind and scale static:", n_all)
assert n_kind.compiles == 2, n_kind.explanations  # one program per kind
assert n_all.compiles == len(set(calls)) == 8, n_all  # one per value
for (s, k), a, b in zip(calls, outs_kind, outs_all, strict=True):
    norm = np.abs(x_np).sum() if k == "l1" else np.sqrt((x_np * x_np).sum())
    np.testing.assert_allclose(a, s * x_np / norm, rtol=1e-5)
    np.testing.assert_allclose(b, s * x_np / norm, rtol=1e-5)

# %% [markdown]
# Both are correct; only one is cheap. `kind` picks between two programs, so two
# compilations is the honest price. A static `scale` makes every new float a new
# program, which is the per-call closure again under another name.
#
# **Rule of thumb**: when a jitted function reads a name that is not one of its
# arguments, ask "can this ever change while the program runs?" If yes, make it an
# argument: traced if it is a number (or array) the computation uses, static if it is a
# choice that changes the program's structure. Constants that never change (π, a fixed
# lookup table of a few numbers) are fine to close over. Large arrays are better passed
# in even when they do not change, since JAX 0.12 embeds them in the program.

# %% tags=["remove-input"]
jitlab.outro()
