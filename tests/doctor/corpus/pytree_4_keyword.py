"""The same arguments, once positionally and once by keyword."""
# doctor-cause: pytree_structure
# doctor-expect: affine pytree_structure

import jax
import jax.numpy as jnp


@jax.jit
def affine(x, scale, offset):
    return x * scale + offset


x = jnp.ones(3)
affine(x, jnp.float32(2.0), jnp.float32(1.0))
affine(x, jnp.float32(2.0), offset=jnp.float32(1.0))
