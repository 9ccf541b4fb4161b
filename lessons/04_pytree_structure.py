# ---
# jupyter:
#   jitlab:
#     fix: stable containers (arrays plus flags), one calling convention
#     half_day:
#       minutes:
#         exercises: 15
#         teaching: 15
#       skip:
#       - 'An optional field: array, `None`, absent'
#       - A list or a tuple of the same arrays
#       - A NamedTuple or a plain tuple
#       - A dataclass registered as a pytree
#       - Keyword or positional
#       - Keeping it fixed, and what `jax.no_tracing()` really checks
#       - 'When no value is neutral: a value and a flag'
#       - Or two functions
#       - State whose structure changes after one step
#     instructor_notes:
#     - Ask for a prediction before the None cell; most learners expect None to be free
#       because the function never does arithmetic on it.
#     - The dict-order result surprises in the other direction; show the two PyTreeDefs
#       printing identically.
#     - In an explanation, input path [0] is the tuple of positional arguments and [1]
#       the dict of keyword arguments, so [0][1]['weights'] is the weights entry of
#       the second positional argument.
#     - Live demo, print jax.tree_util.tree_structure of two batches from a real data
#       loader side by side.
#     - The timed comparison is compile-bound, so its ratio varies between laptops;
#       the compile counts do not.
#     - Learners read `jax.no_tracing()` as "no retrace". Run the cell that passes JAX
#       arrays after a NumPy warm-up and ask why a call that needs no trace raises.
#     keypoints:
#     - jit flattens all arguments, positional and keyword, into leaves and a tree structure;
#       the structure is part of the cache key.
#     - A new dict key (even one the function never reads), None where an array was,
#       a list for a tuple, a NamedTuple for a tuple, or a new static field of a registered
#       dataclass is a new structure, and costs a new compilation.
#     - Dict insertion order does not matter; dicts are flattened in sorted key order.
#     - f(x) and f(x=x) are two signatures; pick one calling convention.
#     - Fix it at the boundary; build the pytree you pass with fixed keys and types,
#       fill optional fields with a neutral value or with a value and a flag, and call
#       positionally.
#     - A state slot that `init` leaves `None` and the first step fills is a new structure
#       at step 2. Build it in `init` (zeros shaped like the parameters) and compare
#       `jax.tree.structure` and `jax.tree.map(jax.typeof, state)` before and after
#       one step.
#     - '`jax.no_tracing()` raises on any miss of jit''s C++ fast path, not only on
#       a trace: a JAX array where only NumPy arrays were seen raises with 0 traces
#       and 0 compilations, and so does every warm call of a program with an effect,
#       such as `jax.debug.print` (lesson 09).'
#     minutes:
#       exercises: 15
#       teaching: 35
#     objectives:
#     - Say what jit flattens its arguments into, and which part of that is in the cache
#       key.
#     - Predict which changes of keys, None, container type and calling style cost a
#       compilation.
#     - Read JAX's "different input pytree" explanation and find the argument it names.
#     - Build a stable container at the boundary and call a jitted function one way
#       only.
#     - Make `init` build the state structure that a training step returns, and check
#       it.
#     - Say what `jax.no_tracing()` checks (jit's fast path), and when it raises without
#       a trace.
#     prerequisites:
#       lessons:
#       - what_jit_caches
#       other:
#       - 'Pytrees: dicts, lists and tuples of arrays (JAX docs, ''Pytrees'')'
#     questions:
#     - Why does a dict with one more key, or a None where an array was, compile again?
#     - Does the order of a dict's keys matter? Does a list differ from a tuple?
#     - Why does f(x=x) compile again after f(x)?
#     title: Pytree structure and the call signature
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
# # 04 · Pytree structure and the call signature
#
# `jax.jit` does not see your arguments as a dict, a list or a dataclass. It flattens
# them into a list of arrays (the *leaves*) and a description of the containers around
# them (the *tree structure*). The leaves' shapes and dtypes are one part of the cache
# key, and the tree structure is another. This lesson finds out which container changes
# make a new structure, which do not, and how to keep the structure fixed.

# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

# %% [markdown]
# Small data for the experiments: a batch of 32 examples with 4 features, per-example
# weights, integer ids, and the parameters of a linear model.

# %%
rng = np.random.default_rng(404)
B, F = 32, 4
x = jnp.asarray(rng.normal(size=(B, F)), dtype=jnp.float32)
y = jnp.asarray(rng.normal(size=B), dtype=jnp.float32)
w = jnp.asarray(rng.uniform(0.5, 1.5, size=B), dtype=jnp.float32)
ids = jnp.arange(B, dtype=jnp.int32)
params = {
    "w": jnp.asarray(rng.normal(size=F), dtype=jnp.float32),
    "b": jnp.float32(0.1),
}


# %%
def why(count):
    """The part of JAX's last cache-miss explanation that says what differed."""
    text = count.explanations[-1]
    return text[text.index("different") :]


# %% [markdown]
# ## What jit sees
#
# `jax.tree_util.tree_flatten` does what `jit` does to each call's arguments: it splits
# a pytree into its leaves and a `PyTreeDef`, the structure with holes (`*`) where the
# leaves were. Dict keys, `None`, and the container types live in the `PyTreeDef`.

# %%
leaves, treedef = jax.tree_util.tree_flatten({"x": x, "y": y})
print(treedef, [str(jax.typeof(leaf)) for leaf in leaves])
assert len(leaves) == 2

# %% [markdown]
# <div class="admonition info"><p class="admonition-title">The source chapter</p>
# <p>The chapter this course draws on lists "structure of function arguments" as a
# cause, but only means functions passed as arguments (lesson 07). The containers
# around your arrays are part of the cache key too, and they are what this lesson is
# about.</p></div>
#
# ## A dict gains a key
#
# `mse` reads `batch["x"]` and `batch["y"]` and nothing else. The second call adds an
# `"ids"` entry that the function never reads.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How many compilations for the two calls?</p></div>


# %%
@jax.jit
def mse(params, batch):
    pred = batch["x"] @ params["w"] + params["b"]
    return jnp.mean((pred - batch["y"]) ** 2)


with jitlab.count_compiles(mse) as n:
    mse(params, {"x": x, "y": y})
    mse(params, {"x": x, "y": y, "ids": ids})  # "ids" is never read

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n, why(n), sep="\n")
assert n.compiles == 2, n.explanations
assert "different input pytree" in n.explanations[-1] and "{'ids'}" in why(n)

# %% [markdown]
# Two compilations. JAX does not look at which keys the function reads: the key set
# is part of the structure, so a batch with one more entry is a different input. The
# explanation names the place, `input path [0][1]`: `[0]` is the tuple of positional
# arguments and `[1]` the second of them, `batch`.
#
# ## The same keys in another order
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>mse</code> has seen <code>{"x": ..., "y": ...}</code>. Does
# <code>{"y": ..., "x": ...}</code> compile again?</p></div>

# %%
with jitlab.count_compiles(mse) as n:
    mse(params, {"y": y, "x": x})
xy = jax.tree_util.tree_structure({"x": x, "y": y})
yx = jax.tree_util.tree_structure({"y": y, "x": x})

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n, f"{xy} == {yx}: {xy == yx}", sep="\n")
assert n.compiles == 0, n.explanations
assert xy == yx

# %% [markdown]
# No. Flattening sorts a dict's keys, so insertion order never reaches the cache key:
# only the *set* of keys does. The same sorting means a dict that goes through a jitted
# function comes back with its keys in sorted order:

# %%
returned = jax.jit(lambda batch: batch)({"y": y, "x": x})
print(list(returned))
assert list(returned) == ["x", "y"]

