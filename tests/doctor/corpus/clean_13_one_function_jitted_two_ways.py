"""One update jitted twice on purpose, with its first argument donated and without,
both used all along: each jitted object compiles once, and neither replaced the other."""
# doctor-cause: none
# doctor-expect: step compiles=2
# doctor-expect: step

import jax
import jax.numpy as jnp


def step(w, g):
    return w - 0.1 * g


in_place, copying = jax.jit(step, donate_argnums=0), jax.jit(step)
w, g = jnp.ones(6), jnp.full(6, 0.5)
for _round in range(3):
    w = in_place(w, g)
    kept = copying(w, g)
