"""A mode string, static by name: "train" and "eval" compile separately."""
# doctor-cause: static_argument
# doctor-expect: apply static_argument

import jax
import jax.numpy as jnp


@jax.jit(static_argnames="mode")
def apply(x, mode="train"):
    return x * 0.5 if mode == "train" else x


x = jnp.ones(3)
apply(x, mode="train")
apply(x, mode="train")
apply(x, mode="eval")
