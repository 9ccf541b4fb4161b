"""An optional bias: None for one model, an array for another."""
# doctor-cause: pytree_structure
# doctor-expect: dense pytree_structure

import jax
import jax.numpy as jnp


@jax.jit
def dense(params, x):
    y = x @ params["w"]
    return y if params["b"] is None else y + params["b"]


x = jnp.ones((2, 3))
dense({"w": jnp.ones((3, 4)), "b": None}, x)
dense({"w": jnp.ones((3, 4)), "b": jnp.zeros(4)}, x)