# %% [markdown]
# ## An optional field: array, `None`, absent
#
# A common pattern: a batch may carry per-example weights. Some code puts the array
# there, some writes `"weights": None`, some leaves the key out. The Python `if` below
# is legal inside `jit`, because `None` is not a traced value: it is known while
# tracing.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Three calls: weights as an array, as <code>None</code>, and absent. How many
# compilations?</p></div>


# %%
@jax.jit
def weighted_mse(params, batch):
    err = (batch["x"] @ params["w"] + params["b"] - batch["y"]) ** 2
    weights = batch.get("weights")
    if weights is None:  # answered while tracing
        return jnp.mean(err)
    return jnp.sum(weights * err) / jnp.sum(weights)


with jitlab.count_compiles(weighted_mse) as n:
    weighted_mse(params, {"x": x, "y": y, "weights": w})
    weighted_mse(params, {"x": x, "y": y, "weights": None})
    weighted_mse(params, {"x": x, "y": y})

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n, *(text[text.index("different") :] for text in n.explanations[1:]), sep="\n")
assert n.compiles == 3, n.explanations
assert "now <class 'NoneType'> and before pytree leaf" in n.explanations[1]

# %% [markdown]
# Three structures, three compilations. `None` is an empty node of the tree, not a leaf:
# `{"x": x, "y": y, "weights": None}` flattens to two leaves, like `{"x": x, "y": y}`,
# yet its `PyTreeDef` is different from both of the others.

# %%
none_leaves, none_treedef = jax.tree_util.tree_flatten(
    {"x": x, "y": y, "weights": None}
)
print(none_treedef, "with", len(none_leaves), "leaves")
assert len(none_leaves) == 2 and none_treedef != xy

# %% [markdown]
# ## A list or a tuple of the same arrays
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>[x, y]</code>, then <code>(x, y)</code>, then <code>[x, y]</code> again. How
# many compilations?</p></div>


# %%
@jax.jit
def total_seq(arrays):
    return sum(jnp.sum(a) for a in arrays)


with jitlab.count_compiles(total_seq) as n:
    total_seq([x, y]), total_seq((x, y)), total_seq([x, y])

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n, why(n), sep="\n")
assert n.compiles == 2, n.explanations
assert "now <class 'tuple'> and before <class 'list'>" in n.explanations[-1]

# %% [markdown]
# Two: the list and the tuple are different structures, and the third call finds the
# list's entry. A list is an easy thing to create by accident (`list(...)`, a
# comprehension, JSON, a config file) where the rest of the code passes tuples.
#
# ## A NamedTuple or a plain tuple
#
# A `NamedTuple` is a tuple to Python (`isinstance(p, tuple)` is true), but JAX
# registers each NamedTuple class as its own node type.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>Pair(x, y)</code>, then <code>Pair(x + 1, y)</code> (new values, same
# class), then the plain tuple <code>(x, y)</code>. How many compilations?</p></div>


# %%
class Pair(NamedTuple):
    x: jax.Array
    y: jax.Array


@jax.jit
def total_pair(arrays):
    return sum(jnp.sum(a) for a in arrays)


with jitlab.count_compiles(total_pair) as n:
    total_pair(Pair(x, y)), total_pair(Pair(x + 1, y)), total_pair((x, y))

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n, why(n), sep="\n")
assert isinstance(Pair(x, y), tuple)
assert n.compiles == 2 and "Pair" in n.explanations[-1], n.explanations

# %% [markdown]
# ## A dataclass registered as a pytree
#
# `jax.tree_util.register_dataclass` turns a dataclass into a pytree node. Fields
# marked `static` are not leaves: they go into the node's metadata, which is part of
# the structure. (`register_pytree_node_class` does the same for
# any class, with the "aux data" returned by `tree_flatten` playing the role of the
# static fields.)
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A layer, the same layer with new weights, then the first weights with
# <code>activation="tanh"</code>. How many compilations?</p></div>


