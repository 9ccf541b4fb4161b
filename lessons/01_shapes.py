# ---
# jupyter:
#   jitlab:
#     fix: padding, masking, bucketing
#     half_day:
#       minutes:
#         exercises: 25
#         teaching: 15
#       skip:
#       - Batches of varying size under `vmap`
#     instructor_notes:
#     - Before the first experiment, ask the room to predict the compilation count;
#       most say 1.
#     - Learners often divide by the padded length instead of n. The exercise's grader
#       feeds garbage in the padding to catch exactly that.
#     - The timing ratio depends on the laptop; the compile counts do not. Teach from
#       the counts.
#     - The static-size nonzero is the tempting fix for the ConcretizationTypeError;
#       ask the room how many programs it costs before running the cell.
#     keypoints:
#     - Every new shape is a new cache key, so it costs a full trace and compilation.
#     - The cost of a loop grows with the number of distinct shapes, not the number
#       of calls.
#     - Padding to one fixed length compiles once but computes on the padding; a mask
#       keeps the answer right.
#     - Bucketing to powers of two bounds compilations to about log2(max length) while
#       wasting less than half.
#     - Count the compilations and the padded elements side by side; which strategy
#       wins depends on how often each program runs.
#     - The batch size is a shape too, under vmap as anywhere else; pad batches to buckets
#       and drop the extra outputs (no mask is needed for per-example work).
#     - Under jit, `jnp.nonzero`, `jnp.argwhere` and `jnp.unique` need `size=` (a `fill_value=`
#       only marks the unused slots); a fixed size keeps one program, a static size
#       computed from the data compiles one per size.
#     minutes:
#       exercises: 25
#       teaching: 20
#     objectives:
#     - Measure the cost of many distinct shapes against the number of compilations.
#     - Pad variable-length data to a fixed length and mask the padding out.
#     - Bucket lengths to powers of two and weigh wasted work against compilations.
#     - Bucket the batch size of a jitted `vmap`.
#     - Give data-dependent sizes a fixed `size=`, and measure it against a static size.
#     prerequisites:
#       lessons:
#       - what_jit_caches
#     questions:
#     - Why does a jitted function slow down when its inputs change length?
#     - How do padding and masking make many lengths share one program?
#     - How many buckets should you have?
#     - Why does a jitted vmap compile again when the batch size changes?
#     - How do jnp.nonzero, jnp.argwhere and jnp.unique work under jit?
#     title: Shapes
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
# # 01 · Shapes
#
# A compiled XLA program has its shapes burned in: `tensor<300xf32>` is a different type
# from `tensor<301xf32>`. So every new input shape is a cache miss, and a loop over
# variable-length data (sentences, time series, ragged batches) can spend nearly all its
# time compiling. This lesson measures that cost and then removes it, twice.

# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import math
import re
from functools import partial

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

# %% [markdown]
# The function under study computes a smooth pairwise similarity of the values in a
# 1-D array: quadratic in the length, so wasted work is visible, but small enough that
# compiling still dominates a single call.


# %%
def similarity(x):
    diff = x[:, None] - x[None, :]
    return jnp.sum(jnp.exp(-(diff**2))) / x.shape[0] ** 2


similarity_jit = jax.jit(similarity)

# %%
rng = np.random.default_rng(0)
lengths = rng.integers(1, 513, size=64)  # a stream of 64 arrays of random length
stream = [rng.normal(size=int(n)).astype(np.float32) for n in lengths]
distinct = len(set(lengths.tolist()))
print(f"{len(stream)} arrays, {distinct} distinct lengths, longest {lengths.max()}")

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How many times will <code>similarity_jit</code> compile over this stream of 64 arrays?</p></div>

