"""A step counter passed as a Python int, then, after resuming from a checkpoint, as the
NumPy int32 the checkpoint stored."""
# doctor-cause: weak_type
# doctor-expect: decay weak_type

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def decay(state, step):
    return state * 0.99**step


state = jnp.ones(2)
for step in range(3):
    state = decay(state, step)
checkpoint = {"state": np.asarray(state), "step": np.int32(3)}
state = decay(jnp.asarray(checkpoint["state"]), checkpoint["step"])
