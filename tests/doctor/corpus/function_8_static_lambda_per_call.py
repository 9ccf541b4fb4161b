"""A function passed as a static argument, written as a lambda at each call: every call
hands jit a new function object, a new key, so the one jitted `apply` compiles again at
every call, however often it is called after."""
# doctor-cause: new_function
# doctor-expect: apply new_function*3

from functools import partial

import jax
import jax.numpy as jnp


@partial(jax.jit, static_argnums=0)
def apply(f, x):
    return f(x) + 1.0


x = jnp.ones(4)
for _step in range(4):
    x = apply(lambda v: v * 0.5, x)
