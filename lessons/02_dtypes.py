# ---
# jupyter:
#   jitlab:
#     fix: cast once at the boundary, explicitly
#     half_day:
#       minutes:
#         exercises: 10
#         teaching: 15
#       skip:
#       - Switching 64-bit types on
#       - Integers and floats
#       - What the cast itself costs
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
x_f64 = np.linspace(0.0, 1.0, 8)  # NumPy's default dtype

with jitlab.count_compiles(shift_scale) as n_f64:
    from_f32 = shift_scale(x_f32)
    from_f64 = shift_scale(x_f64)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n_f64, f"input {x_f64.dtype} -> output {from_f64.dtype}", sep="\n")
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
    print(np.dtype(wide).name, "->", jax.dtypes.canonicalize_dtype(wide).name)
narrow = [
    jax.dtypes.canonicalize_dtype(w) for w in (np.float64, np.int64, np.complex128)
]
assert narrow == [np.float32, np.int32, np.complex64]
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

# %% tags=["answer"] jupyter={"source_hidden": true}
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
# float32 array that is already in the cache. How many compilations? And what does
# <code>minus_big</code> return now?</p></div>

# %%
with jax.enable_x64(True):
    with jitlab.count_compiles(shift_scale) as n_x64:
        wide_out = shift_scale(x_f64)
        narrow_out = shift_scale(x_f32)
    exact = minus_big(big)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n_x64, f"float64 in -> {wide_out.dtype}, float32 in -> {narrow_out.dtype}")
print(f"x64 on: {exact} ({exact.dtype})", n_x64.explanations[-1], sep="\n")
assert n_x64.compiles == 2, n_x64.explanations
assert wide_out.dtype == jnp.float64 and narrow_out.dtype == jnp.float32
assert exact.dtype == jnp.float64 and float(exact[0]) == 1.0  # the answer changes
assert all("jax_enable_x64" in text for text in n_x64.explanations)

# %% [markdown]
# Two compilations, and the second one is the surprise: the float32 input had not changed,
# yet it was traced again. JAX's explanation says why: the *tracing context* is part of
# the cache key, and `jax_enable_x64` is part of that context. Flip the flag and no
# entry in the cache matches any more. The answer changes too: float64 in, float64 out,
# and the + 1 survives.
#
# The old entries are still there, so going back costs nothing:

# %%
with jitlab.count_compiles(shift_scale) as n_back:
    back_out = shift_scale(x_f64)
print(n_back)
assert not jax.config.jax_enable_x64  # the with-block restored the default
assert n_back.compiles == 0 and back_out.dtype == jnp.float32, n_back.explanations

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
    from_ints, from_floats = centre(ints), centre(floats)

# %% tags=["answer"] jupyter={"source_hidden": true}
last = n_int_float.explanations[-1]
print(n_int_float, last, sep="\n")
assert n_int_float.compiles == 2, n_int_float.explanations
assert "i32[8]" in last and "f32[8]" in last
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


host_dtypes = ("float64", "float32", "int64", "uint8", "float16", "bool")
inputs = [jnp.zeros(8, d) for d in ("float32", "int32", "bfloat16")]  # jax.Arrays
inputs += [np.zeros(8, dtype) for dtype in host_dtypes]  # NumPy arrays

# %%
compiled_anew = []
with jitlab.count_compiles(probe) as n_probe:
    for value in inputs:
        before = n_probe.compiles
        probe(value)
        compiled_anew.append(n_probe.compiles > before)


# %% tags=["answer"] jupyter={"source_hidden": true}
def key_row(value, new):
    where = "jnp" if isinstance(value, jax.Array) else "NumPy"
    key = jax.dtypes.canonicalize_dtype(value.dtype).name
    return {"input": f"{where} {value.dtype}", "cache key": key, "new compilation": new}


jitlab.print_table(
    [key_row(v, new) for v, new in zip(inputs, compiled_anew, strict=True)]
)
assert len({value.dtype for value in inputs}) == 8
keys = {jax.dtypes.canonicalize_dtype(value.dtype) for value in inputs}
assert n_probe.compiles == len(keys) == 6, n_probe.explanations
assert compiled_anew == [True] * 3 + [False] * 3 + [True] * 3

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


source_dtypes = ["float64", "int32", "float32", "uint8", "int64", "float16", "int16"]
rng = np.random.default_rng(2)
batches = [rng.normal(100.0, 20.0, (64, 16)).astype(d) for d in source_dtypes * 6]


# %%
def cold_run(label, step):
    """All 42 batches through ``step``, starting from an empty cache."""
    standardise.clear_cache()
    return jitlab.measure(label, lambda: [step(b) for b in batches], count=standardise)


