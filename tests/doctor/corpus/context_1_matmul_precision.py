"""An evaluation run under a higher matmul precision than training."""
# doctor-cause: context
# doctor-expect: predict context

import jax
import jax.numpy as jnp


@jax.jit
def predict(w, x):
    return x @ w


w, x = jnp.ones((3, 2)), jnp.ones((4, 3))
predict(w, x)
with jax.default_matmul_precision("highest"):
    predict(w, x)
predict(w, x)
