"""A jitted function's own clear_cache(), called by a helper after each evaluation."""
# doctor-cause: unknown
# doctor-expect: evaluate unknown unknown

import jax
import jax.numpy as jnp


@jax.jit
def evaluate(w, x):
    return jnp.mean(x @ w)


def run_eval(w, x):
    value = evaluate(w, x)
    evaluate.clear_cache()
    return value


w, x = jnp.ones(3), jnp.ones((4, 3))
for _ in range(3):
    run_eval(w, x)
