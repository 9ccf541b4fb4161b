"""A jitted helper called inside a jitted step: both see the new shape. The helper is
traced again inside the step (it is compiled as part of it)."""
# doctor-cause: shape
# doctor-expect: outer_step shape
# doctor-expect: inner_norm shape

import jax
import jax.numpy as jnp


@jax.jit
def inner_norm(x):
    return jnp.sqrt(jnp.sum(x**2))


@jax.jit
def outer_step(x):
    return x / inner_norm(x)


outer_step(jnp.ones(3))
outer_step(jnp.ones(3))
outer_step(jnp.ones(5))
