"""A shape miss made inside a precision context. JAX 0.12 ranks a context difference
first, so it blames the precision for the last miss; the shape is what changed."""
# doctor-cause: shape
# doctor-expect: project context shape

import jax
import jax.numpy as jnp


@jax.jit
def project(a, b):
    return a @ b


a3, a4, b = jnp.ones((3, 5)), jnp.ones((4, 5)), jnp.ones((5, 2))
with jax.default_matmul_precision("highest"):
    project(a3, b)
project(a3, b)  # outside the context: a context miss
with jax.default_matmul_precision("highest"):
    project(a4, b)  # same context as the first call, new shape
