"""The capstone's first cause in miniature: jax.jit(jax.value_and_grad(lambda ...)) per
step, closing over the batch."""
# doctor-cause: function
# doctor-expect: value_and_grad(<lambda>) function*4

import jax
import jax.numpy as jnp
import numpy as np

rng = np.random.default_rng(3)
w = jnp.zeros(3)
for _step in range(5):
    x = rng.normal(size=(8, 3)).astype(np.float32)
    y = x.sum(axis=1)
    objective = jax.value_and_grad(lambda p: jnp.mean((x @ p - y) ** 2))  # noqa: B023
    value, grad = jax.jit(objective)(w)
    w = w - 0.1 * grad
