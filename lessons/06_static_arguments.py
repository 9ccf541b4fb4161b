# ---
# jupyter:
#   jitlab:
#     fix: few static values, hashable and equal by value, immutable
#     instructor_notes:
#     - Learners often think "static" means "cached once". Run the section 1 loop live
#       and ask for a count before you run it. Then ask what 1 vs 1.0 vs True will cost.
#     - The stale-result cells (section 4) are the ones to demo live. The number is
#       wrong, nothing is printed, and the counter shows zero traces. Ask the room where
#       the 10x went.
#     - People bring up `jax.tree_util.register_dataclass` and equinox Modules. Both
#       are the other way round, making the object a pytree whose array leaves are traced.
#       They fit weights. A frozen dataclass as a static argument fits hyper-parameters.
#     - The memory column needs Linux with glibc (it calls malloc_trim). On macOS the
#       lesson says so and skips the memory checks. The compile counts hold everywhere.
#     keypoints:
#     - A static argument's value is part of the cache key. JAX hashes it and looks
#       for a compiled entry whose value has the same type and compares equal with ==.
#     - JAX 0.12 does not say which static value changed - its explanation reads "cache
#       miss explanation unavailable". Count compilations, and know which arguments
#       are static.
#     - Lists, dicts, NumPy arrays and jax.Arrays are unhashable. As static arguments
#       they raise ValueError ("Non-hashable static arguments are not supported") at
#       call time. Pass a tuple, or pass the array as a traced argument.
#     - A class with the default identity hash compiles once per instance. A frozen
#       dataclass hashes and compares by its fields, so equal instances share one executable.
#     - Whatever the function reads from a static argument is baked into the executable.
#       If == ignores a field, the cached program returns stale numbers and never retraces.
#       Changing a static object after use is worse - stale numbers with an identity
#       hash, undefined behaviour with a hash that changes (unsafe_hash).
#     - Every distinct static value costs a compilation, a cache entry and memory. f.clear_cache()
#       drops f's executables and traces (much of the memory comes back, the next call
#       compiles again) and also empties a cache shared by every function.
#     - Make static only what has few values and shapes the program (modes, flags, sizes).
#       Numbers that change from call to call stay traced.
#     minutes:
#       exercises: 15
#       teaching: 35
#     objectives:
#     - Predict whether a static argument hits the cache from its type, its hash and
#       its equality.
#     - Recognise the error JAX raises for an unhashable static argument, and pick the
#       fix.
#     - Write a configuration class that is hashable by value and immutable, and use
#       it as a static argument or as a static `self`.
#     - Measure what one executable per static value costs (compilations, compile time,
#       cache entries, memory) and decide what should not be static at all.
#     prerequisites:
#       lessons:
#       - what_jit_caches
#       - control_flow
#     questions:
#     - What makes a value a good static argument, and what happens with a bad one?
#     - Why does an equal-looking object compile again, and when does a static argument
#       return a stale result?
#     - What do many distinct static values cost, and how do you get the memory back?
#     title: Static arguments in depth
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
# # 06 · Static arguments in depth
#
# Marking an argument static tells `jax.jit` not to trace it. Its Python value becomes
# part of the cache key, and the function is traced and compiled once for every distinct
# value. That only works if JAX can tell two values apart, and tell when they are the
# same. This lesson looks at what "distinct" means (hash, equality, type). It shows what
# happens when a value cannot be hashed, or is hashed the wrong way, and what a cache
# with one executable per value costs as the values pile up.
# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import ctypes
import ctypes.util
import dataclasses
import functools
import gc
import os
import sys

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

# %% [markdown]
# ## 1. A static value is part of the cache key
#
# On each call, JAX hashes every static argument and looks for a compiled entry whose
# static values are *equal*: same type, and `==` returns `True`. A good static argument
# is therefore
#
# - **hashable**, so it can go into the key at all;
# - **equal by value**, so that two equal-looking values find the same entry;
# - **one of a few values**, because every new value is a new compilation.
#
# A short string that picks a mode meets all three.


