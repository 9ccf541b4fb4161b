"""The same array replicated over a two-device mesh, then split along its rows."""
# doctor-cause: shardings
# doctor-expect: total shardings

import jax

if jax.config.jax_num_cpu_devices < 2:
    jax.config.update("jax_num_cpu_devices", 2)  # before any JAX operation

import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


@jax.jit
def total(x):
    return jnp.sum(x * x)


mesh = jax.make_mesh((2,), ("rows",), devices=jax.devices()[:2])
x = jnp.ones((4, 2))
total(jax.device_put(x, NamedSharding(mesh, P())))
total(jax.device_put(x, NamedSharding(mesh, P("rows"))))
