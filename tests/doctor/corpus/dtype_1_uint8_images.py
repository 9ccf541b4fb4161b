"""Normalised float images, then raw uint8 images from another loader."""
# doctor-cause: dtype
# doctor-expect: normalize dtype

import jax
import numpy as np


@jax.jit
def normalize(images):
    return (images - images.mean()) / (images.std() + 1e-6)


rng = np.random.default_rng(2)
for _batch in range(3):
    normalize(rng.uniform(size=(2, 8, 8)).astype(np.float32))
for _batch in range(3):
    normalize(rng.integers(0, 256, size=(2, 8, 8)).astype(np.uint8))
