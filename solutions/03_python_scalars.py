# ---
# jupyter:
#   jitlab:
#     hints:
#     - 'Print `jax.typeof(schedule(step))` for every step: how many different abstract
#       values would `sgd_step` see for `lr`? Then print `jax.tree.map(jax.typeof, state)`
#       for `init(params0)` and for the state one `sgd_step` returns.'
#     - The cache key is made from the arguments before the body of `sgd_step` runs,
#       so converting `lr` inside the jitted function is too late. Convert it in `train`,
#       just before the call.
#     - Give every learning rate the same dtype and the same weak flag. An array with
#       an explicit dtype does it; `jnp.asarray(lr)` alone does not (an int stays an
#       int), an integer dtype rounds 0.05 to 0, and a static `lr` compiles once per
#       value.
#     - '`sgd_step` returns `avg_loss` as a strong `float32[]`, because the loss is
#       one. A Python `0.0`, or `jnp.asarray(0.0)`, is a weak `~float32[]`: start the
#       average with an explicit dtype in `init`.'
#     title: One compilation for a mixed learning-rate schedule
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
# # Exercise 03 · One compilation for a mixed learning-rate schedule
#
# You are training a linear model `x @ w + b` with plain SGD. The learning rate comes from
# `schedule(step)`, which belongs to a config library you do not own. Depending on the
# phase of training it returns a Python `int` (`0` while the weights are frozen), Python
# `float`s (warm-up), NumPy `float64` scalars (a cosine decay computed with `np.cos`) or a
# `jnp.float32` (the floor). The loop also keeps a running average of the loss, so the
# state carried from step to step is `{"params": {"w": ..., "b": ...}, "avg_loss": ...}`.
#
# Write
#
# - `init(params)`: the state before the first step: these `params`, and `avg_loss`
#   equal to 0. Its types must be the ones `sgd_step` returns:
#   `jax.tree.map(jax.typeof, state)` must not change from one step to the next;
# - `sgd_step(state, batch, lr)`, jitted: one SGD step on `loss`, returning the new
#   state: `params - lr * gradient`, leaf by leaf, and
#   `avg_loss = 0.9 * avg_loss + 0.1 * loss(params, batch)`, with the loss of the
#   params *before* the update;
# - `train(params, batches, schedule)`: starts from `init(params)` on every call (the
#   grader calls it twice from the same start) and calls `sgd_step`
#   once per batch, in order, each time with the state the previous call returned and
#   `lr = schedule(step)` for batch number `step` (counting from 0); it returns the
#   state the last call returned, and leaves the caller's `params` as they were.
#
# Solved means: the numbers match a reference on fresh random data, the results come
# from `sgd_step` (called by its name, with jit on), **and** `sgd_step` compiles exactly
# once over a whole schedule, whatever kinds of scalar it hands out. Do not edit
# `schedule` or `loss`: the grader brings its own schedule, with its own mix.
#
# Try your code with `jitlab.count_compiles(sgd_step)` around a call of `train` before you
# run the grader cell.

# %%
import jax
import jax.numpy as jnp
import jitlab
import numpy as np


def loss(params, batch):
    """Mean squared error of the linear model on one batch."""
    inputs, targets = batch
    predictions = inputs @ params["w"] + params["b"]
    return jnp.mean((predictions - targets) ** 2)


def schedule(step):
    """The learning rate for `step`, as the config library returns it (do not edit)."""
    if step < 2:
        return 0  # frozen: a Python int
    if step < 6:
        return 0.025 * (step - 1)  # warm-up: Python floats
    if step < 14:  # cosine decay: NumPy float64
        return 0.05 * (1 + np.cos(np.pi * (step - 6) / 8))
    return jnp.float32(0.01)  # floor: a jnp float32


data_rng = np.random.default_rng(3)
true_w = data_rng.normal(size=5)
batches = []
for _ in range(20):
    inputs = data_rng.normal(size=(32, 5)).astype(np.float32)
    targets = (inputs @ true_w + 0.5).astype(np.float32)
    batches.append((jnp.asarray(inputs), jnp.asarray(targets)))
params0 = {"w": jnp.zeros(5, jnp.float32), "b": jnp.zeros((), jnp.float32)}

jitlab.print_table(
    {
        "step": step,
        "schedule(step)": f"{float(schedule(step)):.4f}",
        "python type": type(schedule(step)).__name__,
        "traced as": str(jax.typeof(schedule(step))),
    }
    for step in (0, 2, 6, 14)
)


# %%
def init(params):
    """The state before the first step, with the types `sgd_step` returns."""
    # BEGIN SOLUTION
    # sgd_step returns avg_loss as a strong float32[] (the loss is one), so start it as
    # one: a Python 0.0, or jnp.asarray(0.0), is a weak ~float32[], and the state of
    # step 2 would then be a new cache key.
    return {"params": params, "avg_loss": jnp.zeros((), jnp.float32)}
    # END SOLUTION


@jax.jit
def sgd_step(state, batch, lr):
    """One SGD step, and the running average of the loss before it."""
    # BEGIN SOLUTION
    value, grads = jax.value_and_grad(loss)(state["params"], batch)
    # `lr` is a traced float32 scalar: its value changes every step, its type never.
    params = jax.tree.map(lambda p, g: p - lr * g, state["params"], grads)
    return {"params": params, "avg_loss": 0.9 * state["avg_loss"] + 0.1 * value}
    # END SOLUTION


def train(params, batches, schedule):
    """Run `sgd_step` over `batches` with the learning rates of `schedule`."""
    # BEGIN SOLUTION
    state = init(params)
    for step, batch in enumerate(batches):
        # Convert at the boundary, before the jitted call: whatever the schedule returns
        # (int, float, NumPy or jnp scalar), sgd_step always sees a strong float32[] and
        # reuses the one program it compiled. Inside sgd_step would be too late: the
        # cache key is made from the arguments as they arrive.
        lr = jnp.asarray(schedule(step), dtype=jnp.float32)
        state = sgd_step(state, batch, lr)
    return state
    # END SOLUTION


# %% tags=["grader"]
from jitlab.graders import python_scalars

python_scalars.grade(init, sgd_step, train)
