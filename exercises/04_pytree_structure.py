# ---
# jupyter:
#   jitlab:
#     title: One loss, one compilation, whatever the batch looks like
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
# # Exercise 04 · One loss, one compilation, whatever the batch looks like
#
# Stuck? Run `jitlab hint 04` in a terminal for the next hint, mildest first;
# the hints are not in this file.
#
# A data loader hands over batches as dicts of NumPy arrays: `"x"` (examples by
# features) and `"y"` (targets). Some batches also carry per-example `"weights"`. The
# loader is not tidy:
#
# - some batches have no `"weights"` key, some have `"weights": None`, some have an array;
# - some carry an `"ids"` array that the loss does not need;
# - keys arrive in any order.
#
# Callers are not tidy either: some write `loss(params, batch)`, some
# `loss(params, batch=batch)`, some `loss(params=params, batch=batch)`.
#
# Write
#
# - `batch_loss(params, batch)`, jitted: the weighted mean squared error
#   `sum(w * (predict(params, x) - y) ** 2) / sum(w)`, where a batch without weights
#   counts every example once;
# - `loss(params, batch)`, a plain Python function: what every caller calls. It tidies
#   the batch, calls `batch_loss` (by that name) once, and returns its result. It
#   changes neither the caller's dict nor the arrays in it (the loader may reuse them).
#
# **Solved** means: the numbers match a reference for every kind of batch and every
# calling style, each result is the one `batch_loss` computed (with jit on), and
# `batch_loss` compiles **exactly once** for all the batches of a run (they all have
# the same shapes).
#
# The grader draws new shapes and data every time. To look before grading, count for
# yourself in a new cell:
#
# ```python
# import jitlab
# with jitlab.count_compiles(batch_loss) as n:
#     for b in examples:
#         loss(params, b)
#         loss(params, batch=b)
# print(n, n.explanations[-1:])
# ```

# %%
import jax
import jax.numpy as jnp
import numpy as np


def predict(params, x):
    """The model: a linear layer, params = {"w": (features,), "b": ()}."""
    return x @ params["w"] + params["b"]


# Example batches, the way the loader produces them (the grader draws its own).
rng = np.random.default_rng(0)
n, f = 8, 3
params = {
    "w": jnp.asarray(rng.normal(size=f), dtype=jnp.float32),
    "b": jnp.float32(0.5),
}
x = rng.normal(size=(n, f)).astype(np.float32)
y = rng.normal(size=n).astype(np.float32)
examples = [
    {"x": x, "y": y},
    {"x": x, "y": y, "weights": rng.uniform(0.1, 2.0, size=n).astype(np.float32)},
    {"x": x, "y": y, "weights": None},
    {"y": y, "x": x, "ids": np.arange(n, dtype=np.int32)},
]


# %%
@jax.jit
def batch_loss(params, batch):
    """Weighted mean squared error of predict(params, batch["x"]) against batch["y"].

    Decide in `loss` below what `batch` looks like when it gets here; make it look
    the same every time.
    """
    raise NotImplementedError


def loss(params, batch):
    """What callers call, with any batch the loader makes, positionally or by keyword.

    Tidy the batch, then call `batch_loss`; leave the caller's dict as it was.
    """
    raise NotImplementedError


# %% tags=["grader"]
from jitlab.graders import pytree_structure

pytree_structure.grade(loss, batch_loss)
