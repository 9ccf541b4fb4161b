# ---
# jupyter:
#   jitlab:
#     fix: cast once at the boundary, explicitly
#     instructor_notes:
#     - Ask for a show of hands before the first experiment; most people expect float64
#       to compile a second program. It does not, with default settings, and that is
#       the surprise worth pausing on.
#     - The 2**24 + 1 example is the one to do live; it shows that canonicalisation
#       is a silent loss of precision, not only a cache detail.
#     - Learners who know the fix tend to put the cast inside the jitted function. Run
#       the "cast inside" cell live and let the compile count speak.
#     - Recommend setting x64 once, at start-up (JAX_ENABLE_X64=1 or jax.config.update
#       at the top of the program), never per call.
#     keypoints:
#     - The cache key holds each input's dtype after canonicalisation; every new dtype
#       costs a trace and a compilation.
#     - With x64 off (the default), float64 becomes float32 and int64 becomes int32
#       before the lookup, so they share an entry, and the lost precision is silent.
#     - With jax_enable_x64 on, float64 is a real dtype; the flag is part of the tracing
#       context, so flipping it retraces even inputs whose dtype did not change.
#     - An int32 and a float32 array of the same shape are two programs, even when the
#       numbers that come out are equal.
#     - Cast once, explicitly, before the jitted call (jnp.asarray(x, jnp.float32));
#       a cast inside the jitted function runs after the cache lookup and saves nothing.
#     minutes:
#       exercises: 10
#       teaching: 25
#     objectives:
#     - Predict the dtype an input reaches the cache with, after JAX canonicalises it.
#     - Show with compile counts that the dtype, and the x64 flag itself, are part of
#       the cache key.
#     - Cast once at the boundary, before the jitted call, and measure the difference.
#     prerequisites:
#       lessons:
#       - what_jit_caches
#       other:
#       - NumPy dtypes (float32, float64, int32, uint8)
#     questions:
#     - Does a NumPy float64 array compile a second program next to a float32 one?
#     - What does turning on jax_enable_x64 change, for the answer and for the cache?
#     - Why do an int32 array and a float32 array of the same shape cost two compilations?
#     - Where should a dtype cast go so that a loop fed mixed dtypes compiles once?
#     title: Dtypes
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
# # 02 · Dtypes
#
# A jitted function keeps one compiled program per *kind* of input, and the dtype is part
# of the kind. This lesson finds out which dtype an input really has by the time JAX looks
# in its cache (often not the one it arrived with), what the `jax_enable_x64` switch does
# to that, and how one explicit cast at the edge of your code keeps a loop fed mixed
# dtypes down to one compilation.

# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

# The lesson assumes JAX's default: 64-bit types switched off.
assert not jax.config.jax_enable_x64

# %% [markdown]
# ## A float64 array from NumPy
#
# NumPy's default float is float64; JAX's default is float32. We compile a small function
# for a `jnp` float32 array, then call it with a NumPy float64 array of the same shape.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How many compilations do the two calls cost: one or two? And what dtype comes back
# from the float64 call?</p></div>


# %%
@jax.jit
def shift_scale(x):
    return (x - 1.0) * 0.5


x_f32 = jnp.linspace(0.0, 1.0, 8, dtype=jnp.float32)
x_f64 = np.linspace(0.0, 1.0, 8)  # NumPy's default dtype: float64

with jitlab.count_compiles(shift_scale) as n_f64:
    from_f32 = shift_scale(x_f32)
    from_f64 = shift_scale(x_f64)

print(n_f64)
print(f"input {x_f64.dtype} -> output {from_f64.dtype}")
assert x_f64.dtype == np.float64
assert n_f64.compiles == 1, n_f64.explanations
assert from_f32.dtype == from_f64.dtype == jnp.float32

# %% [markdown]
# One compilation. With 64-bit types off, JAX *canonicalises* every input before it looks
# in the cache: float64 becomes float32, int64 becomes int32, complex128 becomes
# complex64. The NumPy array reaches the cache as `f32[8]`, exactly like the `jnp` array,
# so it hits the entry the first call made. `jax.dtypes.canonicalize_dtype` tells you what
# a dtype becomes.