# %%
@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Dense:
    w: jax.Array
    b: jax.Array
    activation: str = dataclasses.field(default="relu", metadata={"static": True})


@jax.jit
def dense_forward(layer, x):
    h = x @ layer.w + layer.b
    return jnp.maximum(h, 0.0) if layer.activation == "relu" else jnp.tanh(h)


# %%
w1, w2 = (jnp.asarray(rng.normal(size=(F, 3)), dtype=jnp.float32) for _ in range(2))
b3 = jnp.zeros(3, dtype=jnp.float32)
with jitlab.count_compiles(dense_forward) as same:
    dense_forward(Dense(w1, b3), x)
    dense_forward(Dense(w2, b3 + 1), x)  # new leaves
with jitlab.count_compiles(dense_forward) as n:
    dense_forward(Dense(w1, b3, activation="tanh"), x)  # new metadata

# %% tags=["answer"] jupyter={"source_hidden": true}
print(same, n, why(n), sep="\n")
assert same.compiles == 1, same.explanations
assert n.compiles == 1, n.explanations
assert "pytree node metadata does not match" in n.explanations[-1]

# %% [markdown]
# The leaves (`w`, `b`) can change freely; the static field is structure. That is the
# point of marking it static: `layer.activation == "relu"` is a Python comparison
# made while tracing, so each activation needs its own program.
#
# ## Keyword or positional
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>scale(x)</code>, <code>scale(v=x)</code>, <code>scale(x)</code>,
# <code>scale(v=x)</code>. How many compilations?</p></div>


# %%
@jax.jit
def scale(v):
    return 2.0 * v


with jitlab.count_compiles(scale) as n:
    scale(x), scale(v=x), scale(x), scale(v=x)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n, why(n), sep="\n")
assert n.compiles == 2, n.explanations
assert "tuple of length 0 and before tuple of length 1" in n.explanations[-1]

# %% [markdown]
# Two. `jit` flattens the pair `(args, kwargs)`, so the same array passed positionally
# or by name gives two structures: `((*,), {})` and `((), {'v': *})`. The explanation
# names both halves: input path `[0]` (the positional arguments) lost an entry and
# `[1]` (the keyword arguments) gained one.

# %%
positional = jax.tree_util.tree_structure(((x,), {}))
by_name = jax.tree_util.tree_structure(((), {"v": x}))
print(positional, "vs", by_name)
assert positional != by_name

# %% [markdown]
# ## The problem in a training loop
#
# Real batches come from a data pipeline, and pipelines are not tidy. Here 48 batches
# arrive as NumPy arrays. Each one has no weights, or weights, or `"weights": None`,
# or an extra `"ids"` field, and some of the callers pass the batch by keyword.
# Every batch has the same shapes and dtypes.


# %%
def loader(n_batches, seed=0):
    """(batch, by_keyword) pairs, as an untidy pipeline and its callers produce them."""
    r = np.random.default_rng(seed)
    stream = []
    for i in range(n_batches):
        batch = {"x": r.normal(size=(B, F)).astype(np.float32)}
        batch["y"] = r.normal(size=B).astype(np.float32)
        kind = r.integers(4)
        if kind == 1:
            batch["weights"] = r.uniform(0.5, 1.5, size=B).astype(np.float32)
        elif kind == 2:
            batch["weights"] = None
        elif kind == 3:
            batch["ids"] = np.arange(i * B, (i + 1) * B, dtype=np.int32)
        stream.append((batch, bool(r.random() < 0.35)))
    return stream


# %%
stream = loader(48)
signatures = {(jax.tree_util.tree_structure(b), by_kw) for b, by_kw in stream}
print(len(stream), "batches,", sum(by_kw for _, by_kw in stream), "passed by keyword")
print(len(signatures), "distinct (structure, calling style) pairs")
assert len(signatures) == 8

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A jitted loss that takes whatever batch it is given, called the way each caller
# likes. How many compilations over the 48 batches?</p></div>


