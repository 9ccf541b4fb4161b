"""A small padding loop outside any jit, over three lengths (41, 43, 45, then 43 and 41
again): each line compiles JAX's multiply, broadcast, scatter and squeeze three times at
most, under the five repeats that mark a long loop, but together they are most of the
run's tracing and compiling, so they are charged to the two lines of `pad_to` (blind
test p09: 18 compilations, 0.52 s of a 0.59 s run, charged to nothing)."""
# doctor-cause: none
# doctor-expect: total
# doctor-helpers: _squeeze@23 broadcast_in_dim@22 multiply@22 scatter@23
# doctor-says: helpers_3_small_padding_loop.py:23 in pad_to:
# doctor-says: helpers_3_small_padding_loop.py:22 in pad_to:

import jax
import jax.numpy as jnp


@jax.jit
def total(x):
    return x.sum()


def pad_to(n, width=47):  # sizes and a dtype of their own: no other program compiled them
    x = jnp.ones(n, jnp.int16) * 3
    return jnp.zeros(width, jnp.int16).at[:n].set(x)


for n in (41, 43, 45, 43, 41):
    total(pad_to(n))
