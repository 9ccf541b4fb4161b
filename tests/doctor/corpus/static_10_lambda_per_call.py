"""A function passed as a static argument, written as a lambda at each call: every call
hands jit a new function object, a new key, so the one jitted `apply` compiles again at
every call, however often it is called after. The part of the key is the static
argument (apply itself was made once), and the advice is to make the lambda once."""
# doctor-cause: static_argument
# doctor-expect: apply static_argument*3
# doctor-says: See lesson 07 functions_as_arguments

from functools import partial

import jax
import jax.numpy as jnp


@partial(jax.jit, static_argnums=0)
def apply(f, x):
    return f(x) + 1.0


x = jnp.ones(4)
for _step in range(4):
    x = apply(lambda v: v * 0.5, x)