# %%
@jax.jit
def loss_naive(params, batch):
    err = (batch["x"] @ params["w"] + params["b"] - batch["y"]) ** 2
    weights = batch.get("weights")
    if weights is None:
        return jnp.mean(err)
    return jnp.sum(weights * err) / jnp.sum(weights)


def run_stream(loss):
    """Every batch, passed the way its caller likes: (loss, seconds) per batch."""
    out = []
    for batch, by_kw in stream:
        with jitlab.stopwatch() as sw:
            value = loss(params, batch=batch) if by_kw else loss(params, batch)
            jax.block_until_ready(value)
        out.append((float(value), sw.seconds))
    return out


# %%
naive = jitlab.measure(
    "varying batch structure", lambda: run_stream(loss_naive), count=loss_naive
)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(naive.counts)
assert naive.compiles == len(signatures) == 8, naive.counts.explanations

# %% [markdown]
# One compilation for each distinct pair of structure and calling style: eight, for
# one loss function and one set of shapes.
#
# ## The fix: one container, one calling convention
#
# Make the structure a decision you take once, at the boundary, instead of something
# each batch decides for you:
#
# - **A stable container.** Build the dict you pass to `jit` yourself, with the same
#   keys every time. Copy the fields the loss needs; leave extras such as `"ids"`
#   behind. Fill an optional field with a value that changes nothing: weights of one
#   give the plain mean.
# - **One calling convention.** Callers can call a thin Python wrapper however they
#   like; the wrapper calls the jitted function one way, positionally.


# %%
def tidy(batch):
    """The one structure loss_core ever sees: three keys, always arrays."""
    weights = batch.get("weights")
    if weights is None:  # absent or None: weight 1 for every example is the plain mean
        weights = np.ones_like(batch["y"])
    return {"x": batch["x"], "y": batch["y"], "weights": weights}


@jax.jit
def loss_core(params, batch):
    err = (batch["x"] @ params["w"] + params["b"] - batch["y"]) ** 2
    return jnp.sum(batch["weights"] * err) / jnp.sum(batch["weights"])


def loss(params, batch):  # callers may pass batch by keyword; we never do
    return loss_core(params, tidy(batch))


# %%
fixed = jitlab.measure(
    "stable container, positional", lambda: run_stream(loss), count=loss_core
)
jitlab.compare(naive, fixed, bench="varying batch structure vs stable container")
assert fixed.compiles == 1, fixed.counts.explanations
np.testing.assert_allclose(
    [v for v, _ in fixed.result], [v for v, _ in naive.result], rtol=1e-5
)
assert naive.seconds > 2 * fixed.seconds, "8 compilations against 1"

# %% [markdown]
# One compilation, and the same 48 numbers. Where the time goes: the cumulative time of
# each version over the stream. Each step in the naive curve is a batch with a structure
# it had not seen yet.

# %%
fig, ax = plt.subplots(figsize=(6, 3.2))
for run in (naive, fixed):
    label = f"{run.label} ({run.compiles} compilations)"
    ax.plot(np.cumsum([seconds for _, seconds in run.result]), label=label)
ax.set(xlabel="batch", ylabel="cumulative seconds")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Keeping it fixed, and what `jax.no_tracing()` really checks
#
# In a test, "it compiles once" should stay true after the next refactor. JAX offers a
# guard for that, `jax.no_tracing()`, but it checks something narrower than its name.
# Every call of a jitted function first looks in jit's *fast path*, a C++ cache keyed
# on the exact call. A hit runs the compiled program at once. A miss
# falls back to Python, which looks in the tracing cache. The guard raises
# `RuntimeError` at the fallback, before it knows whether a trace is needed. So silence
# under the guard means that no call left the fast path, so no call traced or compiled
# (compiling by hand is another matter, shown below); an error means that some call left
# the fast path, which is usually a retrace, but not always.
#
# First the use it was made for: the warm fixed version runs the whole stream under the
# guard. The naive version, warmed up on one batch passed positionally, fails at once:
# the stream's first batch is passed by keyword, a signature it has not seen.