# %%
for wide in (np.float64, np.int64, np.complex128):
    print(f"{np.dtype(wide).name:>10} -> {jax.dtypes.canonicalize_dtype(wide).name}")
assert jax.dtypes.canonicalize_dtype(np.float64) == np.float32
assert jax.dtypes.canonicalize_dtype(np.int64) == np.int32
assert jax.dtypes.canonicalize_dtype(np.complex128) == np.complex64
assert jnp.asarray(np.arange(3)).dtype == jnp.int32  # NumPy's default int is int64

# %% [markdown]
# That sharing is not free: the conversion to float32 drops digits without a word.
# float32 has a 24-bit significand, so 2<sup>24</sup> + 1 = 16,777,217 is the first
# whole number it cannot hold.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>minus_big</code> subtracts 2<sup>24</sup>. Fed a float64 array holding
# 2<sup>24</sup> + 1, what does it return?</p></div>


# %%
@jax.jit
def minus_big(x):
    return x - 16_777_216.0  # 2**24


big = np.array([2.0**24 + 1.0])  # exact in float64
rounded = minus_big(big)
print(f"x64 off: {rounded} ({rounded.dtype})")
assert rounded.dtype == jnp.float32
assert float(rounded[0]) == 0.0  # the + 1 was lost when float64 became float32

# %% [markdown]
# ## Switching 64-bit types on
#
# `jax_enable_x64` makes float64 and int64 real dtypes. JAX has a context manager for
# it, `jax.enable_x64(True)`, which puts the previous setting back at the end of the
# block; in a real program you would set it once at start-up instead.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Inside the block we call <code>shift_scale</code> on the float64 array, then on the
# float32 array that is already in the cache. How many compilations? Then, back outside
# the block, one more call on the float64 array: how many?</p></div>

# %%
with jax.enable_x64(True):
    with jitlab.count_compiles(shift_scale) as n_x64:
        wide_out = shift_scale(x_f64)
        narrow_out = shift_scale(x_f32)
    exact = minus_big(big)

print(n_x64)
print(f"float64 input -> {wide_out.dtype}, float32 input -> {narrow_out.dtype}")
print(f"x64 on:  {exact} ({exact.dtype})")
print(n_x64.explanations[-1])
assert n_x64.compiles == 2, n_x64.explanations
assert wide_out.dtype == jnp.float64
assert narrow_out.dtype == jnp.float32
assert exact.dtype == jnp.float64 and float(exact[0]) == 1.0  # the answer changes
assert all("jax_enable_x64" in text for text in n_x64.explanations)

# %% [markdown]
# Two compilations, and the second one is the surprise: the float32 input had not changed,
# yet it was traced again. JAX's explanation says why: the *tracing context* is part of
# the cache key, and `jax_enable_x64` is part of that context. Flip the flag and no
# entry in the cache matches any more. The answer changes too: float64 in, float64 out, and the + 1
# survives.
#
# The old entries are still there, so going back costs nothing:

# %%
with jitlab.count_compiles(shift_scale) as n_back:
    back_out = shift_scale(x_f64)

print(n_back)
assert not jax.config.jax_enable_x64  # the with-block restored the default
assert n_back.compiles == 0, n_back.explanations
assert back_out.dtype == jnp.float32

# %% [markdown]
# <div class="admonition warning"><p class="admonition-title">What the source chapter gets
# wrong</p><p>It says that calling with float32 and then float64 "will likely trigger
# recompilation". With JAX's default settings it does not: the float64 array is
# canonicalised to float32, shares the float32 entry, and loses precision silently. Only
# with <code>jax_enable_x64</code> on is float64 a second program; and then flipping the
# flag retraces even the float32 calls.</p></div>

# %% [markdown]
# ## Integers and floats
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>centre</code> subtracts the mean. We call it on an int32 array and then on a
# float32 array holding the same numbers. The outputs are equal float32 arrays. How many
# compilations?</p></div>


