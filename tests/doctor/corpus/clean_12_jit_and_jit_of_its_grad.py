"""A loss jitted for evaluation and its gradient jitted for training, each made once:
jit(loss) and jit(grad(loss)) are two programs, each compiled once."""
# doctor-cause: none
# doctor-expect: loss compiles=1
# doctor-expect: grad(loss) compiles=1

import jax
import jax.numpy as jnp
import numpy as np


def loss(w, x, y):
    return jnp.mean((x @ w - y) ** 2)


evaluate, gradient = jax.jit(loss), jax.jit(jax.grad(loss))
rng = np.random.default_rng(12)
x, y = rng.normal(size=(32, 5)).astype(np.float32), rng.normal(size=32).astype(np.float32)
w = jnp.zeros(5)
for _step in range(4):
    w = w - 0.1 * gradient(w, x, y)
    evaluate(w, x, y)
