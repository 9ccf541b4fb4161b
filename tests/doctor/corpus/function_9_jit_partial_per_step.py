"""jax.jit(partial(loss, ...)) made again at every step: each is a new function object of
the same code. The report numbers the objects of this function (#2 of this code now, #1
before), and names the line that makes the jit again, the line to fix, besides the def
and the call site."""
# doctor-cause: function
# doctor-expect: loss function*2
# doctor-says: loss: function object #2 of this code now, #1 before (jax.jit made it again at
# doctor-says: function_9_jit_partial_per_step.py:22: f = jax.jit(partial(loss, scale=2.0)))

from functools import partial

import jax
import jax.numpy as jnp


def loss(w, x, scale):
    return jnp.sum((w * x) ** 2) * scale


w = jnp.ones(3)
for _step in range(3):
    f = jax.jit(partial(loss, scale=2.0))
    f(w, jnp.ones(3))
