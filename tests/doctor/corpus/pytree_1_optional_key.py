"""Batches that sometimes carry a "mask" entry."""
# doctor-cause: pytree_structure
# doctor-expect: masked_mean pytree_structure

import jax
import numpy as np


@jax.jit
def masked_mean(batch):
    mask = batch.get("mask")
    if mask is None:
        return batch["x"].mean()
    return (batch["x"] * mask).sum() / mask.sum()


x = np.ones(6, np.float32)
masked_mean({"x": x})
masked_mean({"x": x, "mask": np.ones(6, np.float32)})
masked_mean({"x": x})
