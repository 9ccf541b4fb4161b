# ---
# jupyter:
#   jitlab:
#     fix: fix shardings at the boundary (device_put or in_shardings); keep configuration
#       constant
#     instructor_notes:
#     - 'The first code cell asks for eight CPU devices (jax_num_cpu_devices) before
#       anything starts JAX''s backend; a learner who ran another cell first gets a
#       RuntimeError from it: restart the kernel and run from the top.'
#     - Ask for a prediction before the device_put(x, devices[1]) cell. Expect two camps,
#       'no recompilation, same shape and dtype' and 'full retrace'. The answer (trace
#       reused, compiled again, nothing explained) is the hook of the lesson.
#     - The 8 devices are threads of one CPU, so there is no speed-up from sharding
#       here; the lesson is about cache keys, not throughput. Say so before anyone asks.
#     - jax.make_mesh defaults to Explicit axes on the pinned release, and older tutorials
#       assume Auto. If learners copy examples from older docs, the explicit mode explains
#       more misses, and some operations need out_sharding arguments.
#     - The timing ratio depends on the laptop; the compile counts do not. Teach from
#       the counts.
#     keypoints:
#     - An array committed to another device hits the trace cache but is lowered and
#       compiled again. The compilation cache is keyed on the device assignment, so
#       eight devices of one kind hold eight executables of one lowered program. jax_explain_cache_misses
#       stays silent about it; jax.log_compiles shows the compilation, with the device
#       in its argument mapping.
#     - An uncommitted array (made without naming a device) and a committed one on the
#       same device are two cache entries. Committed arrays on two different devices
#       in one call raise ValueError.
#     - The mesh is part of an array's traced type, so the first array on a mesh retraces.
#       On a mesh with Auto axes a new PartitionSpec compiles again without a trace
#       and without an explanation. On a mesh with Explicit axes (jax.make_mesh's default
#       on this release) the spec is part of the type, so each new spec retraces and
#       is explained.
#     - in_shardings moves host and uncommitted inputs onto the given sharding, and
#       raises ValueError for a committed input sharded another way. It turns a silent
#       recompilation into a loud error; it does not make every placement free.
#     - jax_enable_x64, jax_default_matmul_precision, jax_numpy_rank_promotion, jax_numpy_dtype_promotion,
#       jax.default_device and the mesh set by jax.set_mesh are part of the cache key
#       (the tracing context; the full list is printed from the running JAX). Each distinct
#       value costs one trace and one compilation ("Tracing context doesn't match"),
#       then it is cached.
#     - Typed keys (jax.random.key) and raw keys (jax.random.PRNGKey) are two types,
#       two compilations. Each set of jax.jit options (donate_argnums, compiler_options)
#       is a cache entry of its own, and JAX does not explain those misses.
#     - jax_debug_nans is not in the key. When a NaN appears it re-runs the function
#       de-optimised and raises FloatingPointError; it turns donation off only in traces
#       made while it is on, and such a trace keeps not donating afterwards.
#     - Moving an array from one device onto a sharding over several devices compiles
#       a small slicing program (_multi_slice) once per source device and shape; from
#       the host, or from another sharding, it is a plain transfer. Place batches where
#       they leave the host.
#     - The fix is to device_put every batch (and the state you carry) onto one sharding
#       before the jitted call, and to keep configuration constant for the life of the
#       process, for example by writing the precision into the operation instead of
#       a context.
#     minutes:
#       exercises: 15
#       teaching: 45
#     objectives:
#     - Simulate eight devices on a CPU and place arrays with device_put, Mesh and NamedSharding.
#     - Tell a tracing-cache miss from a compile-only miss, and find the silent one
#       with jax.log_compiles.
#     - Predict what a jitted function with in_shardings does with an input that arrives
#       sharded another way.
#     - Name the configuration contexts that are part of the cache key, and list them
#       from the running JAX.
#     - Predict the cost of typed against raw PRNG keys, donate_argnums and compiler_options,
#       and jax_debug_nans.
#     - Fix a loop by placing every batch on one sharding at the boundary and keeping
#       configuration constant, and measure the difference.
#     prerequisites:
#       lessons:
#       - what_jit_caches
#       - pytree_structure
#       - diagnosing
#     questions:
#     - Why does the same array, moved to another device, compile again, and why does
#       JAX not say why?
#     - Which changes of sharding retrace, which only compile again, and which raise
#       an error?
#     - Which configuration settings and context managers are part of the cache key?
#     - 'What else changes the key without changing an array''s shape: PRNG key kinds,
#       jit''s own options, jax_debug_nans?'
#     title: Devices, shardings and the tracing context
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
# # 12 · Devices, shardings and the tracing context
#
# So far every cache key in this course was about the arguments' shapes, dtypes and
# structure, and about the function. Two more things decide whether a compiled program
# can be reused: *where* the arguments live (which device, how they are split across
# devices), and the *configuration* in force when the call is made. Neither shows in
# the array's shape, and some of the misses they cause never appear in JAX's cache-miss
# explanations. This lesson runs on eight devices, simulated on a CPU unless the host
# has eight chips.

# %%
import jax

