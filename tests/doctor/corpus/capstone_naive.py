"""Lesson 11's training loop as written: jax.jit(jax.value_and_grad(lambda ...)) per step.
A new function object every step hides every other cause. Twelve of the 32 batches: a
new function every step is the same mistake at every length (and costs a compilation
each)."""
# doctor-cause: function
# doctor-expect: value_and_grad(<lambda>) function*11

import jax
import numpy as np
from _capstone_setup import init_params, learning_rate, loader, loss, update_config


def train_naive(params, batches):
    losses = []
    for step, batch in enumerate(batches):
        update_config(step)
        lr = learning_rate(step)
        objective = jax.value_and_grad(lambda p: loss(p, batch))  # noqa: B023
        value, grads = jax.jit(objective)(params)
        params = jax.tree.map(lambda p, g: p - lr * g, params, grads)  # noqa: B023
        losses.append(float(value))
    return params, np.array(losses)


if __name__ == "__main__":
    params, losses = train_naive(init_params(), loader()[:12])
    print(f"final loss {losses[-1]:.4f}")
