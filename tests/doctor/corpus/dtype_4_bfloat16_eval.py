"""Parameters cast to bfloat16 for a cheap evaluation pass, float32 for training."""
# doctor-cause: dtype
# doctor-expect: forward dtype

import jax
import jax.numpy as jnp


@jax.jit
def forward(params, x):
    return jnp.tanh(x @ params["w"] + params["b"])


params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
x = jnp.ones((5, 3))
forward(params, x)
half = jax.tree.map(lambda p: p.astype(jnp.bfloat16), params)
forward(half, x)
forward(params, x)