# %%
@jax.jit
def centre(x):
    return x - x.mean()


ints = jnp.arange(8, dtype=jnp.int32)
floats = jnp.arange(8, dtype=jnp.float32)

with jitlab.count_compiles(centre) as n_int_float:
    from_ints = centre(ints)
    from_floats = centre(floats)

print(n_int_float)
print(n_int_float.explanations[-1])
assert n_int_float.compiles == 2, n_int_float.explanations
assert "i32[8]" in n_int_float.explanations[-1]
assert "f32[8]" in n_int_float.explanations[-1]
assert from_ints.dtype == from_floats.dtype == jnp.float32
assert bool(jnp.all(from_ints == from_floats))  # same numbers, two programs

# %% [markdown]
# Two. The key is the input's type (`i32[8]` against `f32[8]`), not what the function
# does with it. And the two programs really are different: `.trace` shows the jaxpr each
# input type produces, and only the integer one converts its input to float.

# %%
int_jaxpr = centre.trace(ints).jaxpr.pretty_print(use_color=False)
float_jaxpr = centre.trace(floats).jaxpr.pretty_print(use_color=False)
print(int_jaxpr, float_jaxpr, sep="\n\n")
assert "convert_element_type" in int_jaxpr
assert "convert_element_type" not in float_jaxpr

# %% [markdown]
# ## Which inputs share an entry?
#
# Canonicalisation first, then the lookup. One fresh function, nine inputs of the same
# shape.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Nine inputs, eight different dtypes as they arrive. How many compilations?</p></div>


# %%
@jax.jit
def probe(x):
    return x + x


inputs = {
    "jnp float32": jnp.zeros(8, jnp.float32),
    "NumPy float64": np.zeros(8),
    "NumPy float32": np.zeros(8, np.float32),
    "NumPy int64": np.zeros(8, np.int64),
    "jnp int32": jnp.zeros(8, jnp.int32),
    "NumPy uint8": np.zeros(8, np.uint8),
    "NumPy float16": np.zeros(8, np.float16),
    "jnp bfloat16": jnp.zeros(8, jnp.bfloat16),
    "NumPy bool": np.zeros(8, bool),
}

rows = []
with jitlab.count_compiles(probe) as n_probe:
    for label, value in inputs.items():
        before = n_probe.compiles
        probe(value)
        rows.append(
            {
                "input": label,
                "arrives as": np.dtype(value.dtype).name,
                "cache key": jax.dtypes.canonicalize_dtype(value.dtype).name,
                "new compilation": n_probe.compiles > before,
            }
        )
jitlab.print_table(rows)

arrived = {row["arrives as"] for row in rows}
keys = {row["cache key"] for row in rows}
print(f"{len(arrived)} dtypes arrived, {len(keys)} distinct keys,", end=" ")
print(f"{n_probe.compiles} compilations")
assert len(arrived) == 8
assert n_probe.compiles == len(keys) == 6, n_probe.explanations
assert [row["new compilation"] for row in rows] == [
    True, False, False, True, False, True, True, True, True
]  # fmt: skip

# %% [markdown]
# ## The problem in a loop
#
# A realistic case: batches come from several sources, and each source keeps its own
# dtype (a CSV read by pandas gives float64, a counter int32 or int64, an image uint8, a
# raw sensor int16, a half-precision cache float16). Every batch has the same shape; only
# the dtype varies. `standardise` rescales each column to mean 0 and standard deviation 1.
#
# `standardise.clear_cache()` empties this function's cache before each run, so that
# every run starts cold, as in a fresh process.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>42 batches, seven source dtypes taking turns. How many compilations does the naive
# loop cost? (Use the table above.)</p></div>


# %%
@jax.jit
def standardise(x):
    return (x - x.mean(axis=0)) / x.std(axis=0)


