"""Equinox: each fit passes a new lambda (its loss) into a filter_jit step; filter_jit
holds every callable as static, and a new function object is a new key, so each call
compiles. The part of jit's key that changed is a static argument (make_step itself was
never rebuilt), named with the path of the argument, as a new function object of the
same code each call, and the fix is to make the loss once and pass the target."""
# doctor-cause: static_argument
# doctor-expect: make_step static_argument*3
# doctor-says: loss_fn: <function fit.<locals>.<lambda>> now, <function fit.<locals>.<lambda>>
# doctor-says: before (a new function object, same code, each call)
# doctor-says: Fix: the static argument is a function (or an object holding one) made again
# doctor-says: static argument 3 (07)

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
