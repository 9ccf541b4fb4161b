"""A batch class registered with jax.tree_util.register_dataclass: its meta field (the
split's name) is equal on every call while the object is rebuilt each step, then an
'eval' batch compiles again. The report names the field (b.split, not b[0]), and JAX's
"pytree node metadata does not match" is the same part of the key: the pytree structure."""
# doctor-cause: pytree_structure
# doctor-expect: mean_x pytree_structure
# doctor-says: b.split: 'eval' now, 'train' before (a static field of b) JAX says (agrees)

import dataclasses

import jax
import jax.numpy as jnp


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Batch:
    x: jax.Array
    split: str = dataclasses.field(metadata=dict(static=True))


@jax.jit
def mean_x(b):
    return b.x.mean()


for _ in range(3):
    mean_x(Batch(jnp.ones(4), "train"))
mean_x(Batch(jnp.ones(4), "eval"))
