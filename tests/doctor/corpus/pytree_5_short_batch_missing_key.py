"""The last batch is short and lacks the "weights" key. JAX 0.12 names the pytree
difference only; the shape changed too."""
# doctor-cause: pytree_structure
# doctor-expect: weighted_loss shape+pytree_structure

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def weighted_loss(batch):
    err = batch["x"] ** 2
    if "weights" in batch:
        return jnp.sum(batch["weights"] * err) / jnp.sum(batch["weights"])
    return jnp.mean(err)


weighted_loss({"x": np.ones(8, np.float32), "weights": np.ones(8, np.float32)})
weighted_loss({"x": np.ones(3, np.float32)})
