"""Under an Auto mesh, the training batch is sharded P('data') and the evaluation batch is
replicated P(): the loss is lowered and compiled again for evaluation (the types are the
same). Then a batch on a mesh of the same shape over the devices in the other order:
compiled again without a retrace or a lowering."""
# doctor-cause: shardings
# doctor-expect: batch_loss shardings
# doctor-expect: column_sums shardings

import jax

if jax.config.jax_num_cpu_devices < 2:
    jax.config.update("jax_num_cpu_devices", 2)  # before any JAX operation

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


@jax.jit
def batch_loss(w, batch):
    return jnp.mean((batch @ w) ** 2)


mesh = jax.make_mesh((2,), ("data",), axis_types=(AxisType.Auto,), devices=jax.devices()[:2])
w = jnp.ones((4, 1))
with jax.set_mesh(mesh):
    train = jax.device_put(jnp.ones((8, 4)), P("data"))
    held_out = jax.device_put(jnp.ones((8, 4)), P())
    for _ in range(3):
        batch_loss(w, train)
    batch_loss(w, held_out)


@jax.jit
def column_sums(x):
    return x.sum(axis=0)


devices = jax.devices()[:2]
for order in (devices, devices[::-1]):
    rows = NamedSharding(Mesh(np.array(order), ("data",)), P("data"))
    column_sums(jax.device_put(np.ones((8, 4), np.float32), rows))
