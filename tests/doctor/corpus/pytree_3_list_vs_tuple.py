"""Layer sizes kept as a list in one place and a tuple in another."""
# doctor-cause: pytree_structure
# doctor-expect: stack pytree_structure

import jax
import jax.numpy as jnp


@jax.jit
def stack(layers):
    return sum(jnp.sum(layer) for layer in layers)


a, b = jnp.ones(2), jnp.ones(2)
stack([a, b])
stack((a, b))
stack([a, b])
