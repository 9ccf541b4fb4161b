"""A settings object of a plain class (no __eq__, no __hash__) built again on every step
and passed as a static argument: equal-looking, but compared by identity, so every step
is a new cache key (the report says the objects differ only in their addresses)."""
# doctor-cause: static_argument
# doctor-expect: smooth static_argument static_argument static_argument
# doctor-says: differs only in object addresses: objects without __eq__ are compared by identity

from functools import partial

import jax
import jax.numpy as jnp


class Settings:
    def __init__(self, width=3):
        self.width = width


@partial(jax.jit, static_argnums=1)
def smooth(x, settings):
    return jnp.convolve(x, jnp.ones(settings.width) / settings.width, mode="same")


signal = jnp.arange(8.0)
for _ in range(4):
    signal = smooth(signal, Settings())
