"""A test helper that turns on rank-promotion warnings around one call."""
# doctor-cause: context
# doctor-expect: add_bias context

import jax
import jax.numpy as jnp


@jax.jit
def add_bias(x, b):
    return x + b


x, b = jnp.ones((2, 3)), jnp.ones(3)
add_bias(x, b)
with jax.numpy_rank_promotion("warn"):
    add_bias(x, b)
