"""Batches built as dicts whose keys come in different orders, and the step number passed
as a NumPy int32 or a jnp.int32: jit sorts a dict's keys and the types are equal, so one
compilation."""
# doctor-cause: none
# doctor-expect: step compiles=1

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def step(batch, t):
    return batch["x"].sum() * batch["y"].mean() + t


for i in range(4):
    x, y = jnp.ones((2, 2)), jnp.ones(2)
    batch = {"x": x, "y": y} if i % 2 else {"y": y, "x": x}
    step(batch, np.int32(i) if i % 2 else jnp.int32(i))
