"""A step built by a factory once per epoch: a new closure each time, same code."""
# doctor-cause: function
# doctor-expect: step function function

import jax
import jax.numpy as jnp


def make_step(lr):
    @jax.jit
    def step(w, g):
        return w - lr * g

    return step


w, g = jnp.ones(3), jnp.full(3, 0.1)
for _epoch in range(3):
    step = make_step(0.1)
    for _ in range(2):
        w = step(w, g)
