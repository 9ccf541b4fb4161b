# ---
# jupyter:
#   jitlab:
#     hints:
#     - Print describe(b['x']) for each of the example batches below, then count the
#       step's compilations over them (the snippet under the exercise cell). Almost
#       every placement is an executable of its own, although all batches have the same
#       shape and dtype.
#     - A NamedSharding(mesh, spec) says how to split an array over a mesh. Which PartitionSpec
#       splits the first (batch) axis over the mesh's 'data' axis and keeps the other
#       axes whole? Build it on the mesh you are given.
#     - jax.device_put(tree, sharding) places every leaf of a dict with one sharding,
#       wherever each leaf was before, without changing a value. An array that is already
#       there is left alone.
#     title: One sharding for every batch
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
# # Exercise 12 · One sharding for every batch
#
# A training job reads its batches from several loaders, and each loader puts them on
# devices its own way: some hand over NumPy arrays, some `jnp` arrays on the default
# device, some commit them to device 0 or to another device, some shard them over the
# data mesh or over another mesh with the same axis names, some replicate them, and one
# shards them over a 2-D mesh of its own. Every
# batch is a dict with `"x"` (batch, features) and `"y"` (batch,), float32, with the same
# shapes.
#
# The jitted `step` below compiles again for almost every new placement it sees, and
# JAX's cache-miss explanations stay silent about several of them (lesson 12). Write
#
# - `place(batch, mesh)`: return the batch on **one** `NamedSharding` of `mesh` that
#   splits the batch axis over the mesh's `"data"` axis, whatever placement the batch
#   arrived in. The values, dtypes and keys stay as they are, and so do the dict and
#   arrays you were given: return a new dict, and never write into, delete or donate
#   what you were given. (An array that already has that sharding may come back as it
#   is: `jax.device_put` returns it unchanged, and a JAX array cannot be changed.)
#
# **Solved** means: every placed array holds the values, dtype and shape it arrived
# with and is split over `"data"` on the mesh passed with it, and the step **compiles
# exactly once** per mesh over batches from all the loaders (so its numbers and its
# per-example output follow). The grader builds meshes of its own over every device,
# each in an order of its own: two with the one axis `"data"`, and a 2-D one with an
# axis `"model"` before `"data"`. It hands each batch with one of them (use the `mesh`
# argument of each call, not the `mesh` of this notebook), draws new shapes and data on
# every run, hands one host batch again with its arrays refilled in place (as a loader
# that reuses its buffers does), and counts compilations of a fresh copy of `step` per
# mesh with `jitlab.count_compiles`.

# %%
import os

# As in the lesson: before jax is imported, ask for eight CPU devices.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from jitlab.graders.devices_and_shardings import describe

devices = jax.devices()
if jax.default_backend() == "cpu":
    assert len(devices) == 8, (
        "jax was imported before XLA_FLAGS was set: restart the kernel"
    )

# Every device on one axis called "data". Auto axes, as in the lesson.
mesh = jax.make_mesh((len(devices),), ("data",), axis_types=(AxisType.Auto,))


@jax.jit
def step(w, batch):
    """Per-example squared errors of a linear model, and the gradient of their mean."""
    err = batch["x"] @ w - batch["y"]
    return err**2, 2.0 * (batch["x"].T @ err) / err.shape[0]


# Example batches, the way the loaders hand them over (the grader draws its own).
rng = np.random.default_rng(0)
w = rng.normal(size=3).astype(np.float32)


def host_batch():
    x = rng.normal(size=(4 * len(devices), 3)).astype(np.float32)
    return {"x": x, "y": (x @ w).astype(np.float32)}


other_mesh = jax.make_mesh(
    (len(devices) // 2, 2) if len(devices) % 2 == 0 else (len(devices), 1),
    ("a", "b"),
    axis_types=(AxisType.Auto, AxisType.Auto),
)
examples = [
    host_batch(),
    {k: jnp.asarray(v) for k, v in host_batch().items()},
    jax.device_put(host_batch(), devices[0]),
    jax.device_put(host_batch(), devices[-1]),
    jax.device_put(host_batch(), NamedSharding(mesh, P("data"))),
    jax.device_put(host_batch(), NamedSharding(mesh, P())),
    jax.device_put(host_batch(), NamedSharding(other_mesh, P("b"))),
]
for b in examples:
    print(describe(b["x"]))


# %%
def place(batch, mesh):
    """Return `batch` (a dict with "x" and "y") on one NamedSharding of `mesh` that
    splits the batch axis over the "data" axis, whatever placement it arrived in."""
    # BEGIN SOLUTION
    # One sharding for every batch: the first axis is split over "data", the rest kept
    # whole. For y (1-D) that is its only axis; for x the features stay together.
    sharding = NamedSharding(mesh, P("data"))
    # device_put applies it to every leaf of the dict. It moves host arrays,
    # single-device arrays and arrays sharded another way alike, never changes a value,
    # and leaves an array that already has this sharding where it is. (From a single
    # device it compiles a small slicing program once per source device and shape;
    # that is device_put's cost, not the step's, and it is why the loaders had better
    # place batches from the host.)
    return jax.device_put(batch, sharding)
    # END SOLUTION


# %% [markdown]
# Try it before you ask the grader: count the step's compilations over the examples.
#
# ```python
# import jitlab
#
# with jitlab.count_compiles(step) as n:
#     for b in examples:
#         step(w, place(b, mesh))
# print(n, describe(place(examples[0], mesh)["x"]))
# ```

# %% tags=["grader"]
from jitlab.graders import devices_and_shardings

devices_and_shardings.grade(place)