# %%
def normalise(x, how):
    if how == "l1":
        return x / jnp.sum(jnp.abs(x))
    if how == "l2":
        return x / jnp.sqrt(jnp.sum(x * x))
    if how == "max":
        return x / jnp.max(jnp.abs(x))
    raise ValueError(f"unknown norm {how!r}")


normalise_j = jax.jit(normalise, static_argnames="how")
x = jnp.arange(1.0, 9.0)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>normalise</code> takes a static <code>how</code> and is called 30 times,
# cycling through <code>"l1"</code>, <code>"l2"</code> and <code>"max"</code>.
# How many compilations?</p></div>

# %%
with jitlab.count_compiles(normalise_j) as n:
    for i in range(30):
        normalise_j(x, how=("l1", "l2", "max")[i % 3])

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n, "| cache entries:", normalise_j._cache_size())
assert n.traces == 3 and n.compiles == 3, n.explanations
assert normalise_j._cache_size() == 3

# %% [markdown]
# One compilation per distinct value, then cache hits for the other 27 calls.
# `_cache_size()` is a **private** method of the jitted function. It counts the entries in
# that function's cache, and it may change or go away in any JAX release. We use it here
# only to look inside.
#
# <div class="admonition info"><p class="admonition-title">What the source chapter
# says, and leaves out</p>
# <p>The chapter has the mechanism right: JAX compiles a specialisation "for each unique
# combination of values" of the static arguments. Its own example compiles once for 3
# and once for 7 and reuses each, and it warns that many distinct values mean many
# compilations (section 6 measures them). Read alone, one sentence promises more: static
# arguments avoid "recompilation when only the static arguments change". That holds
# only for a value JAX has met before; a new one always costs a trace and a
# compilation, as the next cell measures. What the chapter leaves out is what "unique"
# means to JAX: equal, of the same type (below), and hashable (section 2), by a hash
# and an equality your own classes can get wrong (sections 3 and 4).</p></div>


# %%
def repeat_sum(x, times):
    total = x
    for _ in range(times - 1):
        total = total + x
    return total


repeat_sum_j = jax.jit(repeat_sum, static_argnums=1)

# %%
compiled_at = []
for times in (3, 3, 7, 7, 3):
    with jitlab.count_compiles(repeat_sum_j) as n:
        repeat_sum_j(x, times)
    compiled_at.append(n.compiles)
print("compilations per call, times = 3, 3, 7, 7, 3:", compiled_at)
assert compiled_at == [1, 0, 1, 0, 0]

# %% [markdown]
# Equality is not quite all of it. JAX also requires the **same type**. In Python,
# `1 == 1.0 == True` and the three hash alike, but as static values they are three keys.


# %%
def scale(x, factor):
    return x * factor


scale_j = jax.jit(scale, static_argnums=1)
same_hash = hash(1) == hash(1.0) == hash(True)
print("equal:", 1 == 1.0 == True, "| same hash:", same_hash)  # noqa: E712

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>scale(x, factor)</code> with a static <code>factor</code> is called with
# <code>1</code>, then <code>1.0</code>, then <code>True</code>. How many compilations?
# </p></div>

# %%
with jitlab.count_compiles(scale_j) as n:
    for factor in (1, 1.0, True):
        scale_j(x, factor)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n, n.explanations[-1].splitlines()[-1].strip(), sep="\n")
assert n.compiles == 3, n.explanations
# JAX 0.12 does not say which static value differed (0.10.2 printed both values).
assert "cache miss explanation unavailable" in n.explanations[-1]

# %% [markdown]
# JAX wraps each static value so that equality also checks `type(a) is type(b)`. An
# integer and a float can build different programs, so this is a safety net. It also
# means a static argument that sometimes arrives as `2` and sometimes as `2.0` compiles
# twice. Pick one type per static argument.
#
# ## 2. Unhashable values
#
# A value that cannot be hashed cannot go into the key.


# %%
def weighted_sum(x, weights):
    total = 0.0
    for i, w in enumerate(weights):
        total = total + w * x[i]
    return total


