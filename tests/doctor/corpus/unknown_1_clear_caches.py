"""jax.clear_caches() between epochs, to free memory: the next call compiles again with
exactly the same arguments."""
# doctor-cause: unknown
# doctor-expect: update unknown

import jax
import jax.numpy as jnp


@jax.jit
def update(w):
    return w * 0.5


w = jnp.ones(3)
for _epoch in range(2):
    for _ in range(3):
        w = update(w)
    jax.clear_caches()
