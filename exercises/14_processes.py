# ---
# jupyter:
#   jitlab:
#     title: One program on every process
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
# # Exercise 14 · One program on every process
#
# Stuck? Run `jitlab hint 14` in a terminal for the next hint, mildest first;
# the hints are not in this file.
#
# Two JAX processes train a linear model together, data-parallel: each reads its own
# rows, the rows of both processes form one global batch split over the mesh's
# `"data"` axis, and the jitted step averages the squared error over all of them. The
# data loader is ragged: at each step a process gets between 1 and `max_rows` rows,
# and the two processes rarely get the same number. Write, in the exercise cell:
#
# - `make_global_batch(x, y, mesh, max_rows)`: this process's rows (`x`: float32
#   `(n, F)`, `y`: float32 `(n,)`, with `1 <= n <= max_rows`; a real row may hold
#   zeros) as a global batch on `mesh`: a pytree (a dict, a tuple, ...) of
#   `jax.Array`s built with `jax.make_array_from_process_local_data`, split over
#   `"data"`. Its shapes must be
#   **the same on every process and at every step**.
# - `train_step(w, batch, lr)`, jitted: returns `(new_w, loss)`. `loss` is the mean
#   squared error of `x @ w - y` over the **real** rows of **both** processes (padding
#   left out), and `new_w = w - lr * gradient of that loss`. `w` is float32 `(F,)`,
#   replicated over the mesh; `lr` is a Python float.
#
# **Solved** means: `train_step` compiles **exactly once on each process** for a stream
# of 8 ragged steps, and both processes get the losses and weights that one process
# training on all the real rows would get.
#
# **How the grader runs your code.** It starts two JAX processes joined by
# `jax.distributed` (as in the lesson, with `jitlab.instruments.multiprocess`), with
# **one CPU device each**, whatever devices the notebook has: the mesh has one device
# per process, and your code need not handle more. In each
# of them it runs **the whole cell** that defines `make_global_batch` and `train_step`, as you
# wrote it, with these names already imported: `jax`, `jnp`, `np`, `NamedSharding`,
# `P`, `functools` (and `os`, `time`, `collections`, `hashlib`, `logging`, `jitlab`).
# So keep everything your functions need in that cell (helpers are fine), and nothing
# that uses the notebook's other variables. Then each process builds the mesh (every
# device on the axis `"data"`) and the zero weights, and for each step calls
# `make_global_batch` on its own rows and `train_step` on the result, counting
# `train_step`'s compilations with `jitlab.count_compiles`. Before each step the
# processes compare what they are about to run, and stop together if it differs: a
# mismatch ends in a verdict, not in the hang or the abort of the lesson. The grader
# draws new data, `max_rows`, `F` and `lr` on every run. Run `jitlab check processes`
# for a verdict and `jitlab hint processes` for a hint.

# %%
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

# A small example on this one process: 3 real rows of 2 features.
example_x = np.arange(6, dtype=np.float32).reshape(3, 2)
example_y = np.array([1.0, 2.0, 3.0], np.float32)
example_w = jnp.zeros(2, jnp.float32)
one_device = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
# With one process, the global array is this process's rows.
split = NamedSharding(one_device, P("data"))
print(jax.make_array_from_process_local_data(split, example_y).shape)


# %%
def make_global_batch(x, y, mesh, max_rows):
    """This process's rows as a global batch, the same shapes on every process."""
    raise NotImplementedError


@jax.jit
def train_step(w, batch, lr):
    """One SGD step on the real rows of every process; returns (new_w, loss)."""

    raise NotImplementedError


# %% [markdown]
# Try it on this one process first, then on two processes as the grader does:
#
# ```python
# batch = make_global_batch(example_x, example_y, one_device, 4)
# print(jax.tree.map(lambda a: a.shape, batch))
# print(train_step(example_w, batch, 0.1))
#
# from jitlab.graders import processes
#
# processes.show(make_global_batch, train_step)  # what each process built and compiled
# ```

# %% tags=["grader"]
from jitlab.graders import processes

processes.grade(make_global_batch, train_step)
