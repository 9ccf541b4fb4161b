"""A schedule that returns a Python float in warm-up and a NumPy float64 after it: weak
f32[] then strong f32[]."""
# doctor-cause: weak_type
# doctor-expect: sgd_step weak_type

import jax
import jax.numpy as jnp
import numpy as np


def schedule(step):
    if step < 3:
        return 0.1 * (step + 1) / 3
    return 0.1 * np.cos(step / 10)


@jax.jit
def sgd_step(w, g, lr):
    return w - lr * g


w, g = jnp.ones(4), jnp.full(4, 0.5)
for step in range(6):
    w = sgd_step(w, g, schedule(step))
