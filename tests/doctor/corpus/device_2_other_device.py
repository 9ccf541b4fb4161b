"""Inputs committed to device 0, then to device 1 (two CPU devices)."""
# doctor-cause: shardings
# doctor-expect: scale shardings

import jax

if jax.config.jax_num_cpu_devices < 2:
    jax.config.update("jax_num_cpu_devices", 2)  # before any JAX operation

import jax.numpy as jnp  # noqa: E402


@jax.jit
def scale(x):
    return 3 * x


cpu0, cpu1 = jax.devices()[:2]
x = jnp.ones(4)
scale(jax.device_put(x, cpu0))
scale(jax.device_put(x, cpu1))
scale(jax.device_put(x, cpu0))
