"""A remat policy built again at every step and passed as a static argument: the jitted
`step` is made once, so the part of jit's key that changed is the static argument (a new
function object of the same code each call), not the function itself; the fix is to build
the policy once."""
# doctor-cause: static_argument
# doctor-expect: step static_argument*2
# doctor-says: policy: <function save_only_these_names.<locals>.policy> now
# doctor-says: (a new function object, same code, each call)
# doctor-says: Fix: the static argument is a function (or an object holding one) made again

from functools import partial

import jax
import jax.numpy as jnp


@partial(jax.jit, static_argnames="policy")
def step(x, policy):
    return jax.checkpoint(lambda v: jnp.sin(v) * 2, policy=policy)(x)


x = jnp.ones(3)
for _ in range(3):
    x = step(x, policy=jax.checkpoint_policies.save_only_these_names("a"))
