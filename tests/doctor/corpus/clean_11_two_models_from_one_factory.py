"""Two jitted steps from one factory, for two models of different widths, each called
at every step: two function objects of one code, each compiled once. The second one's
first compilation replaces nothing, so it is no recompilation of the first."""
# doctor-cause: none
# doctor-expect: update compiles=2
# doctor-expect: update

import jax
import jax.numpy as jnp
import numpy as np


def make_update(rate):
    @jax.jit
    def update(w, x, y):
        return w - rate * jax.grad(lambda v: jnp.mean((x @ v - y) ** 2))(w)

    return update


small, wide = make_update(0.05), make_update(0.01)
rng = np.random.default_rng(11)
x4, x7 = rng.normal(size=(16, 4)).astype(np.float32), rng.normal(size=(16, 7)).astype(np.float32)
y = rng.normal(size=16).astype(np.float32)
w4, w7 = jnp.zeros(4), jnp.zeros(7)
for _step in range(4):
    w4, w7 = small(w4, x4, y), wide(w7, x7, y)
