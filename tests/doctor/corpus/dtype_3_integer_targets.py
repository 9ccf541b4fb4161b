"""Targets as float32 from one source and int32 class labels from another."""
# doctor-cause: dtype
# doctor-expect: loss dtype

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def loss(pred, target):
    return jnp.mean((pred - target) ** 2)


pred = jnp.zeros(4)
loss(pred, np.array([0.0, 1.0, 2.0, 1.0], np.float32))
loss(pred, np.array([0, 1, 2, 1], np.int32))
loss(pred, np.array([1.0, 1.0, 0.0, 1.0], np.float32))