source_dtypes = [
    np.float64,
    np.int32,
    np.float32,
    np.uint8,
    np.int64,
    np.float16,
    np.int16,
]
rng = np.random.default_rng(2)
batches = [
    rng.normal(100.0, 20.0, size=(64, 16)).astype(source_dtypes[i % len(source_dtypes)])
    for i in range(42)
]


def naive_loop(batch_list):
    return [standardise(batch) for batch in batch_list]


def timed_run(loop, batch_list, repeats=3):
    """Run ``loop`` cold ``repeats`` times; return (median seconds, counts, outputs)."""
    seconds = []
    for _ in range(repeats):
        standardise.clear_cache()
        with jitlab.count_compiles(standardise) as counts:
            with jitlab.stopwatch() as watch:
                outputs = jax.block_until_ready(loop(batch_list))
        seconds.append(watch.seconds)
    return float(np.median(seconds)), counts, outputs


naive_s, n_naive, naive_out = timed_run(naive_loop, batches)
print(n_naive)
print(f"naive loop: {naive_s:.3f} s for {len(batches)} batches")
print("output dtypes:", sorted({out.dtype.name for out in naive_out}))
assert n_naive.compiles == 5, n_naive.explanations
assert {out.dtype.name for out in naive_out} == {"float16", "float32"}

# %% [markdown]
# Five compilations: float64 and int64 collapse onto float32 and int32, which leaves five
# distinct keys. Note the output dtypes too: the float16 batches came back in float16, so
# the answers are not even equally precise across batches.
#
# ## The fix: one cast, at the boundary
#
# Decide the dtype your computation runs in, and convert to it explicitly *before* the
# jitted call. For NumPy inputs `jnp.asarray(batch, jnp.float32)` converts on the host
# and hands JAX a float32 array; every call then has the same key.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Same 42 batches through the wrapper. Compilations? And how much faster overall?</p>
# </div>


# %%
def standardise_any(batch):
    """The boundary: whatever dtype arrives, standardise sees float32."""
    return standardise(jnp.asarray(batch, jnp.float32))


def cast_loop(batch_list):
    return [standardise_any(batch) for batch in batch_list]


cast_s, n_cast, cast_out = timed_run(cast_loop, batches)
print(n_cast)
speedup = naive_s / cast_s
jitlab.print_table(
    [
        {"loop": "naive", "compiles": n_naive.compiles, "total_s": naive_s},
        {"loop": "cast at boundary", "compiles": n_cast.compiles, "total_s": cast_s},
    ]
)
print(f"speedup: {speedup:.1f}x")

jitlab.record("mixed dtypes, no cast", compiles=n_naive.compiles, total_s=naive_s)
jitlab.record(
    "mixed dtypes, cast at boundary",
    compiles=n_cast.compiles,
    total_s=cast_s,
    speedup=speedup,
)

assert n_cast.compiles == 1, n_cast.explanations
assert {out.dtype.name for out in cast_out} == {"float32"}
assert naive_s > 2 * cast_s, (naive_s, cast_s)  # wide margin; typically 5x or more here

# %% [markdown]
# The cast also made the numbers uniform. Against a float64 NumPy reference, computed
# from each batch exactly as it arrived, the naive loop's worst error is on the float16
# batches; the cast loop is float32 everywhere.


# %%
def reference(batch):
    wide = np.asarray(batch, np.float64)
    return (wide - wide.mean(axis=0)) / wide.std(axis=0)


def worst_error_by_source(outputs):
    """Largest absolute error against the reference, for each source dtype."""
    worst = {}
    for out, batch in zip(outputs, batches, strict=True):
        error = float(np.max(np.abs(np.asarray(out, np.float64) - reference(batch))))
        worst[batch.dtype.name] = max(error, worst.get(batch.dtype.name, 0.0))
    return worst


naive_err = worst_error_by_source(naive_out)
cast_err = worst_error_by_source(cast_out)
jitlab.print_table(
    [
        {
            "source dtype": name,
            "naive error": naive_err[name],
            "cast error": cast_err[name],
        }
        for name in naive_err
    ]
)
assert max(naive_err, key=naive_err.get) == "float16"
assert max(cast_err.values()) < 1e-4
assert naive_err["float16"] > 100 * max(cast_err.values())

