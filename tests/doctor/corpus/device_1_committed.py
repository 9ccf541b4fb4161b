"""An array made by jnp (uncommitted), then the same values put on device 0 explicitly
(committed). jit traces once; the committed call lowers and compiles again, and JAX
gives no explanation: its explanations cover the tracing cache only."""
# doctor-cause: shardings
# doctor-expect: scale shardings

import jax
import jax.numpy as jnp


@jax.jit
def scale(x):
    return 3 * x


x = jnp.ones(4)
scale(x)
scale(jax.device_put(x, jax.devices()[0]))
