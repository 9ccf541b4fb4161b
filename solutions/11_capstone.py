# ---
# jupyter:
#   jitlab:
#     hints:
#     - 'Diagnose before you fix. Run train inside jitlab.count_compiles("<lambda>")
#       and read the explanations: while a new function is built every step, nothing
#       else can show. Start with one train_step, defined once with @jax.jit, that takes
#       everything that changes as an argument.'
#     - After every change, compare your losses with train(...) on the same batches.
#       If they go wrong from step DECAY_FROM on, look at the weight decay first. A
#       step that reads CONFIG while tracing keeps the old value (read CONFIG in train_fast
#       on every step and pass the weight decay in as an argument), and the decay switches
#       on at step DECAY_FROM, on params['w'] only.
#     - Give train_step the same kind of input on every step, from one boundary function.
#       Always pass the keys x, y, weights and length, with weights of one when they
#       are missing or None. Pad x with zeros (in NumPy) to bucket_size(length). Convert
#       the learning rate with np.float32(...), and do not make it static.
#     - 'Inside train_step, keep the padding out of the mean. real = jnp.arange(x.shape[1])
#       < batch[''length''] marks the real time steps; sum tanh(...) where real and
#       divide by the length, not by the padded size. A zero row is not neutral: tanh(0
#       @ w + b) is tanh(b).'
#     title: A training loop that compiles once per bucket, with the same numbers
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
# # Exercise 11 · A training loop that compiles once per bucket, with the same numbers
#
# A colleague's training script trains a small sequence regressor: a `tanh` layer at
# every time step, mean pooling over time, a linear readout. It gives the right
# numbers, but `train` (below) compiles on **every** step. Lesson 11 found five
# causes in a script like it. This one has the same five, in a smaller loop.
#
# Write three things in the cell marked *your turn*:
#
# 1. `bucket_size(n)`: the padded length for a batch of length `n`, for every `n` from 1
#    to 48 (longer batches never come). It must be at least `n` and waste less than
#    half (anything up to 16 is fine for small `n`), in **at most 7** distinct sizes.
# 2. `train_step`: your jitted step. Its signature is yours to choose.
# 3. `train_fast(params, batches)`: the same results as `train(params, batches)` (the
#    final parameters, and the loss at every step), with `train_step` doing the work:
#    pad each batch's `x` to `bucket_size(length)` time steps (whatever the compile
#    count, the grader reads the padded shapes) and call `train_step` by its name at
#    every step (the grader watches its calls). Do not change the batches you are
#    given (the caller reads them again). A later call may be given the same dicts and
#    arrays again, refilled with new data, as a loader with fixed buffers does.
#
# Solved means:
#
# - the losses at every step and the final parameters match the original loop, on
#   fresh random parameters and batches (some lengths sit exactly on a bucket size);
# - `train_step` compiles **at most once per bucket** (the grader clears its cache
#   first), with jit switched on;
# - a second run, whose lengths fall in buckets already compiled, compiles **nothing
#   at all**, counted over every function JAX compiles.
#
# Batches always hold `B` examples with `F` features each. Only the length varies
# (`MIN_LENGTH` to `MAX_LENGTH`), and so do the form of `"weights"` and the schedule.
# Keep the library cell as it is. Run `jitlab check capstone` for a verdict,
# `jitlab hint capstone` for a hint.

# %%
import jax
import jax.numpy as jnp
import jitlab
import numpy as np

# --- the library and the script: do not edit -----------------------------------------
B, F, H = 8, 3, 8  # examples per batch, features per time step, hidden units
STEPS, WARMUP, DECAY_FROM = 12, 3, 6
BASE_LR, WEIGHT_DECAY = 0.3, 0.02
MIN_LENGTH, MAX_LENGTH = 3, 24


def learning_rate(step):
    """Warm-up, then exponential decay."""
    if step < WARMUP:
        return BASE_LR * (step + 1) / WARMUP
    return BASE_LR * np.exp(-0.2 * (step - WARMUP))


CONFIG = {"weight_decay": 0.0}


def update_config(step):
    """The script's callback: weight decay from step DECAY_FROM on."""
    CONFIG["weight_decay"] = WEIGHT_DECAY if step >= DECAY_FROM else 0.0


def predict(params, x):
    hidden = jnp.tanh(x @ params["w"] + params["b"])  # (batch, time, hidden)
    return hidden.mean(axis=1) @ params["v"]


def loss(params, batch):
    err = (predict(params, batch["x"]) - batch["y"]) ** 2
    weights = batch.get("weights")
    data = (
        jnp.mean(err) if weights is None else jnp.sum(weights * err) / jnp.sum(weights)
    )
    return data + CONFIG["weight_decay"] * jnp.sum(params["w"] ** 2)


