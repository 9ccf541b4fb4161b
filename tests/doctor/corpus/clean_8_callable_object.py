"""A callable loss object jitted again on each step, jax.jit(loss): the object stays alive
and is the same one, so the compiled program is found. It has no __name__ (JAX calls it
"<unnamed function>"); the report names its class's __call__."""
# doctor-cause: none
# doctor-expect: Loss.__call__ compiles=1
# doctor-functions: Loss.__call__

import jax
import jax.numpy as jnp


class Loss:
    def __init__(self, scale):
        self.scale = scale

    def __call__(self, w, x):
        return self.scale * jnp.sum((x @ w) ** 2)


loss = Loss(0.5)
w, x = jnp.ones(3), jnp.ones((2, 3))
for _ in range(4):
    jax.jit(loss)(w, x)
