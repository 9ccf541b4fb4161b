"""Three programs compiled ahead of time with .lower(...).compile() for int32 batches of
three sizes, then the loop feeds uint8, uint16 and int16 batches of the same sizes: each
first call of a size compiles again, for the dtype. Six compilations, three of them ahead
of time; the three cache misses are the calls'."""
# doctor-cause: dtype
# doctor-expect: histogram dtype dtype dtype compiles=6

import jax
import jax.numpy as jnp
import numpy as np


@jax.jit
def histogram(pixels):
    return jnp.bincount(pixels.ravel(), length=256)


SIZES = (8, 16, 32)
for n in SIZES:
    histogram.lower(jax.ShapeDtypeStruct((n, n), jnp.int32)).compile()  # warm-up

rng = np.random.default_rng(0)
for n, dtype in zip(SIZES, (np.uint8, np.uint16, np.int16), strict=True):
    histogram(rng.integers(0, 100, size=(n, n)).astype(dtype))
    histogram(rng.integers(0, 100, size=(n, n)).astype(dtype))  # cached
