"""A typed PRNG key (jax.random.key), then a raw uint32 key (jax.random.PRNGKey), into one
jitted sampler: key<fry>[] against u32[2], a change of dtype and shape at once, shown as
one change of both ("dtype and shape", * in the timeline). A key cannot be cast, so the
advice is to make keys one way."""
# doctor-cause: dtype
# doctor-expect: noise dtype
# doctor-says: key: u32[2] now, key<fry>[] before (a typed PRNG key against a raw uint32 key:
# doctor-says: dtype and shape)
# doctor-says: array types (dtype and shape) 1 (02)
# doctor-says: array types   o*
# doctor-says: a key cannot be cast

import jax


@jax.jit
def noise(key):
    return jax.random.normal(key, (3,))


noise(jax.random.key(0))
noise(jax.random.PRNGKey(1))
