"""Lesson 11 after fix 1 (one step function, defined once): three causes remain planted,
the batch's "weights" key (array, None or absent), one length per batch, and a learning
rate that is a Python float or a NumPy float64."""
# doctor-cause: pytree_structure
# doctor-expect: train_step causes=shape,weak_type,pytree_structure compiles=27

import jax
import numpy as np
from _capstone_setup import init_params, learning_rate, loader, loss, update_config


@jax.jit
def train_step(params, batch, lr):
    value, grads = jax.value_and_grad(loss)(params, batch)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), value


def train(params, batches):
    losses = []
    for step, batch in enumerate(batches):
        update_config(step)
        params, value = train_step(params, batch, learning_rate(step))
        losses.append(float(value))
    return params, np.array(losses)


if __name__ == "__main__":
    params, losses = train(init_params(), loader())
    print(f"final loss {losses[-1]:.4f}")