def train(params, batches):
    """The script's loop: right numbers, one compilation per step."""
    losses = []
    for step, batch in enumerate(batches):
        update_config(step)
        lr = learning_rate(step)
        objective = jax.value_and_grad(lambda p: loss(p, batch))  # noqa: B023
        value, grads = jax.jit(objective)(params)
        params = jax.tree.map(lambda p, g: p - lr * g, params, grads)  # noqa: B023
        losses.append(float(value))
    return params, np.array(losses)


# --- some data to try things on ------------------------------------------------------
def init_params(rng):
    return {
        "w": jnp.asarray(rng.normal(size=(F, H)) / np.sqrt(F), jnp.float32),
        "b": jnp.asarray(0.5 * rng.normal(size=H), jnp.float32),
        "v": jnp.asarray(rng.normal(size=H) / np.sqrt(H), jnp.float32),
    }


def make_batches(rng, steps=STEPS):
    batches = []
    for _ in range(steps):
        length = int(rng.integers(MIN_LENGTH, MAX_LENGTH + 1))
        x = rng.normal(size=(B, length, F)).astype(np.float32)
        y = (np.tanh(x.sum(axis=(1, 2)) / length) + 0.1 * rng.normal(size=B)).astype(
            np.float32
        )
        batch = {"x": x, "y": y}
        form = rng.integers(3)
        if form == 1:
            batch["weights"] = rng.uniform(0.5, 1.5, size=B).astype(np.float32)
        elif form == 2:
            batch["weights"] = None
        batches.append(batch)
    return batches


rng = np.random.default_rng(0)
params0, batches = init_params(rng), make_batches(rng)

# %% [markdown]
# The symptom, measured:

# %%
with jitlab.count_compiles("<lambda>") as n:
    slow_params, slow_losses = train(params0, batches)
print(n)
print("losses:", np.round(slow_losses, 3))
assert n.compiles == STEPS

# %% [markdown]
# Your turn. Diagnose first (`n.explanations`, `jax.log_compiles()`; add cells as you
# like), then fix one cause at a time and compare with `slow_losses` after each fix.


# %%
def bucket_size(n: int) -> int:
    # BEGIN SOLUTION
    # The next power of two: less than 2x the real length, and only a few sizes.
    return 1 << max(n - 1, 0).bit_length()
    # END SOLUTION


@jax.jit
def train_step(params, batch, lr, weight_decay):
    """One SGD step; change the signature if your design needs another."""
    # BEGIN SOLUTION
    # Defined once, so jit caches it: one program per bucket.

    def fixed_loss(params):
        x, length = batch["x"], batch["length"]  # x is padded; length is traced
        hidden = jnp.tanh(x @ params["w"] + params["b"])
        real = (jnp.arange(x.shape[1]) < length)[None, :, None]  # mask the padding out
        pooled = jnp.sum(jnp.where(real, hidden, 0.0), axis=1) / length
        err = (pooled @ params["v"] - batch["y"]) ** 2
        data = jnp.sum(batch["weights"] * err) / jnp.sum(batch["weights"])
        return data + weight_decay * jnp.sum(
            params["w"] ** 2
        )  # an argument, never stale

    value, grads = jax.value_and_grad(fixed_loss)(params)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), value
    # END SOLUTION


# BEGIN SOLUTION (no stub)


def prepare(step, batch):
    """The boundary: one structure, one shape per bucket, scalars of one type."""
    size, length, features = batch["x"].shape
    x = np.zeros((size, bucket_size(length), features), np.float32)
    x[:, :length] = batch["x"]  # pad in NumPy: no JAX work, nothing to compile
    weights = batch.get("weights")
    if weights is None:  # absent or None: weights of one give the plain mean
        weights = np.ones(size, np.float32)
    fixed = {"x": x, "y": batch["y"], "weights": weights, "length": np.int32(length)}
    lr = np.float32(learning_rate(step))  # Python float or NumPy float64: one type
    decay = np.float32(CONFIG["weight_decay"])  # read now, on every step
    return fixed, lr, decay


# END SOLUTION


def train_fast(params, batches):
    """Same results as train(params, batches); train_step does the work."""
    # BEGIN SOLUTION
    losses = []
    for step, batch in enumerate(batches):
        update_config(step)  # the script's callback stays; the step no longer reads it
        params, value = train_step(params, *prepare(step, batch))
        losses.append(float(value))
    return params, np.array(losses)
    # END SOLUTION


# %% tags=["grader"]
from jitlab.graders import capstone

capstone.grade(train_fast, train_step, bucket_size)
