"""A static options object without __eq__ or __hash__, rebuilt on every call with the same
fields: jit compares it by identity, so every call compiles. Its text is the same; the
report says so, since the text alone would hide the cause."""
# doctor-cause: static_argument
# doctor-expect: solve static_argument*2
# doctor-says: Options(steps=2) (Options) (same text, but not equal: objects without __eq__

import functools

import jax
import jax.numpy as jnp


class Options:
    def __init__(self, steps):
        self.steps = steps

    def __repr__(self):
        return f"Options(steps={self.steps})"


@functools.partial(jax.jit, static_argnums=1)
def solve(x, opts):
    for _ in range(opts.steps):
        x = x - 0.1 * x
    return x


for _ in range(3):
    solve(jnp.ones(3), Options(2))
