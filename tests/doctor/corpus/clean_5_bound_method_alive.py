"""jax.jit(model.forward) made again on every call while the first bound method is kept
alive: an equal bound method (same object, same function) finds the compiled program."""
# doctor-cause: none
# doctor-expect: forward compiles=1

import jax
import jax.numpy as jnp


class Model:
    def __init__(self):
        self.scale = 2.0

    def forward(self, x):
        return x * self.scale


model = Model()
kept = model.forward  # alive for the whole run
jax.jit(kept)(jnp.ones(3))
for _ in range(4):
    jax.jit(model.forward)(jnp.ones(3))
