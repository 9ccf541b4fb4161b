"""100 examples in batches of 32: the short last batch compiles the step again."""
# doctor-cause: shape
# doctor-expect: train_step shape

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def train_step(w, x, y):
    grad = jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    return w - 0.1 * grad


rng = np.random.default_rng(1)
x_all = rng.normal(size=(100, 3)).astype(np.float32)
y_all = x_all @ np.array([1.0, -2.0, 0.5], np.float32)
w = jnp.zeros(3)
for _epoch in range(2):
    for start in range(0, 100, 32):
        w = train_step(w, x_all[start : start + 32], y_all[start : start + 32])
print(w)
