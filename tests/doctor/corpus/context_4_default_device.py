"""A section that runs with jax.default_device set to the second CPU device."""
# doctor-cause: context
# doctor-expect: double context

import jax

if jax.config.jax_num_cpu_devices < 2:
    jax.config.update("jax_num_cpu_devices", 2)  # before any JAX operation

import numpy as np  # noqa: E402


@jax.jit
def double(x):
    return 2 * x


x = np.ones(3, np.float32)
double(x)
with jax.default_device(jax.devices()[1]):
    double(x)