# %%
naive = jitlab.measure(
    "one program per length",
    lambda: [similarity_jit(x) for x in stream],
    count=similarity_jit,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(naive.counts, naive.counts.explanations[-1], sep="\n")
assert naive.compiles == distinct, "one compilation per distinct length"
assert naive.counts.total_seconds > 0.75 * naive.seconds, "nearly all of it compiles"

# %% [markdown]
# JAX's explanation names the culprit: the same function, a different input type
# (`f32[n]` for another `n`). Note that the values never matter; only the shape does.
#
# ## Time grows with the number of distinct shapes
#
# Keep the number of calls fixed at 30 and vary how many distinct lengths they use. The
# cache is cleared before each run so every run starts cold.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Thirty calls over one length against thirty calls over thirty lengths: how much
# slower?</p></div>


# %%
def run_with_distinct_lengths(k: int, calls: int = 30) -> jitlab.Run:
    pool = np.linspace(200, 400, k).astype(int)
    inputs = [np.ones(int(pool[i % k]), np.float32) for i in range(calls)]
    similarity_jit.clear_cache()
    work = lambda: [similarity_jit(x) for x in inputs]  # noqa: E731
    return jitlab.measure(f"{k} lengths", work, count=similarity_jit)


sweep = [run_with_distinct_lengths(k) for k in (1, 3, 10, 20, 30)]

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.print_table([run.row() for run in sweep])
assert [run.compiles for run in sweep] == [1, 3, 10, 20, 30]
assert sweep[-1].seconds > 3 * sweep[0].seconds, "30 compilations cost more than 1"

# %% [markdown]
# Each run makes the same 30 calls; what changes is how many of them compile. Plotted,
# the time climbs with the number of distinct lengths. How straight the line is depends
# on the machine and what else runs on it; the compile counts do not.

# %%
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.plot([run.compiles for run in sweep], [run.seconds for run in sweep], "o-")
ax.set(xlabel="distinct input lengths (30 calls each run)", ylabel="total seconds")
ax.set_title("Same number of calls, more shapes: more compilations")
ax.grid(alpha=0.3)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Fix one: pad to a fixed length, and mask
#
# Pad every array with zeros to the longest length we will ever see, and pass the real
# length `n` as a *traced* argument. The padded positions must not count, so the function
# builds a mask from `n`. Without the mask the zeros would join the pairwise sum and change
# the answer.

# %%
MAX_LENGTH = 512


def pad_to(x: np.ndarray, size: int) -> np.ndarray:
    padded = np.zeros(size, dtype=np.float32)
    padded[: len(x)] = x
    return padded


@jax.jit
def masked_similarity(padded, n):
    valid = jnp.arange(padded.shape[0]) < n
    pair_mask = valid[:, None] & valid[None, :]
    diff = padded[:, None] - padded[None, :]
    return jnp.sum(jnp.where(pair_mask, jnp.exp(-(diff**2)), 0.0)) / n**2


# %%
fixed = jitlab.measure(
    "pad to 512 + mask",
    lambda: [masked_similarity(pad_to(x, MAX_LENGTH), len(x)) for x in stream],
    count=masked_similarity,
)
jitlab.compare(naive, fixed)
assert fixed.compiles == 1
np.testing.assert_allclose(fixed.result, naive.result, rtol=1e-4)

# %% [markdown]
# One compilation, and the same numbers. The price: every call now computes a
# 512 x 512 grid, even for an array of length 3.
#
# ## Fix two: buckets
#
# Round each length up to the next power of two. Lengths up to 512 fall into at most 10
# buckets (1, 2, 4, ..., 512), each wastes less than half its length, and lengths in the
# same bucket share an executable.


# %%
def next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def bucket(x: np.ndarray) -> np.ndarray:
    return pad_to(x, next_power_of_two(len(x)))


# %%
masked_similarity.clear_cache()  # count every bucket, 512 included
bucketed = jitlab.measure(
    "power-of-two buckets + mask",
    lambda: [masked_similarity(bucket(x), len(x)) for x in stream],
    count=masked_similarity,
)
naive_vs_buckets = jitlab.compare(naive, bucketed, bench="naive vs buckets")
buckets_used = {next_power_of_two(int(n)) for n in lengths}
print("buckets used:", sorted(buckets_used))
assert bucketed.compiles == len(buckets_used) <= 10
np.testing.assert_allclose(bucketed.result, naive.result, rtol=1e-4)
assert naive_vs_buckets.speedup > 2, "buckets should win by a wide margin"

# %% [markdown]
# ## The trade-off, side by side
#
# Wasted work is counted as grid cells computed against grid cells needed
# (`padded_length**2` against `n**2`, since the function is quadratic).
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Which strategy computes the most grid cells, and which compiles the most?</p></div>

# %%
needed = sum(int(n) ** 2 for n in lengths)
runs = [naive, fixed, bucketed]
work = [
    1.0,
    len(lengths) * MAX_LENGTH**2 / needed,
    sum(next_power_of_two(int(n)) ** 2 for n in lengths) / needed,
]

# %% tags=["answer"] jupyter={"source_hidden": true}
rows = [{**run.row(), "work / needed": w} for run, w in zip(runs, work, strict=True)]
jitlab.print_table(rows)
assert work[1] > work[2] > 1, "padding to the maximum wastes the most"
assert work[2] < 4, "a bucket is less than twice the length: under 4x for n**2 work"
assert naive.compiles > 5 * bucketed.compiles > 5 * fixed.compiles

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3))
names, colors = ["per length", "pad to max", "buckets"], ["C3", "C0", "C2"]
left.bar(names, [run.compiles for run in runs], color=colors)
left.set_title("compilations")
right.bar(names, work, color=colors)
right.set_title("work computed / work needed")
fig.tight_layout()
plt.show()

