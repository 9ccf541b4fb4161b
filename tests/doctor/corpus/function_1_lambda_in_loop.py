"""jax.jit of a lambda written inside the loop: a new function object every step."""
# doctor-cause: function
# doctor-expect: <lambda> function*3

import jax
import jax.numpy as jnp

x = jnp.ones(3)
for _step in range(4):
    x = jax.jit(lambda v: v * 0.9)(x)
