"""A fresh functools.partial per call: equal arguments, a new object every time."""
# doctor-cause: function
# doctor-expect: penalty function function

from functools import partial

import jax
import jax.numpy as jnp


def penalty(w, strength):
    return strength * jnp.sum(w**2)


w = jnp.ones(3)
for _ in range(3):
    jax.jit(partial(penalty, strength=0.01))(w)
