"""An evaluation loop: each batch has its own length, and the last one comes from another
code path as a NumPy float16 array of a new length: shape misses, then one miss that is
shape and dtype at once. JAX's text shows both changes too (f16[9] against f32[10])."""
# doctor-cause: shape
# doctor-expect: score shape shape shape+dtype
# doctor-says: x: f16[9] (NumPy float16 array) now, f32[14] before
# doctor-says: JAX says (agrees): different input types: * at x, now f16[9]

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def score(x):
    return jnp.sum(x * x)


for n in (10, 12, 14):
    score(jnp.ones(n, jnp.float32))
score(np.ones(9, np.float16))  # another dtype and a new length
