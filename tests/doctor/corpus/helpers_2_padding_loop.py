"""A padding loop outside any jit: `padded.at[:n].set(jnp.ones(n))` compiles JAX's scatter,
broadcast and squeeze once per new n. The jitted `total` never recompiles; the cost is
charged to the user's line, with its compilations and seconds together."""
# doctor-cause: none
# doctor-expect: total
# doctor-helpers: _squeeze@20 broadcast_in_dim@20 scatter@20
# doctor-says: helpers_2_padding_loop.py:20 in <module>: 25 compilations,

import jax
import jax.numpy as jnp


@jax.jit
def total(x):
    return x.sum()


for n in range(29, 37):  # sizes and a dtype of its own: no other program compiled them
    padded = jnp.zeros(37, jnp.bfloat16)
    padded = padded.at[:n].set(jnp.ones(n, jnp.bfloat16))
    total(padded)
