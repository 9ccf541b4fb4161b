"""A frozen dataclass of settings rebuilt on every call and passed as a static argument:
equal and of equal hash every time, so jit reuses the one program."""
# doctor-cause: none
# doctor-expect: blur compiles=1

import dataclasses
import functools

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class BlurSettings:
    width: int = 3
    mode: str = "same"


@functools.partial(jax.jit, static_argnames="settings")
def blur(x, settings):
    kernel = jnp.ones(settings.width) / settings.width
    return jnp.convolve(x, kernel, mode=settings.mode)


signal = jnp.arange(10.0)
for _ in range(5):
    signal = blur(signal, settings=BlurSettings())
