"""jax.jit(f) re-applied on every call, fed NumPy int64/float64 arrays and jnp
int32/float32 arrays in turn: with x64 off they canonicalise to one type, and the
re-made jit finds the program compiled for the first call."""
# doctor-cause: none
# doctor-expect: scale_rows compiles=1

import jax
import jax.numpy as jnp
import numpy as np


def scale_rows(x, w):
    return x * w[:, None]


rng = np.random.default_rng(0)
for i in range(6):
    x = rng.integers(0, 9, size=(4, 3))  # int64
    w = rng.normal(size=4)  # float64
    if i % 2:
        x, w = jnp.asarray(x, jnp.int32), jnp.asarray(w, jnp.float32)
    jax.jit(scale_rows)(x, w)
