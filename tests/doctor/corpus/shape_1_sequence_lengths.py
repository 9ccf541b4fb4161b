"""Sequences of different lengths through one jitted encoder: one program per length."""
# doctor-cause: shape
# doctor-expect: encode shape shape

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def encode(w, x):
    return jnp.tanh(x @ w).mean(axis=0)


rng = np.random.default_rng(0)
w = jnp.asarray(rng.normal(size=(4, 8)), jnp.float32)
for length in (5, 7, 9, 5, 7, 9):
    encode(w, rng.normal(size=(length, 4)).astype(np.float32))
