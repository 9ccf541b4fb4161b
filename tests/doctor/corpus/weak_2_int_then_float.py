"""A scale passed as the Python int 2, later as the Python float 2.5: weak int32, then
weak float32."""
# doctor-cause: weak_type
# doctor-expect: rescale weak_type

import jax
import jax.numpy as jnp


@jax.jit
def rescale(x, factor):
    return x * factor


x = jnp.ones(3)
rescale(x, 2)
rescale(x, 3)
rescale(x, 2.5)
