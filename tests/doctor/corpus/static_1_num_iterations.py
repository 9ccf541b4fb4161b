"""A solver whose iteration count is static: one program per count."""
# doctor-cause: static_argument
# doctor-expect: solve static_argument static_argument

from functools import partial

import jax
import jax.numpy as jnp


@partial(jax.jit, static_argnums=1)
def solve(x, iterations):
    for _ in range(iterations):
        x = 0.5 * (x + 2.0 / x)
    return x


x = jnp.full(3, 1.0)
for iterations in (3, 5, 3, 8):
    solve(x, iterations)
