"""The same update function jitted at two places, once with donate_argnums=0 (the
training loop) and once without (a checkpoint check): the donation changes the lowered
program, so the second jax.jit traces, lowers and compiles again for identical inputs."""
# doctor-cause: function
# doctor-expect: apply_update function

import jax
import jax.numpy as jnp


def apply_update(params, grads):
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


train_update = jax.jit(apply_update, donate_argnums=0)
check_update = jax.jit(apply_update)

grads = {"w": jnp.ones(3)}
params = {"w": jnp.zeros(3)}
for _ in range(3):
    params = train_update(params, grads)
check_update(params, grads)
