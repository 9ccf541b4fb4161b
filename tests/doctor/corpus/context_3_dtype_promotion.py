"""Strict dtype promotion switched on for one section of a program."""
# doctor-cause: context
# doctor-expect: mix context

import jax
import jax.numpy as jnp


@jax.jit
def mix(a, b):
    return a * b


a, b = jnp.ones(3), jnp.ones(3)
mix(a, b)
with jax.numpy_dtype_promotion("strict"):
    mix(a, b)
    mix(a, b)
