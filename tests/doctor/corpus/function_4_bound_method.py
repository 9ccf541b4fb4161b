"""jax.jit(self.method) inside a method: a new bound method object on every call."""
# doctor-cause: function
# doctor-expect: _forward function function

import jax
import jax.numpy as jnp


class Model:
    def __init__(self):
        self.scale = 2.0

    def _forward(self, x):
        return x * self.scale

    def __call__(self, x):
        return jax.jit(self._forward)(x)


model = Model()
x = jnp.ones(3)
for _ in range(3):
    model(x)