naive = cold_run("mixed dtypes, no cast", standardise)

# %% tags=["answer"] jupyter={"source_hidden": true}
naive_dtypes = {out.dtype.name for out in naive.result}
print(naive.counts, "| output dtypes:", sorted(naive_dtypes))
assert naive.compiles == 5, naive.counts.explanations
assert naive_dtypes == {"float16", "float32"}

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


cast = cold_run("mixed dtypes, cast at boundary", standardise_any)

# %% tags=["answer"] jupyter={"source_hidden": true}
boundary = jitlab.compare(naive, cast)
assert cast.compiles == 1, cast.counts.explanations
assert {out.dtype.name for out in cast.result} == {"float32"}
assert boundary.speedup > 2, boundary.rows()  # wide margin; typically 4x or more here

# %% [markdown]
# The cast also made the numbers uniform. Against a float64 NumPy reference, computed
# from each batch exactly as it arrived, the naive loop's worst error is on the float16
# batches; the cast loop is float32 everywhere.


# %%
def worst_error_by_source(outputs):
    """Largest absolute error against a float64 reference, for each source dtype."""
    worst = {}
    for out, batch in zip(outputs, batches, strict=True):
        wide = np.asarray(batch, np.float64)
        want = (wide - wide.mean(axis=0)) / wide.std(axis=0)
        error = float(np.max(np.abs(np.asarray(out, np.float64) - want)))
        worst[batch.dtype.name] = max(error, worst.get(batch.dtype.name, 0.0))
    return worst


# %%
naive_err, cast_err = (
    worst_error_by_source(naive.result),
    worst_error_by_source(cast.result),
)
for name, error in naive_err.items():
    print(f"{name:>8}: naive error {error:.1e}, cast error {cast_err[name]:.1e}")
assert max(naive_err, key=naive_err.get) == "float16"
assert max(cast_err.values()) < 1e-4
assert naive_err["float16"] > 100 * max(cast_err.values())

# %% [markdown]
# Where did the time go? Cumulative wall time, batch by batch, on a cold cache: each step
# of the naive line is a dtype seen for the first time.

# %%
curves = {}
for label, step in [("naive", standardise), ("cast at the boundary", standardise_any)]:
    standardise.clear_cache()
    curves[label] = np.cumsum([jitlab.time_once(step, batch) for batch in batches])

# %%
fig, ax = plt.subplots(figsize=(6, 3.2))
for label, curve in curves.items():
    ax.plot(curve, label=label)
ax.set(xlabel="batch", ylabel="cumulative seconds", title="42 batches, 7 dtypes, cold")
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

# %% tags=["answer"] jupyter={"source_hidden": true}
canonical = {jax.dtypes.canonicalize_dtype(batch.dtype) for batch in batches}
print(n_inside, f"{len(source_dtypes)} source dtypes, {len(canonical)} canonical")
print(n_inside.explanations[-1])
assert n_inside.compiles == naive.compiles == 5, n_inside.explanations
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
# From NumPy, `jnp.asarray(x, jnp.float32)` converts the values on the host; what it
# hands JAX is already float32, and the one tiny program it compiles per new shape
# (a float32 `convert_element_type`) is shared by every source dtype. From an array that
# already lives on the device, the conversion is that JAX operation on the source dtype,
# compiled once per source dtype and then cached: a few tiny programs, instead of one
# full copy of your function per dtype.

# %%
on_host = [np.ones((64, 15), dtype) for dtype in (np.int16, np.uint8, np.float16)]
on_device = [jnp.asarray(array) for array in on_host]
with jitlab.count_compiles(None) as n_host_cast:
    [jnp.asarray(array, jnp.float32) for array in on_host]
with jitlab.count_compiles("convert_element_type") as n_device_cast:
    [jnp.asarray(array, jnp.float32) for array in on_device]
with jitlab.count_compiles("convert_element_type") as n_device_again:
    [jnp.asarray(array, jnp.float32) for array in on_device]

# %%
print(n_host_cast, n_device_cast, n_device_again, sep="\n")
assert n_host_cast.compiles == 1, "from NumPy: one float32 copy per shape, any dtype"
assert n_device_cast.compiles == len(on_device)  # one per source dtype
assert n_device_again.compiles == 0

# %% [markdown]
# ## Key points
#
# A dtype that arrives in many forms should be decided once, at the edge of your code:
# one explicit cast before the jitted call, in a wrapper such as `standardise_any`. Set
# `jax_enable_x64` once, at start-up, if you need float64, and never flip it inside a
# loop. The exercise applies this to a scoring function fed by a loader of mixed dtypes.

# %% tags=["remove-input"]
jitlab.outro()