# Eight CPU devices, simulated on this one processor. JAX reads the setting once, when
# its CPU backend starts (the machine report below starts it), so it comes first.
jax.config.update("jax_num_cpu_devices", 8)

# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import logging
import logging.handlers
import textwrap

import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

# %%
# Eight accelerators (a host with eight TPU chips or GPUs) are the lesson's devices. A
# machine with fewer (a laptop, or one TPU chip) uses the eight CPU devices asked for
# above: the CPU platform is there beside any accelerator. Arrays made without naming a
# device then go to the first of them, not to the chip.
accelerators = jax.devices()
if len(accelerators) >= 8:
    devices = accelerators[:8]
else:
    devices = jax.devices("cpu")[:8]
    if jax.default_backend() != "cpu":
        jax.config.update("jax_default_device", devices[0])
print(jax.default_backend(), "backend;", len(devices), "devices:", devices)
assert len(devices) == 8, "this lesson needs 8 devices; run it with JAX_PLATFORMS=cpu"

# %% [markdown]
# On a machine with one accelerator, such as the course's TPU machine, the line above
# names the accelerator's backend and eight CPU devices: the lesson runs beside the
# chip, on the CPU platform, and every count below is the same as on a laptop. On a
# host with eight chips it runs on them.

# %% [markdown]
# Unless the host has eight chips, these are eight CPU "devices" that share one
# processor. Nothing here gets faster by sharding, and nothing needs to: this lesson
# counts compilations.
#
# ## 1. Where an array lives
#
# An array made without naming a device (`jnp.ones`, `jnp.asarray`, the result of a
# computation on such arrays) is **uncommitted**: it sits on the default device, and
# `jit` may move it wherever the computation runs. `jax.device_put(x, device)` makes a
# **committed** copy: the computation must run where it is, and the result lands there.

# %%
x = jnp.linspace(0.0, 1.0, 1024, dtype=jnp.float32)
x_on_1 = jax.device_put(x, devices[1])
print("x:", x.sharding, x.committed, "| x_on_1:", x_on_1.sharding, x_on_1.committed)

# %%
assert not x.committed and x_on_1.committed
assert x.devices() == {devices[0]} and x_on_1.devices() == {devices[1]}
assert (x.shape, x.dtype) == (x_on_1.shape, x_on_1.dtype)
assert not jnp.asarray(np.ones(3)).committed and not (2 * x).committed


# %%
@jax.jit
def wave(v):
    return jnp.sin(3.0 * v) * jnp.exp(-v)


with jitlab.count_compiles(wave) as first:
    wave(x)
assert (first.traces, first.compiles) == (1, 1)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>wave(x)</code> has run. Now <code>wave(x_on_1)</code>: same shape, same dtype,
# same values, another device. No new work, a full retrace, or something in between?
# And what will JAX's cache-miss explanation say?</p></div>
#
# Besides `count_compiles`, this cell switches on lesson 09's `jax.log_compiles` and
# keeps JAX's log lines in a standard-library buffer.

# %%
log = logging.handlers.BufferingHandler(capacity=10_000)
logging.getLogger("jax").addHandler(log)
try:
    with jitlab.count_compiles(wave) as moved, jax.log_compiles(True):
        y_on_1 = wave(x_on_1)
finally:
    logging.getLogger("jax").removeHandler(log)
lines = [record.getMessage() for record in log.buffer]

# %% tags=["answer"] jupyter={"source_hidden": true}
print(moved, f"({moved.lowerings} lowering); explained: {moved.explanations}")
assert (moved.traces, moved.lowerings, moved.compiles) == (0, 1, 1)
assert moved.explanations == []
assert y_on_1.devices() == {devices[1]}

# %% [markdown]
# Something in between. The **trace cache hit**: shape, dtype and structure match, so
# the jaxpr is reused and Python never ran `wave` again. But the jaxpr was **lowered
# and compiled again**: the lowering cache is keyed on the inputs' shardings, and a
# committed array on device 1 is a new one. And `explanations` is empty:
# `jax_explain_cache_misses` reports misses of the trace cache only, and this miss
# happened further down ([lesson 10](../10_compiling_less/) lists the caches).
#
# `jax.log_compiles` does see it. Its "Compiling" line lists each argument's sharding,
# so the device is right there:

# %%
compiling = [line for line in lines if line.startswith("Compiling jit(wave)")]
print(compiling[0])
assert len(compiling) == 1
assert "Argument mapping" in compiling[0] and repr(devices[1]) in compiling[0]
assert any(line.startswith("Finished XLA compilation of jit(wave)") for line in lines)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A new function, called on <code>x</code> committed to each of the eight devices in
# turn, and then the whole tour again. How many traces, how many compilations?</p></div>


# %%
@jax.jit
def ripple(v):
    return jnp.cos(5.0 * v) * v


with jitlab.count_compiles(ripple) as tour:
    landed = [ripple(jax.device_put(x, d)).devices() for _ in range(2) for d in devices]

# %% tags=["answer"] jupyter={"source_hidden": true}
print(tour, f"({tour.lowerings} lowering)")
assert (tour.traces, tour.lowerings, tour.compiles) == (1, 1, 8), tour
assert landed == [{d} for d in devices] * 2
assert len({d.device_kind for d in devices}) == 1  # one kind, eight executables