# %% [markdown]
# Which strategy wins depends on how often each program runs. With few calls, compiling
# is the whole cost and one padded program wins. When the same programs run millions of
# times, wasted work counts too: one program per length wastes nothing but compiles the
# most, padding to the maximum compiles once but wastes the most, and buckets sit in
# between, with a handful of compilations and less than 4x waste for a quadratic
# function (less than 2x for a linear one). Many real systems go further and pick bucket
# boundaries from the observed length distribution.
#
# ## Batches of varying size under `vmap`
#
# `jax.vmap` writes the batched function for you, but the batch size is still a shape:
# a jitted `vmap` compiles once per batch size. The last, smaller batch of an epoch, or
# a server that batches whatever requests have arrived, pays for it. Buckets work here
# too, and more simply: each example is computed on its own, so the padding rows cannot
# leak into the real ones, and no mask is needed. Drop their outputs.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>20 batches of 1 to 64 examples through a jitted <code>vmap</code>: how many
# compilations? And with each batch padded to the next power of two?</p></div>


# %%
def example_energy(row):
    """One example's energy: the per-example function that vmap maps over a batch."""
    return jnp.sum(jnp.tanh(row) ** 2)


def pad_rows(batch: np.ndarray, rows: int) -> np.ndarray:
    padded = np.zeros((rows, batch.shape[1]), dtype=batch.dtype)
    padded[: len(batch)] = batch
    return padded


batch_sizes = rng.integers(1, 65, size=20)
batches = [rng.normal(size=(int(b), 16)).astype(np.float32) for b in batch_sizes]

