"""A frozen dataclass config as a static argument; a sweep changes one field."""
# doctor-cause: static_argument
# doctor-expect: layer static_argument static_argument

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Config:
    width: int = 4
    leak: float = 0.1


@partial(jax.jit, static_argnames="config")
def layer(x, config):
    return jnp.where(x > 0, x, config.leak * x)


x = jnp.linspace(-1, 1, 4)
for leak in (0.1, 0.2, 0.1, 0.3):
    layer(x, config=Config(leak=leak))