# %% [markdown]
# One trace, one lowering, eight executables, and the second tour hit all eight. The
# compilation cache is keyed on the lowered module *and the device assignment*, so XLA
# compiles it once per device, even for eight devices of one kind. Committed on device
# 0 is not the same key as uncommitted on device 0 either:

# %%
with jitlab.count_compiles(ripple) as n:
    ripple(x)  # uncommitted, on device 0, where the tour has already been
print(n, f"({n.lowerings} lowering)")
assert (n.traces, n.lowerings, n.compiles) == (0, 1, 1)

# %% [markdown]
# ## Committed arrays on two devices do not mix
#
# An uncommitted argument follows a committed one. Two committed arguments on different
# devices have no place to run, and JAX refuses rather than guess.


# %%
@jax.jit
def add(a, b):
    return a + b


assert add(x, x_on_1).devices() == {devices[1]}  # x follows x_on_1
mixed = jitlab.attempt(add, x_on_1, jax.device_put(x, devices[2]))
print(textwrap.shorten(str(mixed), 120))
assert type(mixed.error) is ValueError, mixed
assert str(mixed.error).startswith("Received incompatible devices for jitted")

# %% [markdown]
# ## 2. Meshes and named shardings
#
# A `Mesh` arranges devices in a grid with named axes. A `NamedSharding(mesh, spec)`
# says how an array is split over that grid: the `PartitionSpec` names a mesh axis for
# each array dimension, or `None` to keep that dimension whole. Here is a 4 x 2 mesh
# built two ways:

# %%
mesh = jax.make_mesh(
    (4, 2), ("rows", "cols"), axis_types=(AxisType.Auto,) * 2, devices=devices
)
same_mesh = Mesh(np.array(devices).reshape(4, 2), ("rows", "cols"))
print(mesh)
assert same_mesh.axis_types == mesh.axis_types == (AxisType.Auto, AxisType.Auto)
assert same_mesh == mesh

# %% [markdown]
# And an 8 x 8 array split by rows and, separately, by columns:

# %%
by_rows = NamedSharding(mesh, P("rows", None))
by_cols = NamedSharding(mesh, P(None, "cols"))
grid = jnp.arange(64.0, dtype=jnp.float32).reshape(8, 8)
grid_rows = jax.device_put(grid, by_rows)
grid_cols = jax.device_put(grid, by_cols)
jax.debug.visualize_array_sharding(grid_rows)
jax.debug.visualize_array_sharding(grid_cols)

# %%
shards_rows = [s.index for s in grid_rows.addressable_shards]
assert {s.data.shape for s in grid_rows.addressable_shards} == {(2, 8)}
assert {s.data.shape for s in grid_cols.addressable_shards} == {(8, 4)}
assert shards_rows[0] == shards_rows[1]  # neighbours on "cols" share their rows
np.testing.assert_array_equal(grid_rows, grid_cols)

# %% [markdown]
# Same values, same shape, two layouts: each device holds a quarter of the rows (and
# shares it with its neighbour on the `cols` axis), or half of the columns.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>smooth</code> is called on the single-device <code>grid</code>, then on
# <code>grid_rows</code>, then <code>grid_cols</code>, then a fresh array placed by rows.
# For each call: a trace, a compilation only, or nothing?</p></div>


# %%
@jax.jit
def smooth(g):
    return jnp.tanh(g / 64.0) * 2.0


calls = {
    "single device": grid,
    "P('rows', None)": grid_rows,
    "P(None, 'cols')": grid_cols,
    "P('rows', None), new array": jax.device_put(grid + 1.0, by_rows),
}
counts, specs = {}, {}
for label, arg in calls.items():
    with jitlab.count_compiles(smooth) as counts[label]:
        specs[label] = getattr(smooth(arg).sharding, "spec", "one device")

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.print_table(
    {"argument": k, "traces": n.traces, "compiles": n.compiles,
     "explained": len(n.explanations), "result sharding": str(specs[k])}
    for k, n in counts.items()
)  # fmt: skip
mesh_arrives = counts["P('rows', None)"]
print(mesh_arrives.explanations[-1])
seen = [(n.traces, n.compiles) for n in counts.values()]
assert seen == [(1, 1), (1, 1), (0, 1), (0, 0)]
assert [len(n.explanations) for n in counts.values()] == [1, 1, 0, 0]
mesh_in_type = "({Auto: ('rows', 'cols')}) and before f32[8,8]({})"
assert mesh_in_type in mesh_arrives.explanations[-1]
assert specs["P(None, 'cols')"] == P(None, "cols")

# %% [markdown]
# Read the explanation: the type of `g` is `f32[8,8]({Auto: ('rows', 'cols')})`. The
# **mesh** is part of the traced type, so the first array on a mesh retraces. The
# **PartitionSpec** is not, with `Auto` axes: `P(None, 'cols')` on the same mesh reused
# the trace, compiled again, and said nothing, as the device move did. The result
# follows the input's sharding.
#
# ## Explicit axes: the sharding becomes part of the type
#
# `jax.make_mesh` without `axis_types` does not give `Auto` axes on this release. It gives
# **Explicit** ones, and then the PartitionSpec is written into the type itself.