# %%
per_size_jit = jax.jit(jax.vmap(example_energy))
per_size = jitlab.measure(
    "vmap, one program per batch size",
    lambda: [per_size_jit(b) for b in batches],
    count=per_size_jit,
)
bucketed_jit = jax.jit(jax.vmap(example_energy))
by_bucket = jitlab.measure(
    "vmap, batch sizes in buckets",
    lambda: [
        bucketed_jit(pad_rows(b, next_power_of_two(len(b))))[: len(b)] for b in batches
    ],
    count=bucketed_jit,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.compare(per_size, by_bucket)
assert per_size.compiles == len(set(batch_sizes.tolist())), "one per batch size"
assert by_bucket.compiles == len({next_power_of_two(int(b)) for b in batch_sizes})
for got, want in zip(by_bucket.result, per_size.result, strict=True):
    np.testing.assert_allclose(got, want, rtol=1e-6)

# %% [markdown]
# One compilation per batch size without buckets, one per bucket with them, and the
# same numbers. (A function that mixes examples, such as a mean over the batch, would
# need the mask again.)
#
# ## Sizes that depend on the data
#
# Some functions return an array whose *length* depends on the values:
# `jnp.nonzero`, `jnp.argwhere` and `jnp.unique` as NumPy defines them. Under jit the
# output shape must be known from the input shapes alone, so these functions need a
# `size=` argument. Without it, tracing fails with a `ConcretizationTypeError`. A
# `fill_value=` is optional: it says what fills the unused slots (`jnp.nonzero` fills
# them with index 0 otherwise, which looks like a real index). Lesson 05 shows the
# related errors of boolean indexing (`x[x > 0]`) and of `jnp.arange` on a traced value.

# %%
without_size = {
    "nonzero": lambda v: jnp.nonzero(v > 0),
    "argwhere": lambda v: jnp.argwhere(v > 0),
    "unique": lambda v: jnp.unique(v),
}
for name, fn in without_size.items():
    tried = jitlab.attempt(jax.jit(fn), jnp.arange(4.0))
    print(f"jnp.{name} without size=: {type(tried.error).__name__}")
    assert type(tried.error) is jax.errors.ConcretizationTypeError, tried

size_only = jax.jit(lambda v: jnp.nonzero(v > 0, size=4)[0])(jnp.array([0.0, 3, 0, 5]))
print("jnp.nonzero with size=4 alone:", size_only)
assert size_only.tolist() == [1, 3, 0, 0], (
    "unused slots hold index 0 without fill_value"
)

# %% [markdown]
# There are two ways to give the size. A **fixed size** is the largest the answer can
# be, here the input's length; the caller reads how many slots are real from a count
# returned beside the indices. A **static size** is computed from the data before the
# call (the exact count, passed with `static_argnames`), so the result has exactly the
# right length.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Twelve arrays of 64 values, with 1, 3, 4, 6, 8 or 11 of them above the threshold:
# how many compilations for each way?</p></div>

# %%
THRESHOLD = 2.0


@jax.jit
def outliers_fixed(x, threshold):
    """Indices of the values above threshold, padded with -1 to the length of x."""
    above = x > threshold
    (idx,) = jnp.nonzero(above, size=x.shape[0], fill_value=-1)
    return idx, jnp.sum(above)


@partial(jax.jit, static_argnames="count")
def outliers_static(x, threshold, count):
    """Exactly ``count`` indices: one program per value of ``count``."""
    (idx,) = jnp.nonzero(x > threshold, size=count)
    return idx


# %%
def with_outliers(k: int) -> np.ndarray:
    """64 values, exactly k of them above the threshold."""
    x = rng.uniform(-1.0, 1.0, size=64).astype(np.float32)
    x[rng.choice(64, size=k, replace=False)] = THRESHOLD + 1.0
    return x


outlier_counts = [1, 3, 4, 6, 8, 11] * 2
signals = [with_outliers(k) for k in outlier_counts]

# %%
static = jitlab.measure(
    "data-dependent size, static size",
    lambda: [
        outliers_static(x, THRESHOLD, count=int(sum(x > THRESHOLD))) for x in signals
    ],
    count=outliers_static,
)
fixed_size = jitlab.measure(
    "data-dependent size, fixed size=",
    lambda: [outliers_fixed(x, THRESHOLD) for x in signals],
    count=outliers_fixed,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.compare(static, fixed_size)
assert fixed_size.compiles == 1
assert static.compiles == len(set(outlier_counts)) == 6
for (idx, count), tidy, k in zip(
    fixed_size.result, static.result, outlier_counts, strict=True
):
    assert int(count) == k and len(tidy) == k
    np.testing.assert_array_equal(idx[:k], tidy)  # the same indices, in order
    assert bool(jnp.all(idx[k:] == -1))  # and the rest is the fill value

# %% [markdown]
# The fixed size compiles once and returns 64 slots every time, most of them `-1`; the
# caller uses the count (or a mask `idx >= 0`) to ignore the rest, exactly like the
# padding above. The static size returns a tidy array but compiles once per distinct
# count, which is one program per shape again. Buckets apply here too: round the count
# up to a power of two and pass that as the static size.
#
# <div class="admonition tip"><p class="admonition-title">Where shapes come from</p>
# <p>Shapes change without you asking: the last, smaller batch of an epoch; filtering with
# a boolean mask outside jit; <code>np.unique</code> before the call. Drop or pad the last
# batch, and keep data-dependent sizes inside the program with a fixed
# <code>size=</code> and a mask.</p></div>
#
# ## On a TPU, shapes come in tiles
#
# A CPU stores an array's numbers one after another. A TPU stores them in *tiles* that
# match its vector registers: the float32 arrays below, in tiles of 8 rows by 128 lanes,
# written `T(8,128)` in the compiled program's layout, when they have two dimensions,
# and in tiles of 1024 when they have one. An array whose shape is not a whole number of
# tiles is padded up to whole tiles. XLA chooses the layout when it compiles, and the
# compiled program says what it chose: the layout follows the shape of each parameter in
# `compiled.as_text()` (`f32[9,129]{1,0:T(8,128)}`), and `memory_analysis()` counts the
# bytes the parameter takes.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A float32 array of 9 by 129 holds 4,644 bytes of numbers. How many bytes does it
# take as the argument of a compiled program on this machine? And on a TPU?</p></div>


# %%
def laid_out(shape):
    """The layout XLA chose for a float32 argument of ``shape``, and its bytes."""
    arg = jax.ShapeDtypeStruct(shape, jnp.float32)
    compiled = jax.jit(lambda a: 2.0 * a).lower(arg).compile()
    param = next(
        line for line in compiled.as_text().splitlines() if "parameter(0)" in line
    )
    layout = re.search(r"f32\[[\d,]*\]\{([^}]*)\}", param)[1]
    tile = re.search(r"T\(([\d,]+)\)", layout)
    tile = tuple(int(n) for n in tile[1].split(",")) if tile else ()
    # the bytes the tile rule gives (a tile covers the last dimensions)
    kept = shape[: len(shape) - len(tile)]
    rounded = [-(-d // t) * t for d, t in zip(shape[len(kept) :], tile, strict=True)]
    return {
        "shape": shape,
        "layout": layout,
        "data bytes": 4 * math.prod(shape),
        "tile rule bytes": 4 * math.prod(kept) * math.prod(rounded),
        "argument bytes": compiled.memory_analysis().argument_size_in_bytes,
    }


tiles = [laid_out(shape) for shape in [(9, 129), (8, 128), (16, 256), (1000,), (1024,)]]

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.print_table(tiles)
for row in tiles:
    jitlab.record(
        f"bytes of a float32 {row['shape']} argument",
        data_bytes=row["data bytes"],
        argument_bytes=row["argument bytes"],
        layout=row["layout"],
    )
    assert row["argument bytes"] == row["tile rule bytes"], row  # padded to whole tiles
    if row["shape"] in [(8, 128), (16, 256), (1024,)]:  # multiples of the tile
        assert row["argument bytes"] == row["data bytes"], row  # no padding anywhere
if jax.default_backend() == "tpu":
    assert (
        tiles[0]["layout"].endswith("T(8,128)") and tiles[0]["argument bytes"] == 16_384
    )
if jax.default_backend() == "cpu":
    assert all(row["argument bytes"] == row["data bytes"] for row in tiles)  # no tiles

# %% [markdown]
# On a CPU every array takes exactly its bytes. On a TPU, `f32[9,129]` is stored as two
# tiles down and two across, 16 rows by 256 lanes. The same table from the course's
# other machines, read from their committed results files:

# %%
jitlab.print_table(
    {"shape": str(shape), **row}
    for shape in [(9, 129), (8, 128), (1000,)]
    for row in jitlab.measured_on_machines(
        f"bytes of a float32 {shape} argument", "data_bytes", "argument_bytes", "layout"
    )
)

# %% [markdown]
# So on a TPU, choose bucket sizes that are multiples of the tile: for float32, a batch
# of 8, 16 or 128 rows and a length that is a multiple of 128 cost no memory beyond
# their data, while a bucket of 9 rows or 129 lanes pays for a whole extra row or column
# of tiles. Powers of two from 128 up are multiples of both. Other dtypes can be tiled
# otherwise: read the tile of your own arrays from the compiled layout. The padding and
# masking of this lesson work the same; only the sizes worth choosing change.

# %% tags=["remove-input"]
jitlab.outro()
