"""A jitted predict closes over 16.8 MB of weights and compiles for five batch sizes. The
weights are no input of the program: jit bakes them into each executable as a constant, so
the five programs in jit's cache hold five copies (84 MB; the process grew by about 17 MB
per compilation, measured on CPU). The row says so and points to passing them as
arguments."""
# doctor-cause: shape
# doctor-expect: predict shape*4
# doctor-says: holds 83.9 MB of captured arrays in its 5 compiled programs (W f32[2048,2048],
# doctor-says: 16.8 MB baked into each): pass them as arguments (lesson 08

import jax
import jax.numpy as jnp
import numpy as np

W = jnp.asarray(np.random.default_rng(0).random((2048, 2048), np.float32))


@jax.jit
def predict(x):
    return jnp.tanh(x @ W)


for n in range(1, 6):
    predict(np.ones((n, 2048), np.float32))