# %%
explicit_mesh = jax.make_mesh((4, 2), ("rows", "cols"), devices=devices)
e_rows = jax.device_put(grid, NamedSharding(explicit_mesh, P("rows", None)))
e_cols = jax.device_put(grid, NamedSharding(explicit_mesh, P(None, "cols")))
print(explicit_mesh.axis_types, "|", jax.typeof(e_rows), "|", jax.typeof(e_cols))
assert explicit_mesh.axis_types == (AxisType.Explicit, AxisType.Explicit)
assert str(jax.typeof(e_rows)) == "float32[8@rows,8]"


# %%
@jax.jit
def smooth_explicit(g):
    return jnp.tanh(g / 64.0) * 2.0


smooth_explicit(e_rows)
with jitlab.count_compiles(smooth_explicit) as n:
    smooth_explicit(e_cols)
print(n, n.explanations[-1], sep="\n")
assert (n.traces, n.compiles) == (1, 1)
assert "now f32[8,8@cols]" in n.explanations[-1]
assert "before f32[8@rows,8]" in n.explanations[-1]

# %% [markdown]
# With explicit axes every new PartitionSpec is a new type: one more trace than with
# `Auto` axes, and an explanation that names the argument and both layouts. Still one
# compilation per layout either way.
#
# ## 3. Fixing the shardings in `jax.jit`
#
# `jax.jit(f, in_shardings=..., out_shardings=...)` writes the shardings into the
# program. Two copies of one normalisation: `follow` leaves the shardings to the
# inputs, `pinned` fixes them to rows.


# %%
def row_normalise(g):
    return g / jnp.sum(jnp.abs(g), axis=1, keepdims=True)


def follow(g):
    return row_normalise(g)


def pinned(g):
    return row_normalise(g)


follow = jax.jit(follow)
pinned = jax.jit(pinned, in_shardings=by_rows, out_shardings=by_rows)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Each is called on a NumPy array, an uncommitted <code>jnp</code> array, the array
# placed by rows, the array placed by columns, and the array committed to device 3.
# Where does each result land, how many compilations, and does anything fail?</p></div>


# %%
def lands(out):
    return str(getattr(out.sharding, "spec", f"device {out.devices()}"))


def call_counted(fn, arg):
    with jitlab.count_compiles(fn) as n:
        tried = jitlab.attempt(fn, arg)
    where = "-" if tried.raised else lands(tried.value)
    return {"lands": where, "counts": f"{n.traces}/{n.compiles}", "tried": tried}


inputs = {
    "NumPy array": np.asarray(grid),
    "uncommitted jnp array": grid,
    "placed by rows": grid_rows,
    "placed by columns": grid_cols,
    "committed to device 3": jax.device_put(grid, devices[3]),
}
followed = {label: call_counted(follow, arg) for label, arg in inputs.items()}
pinning = {label: call_counted(pinned, arg) for label, arg in inputs.items()}

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.print_table(
    {"input": k, "follow": f"{followed[k]['lands']} ({followed[k]['counts']})",
     "pinned": f"{pinning[k]['lands']} ({pinning[k]['counts']})"}
    for k in inputs
)  # fmt: skip
refused = {k: r["tried"].error for k, r in pinning.items() if r["tried"].raised}
print(str(refused["placed by columns"]).splitlines()[0])
rows_spec, cols_spec = str(P("rows", None)), str(P(None, "cols"))
seen = [r["counts"] for r in followed.values()]
assert seen == ["1/1", "0/0", "1/1", "0/1", "0/1"]
assert [r["lands"] for r in followed.values()][2:4] == [rows_spec, cols_spec]
assert [r["counts"] for r in pinning.values()][:3] == ["1/1", "0/0", "1/1"]
assert [r["lands"] for r in pinning.values()][:3] == [rows_spec] * 3
assert sorted(refused) == ["committed to device 3", "placed by columns"]
for err in refused.values():
    assert type(err) is ValueError
    assert str(err).startswith("Sharding passed to jit does not match the sharding")

# %% [markdown]
# What `in_shardings` does, measured:
#
# - **Host and uncommitted inputs are moved** onto `by_rows` and share one program.
# - **A committed input sharded another way raises `ValueError`**, whether it sits on
#   one device or on the mesh with another spec. `jit` did not move either committed
#   argument behind your back; it refused.
# - An input **already placed by rows still cost a second trace**: it carries the mesh
#   in its type, the host array did not.
#
# So `in_shardings` is a contract, not a converter: it turns a silent recompilation into
# a loud error. One program needs the inputs to arrive the same way every time: all
# from the host, or all already placed on that sharding.
#
# ## 4. The state you carry across steps
#
# A training step returns the new parameters, and they come back *on the mesh*. If the
# first parameters came from the host, the second step sees a new type.

# %%
data_mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,), devices=devices)
batch_sharding = NamedSharding(data_mesh, P("data"))
replicated = NamedSharding(data_mesh, P())

rng = np.random.default_rng(12)
B, F = 256, 16
true_w = rng.normal(size=F).astype(np.float32)


