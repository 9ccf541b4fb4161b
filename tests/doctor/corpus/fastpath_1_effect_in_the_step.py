"""A training step that logs with jax.debug.print compiles once, and then every warm call
goes through jit's Python path: the print is an effect, and a program with an effect has
no C++ fast path. The same step with jax.pure_callback (no effect) stays on it."""
# doctor-cause: none
# doctor-expect: logged_step compiles=1 calls=6 python=5
# doctor-expect: quiet_step compiles=1 calls=6 python=0

import contextlib
import io

import jax
import jax.numpy as jnp


@jax.jit
def logged_step(w):
    jax.debug.print("w[0] = {}", w[0])
    return w * 0.9


@jax.jit
def quiet_step(w):
    same = jax.pure_callback(lambda v: v, jax.ShapeDtypeStruct(w.shape, w.dtype), w)
    return same * 0.9


w = v = jnp.ones(3)
with contextlib.redirect_stdout(io.StringIO()):
    for _ in range(6):
        w = logged_step(w)
        v = quiet_step(v)
    jax.effects_barrier()
