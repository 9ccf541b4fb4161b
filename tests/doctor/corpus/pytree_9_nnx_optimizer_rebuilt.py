"""A Flax NNX optimizer rebuilt inside the loop with a fresh optax.adam. nnx.jit passes the
optimizer's GraphDef as pytree metadata, and the GraphDef holds the optax transformation:
a NamedTuple of functions that a fresh optax.adam makes again. They print the same but
for their addresses and compare by identity, so every rebuilt optimizer is a new
structure to jit. The doctor names the attribute ("tx") and the function inside it."""
# doctor-cause: pytree_structure
# doctor-expect: train_step pytree_structure
# doctor-says: optimizer.tx.init:
# doctor-says: <function chain.<locals>.init_fn> (equal text, not equal) now

import jax.numpy as jnp
import optax
from flax import nnx

model = nnx.Linear(4, 2, rngs=nnx.Rngs(0))
x, y = jnp.ones((8, 4)), jnp.ones((8, 2))


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss(m):
        return ((m(x) - y) ** 2).mean()

    value, grads = nnx.value_and_grad(loss)(model)
    optimizer.update(model, grads)
    return value


for _ in range(2):
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)  # rebuilt: the bug
    train_step(model, optimizer, x, y)