def make_batch(r):
    xb = r.normal(size=(B, F)).astype(np.float32)
    return {"x": xb, "y": (xb @ true_w + 0.1 * r.normal(size=B)).astype(np.float32)}


train_batches = [jax.device_put(make_batch(rng), batch_sharding) for _ in range(4)]


# %%
def train(w):
    @jax.jit
    def sgd_step(w, batch):
        err = batch["x"] @ w - batch["y"]
        return w - 0.1 * (batch["x"].T @ err) / B

    with jitlab.count_compiles(sgd_step) as n:
        for batch in train_batches:
            w = sgd_step(w, batch)
    return n, w


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Four SGD steps, batches placed on a data mesh, parameters starting as
# <code>jnp.zeros(16)</code>. How many compilations? And with the parameters placed,
# replicated, before the first step?</p></div>

# %%
from_host, w_host = train(jnp.zeros(F, jnp.float32))
placed_once, w_placed = train(jax.device_put(jnp.zeros(F, jnp.float32), replicated))

# %% tags=["answer"] jupyter={"source_hidden": true}
print("from the host:", from_host, "| placed up front:", placed_once)
print(from_host.explanations[-1].splitlines()[-1])
assert from_host.compiles == 2 and placed_once.compiles == 1
on_mesh = "at w, now f32[16]({Auto: ('data',)}) and before f32[16]({})"
assert on_mesh in from_host.explanations[-1]
assert w_host.sharding.is_equivalent_to(replicated, 1)
np.testing.assert_allclose(w_host, w_placed, rtol=1e-5, atol=1e-6)

# %% [markdown]
# Place the state where the step will leave it (here: replicated on the mesh) before
# the first step, and the loop compiles once.
#
# ## 5. Configuration is part of the cache key
#
# Some settings can change what tracing produces, or whether it succeeds: whether 64-bit
# types exist, the precision of matrix products, whether rank or dtype promotion is
# allowed, which device is the default, which mesh is in context. JAX puts their
# current values into the cache key (the *tracing context*).


# %%
@jax.jit
def project(a, b):
    return a @ b


a = jnp.asarray(rng.normal(size=(32, 32)), jnp.float32)
b = jnp.asarray(rng.normal(size=(32, 8)), jnp.float32)
project(a, b)
contexts = {
    "x64": lambda: jax.enable_x64(True),
    "precision": lambda: jax.default_matmul_precision("highest"),
    "rank promotion": lambda: jax.numpy_rank_promotion("raise"),
    "dtype promotion": lambda: jax.numpy_dtype_promotion("strict"),
    "default device": lambda: jax.default_device(devices[1]),
    "mesh": lambda: jax.set_mesh(data_mesh),
}

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>project(a, b)</code> has run. Then one call inside each of these six context
# managers, one call outside again, and each context entered a second time. How many
# compilations?</p></div>


# %%
def enter_twice(context):
    with jitlab.count_compiles(project) as entered:
        with context():
            project(a, b)
        project(a, b)  # outside again
    with jitlab.count_compiles(project) as again, context():
        project(a, b)
    return entered, again


contexts_seen = {label: enter_twice(context) for label, context in contexts.items()}

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.print_table(
    {"context": k, "traces": n.traces, "compiles": n.compiles,
     "second time": m.compiles,
     "JAX says": textwrap.shorten(n.explanations[-1].splitlines()[-1], 60)}
    for k, (n, m) in contexts_seen.items()
)  # fmt: skip
said = {label: n.explanations[-1] for label, (n, _) in contexts_seen.items()}
print(said["x64"])
for entered, again in contexts_seen.values():
    assert (entered.traces, entered.compiles, again.compiles) == (1, 1, 0)
assert all("Tracing context doesn't match" in text for text in said.values())
differs = {
    "x64": "jax_enable_x64 differs: now True and before False",
    "precision": "jax_default_matmul_precision differs: now highest and before None",
    "rank promotion": "jax_numpy_rank_promotion differs: now raise and before allow",
    "dtype promotion": "jax_numpy_dtype_promotion differs: now strict and before stand",
    # before: None (unset), except beside one accelerator (cpu:0 there)
    "default device": "jax_default_device differs: now cpu:1 and before "
    f"{jax.config.jax_default_device}",
    "mesh": "abstract_mesh_context_manager differs",
}
for label, text in differs.items():
    assert text in said[label], said[label]

# %% [markdown]
# Each context costs one trace and one compilation the first time, and is cached after
# that; leaving it returns to the old entry. `jax.set_mesh` is this release's spelling of
# the mesh context (there is no `jax.sharding.use_mesh` in this release). Only the
# *value* counts:

# %%
with jitlab.count_compiles(project) as unchanged, jax.enable_x64(False):
    project(a, b)  # x64 is already off
with jitlab.count_compiles(project) as toggled:
    results = []
    for i in range(10):
        with jax.default_matmul_precision("float32" if i % 2 else None):
            results.append(project(a, b))
