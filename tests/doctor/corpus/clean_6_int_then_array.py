"""A re-created jax.jit(f) called with the Python int 3, then with jnp.asarray(3) (a weak
int32 array): the second call traces again, finds the program compiled for the first,
and compiles nothing. A retrace, not a recompilation."""
# doctor-cause: none
# doctor-expect: bump compiles=1 retraces=1

import jax
import jax.numpy as jnp


def bump(x):
    return x + 1


jax.jit(bump)(3)
jax.jit(bump)(jnp.asarray(3))
jax.jit(bump)(jnp.asarray(4))
