"""A loader that makes its namedtuple class inside the function, so every batch is an
instance of a new class with the same name (lesson 09's worked diagnosis)."""
# doctor-cause: pytree_structure
# doctor-expect: eval_loss pytree_structure*2

import collections

import jax
import jax.numpy as jnp
import numpy as np


def make_batch(x, y):
    Batch = collections.namedtuple("Batch", ["x", "y"])
    return Batch(x=x, y=y)


@jax.jit
def eval_loss(w, batch):
    return jnp.mean((batch.x @ w - batch.y) ** 2)


w = np.ones((3, 2), np.float32)
x, y = np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32)
for _ in range(3):
    eval_loss(w, make_batch(x, y))
