"""f32[3], f32[4], then i32[4]. The last call differs from the second in dtype only; JAX
0.12 compares it with the first call instead (its tie-break picks the first key)."""
# doctor-cause: dtype
# doctor-expect: shift shape dtype

import jax
import jax.numpy as jnp


@jax.jit
def shift(x):
    return x + 1


shift(jnp.ones(3, jnp.float32))
shift(jnp.ones(4, jnp.float32))
shift(jnp.ones(4, jnp.int32))