# %%
def under_guard(loss):
    with jax.no_tracing():
        return run_stream(loss)


loss_naive.clear_cache()
loss_naive(params, stream[0][0])  # warm for one structure only
with jitlab.count_compiles(loss_core) as guarded:
    fixed_guarded = jitlab.attempt(under_guard, loss)
naive_guarded = jitlab.attempt(under_guard, loss_naive)
print("fixed:", guarded, "| naive:", naive_guarded)
assert not fixed_guarded.raised and guarded.traces == guarded.compiles == 0
assert type(naive_guarded.error) is RuntimeError, naive_guarded
assert "loss_naive" in str(naive_guarded.error) and stream[0][1]  # 0 is by keyword

# %% [markdown]
# Now the same batch, same shapes and dtypes, as JAX arrays instead of NumPy arrays.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>loss_core</code> was warmed up on batches of NumPy arrays (that is what
# <code>tidy</code> builds). Does the guard let through the same batch as JAX arrays,
# same shapes and dtypes? How many traces does that call cost without the guard?</p></div>

# %%
tidy_batch = tidy(stream[0][0])
as_jax = {key: jnp.asarray(value) for key, value in tidy_batch.items()}
loss_core.clear_cache()
loss_core(params, tidy_batch)  # warm-up on NumPy leaves
with jax.no_tracing():
    jax_leaves = jitlab.attempt(loss_core, params, as_jax)
with jitlab.count_compiles(loss_core) as unguarded:
    loss_core(params, as_jax)  # the same call, without the guard

# %% tags=["answer"] jupyter={"source_hidden": true}
print(
    "JAX leaves after a NumPy warm-up:", jax_leaves, "| without the guard:", unguarded
)
assert type(jax_leaves.error) is RuntimeError, jax_leaves
assert unguarded.traces == 0 and unguarded.compiles == 0  # the tracing cache had it

# %% [markdown]
# A cache hit, with no trace and no compilation, and still an error: a JAX array where
# the fast path has only seen NumPy arrays (or the reverse) is a new fast-path entry,
# though the abstract value is the same. A committed array on another device than the
# one the function was warmed up with leaves the fast path too (lesson 12 has several
# devices), and every warm call of a program with an effect, such as
# `jax.debug.print`, raises under the guard
# ([lesson 09](../09_diagnosing/#which-calls-skip-the-fast-path)). To guard a test with
# `jax.no_tracing()`, warm up with the same kinds of inputs the test passes. To check the
# number of compilations rather than fast-path misses, count them, with
# `jitlab.count_compiles` as above or with a trace counter in the test (lesson 09 shows
# `chex.assert_max_traces`).
#
# The guard watches calls and traces, not the compiler. Lowering a signature JAX has
# already traced, and compiling it with other compiler options, builds a new executable
# under the guard without a word:

# %%
with jitlab.count_compiles(loss_core) as by_hand, jax.no_tracing():
    loss_core.lower(params, tidy_batch).compile({"xla_embed_ir_in_executable": True})
print("lower().compile(options) under the guard:", by_hand)
assert by_hand.traces == 0 and by_hand.compiles == 1  # a compilation, and no error

# %% [markdown]
# ## When no value is neutral: a value and a flag
#
# Weights of one change nothing, so filling them was easy. Some optional inputs have no
# such value. Here an optional baseline is subtracted from the targets, and without one
# the batch mean is used. Pass a placeholder and a boolean *array* saying whether it is
# real, and choose with `jnp.where`: the flag is a traced value, not structure. Both
# sides are computed, so keep this pattern for cheap alternatives.


# %%
@jax.jit
def centred_targets(y, baseline, has_baseline):
    return y - jnp.where(has_baseline, baseline, jnp.mean(y))


