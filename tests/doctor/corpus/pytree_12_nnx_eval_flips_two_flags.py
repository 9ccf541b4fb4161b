"""Flax NNX: model.eval() flips BatchNorm's use_running_average and Dropout's
deterministic at once. Both are in the model's GraphDef, pytree node metadata, so the part
of jit's key is the pytree structure; the report names both flags (every part that
differed, not the first) and sends the reader to model.train()/model.eval(), not to the
lesson on containers. The flags are named by the user's attribute path (model.bn), not by
the GraphDef's flat attribute list."""
# doctor-cause: pytree_structure
# doctor-expect: forward pytree_structure
# doctor-says: model.bn.use_running_average: True now, False before (a static field of model)
# doctor-says: model.drop.deterministic: True now, False before (a static field of model)
# doctor-says: call model.train() again before the next training step
# doctor-says: See lesson 13 frameworks

import jax.numpy as jnp
from flax import nnx


class Net(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(4, 4, rngs=rngs)
        self.bn = nnx.BatchNorm(4, rngs=rngs)
        self.drop = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x):
        return self.drop(self.bn(self.lin(x)))


model = Net(nnx.Rngs(0))


@nnx.jit
def forward(model, x):
    return model(x).sum()


x = jnp.ones((8, 4))
forward(model, x)
forward(model, x)
model.eval()
forward(model, x)
