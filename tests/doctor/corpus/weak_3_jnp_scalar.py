"""A temperature passed as a Python float, then as jnp.float32 read back from a config."""
# doctor-cause: weak_type
# doctor-expect: softmax_t weak_type

import jax
import jax.numpy as jnp


@jax.jit
def softmax_t(logits, temperature):
    return jax.nn.softmax(logits / temperature)


logits = jnp.arange(4.0)
softmax_t(logits, 0.5)
softmax_t(logits, 0.7)
softmax_t(logits, jnp.float32(0.7))