print("x64 off when off:", unchanged, "| precision toggled 10 times:", toggled)
assert hasattr(jax, "set_mesh") and not hasattr(jax.sharding, "use_mesh")
assert unchanged.compiles == 0
assert toggled.compiles == 1 and toggled.traces == 1
np.testing.assert_allclose(results[1], results[0], rtol=1e-6)  # same numbers

# %% [markdown]
# A context that sets what is already set is free, and a toggling context costs one
# compilation per distinct value, not per call. And `"float32"` is a new value even
# though, on this CPU, it gives the same numbers as the default.
#
# ## 6. The rest of the cache key
#
# Which settings are in the tracing context? JAX has no public list. It keeps one in
# private code, `jax._src.config.trace_context_names()`, which builds the key, and the
# cell below prints it from the JAX that runs this page (so the list cannot go stale),
# then checks it against the experiment above: every setting that cost a trace there
# must be in it.

# %%
from jax._src import config as jax_config_internals  # private: JAX has no public list

in_key = jax_config_internals.trace_context_names()
settings_in_key = sorted(name for name in in_key if name in jax.config.values)
others = sorted(set(in_key) - set(settings_in_key))
print(f"{len(in_key)} entries in the tracing context on jax {jax.__version__}:")
print(f"{len(settings_in_key)} settings: {', '.join(settings_in_key)}\nand {others}")

# %%
said_differs = {text.split(" differs")[0].split()[-1] for text in said.values()}
print("named in the experiment's explanations:", sorted(said_differs))
assert said_differs <= set(in_key), said_differs - set(in_key)
assert "jax_debug_nans" not in in_key and "jax_compilation_cache_dir" not in in_key

# %% [markdown]
# Most of those are settings you will never touch; the ones met in practice are in the
# experiment above. Two settings that *look* as if they should be in the key are not:
# `jax_debug_nans` (below) and the persistent cache's settings (lesson 10).
#
# ### Typed and raw PRNG keys
#
# `jax.random.key(0)` makes a *typed* key, a scalar of the dtype `key<fry>`.
# `jax.random.PRNGKey(0)` makes the older *raw* key, two `uint32`s. Both work with every
# `jax.random` function.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A jitted sampler is called with <code>key(0)</code>, <code>PRNGKey(0)</code>,
# <code>key(1)</code> and <code>PRNGKey(1)</code>. How many compilations?</p></div>


# %%
@jax.jit
def sample(key):
    return jax.random.normal(key, (3,))


typed, raw = jax.random.key, jax.random.PRNGKey
keys_made = [typed(0), raw(0), typed(1), raw(1)]
with jitlab.count_compiles(sample) as keys:
    draws = [sample(k) for k in keys_made]

# %% tags=["answer"] jupyter={"source_hidden": true}
print(keys, "|", keys.last_reason)
print("typed:", jax.typeof(keys_made[0]), "| raw:", jax.typeof(keys_made[1]))
assert keys.compiles == 2
assert "now u32[2]({}) and before key<fry>[]({})" in keys.explanations[-1]
np.testing.assert_array_equal(draws[0], draws[1])  # the same key, two programs

# %% [markdown]
# Two compilations, and the same numbers from both: the key's *values* are data, its
# *kind* is part of the type. Pick one kind for the whole program (`jax.random.key` is
# the current one); a raw key that arrives from older code is turned into a typed one
# at the boundary with `jax.random.wrap_key_data`, and then hits the typed entry:

# %%
with jitlab.count_compiles(sample) as wrapped:
    sample(jax.random.wrap_key_data(jax.random.PRNGKey(2)))
print("a raw key wrapped into a typed one:", wrapped)
assert wrapped.compiles == 0

# %% [markdown]
# ### Options of `jax.jit` itself
#
# `jax.jit(f, donate_argnums=...)` and `jax.jit(f, compiler_options=...)` wrap the same
# Python function, but their options are part of jit's key: each combination is a
# cache entry of its own. (`compiler_options` are passed to XLA; the one here lowers
# XLA:CPU's optimisation level.) A counter in the body shows how often Python runs.

# %%
scale_body_runs = []


def scale(v):
    scale_body_runs.append("ran")
    return v * 2.0


variants = [
    jax.jit(scale),
    jax.jit(scale, donate_argnums=0),
    jax.jit(scale, compiler_options={"xla_backend_optimization_level": 0}),
]
v8 = np.arange(8, dtype=np.float32)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The three wrappers of <code>scale</code>, each called twice. How many traces,
# lowerings and compilations, and how many times does the body of <code>scale</code>
# run?</p></div>

# %%
rounds = []
for _ in range(2):
    with jitlab.count_compiles(scale) as n:
        for fn in variants:
            fn(jnp.asarray(v8))  # a fresh array each time: donation consumes it
    rounds.append(n)

# %% tags=["answer"] jupyter={"source_hidden": true}
first_round, second_round = rounds
print(first_round, f"({first_round.lowerings} lowerings) | again:", second_round)
print(f"body ran {len(scale_body_runs)}x; explained: {first_round.explanations}")
assert (first_round.traces, first_round.lowerings, first_round.compiles) == (3, 2, 3)
assert len(scale_body_runs) == 1
assert len(first_round.explanations) == 1  # the two variants' misses: no explanation
assert (second_round.traces, second_round.compiles) == (0, 0)

