"""jax.grad of a jitted function, outside jit, compiles more programs under the same name.
They are programs for the gradient, not recompilations."""
# doctor-cause: none
# doctor-expect: energy

import jax
import jax.numpy as jnp


@jax.jit
def energy(x):
    return jnp.sum(x**2)


x = jnp.ones(3)
energy(x)
for _ in range(3):
    jax.grad(energy)(x)
energy(x)
jax.vmap(energy)(jnp.ones((2, 3)))