weighted_sum_j = jax.jit(weighted_sum, static_argnums=1)  # creating it is fine

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Weights passed as a static argument, as a list, a NumPy array and a
# <code>jax.Array</code>. Does <code>jax.jit(...)</code> refuse, does the call fail, or
# does it compile?</p></div>

# %%
candidates = {
    "list": [0.5, 0.25, 0.25],
    "NumPy array": np.array([0.5, 0.25, 0.25]),
    "jax.Array": jnp.array([0.5, 0.25, 0.25]),
}
tried = {label: jitlab.attempt(weighted_sum_j, x, w) for label, w in candidates.items()}

# %% tags=["answer"] jupyter={"source_hidden": true}
for label, attempt in tried.items():
    assert type(attempt.error) is ValueError, attempt
    message = str(attempt.error)
    assert message.startswith("Non-hashable static arguments are not supported")
    cause = [line for line in message.splitlines() if line.startswith("TypeError")][0]
    print(f"{label:11} -> ValueError: Non-hashable static arguments ... ({cause})")

# %% [markdown]
# `jax.jit` accepts `static_argnums=1` without complaint. The error comes at the first
# call, as a `ValueError` that wraps Python's own `TypeError: unhashable type`. A `dict`
# or a mutable `@dataclass` (next section) fails the same way.
#
# There are two ways out, depending on how the value behaves:
#
# - It is a fixed choice with few values: pass a **tuple**. Tuples hash by value, so a
#   fresh tuple with the same numbers finds the same executable.
# - It changes from call to call (weights usually do): **do not make it static**. Pass
#   the array as a traced argument, and one executable serves every value.


# %%
@jax.jit
def weighted_sum_traced(x, weights):
    return jnp.dot(weights, x[: weights.shape[0]])


rng = np.random.default_rng(6)
weight_sets = [rng.dirichlet(np.ones(3)).astype(np.float32) for _ in range(5)]

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The same weights twice as two equal tuples; then five different weight vectors, as
# static tuples and as traced arrays. How many compilations each?</p></div>

# %%
with jitlab.count_compiles(weighted_sum_j) as n_same:
    a = weighted_sum_j(x, (0.5, 0.25, 0.25))
    b = weighted_sum_j(x, tuple([0.5, 0.25, 0.25]))  # a new tuple, equal by value