def centre(y, baseline=None):
    if baseline is None:
        return centred_targets(y, jnp.float32(0.0), jnp.bool_(False))
    return centred_targets(y, jnp.asarray(baseline, dtype=jnp.float32), jnp.bool_(True))


# %%
with jitlab.count_compiles(centred_targets) as n:
    without, with_baseline = centre(y), centre(y, 0.5)
print(n)
np.testing.assert_allclose(without, y - jnp.mean(y), rtol=1e-6)
np.testing.assert_allclose(with_baseline, y - 0.5, rtol=1e-6)
assert n.compiles == 1, n.explanations

# %% [markdown]
# The placeholder is a strongly typed `jnp.float32`, not a Python `0.0`: as lesson 03
# showed, a Python float is traced as a weak `~float32[]`, a different cache key from
# the `float32[]` the real baseline gets. The flag is another matter. A Python `bool`
# has no weak form: `False` is traced as `bool[]`, exactly like `jnp.bool_(False)`. So
# only the float placeholder needs care, and the two calls below show it, one argument
# at a time.

# %%
assert str(jax.typeof(False)) == str(jax.typeof(jnp.bool_(False))) == "bool[]"
assert str(jax.typeof(0.0)) == "~float32[]"
with jitlab.count_compiles(centred_targets) as python_flag:
    centred_targets(y, jnp.float32(0.0), False)  # a Python bool flag
with jitlab.count_compiles(centred_targets) as python_placeholder:
    centred_targets(y, 0.0, jnp.bool_(False))  # a Python float placeholder

# %%
print(
    "Python bool flag:", python_flag, "\nPython float placeholder:", python_placeholder
)
print(why(python_placeholder))
assert python_flag.compiles == 0, python_flag.explanations  # same key as jnp.bool_
assert python_placeholder.compiles == 1, python_placeholder.explanations
assert "weak_type=True" in python_placeholder.explanations[-1]

# %% [markdown]
# ## Or two functions
#
# When the two cases do really different work, and computing both would waste time,
# keep two jitted functions and choose in Python. That is two compilations, known in
# advance, and never more.


