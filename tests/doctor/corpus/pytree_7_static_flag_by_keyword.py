"""A static flag given by keyword, then positionally: the value True is compiled already,
and the new key is the calling convention. A second static-flag function is traced inside
another jit on int32 first; its direct calls on float32 compile, and each is compared
with its earlier compilations, not with that trace."""
# doctor-cause: pytree_structure
# doctor-expect: forward static_argument pytree_structure
# doctor-expect: normalise static_argument compiles=2

from functools import partial

import jax
import jax.numpy as jnp


@partial(jax.jit, static_argnames="train")
def forward(x, train=False):
    return x * 0.5 if train else x


@partial(jax.jit, static_argnames="eps")
def normalise(x, eps):
    return x / (jnp.abs(x).sum() + eps)


@jax.jit
def pipeline(x):
    return normalise(x, eps=1)


x = jnp.ones(3)
forward(x)
forward(x, train=True)
forward(x, True)

pipeline(jnp.ones(3, jnp.int32))  # normalise traced inside pipeline, on int32
normalise(x, eps=1)  # its first compilation
normalise(x, eps=2)  # a new static value: compared with the compilation above