as_tuples = jitlab.measure(
    "5 weight vectors as static tuples",
    lambda: [weighted_sum_j(x, tuple(w.tolist())) for w in weight_sets],
    count=weighted_sum_j,
)
as_arrays = jitlab.measure(
    "5 weight vectors as traced arrays",
    lambda: [weighted_sum_traced(x, jnp.asarray(w)) for w in weight_sets],
    count=weighted_sum_traced,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
print("equal tuples, twice:", n_same)
weights_fix = jitlab.compare(as_tuples, as_arrays)
assert n_same.compiles == 1 and float(a) == float(b)
assert as_tuples.compiles == 5 and as_arrays.compiles == 1
np.testing.assert_allclose(as_tuples.result, as_arrays.result, rtol=1e-5)

# %% [markdown]
# ## 3. Your own class as a static argument
#
# Configuration objects are the usual static arguments in real code. Here a smoothing
# filter reads two fields from its configuration: a `window` that sets a shape, and a
# `gain`.


# %%
def smooth(x, cfg):
    kernel = jnp.ones(cfg.window) / cfg.window
    return cfg.gain * jnp.convolve(x, kernel, mode="same")


smooth_j = jax.jit(smooth, static_argnums=1)
signal = jnp.sin(jnp.linspace(0.0, 6.0, 64))


class PlainSmoothing:
    """An ordinary class: Python's default hash and == use the object's identity."""

    def __init__(self, window, gain):
        self.window = window
        self.gain = gain


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Four calls, each with a new <code>PlainSmoothing(window=3, gain=1.0)</code>. The
# four objects look the same. How many compilations?</p></div>

# %%
plain_configs = jitlab.measure(
    "config with identity hash, 4 equal instances",
    lambda: [smooth_j(signal, PlainSmoothing(window=3, gain=1.0)) for _ in range(4)],
    count=smooth_j,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(
    plain_configs.counts, "| equal?", PlainSmoothing(3, 1.0) == PlainSmoothing(3, 1.0)
)
assert plain_configs.compiles == 4, plain_configs.counts.explanations
explained = plain_configs.counts.explanations[-1]
assert "cache miss explanation unavailable" in explained
assert PlainSmoothing(3, 1.0) != PlainSmoothing(3, 1.0)

# %% [markdown]
# JAX 0.12 gives no reason for this miss ("cache miss explanation unavailable"), so the
# count is the evidence. With the default hash, every instance is a new key, so a
# configuration built inside a loop or a function compiles on every call.
#
# A **frozen dataclass** fixes both halves. `@dataclass` writes `__eq__` over the fields,
# and `frozen=True` adds a matching `__hash__` and forbids assignment after construction.


# %%
@dataclasses.dataclass(frozen=True)
class Smoothing:
    window: int
    gain: float


a, b = Smoothing(3, 1.0), Smoothing(3, 1.0)
assert a is not b and a == b and hash(a) == hash(b)

# %%
frozen_configs = jitlab.measure(
    "frozen dataclass config, 4 equal instances + 1 new",
    lambda: [smooth_j(signal, Smoothing(w, 1.0)) for w in (3, 3, 3, 3, 5)],
    count=smooth_j,
)
config_fix = jitlab.compare(plain_configs, frozen_configs)
assert frozen_configs.compiles == 2, frozen_configs.counts.explanations  # 3 and 5

# %%
refused = jitlab.attempt(setattr, a, "gain", 2.0)
print("assignment refused:", refused)
assert type(refused.error) is dataclasses.FrozenInstanceError


# %% [markdown]
# Without `frozen=True` you get no hash at all. Python sets `__hash__ = None` on a
# dataclass that defines `__eq__` and can still be changed, and JAX then refuses it
# like a list.


# %%
@dataclasses.dataclass
class MutableSmoothing:
    window: int
    gain: float


mutable = jitlab.attempt(smooth_j, signal, MutableSmoothing(3, 1.0))
print(mutable)
assert MutableSmoothing.__hash__ is None and type(mutable.error) is ValueError
assert "Non-hashable static arguments are not supported" in str(mutable.error)

# %% [markdown]
# ## 4. Stale results: when the key says "same" and the value is not
#
# The cache trusts `==`. If two values compare equal, JAX reuses the executable it built
# for the first one, and **everything the function read from that first value is baked
# into the executable as a constant**. So equality must cover every field the function
# reads, and the object must not change after it has been used.
#
# A common shortcut looks harmless. "`gain` is just a number and doesn't change the
# program, so leave it out of `__eq__`."


# %%
class WindowKeyed:
    """Hashes and compares by `window` only; `gain` is left out (the bug)."""

    def __init__(self, window, gain):
        self.window = window
        self.gain = gain

    def __eq__(self, other):
        return isinstance(other, WindowKeyed) and other.window == self.window

    def __hash__(self):
        return hash(self.window)


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>WindowKeyed</code> compares and hashes by <code>window</code> only. We smooth
# with <code>gain=1.0</code>, then with a new object with <code>gain=10.0</code>. Is the
# second result ten times larger?</p></div>

# %%
quiet, loud = WindowKeyed(window=3, gain=1.0), WindowKeyed(window=3, gain=10.0)
out_quiet = smooth_j(signal, quiet)
with jitlab.count_compiles(smooth_j) as n:
    out_loud = smooth_j(signal, loud)
expected_loud = smooth(signal, loud)  # run without jit: reads gain=10 now

# %% tags=["answer"] jupyter={"source_hidden": true}
print(f"peak: gain 1 {out_quiet.max():.4f}, gain 10 {out_loud.max():.4f}", end=" ")
print(f"(expected {expected_loud.max():.4f});", n)
assert n.traces == 0 and n.compiles == 0  # a cache hit: no retrace, no warning
np.testing.assert_allclose(out_loud, out_quiet)  # the gain=1 program ran again
np.testing.assert_allclose(expected_loud, 10 * out_quiet, rtol=1e-5)

# %% [markdown]
# No error, no warning, no retrace. The number is just wrong.
#
# Changing a configuration **in place** after use is a second way to the same bug, or to
# something worse. JAX keeps the static object itself in its cache key, not a copy, so
# changing the object changes the key that is already stored.
#
# - With the default identity hash, the changed object still hashes and "equals" as
#   before, so the lookup finds the old executable: a stale result, every time.
# - With `@dataclass(unsafe_hash=True)` (mutable, hashed by value) the hash changes under
#   JAX's feet, and the stored key no longer matches the hash it was filed under. What
#   happens then is not specified by JAX or by Python's dictionaries, and it has changed
#   between releases: JAX 0.10.2 returned the old number, JAX 0.12 traces again and
#   returns the new one. Code must not depend on either, so the cell below asserts only
#   that it is one of the two, and prints which one your JAX chose.


# %%
@dataclasses.dataclass(unsafe_hash=True)
class UnsafeSmoothing:
    window: int
    gain: float


def after_change(cfg):
    """Compilations, and the peak ratio (10 if right), when cfg.gain goes 1 -> 10."""
    before = smooth_j(signal, cfg)
    cfg.gain = 10.0  # changed after use
    with jitlab.count_compiles(smooth_j) as n:
        after = smooth_j(signal, cfg)
    return n.compiles, round(float(after.max() / before.max()), 3)


# %%
identity = after_change(PlainSmoothing(window=4, gain=1.0))
by_value = after_change(UnsafeSmoothing(window=4, gain=1.0))
print("(compiles, peak ratio): identity hash", identity, "| unsafe_hash", by_value)
assert identity == (0, 1.0)  # the same key: a stale result, the old gain baked in
assert by_value in {(0, 1.0), (1, 10.0)}  # undefined: stale, or retraced

# %% [markdown]
# With a frozen dataclass this bug cannot be written. `cfg.gain = 10.0` raises, and you
# build a new value with `dataclasses.replace(cfg, gain=10.0)`. That value is unequal to
# the old one, so it compiles a program of its own and returns the right numbers.

# %%
cfg = Smoothing(window=4, gain=1.0)
before = smooth_j(signal, cfg)
with jitlab.count_compiles(smooth_j) as n:
    after = smooth_j(signal, dataclasses.replace(cfg, gain=10.0))
print(n)
assert n.compiles == 1
np.testing.assert_allclose(after, 10 * before, rtol=1e-5)

# %% [markdown]
# ## 5. `self` as a static argument
#
# Decorating a method with `jax.jit` gives it `self` as its first argument, and `self` is
# not an array. A common fix is `functools.partial(jax.jit, static_argnums=0)`, which makes
# `self` static. Everything above then applies to the whole object: its class decides the
# hash and the equality.
#
# The two classes below differ only in that. (The methods have different names because
# `count_compiles` matches functions by name.)

# %%
ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu}


class PlainHead:
    def __init__(self, activation, scale):
        self.activation = activation
        self.scale = scale

    @functools.partial(jax.jit, static_argnums=0)
    def apply_plain(self, w, x):
        return self.scale * ACTIVATIONS[self.activation](x @ w)


@dataclasses.dataclass(frozen=True)
class FrozenHead:
    activation: str
    scale: float

    @functools.partial(jax.jit, static_argnums=0)
    def apply_frozen(self, w, x):
        return self.scale * ACTIVATIONS[self.activation](x @ w)


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>An evaluation loop builds its head afresh on each of 5 batches, as
# <code>Head("tanh", 0.5)</code>. How many compilations with each class?</p></div>

# %%
w = jnp.asarray(rng.normal(size=(8, 4)), dtype=jnp.float32)
batches = [jnp.asarray(rng.normal(size=(16, 8)), dtype=jnp.float32) for _ in range(5)]
plain_heads = jitlab.measure(
    "static self, identity hash, 5 fresh heads",
    lambda: [PlainHead("tanh", 0.5).apply_plain(w, xb) for xb in batches],
    count=PlainHead.apply_plain,
)
frozen_heads = jitlab.measure(
    "static self, frozen dataclass, 5 fresh heads",
    lambda: [FrozenHead("tanh", 0.5).apply_frozen(w, xb) for xb in batches],
    count=FrozenHead.apply_frozen,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
heads = jitlab.compare(plain_heads, frozen_heads)
assert plain_heads.compiles == 5 and frozen_heads.compiles == 1, heads.rows()
np.testing.assert_allclose(plain_heads.result, frozen_heads.result, rtol=1e-6)

# %% [markdown]
# `jax.jit(FrozenHead.some_method, static_argnums=0)` written outside the class is the
# same thing. Both put the whole of `self` into the key, which has a consequence. A
# static `self` may only hold hyper-parameters. Put the weights on it and the frozen
# dataclass hashes its fields, reaches an array, and fails.


# %%
@dataclasses.dataclass(frozen=True)
class HeadWithWeights:
    w: jax.Array
    scale: float

    @functools.partial(jax.jit, static_argnums=0)
    def apply_with_weights(self, x):
        return self.scale * jnp.tanh(x @ self.w)


# %%
with_weights = jitlab.attempt(HeadWithWeights(w, 0.5).apply_with_weights, batches[0])
print(with_weights)
assert type(with_weights.error) is ValueError
assert "Non-hashable static arguments are not supported" in str(with_weights.error)

# %% [markdown]
# Keep weights as traced arguments, as `w` is in `apply_frozen`. If you want them on the
# object, make the object a pytree instead of a static argument
# (`jax.tree_util.register_dataclass`, or an Equinox/Flax module). Lesson 07 returns to
# methods and bound `self`.
#
# ## 6. Many distinct values: one executable each
#
# The classic mistake is making static something that changes on every call. A learning
# rate that follows a schedule is the textbook case. Each new value is a new key, so
# each step traces, compiles and stores another executable.
#
# Memory is the hard column to measure honestly. `compiled.memory_analysis()` reports
# zero code size on the CPU backend, so it cannot tell us. We read the process's resident
# memory instead. First we ask glibc's allocator (`malloc_trim`) to hand freed pages back,
# because otherwise freed memory still counts as resident. That needs Linux with glibc.
# Elsewhere the lesson prints no memory figures and skips their checks.

# %%
_LIBC_NAME = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
_LIBC = ctypes.CDLL(_LIBC_NAME) if _LIBC_NAME else None
MEMORY_MEASURABLE = (
    _LIBC is not None
    and hasattr(_LIBC, "malloc_trim")
    and os.path.exists("/proc/self/statm")
)


def live_memory_mb(collect=True):
    """Resident MiB, after returning freed pages to the OS; None if unsupported."""
    if not MEMORY_MEASURABLE:
        return None
    if collect:  # a full garbage collection: slow, so the loop below skips it
        gc.collect()
    _LIBC.malloc_trim(0)
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


# %%
def sgd_step(w, g, lr):
    return w - lr * g


step_static = jax.jit(sgd_step, static_argnums=2)  # the mistake: lr is static
params, grads = jnp.ones(256), jnp.full(256, 0.5)
learning_rates = np.geomspace(1e-1, 1e-4, 32).tolist()  # Python floats, one per step

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>32 steps, each with a new static learning rate. How many compilations, how many
# cache entries, and does memory grow?</p></div>


# %%
def schedule(step, growth, start, checkpoints=(1, 2, 4, 8, 16, 24, 32)):
    """The 32 steps, noting at checkpoints the cache size and the memory grown."""
    for k, lr in enumerate(learning_rates, start=1):
        step(params, grads, lr).block_until_ready()
        if k in checkpoints:
            memory = live_memory_mb(collect=False)
            growth.append((k, step._cache_size(), memory and memory - start))


growth, memory_start = [], live_memory_mb()  # outside the timed run
static_lr = jitlab.measure(
    "32-step lr schedule, lr static",
    lambda: schedule(step_static, growth, memory_start),
    count=step_static,
    explain=False,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
steps, entries, grown = zip(*growth, strict=True)
print(static_lr.counts, "| cache entries after steps", steps, ":", entries)
assert static_lr.compiles == 32 and entries == steps  # one each, none evicted
if MEMORY_MEASURABLE:
    grown_mb = grown[-1]
    print(f"memory grown: {grown_mb:.1f} MiB, about {grown_mb / 32:.2f} MiB an entry")
    assert grown_mb > 5, grown_mb  # measured here: 0.3 to 1.5 MiB an entry

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(steps, entries, "o-", label="cache entries (_cache_size)")
ax.set(xlabel="distinct static values", ylabel="entries", title="one executable each")
if MEMORY_MEASURABLE:
    ax_mem = ax.twinx()
    ax_mem.plot(steps, grown, "D--", color="C3", label="memory (MiB)")
    ax_mem.set_ylabel("resident memory growth, MiB")
    ax_mem.legend(loc="lower right")
ax.legend(loc="upper left")
plt.show()

# %% [markdown]
# Count and cache size grow one for one with the number of values, and so does
# resident memory: hundreds of kilobytes or more per entry (the figure above is this
# machine's), for a function that subtracts two vectors. Nothing evicts these entries at this
# scale.
#
# ## 7. Emptying the cache: `clear_cache()` and `jax.clear_caches()`
#
# A jitted function has a `clear_cache()` method. For that function it drops the
# compiled executables (its fast-path entries) and the traces (jaxprs) kept in JAX's
# inner tracing cache, and much of the memory comes back (about half here, measured
# below). It also empties one cache that *every* jitted function shares; the next cells
# show what that costs.
# `jax.clear_caches()` empties the caches of every function in the process. Both cost
# the same thing for the functions they clear: the next call traces and compiles again,
# even for a value that was compiled before.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>After <code>step_static.clear_cache()</code>, how many entries are left, and what
# does the next call with an already-seen learning rate cost?</p></div>

# %%
memory_before = live_memory_mb()
step_static.clear_cache()
memory_after = live_memory_mb()
entries_left = step_static._cache_size()
with jitlab.count_compiles(step_static) as n_again:
    again = jitlab.time_calls(step_static, params, grads, learning_rates[0], repeats=20)

# %% tags=["answer"] jupyter={"source_hidden": true}
print("entries after clear_cache():", entries_left, "|", n_again, "|", again)
assert entries_left == 0 and n_again.traces == n_again.compiles == 1  # seen, compiled
assert again.first_over_steady > 10  # wide margin: a compilation against a cache hit
jitlab.record(
    "first call after clear_cache",
    compiles=n_again.compiles,
    first_ms=1e3 * again.first_seconds,
    steady_us=1e6 * again.median_seconds,
)
if MEMORY_MEASURABLE:
    freed = memory_before - memory_after
    print(f"memory given back: {freed:.1f} MiB of {grown_mb:.1f} MiB grown")
    assert freed > 0.25 * grown_mb, (freed, grown_mb)  # wide margin: about half here

# %% [markdown]
# "For that function alone" is not quite all of it. JAX looks a call up in three steps:
# the C++ fast path, then a first Python cache shared by all jitted functions, then the
# inner tracing cache (keyed on the function), whose miss runs your Python.
# `clear_cache()` empties the shared middle step for everyone. Another function's next
# lookup that gets past the fast path misses there: a `.trace()` or `.lower()`, or every
# call of a function the fast path cannot serve, such as one with an effect
# ([lesson 09](../09_diagnosing/#which-calls-skip-the-fast-path)). `count_compiles`
# counts that miss as a trace, though the inner cache still answers: your Python does
# not run and nothing compiles.

# %%
body_runs = []


def normalise_watched(x, how):
    body_runs.append(how)  # runs only when JAX really traces the Python
    return normalise(x, how)


watched_j = jax.jit(normalise_watched, static_argnames="how")
watched_j(x, how="l2")  # trace and compile once
entries, body_runs[:] = watched_j._cache_size(), []

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>watched_j</code> is warm. We call <code>step_static.clear_cache()</code>,
# then <code>watched_j.trace(x, how="l2")</code>. Does <code>watched_j</code>
# run its Python again, and does it compile?</p></div>

# %%
with jitlab.count_compiles(watched_j) as n_warm:
    watched_j.trace(x, how="l2")  # answered by the shared cache
step_static.clear_cache()  # another function's cache...
with jitlab.count_compiles(watched_j) as n_shared:
    watched_j(x, how="l2")  # the fast path: untouched
    watched_j.trace(x, how="l2")  # ...but the shared cache was emptied

# %% tags=["answer"] jupyter={"source_hidden": true}
print("before:", n_warm, "| after:", n_shared, "| Python body runs:", len(body_runs))
assert n_warm.traces == 0 and n_warm.compiles == 0
assert n_shared.traces == 1 and n_shared.compiles == 0  # a miss in the shared cache
assert body_runs == []  # answered by the inner cache: the Python did not run
assert watched_j._cache_size() == entries  # its executables are all still there

# %% [markdown]
# Harmless for speed (a lookup, no compilation), but a test that asserts "zero traces"
# for one function can fail because another function's cache was cleared.
#
# `jax.clear_caches()` reaches further, to functions that did nothing wrong:

# %%
with jitlab.count_compiles(normalise_j) as n_hit:
    normalise_j(x, how="l2")  # compiled back in section 1
jax.clear_caches()
with jitlab.count_compiles(normalise_j) as n_cleared:
    normalise_j(x, how="l2")
print("before jax.clear_caches():", n_hit, "| after:", n_cleared)
assert n_hit.compiles == 0 and n_cleared.compiles == 1

# %% [markdown]
# Clearing treats the symptom. It is useful in a long-running process that really does
# cycle through many configurations, and it pays for itself only if those values do not
# come back soon. The cure is upstream: do not make a value static when it has many
# values.
#
# ## 8. The fix: choose what is static
#
# The learning rate only scales a vector. It does not change a shape, a dtype or a
# branch, so nothing needs to know its value at compile time. Pass it traced.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The same 32 steps with <code>lr</code> traced: how many compilations, and how much
# faster is the loop?</p></div>

# %%
step_traced = jax.jit(sgd_step)  # lr traced: a weakly typed scalar
traced_growth, memory_start = [], live_memory_mb()
traced_lr = jitlab.measure(
    "32-step lr schedule, lr traced",
    lambda: schedule(step_traced, traced_growth, memory_start),
    count=step_traced,
    explain=False,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
lr_fix = jitlab.compare(static_lr, traced_lr)
assert static_lr.compiles == 32 and traced_lr.compiles == 1
assert step_traced._cache_size() == 1
assert lr_fix.speedup > 3, lr_fix  # wide margin; measured here: tens of times
last = learning_rates[-1]
np.testing.assert_allclose(
    step_traced(params, grads, last), sgd_step(params, grads, last), rtol=1e-6
)

# %% [markdown]
# ### A checklist for static arguments
#
# A value is a good static argument when every answer is on the left:
#
# - **Needed to build the program?** Yes: a shape, a branch, a loop count, a mode.
#   No: a number that only enters arithmetic, so trace it.
# - **How many distinct values over a run?** A handful. Not one per step, per batch or
#   per user.
# - **Hashable?** `str`, `int`, `bool`, `tuple`, a frozen dataclass, a `NamedTuple`.
#   Not a `list`, `dict`, NumPy array, `jax.Array` or mutable `@dataclass`.
# - **Equal by value, over every field the function reads?** `@dataclass(frozen=True)`.
#   Not the default identity hash, nor an `__eq__` that skips fields.
# - **Immutable after use?** Frozen, and rebuilt with `dataclasses.replace`. Never changed
#   in place, or you get stale results.
#
# In a real model the configuration usually mixes the two kinds. Keep the structural
# fields (activation, number of layers, whether to normalise) in a frozen dataclass passed
# as a static argument. Keep the numbers that move (learning rate, temperature, weights)
# as traced arguments. The exercise asks you to do exactly that split.

# %% tags=["remove-input"]
jitlab.outro()
