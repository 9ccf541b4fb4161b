"""A static float that is NaN ("no clipping"). NaN is not equal to itself, so the cache
never hits. The value's text and hash do not change; equality does."""
# doctor-cause: static_argument
# doctor-expect: clip static_argument static_argument

import math
from functools import partial

import jax
import jax.numpy as jnp


@partial(jax.jit, static_argnums=1)
def clip(x, limit):
    return x if math.isnan(limit) else jnp.clip(x, -limit, limit)


x = jnp.ones(3)
for _ in range(3):
    clip(x, float("nan"))