# %% [markdown]
# Where did the time go? Cumulative wall time, batch by batch, on a cold cache: each step
# of the naive line is a dtype seen for the first time.


# %%
def per_batch_seconds(step, batch_list):
    standardise.clear_cache()
    return np.array([jitlab.time_once(step, batch) for batch in batch_list])


naive_steps = per_batch_seconds(standardise, batches)
cast_steps = per_batch_seconds(standardise_any, batches)

fig, ax = plt.subplots(figsize=(6, 3.2))
ax.plot(np.cumsum(naive_steps), label="naive: one program per dtype")
ax.plot(np.cumsum(cast_steps), label="cast at the boundary: one program")
ax.set_xlabel("batch")
ax.set_ylabel("cumulative seconds")
ax.set_title("42 batches, 7 source dtypes, cold cache")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Casting inside the jitted function does not help
#
# The tempting shortcut is to put the cast inside: `x.astype(jnp.float32)` as the first
# line of the jitted function.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The same 42 batches go to <code>standardise_inside</code>, whose first line casts to
# float32. How many compilations?</p></div>


# %%
@jax.jit
def standardise_inside(x):
    x = x.astype(jnp.float32)  # too late: the cache lookup already used x's dtype
    return (x - x.mean(axis=0)) / x.std(axis=0)


with jitlab.count_compiles(standardise_inside) as n_inside:
    for batch in batches:
        standardise_inside(batch)

print(n_inside)
print(n_inside.explanations[-1])
canonical = {jax.dtypes.canonicalize_dtype(batch.dtype) for batch in batches}
print(f"{len(source_dtypes)} source dtypes, {len(canonical)} after canonicalisation")
assert n_inside.compiles == n_naive.compiles == 5, n_inside.explanations
assert len(canonical) == n_inside.compiles < len(source_dtypes)  # keyed after canon.

# %% [markdown]
# Still five. The cache lookup happens *before* the body runs, on each argument's dtype
# after canonicalisation: float64 and int64 have already become float32 and int32, which
# is why seven source dtypes make five keys, not seven. What the body does with the
# argument comes later. The cast inside gives uniform float32 answers, but every
# canonical dtype still pays for its own trace and compilation.
#
# ## What the cast itself costs
#
# From NumPy, `jnp.asarray(x, jnp.float32)` converts on the host and compiles nothing.
# From an array that already lives on the device, the conversion is a small JAX operation
# (`convert_element_type`), compiled once per source dtype and then cached: a few tiny
# programs, instead of one full copy of your function per dtype.

# %%
on_host = [np.ones((64, 16), dtype) for dtype in (np.int16, np.uint8, np.float16)]
on_device = [jnp.asarray(array) for array in on_host]

with jitlab.count_compiles(None) as n_host_cast:
    for array in on_host:
        jnp.asarray(array, jnp.float32)
with jitlab.count_compiles("convert_element_type") as n_device_cast:
    for array in on_device:
        jnp.asarray(array, jnp.float32)
with jitlab.count_compiles("convert_element_type") as n_device_again:
    for array in on_device:
        jnp.asarray(array, jnp.float32)

print(f"cast from NumPy:        {n_host_cast.compiles} compilations (any function)")
cold = n_device_cast.compiles
print(f"cast from device, cold: {cold} compilations of convert_element_type")
print(f"cast from device, warm: {n_device_again.compiles} compilations")
assert n_host_cast.compiles == 0
assert n_device_cast.compiles == len(on_device)  # one per source dtype
assert n_device_again.compiles == 0

# %% [markdown]
# ## Key points
#
# A dtype that arrives in many forms should be decided once, at the edge of your code:
# one explicit cast before the jitted call, in a wrapper such as `standardise_any`. Set
# `jax_enable_x64` once, at start-up, if you need float64, and never flip it inside a
# loop. The exercise applies this to a scoring function fed by a loader of mixed dtypes.

# %%
jitlab.outro()