# %% [markdown]
# Three entries, each cached after its first call, and the Python body ran once: each
# variant missed jit's own cache (the counter's `traces` counts those misses), but the
# jaxpr for `scale` on `f32[8]` was already in JAX's inner tracing cache. Donation
# changes the lowered program (the input's buffer is reused for the output), so it was
# lowered again; the compiler options do not change the program, only how XLA compiles
# it. And JAX explained only the first miss: the two variants' misses are silent.
#
# ### `jax_debug_nans`: not in the key, but it changes what runs
#
# `jax.debug_nans(True)` checks every jitted result for NaNs. Is it in the key, and
# what happens when a NaN appears?


# %%
callback_runs = []


@jax.jit
def log_of(v):
    jax.debug.callback(lambda: callback_runs.append("ran"))
    return jnp.log(v)


ok_values = jnp.asarray([1.0, 2.0])
log_of(ok_values)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A warm jitted function, called inside <code>jax.debug_nans(True)</code>: does it
# retrace? A function with a callback that produces a NaN: what happens, and how many
# times does the callback run?</p></div>

# %%
with jitlab.count_compiles(log_of) as checked, jax.debug_nans(True):
    log_of(ok_values)
callback_runs.clear()
with jitlab.count_compiles(None) as rerun, jax.debug_nans(True):
    with_nan = jitlab.attempt(log_of, jnp.asarray([1.0, -1.0]))
jax.effects_barrier()

# %% tags=["answer"] jupyter={"source_hidden": true}
print("warm, under debug_nans:", checked, "|", textwrap.shorten(str(with_nan), 80))
print(f"the callback ran {len(callback_runs)} times; {rerun}")
assert (checked.traces, checked.compiles) == (0, 0)  # not part of the key
assert type(with_nan.error) is FloatingPointError, with_nan
assert len(callback_runs) == 2  # the compiled run, then the de-optimised re-run
assert rerun.compiles >= 1  # the re-run compiles operations one by one

# %% [markdown]
# No retrace: `jax_debug_nans` is not in the tracing context. When a NaN appears, JAX
# runs the function again, de-optimised (one operation at a time, each compiled on its
# own), and raises a `FloatingPointError` that names the operation. So the callback ran
# twice: in the compiled program, and in the re-run. It also turns donation off, but
# only in traces made while it is on. Donation next:
# a function traced with `debug_nans` off and called with it on, and one first traced
# with it on and called with it off.


# %%
def halve(v):
    return v / 2.0


donating_warm = jax.jit(halve, donate_argnums=0)
donating_warm(jnp.ones(4))  # traced with debug_nans off
with jax.debug_nans(True):
    given_warm = jnp.ones(4)
    donating_warm(given_warm)

donating_fresh = jax.jit(lambda v: v / 2.0, donate_argnums=0)
with jax.debug_nans(True):
    donating_fresh(jnp.ones(4))  # first traced with debug_nans on
given_fresh = jnp.ones(4)
with jitlab.count_compiles(None) as after:
    donating_fresh(given_fresh)  # debug_nans off again: a cache hit

# %%
print(
    "donated:", given_warm.is_deleted(), "(warm)", given_fresh.is_deleted(), "(fresh)"
)
assert given_warm.is_deleted()  # the cached trace still donates
assert after.traces == 0 and not given_fresh.is_deleted()  # this trace never donates

# %% [markdown]
# So `jax_debug_nans` is free until a NaN appears, and then the function runs twice,
# the second time slowly. Its effect on donation sticks to the traces made while it
# was on, because it is not part of the key: a function first traced under it keeps
# not donating after it is switched off, until that cache entry is dropped.
#
# ## 7. The problem in a loop, and the fix
#
# An evaluation loop scores one model on 24 batches. The batches leave the host as
# NumPy arrays, and several loaders put them on devices, each its own way: some keep
# them on the host, three workers commit theirs to "their" device (1, 2 or 3), one
# loader shards over the data mesh, one replicates, one shards over the 4 x 2 mesh. A
# metrics helper wraps every third call in `jax.default_matmul_precision("highest")`.

# %%
targets = {
    "host": None,
    "device 1": devices[1],
    "device 2": devices[2],
    "device 3": devices[3],
    "sharded over data": batch_sharding,
    "replicated": replicated,
    "4x2 mesh by rows": NamedSharding(mesh, P("rows")),
}
kinds = [list(targets)[i % len(targets)] for i in rng.permutation(24)]
stream = [(make_batch(rng), kind, i % 3 == 2) for i, kind in enumerate(kinds)]
w_eval = np.asarray(w_placed)  # the model to score, as a host array
distinct_keys = len({(kind, strict) for _, kind, strict in stream})
print(f"{len(stream)} batches, {distinct_keys} (loader, context) pairs")


# %%
@jax.jit
def eval_loss(w, batch):
    err = batch["x"] @ w - batch["y"]
    return jnp.mean(err**2)