# %%
@jax.jit
def loss_plain(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


@jax.jit
def loss_weighted(params, x, y, weights):
    err = (x @ params["w"] + params["b"] - y) ** 2
    return jnp.sum(weights * err) / jnp.sum(weights)


def loss_two(params, batch):
    weights = batch.get("weights")
    if weights is None:
        return loss_plain(params, batch["x"], batch["y"])
    return loss_weighted(params, batch["x"], batch["y"], weights)


# %%
with (
    jitlab.count_compiles(loss_plain) as plain,
    jitlab.count_compiles(loss_weighted) as wtd,
):
    two = run_stream(loss_two)
print(plain, wtd, sep="\n")
assert plain.compiles == 1 and wtd.compiles == 1
np.testing.assert_allclose([v for v, _ in two], [v for v, _ in naive.result], rtol=1e-5)

# %% [markdown]
# ## State whose structure changes after one step
#
# The same trap waits in a training loop's *state*, where the structure is decided by
# two pieces of code: `init`, which builds the state for step 1, and the step, which
# builds it for every step after. A common pattern fills a slot lazily: the momentum
# starts as `None` and the first step replaces it with the gradients.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Six steps of <code>momentum_step</code> from <code>init_lazy</code>, same shapes
# throughout. How many compilations?</p></div>


# %%
def init_lazy(params):
    return {"params": params, "momentum": None}  # "the first step fills it in"


@jax.jit
def momentum_step(state, batch):
    grads = jax.grad(mse)(state["params"], batch)
    if state["momentum"] is None:  # structure: decided while tracing
        momentum = grads
    else:
        momentum = jax.tree.map(lambda m, g: 0.9 * m + g, state["momentum"], grads)
    new_params = jax.tree.map(lambda p, m: p - 0.05 * m, state["params"], momentum)
    return {"params": new_params, "momentum": momentum}


def train_momentum(init, n_steps=6):
    state = init(params)
    for _ in range(n_steps):
        state = momentum_step(state, {"x": x, "y": y})
    return state


# %%
lazy = jitlab.measure(
    "state: momentum None in init",
    lambda: train_momentum(init_lazy),
    count=momentum_step,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(lazy.counts, why(lazy.counts), sep="\n")
assert lazy.compiles == 2, lazy.counts.explanations

# %% [markdown]
# Step 1 compiled for a state with `None` in it, step 2 for the state step 1 returned,
# and from then on the state keeps that second structure. The check, as in lesson 03:
# map `jax.typeof` over the state before and after one step, and compare.

# %%
state = init_lazy(params)
before = jax.tree.map(jax.typeof, state)
after = jax.tree.map(jax.typeof, momentum_step(state, {"x": x, "y": y}))
print("init:    ", jax.tree.structure(before), "\none step:", jax.tree.structure(after))
assert before["momentum"] is None and after["momentum"] is not None
assert before["params"] == after["params"]  # the parameters keep their types

# %% [markdown]
# One caution with that comparison. `==` on the mapped trees is Python's equality of
# containers, and Python says a NamedTuple equals a plain tuple with the same items,
# though jit sees two structures (the `Pair` experiment above). Compare the
# structures too:

# %%
pair_types = jax.tree.map(jax.typeof, Pair(x, y))
tuple_types = jax.tree.map(jax.typeof, (x, y))
same_structure = jax.tree.structure(Pair(x, y)) == jax.tree.structure((x, y))
print(f"== says {pair_types == tuple_types}; structures equal: {same_structure}")
assert pair_types == tuple_types  # Python equality misses the difference...
assert not same_structure  # ...jit does not

# %% [markdown]
# The fix is in `init`: build the slot the step will return, here zeros shaped like the
# parameters. With zero momentum the first update is the gradient, as before, so the
# numbers do not change.


# %%
def init_zeros(params):
    return {"params": params, "momentum": jax.tree.map(jnp.zeros_like, params)}


state = init_zeros(params)
stepped = momentum_step(state, {"x": x, "y": y})
assert jax.tree.structure(state) == jax.tree.structure(stepped)
assert jax.tree.map(jax.typeof, state) == jax.tree.map(jax.typeof, stepped)

# %%
momentum_step.clear_cache()
zeros = jitlab.measure(
    "state: momentum zeros in init",
    lambda: train_momentum(init_zeros),
    count=momentum_step,
)
jitlab.compare(lazy, zeros)
assert zeros.compiles == 1, zeros.counts.explanations
for got, want in zip(
    jax.tree.leaves(zeros.result), jax.tree.leaves(lazy.result), strict=True
):
    np.testing.assert_allclose(got, want, rtol=1e-5)

# %% [markdown]
# ## Summary: which change retraces
#
# Each row was measured above, on this machine's JAX.
#
# | change between calls | new compilation? |
# | --- | --- |
# | a dict gains a key (even one never read) | yes |
# | the same dict keys, inserted in another order | no |
# | an optional field: array, then `None`, then absent | yes, each |
# | a list becomes a tuple of the same arrays | yes |
# | a NamedTuple becomes a plain tuple | yes |
# | a registered dataclass with new array values | no |
# | a registered dataclass with a new static field | yes |
# | `f(x)` then `f(x=x)` | yes |
# | a state slot `None` in `init`, an array after one step | yes, at step 2 |
#
# And the fixes, on the same 48 batches: the jitted loss as it is compiled 8 times,
# `tidy()` with a positional call once, and two functions once each, a fixed cost you
# choose, not one that grows with the variety of the data. The value-and-flag pattern
# compiled once as well.

# %% tags=["remove-input"]
jitlab.outro()
