"""An array on the default device, then the same values replicated on an Explicit mesh:
the mesh axes enter the type (JAX writes i32[4]({Explicit: ('device',)})), a sharding
change, not a shape change."""
# doctor-cause: shardings
# doctor-expect: offset shardings

import jax

if jax.config.jax_num_cpu_devices < 2:
    jax.config.update("jax_num_cpu_devices", 2)  # before any JAX operation

import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


@jax.jit
def offset(x):
    return x + 1


mesh = jax.make_mesh((2,), ("device",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:2])
offset(jnp.ones(4, jnp.int32))
offset(jax.device_put(jnp.ones(4, jnp.int32), NamedSharding(mesh, P())))
