"""Equinox: each fit passes a new lambda (its loss) into a filter_jit step; filter_jit
holds every callable as static, and a new function object is a new key, so each call
compiles. Named as a new function object (define the loss once, pass the target), with
the path of the argument, not a static value that differs only by its address."""
# doctor-cause: new_function
# doctor-expect: make_step new_function*3
# doctor-says: loss_fn: <function fit.<locals>.<lambda>> (a new function object, same code)

import equinox as eqx
import jax.numpy as jnp


@eqx.filter_jit
def make_step(params, loss_fn):
    return params - 0.1 * loss_fn(params)


def fit(params, target):
    for _ in range(2):
        params = make_step(params, lambda p: p - target)
    return params


p = jnp.ones(3)
for target in (0.0, 1.0):
    p = fit(p, target)
