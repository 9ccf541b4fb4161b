"""A loop builds its input with jnp.ones(n) for a new n every step: the user's function
recompiles for the shape, and so does JAX's own broadcast_in_dim, at the line that calls
jnp.ones, for about as long. The doctor names that line."""
# doctor-cause: shape
# doctor-expect: smooth shape*5
# doctor-helpers: broadcast_in_dim@18

import jax
import jax.numpy as jnp


@jax.jit
def smooth(x):
    return jnp.convolve(x, jnp.ones(3) / 3, mode="same")


for n in range(10, 16):
    smooth(jnp.ones(n))
