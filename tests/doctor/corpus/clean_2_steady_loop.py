"""A loop with one shape, one dtype and one structure: one compilation. NumPy float64
inputs and jnp float32 inputs share the entry (x64 is off)."""
# doctor-cause: none
# doctor-expect: step

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def step(w, x):
    return w - 0.01 * x.mean(axis=0)


rng = np.random.default_rng(4)
w = jnp.zeros(3)
for i in range(20):
    x = rng.normal(size=(8, 3))
    w = step(w, x if i % 2 else jnp.asarray(x, jnp.float32))