def score_each_loader_its_way():
    losses = []
    for raw_batch, kind, strict in stream:
        with jax.default_matmul_precision("highest" if strict else None):
            batch = (
                raw_batch
                if kind == "host"
                else jax.device_put(raw_batch, targets[kind])
            )
            losses.append(eval_loss(w_eval, batch))
    return losses


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How many times does <code>eval_loss</code> compile over the 24 batches? How many
# of those misses does JAX explain?</p></div>

# %%
problem = jitlab.measure("each loader its own way, context toggled",
                         score_each_loader_its_way, count=eval_loss)  # fmt: skip

# %% tags=["answer"] jupyter={"source_hidden": true}
print(problem.counts)
print(f"{len(problem.counts.explanations)} of {problem.compiles} misses explained")
assert problem.compiles == distinct_keys, (problem.compiles, distinct_keys)
assert len(problem.counts.explanations) == problem.traces < problem.compiles

# %% [markdown]
# One compilation per distinct (loader, context) pair, and most of them silent: only
# the misses that retraced (the first call, a new mesh in the type, a new context) were
# explained; another device or another spec on the same mesh compiled in silence.
#
# **The fix** works at the boundary, where a batch leaves the host:
#
# - `place(batch)`: one `jax.device_put` onto one `NamedSharding`, the same for every
#   loader.
# - The parameters are placed once, replicated, before the loop.
# - The configuration stays constant: the precision is written into the operation
#   (`precision=jax.lax.Precision.HIGHEST`), where it is part of the program, instead
#   of a context manager around some of the calls.


# %%
def place(batch):
    return jax.device_put(batch, batch_sharding)


@jax.jit
def eval_loss_fixed(w, batch):
    pred = jnp.dot(batch["x"], w, precision=jax.lax.Precision.HIGHEST)
    return jnp.mean((pred - batch["y"]) ** 2)


def score_placed():
    w = jax.device_put(w_eval, replicated)
    return [eval_loss_fixed(w, place(host_batch)) for host_batch, _, _ in stream]


# %%
with jitlab.count_compiles(None) as everything:
    fix = jitlab.measure(
        "place() + constant config", score_placed, count=eval_loss_fixed
    )
placed = place(stream[0][0])

# %%
print(fix.counts, "| every function:", everything)
assert fix.compiles == 1 and everything.compiles == 1, everything
np.testing.assert_allclose(fix.result, problem.result, rtol=1e-4)
assert place(placed)["x"] is placed["x"]  # already in place: device_put does not copy

# %% [markdown]
# One compilation in the whole loop, counting every function JAX compiled
# (`device_put` from the host compiles nothing), and the same 24 numbers. Side by side:

# %%
side_by_side = jitlab.compare(problem, fix)
assert problem.compiles >= 8 * fix.compiles
assert side_by_side.speedup > 2, side_by_side.speedup

# %% [markdown]
# ## 8. Why at the host, and not after arrival
#
# `place` also accepts a batch that is already on a device, so why not let the loaders
# do what they like and call `place` afterwards? Because moving an array from **one
# device** onto a sharding over many is itself a small XLA program (`_multi_slice`,
# which cuts the array into shards), compiled for each source device and shape.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A fresh 192 x 16 array is placed onto <code>batch_sharding</code> from the host,
# from device 5, from device 6, from device 5 again, then its first 96 rows from device
# 5, and finally the whole array from the 4 x 2 mesh. Which of these compile?</p></div>

# %%
fresh = rng.normal(size=(192, 16)).astype(np.float32)
sources = {
    "host (NumPy)": lambda: fresh,
    "committed to device 5": lambda: jax.device_put(fresh, devices[5]),
    "committed to device 6": lambda: jax.device_put(fresh, devices[6]),
    "committed to device 5, again": lambda: jax.device_put(fresh, devices[5]),
    "committed to device 5, 96 x 16": lambda: jax.device_put(fresh[:96], devices[5]),
    "4x2 mesh by rows": lambda: jax.device_put(fresh, NamedSharding(mesh, P("rows"))),
}
moves = {}
for label, make in sources.items():
    arrived = jax.block_until_ready(make())
    moves[label] = jitlab.measure(
        label, lambda a=arrived: jax.device_put(a, batch_sharding), count="_multi_slice"
    )

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.print_table(
    {"from": k, "compiles": m.compiles, "ms": 1e3 * m.seconds} for k, m in moves.items()
)
assert [m.compiles for m in moves.values()] == [0, 1, 1, 0, 1, 0]

# %% [markdown]
# From the host, or from another sharding, the move is a plain transfer. From a single
# device, it compiles once per source device (and per shape), so a loader that commits
# batches to eight devices and a `place` after it would move the compilations from the
# step into `device_put`. Put each batch on its sharding once, where it leaves the
# host; `place` on arrival is the safety net, not the plan.
#
# <div class="admonition tip"><p class="admonition-title">device_put or in_shardings?</p>
# <p>Both fix the sharding at the boundary. <code>device_put</code> accepts anything and
# moves it; <code>in_shardings</code> moves host and uncommitted inputs and refuses
# committed ones sharded another way, which makes a misbehaving loader fail loudly. A
# common pattern uses both: <code>device_put</code> in the input pipeline, and
# <code>in_shardings</code> on the step as a guard.</p></div>

# %% tags=["remove-input"]
jitlab.outro()
