"""A 'memory guard' that clears every JAX cache whenever a counter says so."""
# doctor-cause: unknown
# doctor-expect: step unknown

import jax
import jax.numpy as jnp


@jax.jit
def step(state):
    return state + 1


def memory_guard(calls):
    if calls == 3:
        jax.clear_caches()


state = jnp.zeros(2)
for calls in range(5):
    state = step(state)
    memory_guard(calls)
