"""The "library" code of lesson 11's training script (data, schedule, config, model),
copied from the lesson so the doctor can run its loop as a program. Not a corpus program
itself (the leading underscore keeps it out of the corpus)."""

import jax.numpy as jnp
import numpy as np

B, F, H = 16, 8, 16  # batch size, features per time step, hidden units
STEPS, WARMUP, DECAY_FROM = 32, 6, 16
MIN_LENGTH, MAX_LENGTH = 4, 20
BASE_LR, MIN_LR, WEIGHT_DECAY = 0.2, 0.01, 0.01


def loader(seed=11):
    """STEPS batches of NumPy arrays: one length per batch, weights in three forms."""
    rng = np.random.default_rng(seed)
    direction = rng.normal(size=F)
    batches = []
    for _ in range(STEPS):
        length = int(rng.integers(MIN_LENGTH, MAX_LENGTH + 1))
        x = rng.normal(size=(B, length, F)).astype(np.float32)
        y = np.sin(3 * x.mean(axis=1) @ direction) + 0.1 * rng.normal(size=B)
        batch = {"x": x, "y": y.astype(np.float32)}
        source = rng.integers(3)
        if source == 1:
            batch["weights"] = rng.uniform(0.5, 1.5, size=B).astype(np.float32)
        elif source == 2:
            batch["weights"] = None
        batches.append(batch)
    return batches


def learning_rate(step):
    """Linear warm-up, cosine decay, a floor: the library's schedule."""
    if step < WARMUP:
        return BASE_LR * (step + 1) / WARMUP
    progress = (step - WARMUP) / (STEPS - WARMUP)
    return max(MIN_LR, BASE_LR * 0.5 * (1.0 + np.cos(np.pi * progress)))


CONFIG = {"weight_decay": 0.0}


def update_config(step):
    """The script's callback: no weight decay in the first half of training."""
    CONFIG["weight_decay"] = WEIGHT_DECAY if step >= DECAY_FROM else 0.0


def init_params(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "w": jnp.asarray(rng.normal(size=(F, H)) / np.sqrt(F), jnp.float32),
        "b": jnp.asarray(0.5 * rng.normal(size=H), jnp.float32),
        "v": jnp.asarray(rng.normal(size=H) / np.sqrt(H), jnp.float32),
    }


def predict(params, x):
    hidden = jnp.tanh(x @ params["w"] + params["b"])  # (batch, time, hidden)
    return hidden.mean(axis=1) @ params["v"]  # mean pooling over time, then a readout


def data_term(err, batch):
    weights = batch.get("weights")
    if weights is None:
        return jnp.mean(err)
    return jnp.sum(weights * err) / jnp.sum(weights)


def loss(params, batch):
    err = (predict(params, batch["x"]) - batch["y"]) ** 2
    return data_term(err, batch) + CONFIG["weight_decay"] * jnp.sum(params["w"] ** 2)
