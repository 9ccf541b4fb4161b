"""With a persistent compilation cache, a small function misses the cache and is not
written: it compiled faster than jax_persistent_cache_min_compile_time_secs (1 s by
default). A second function, with the minimum set to 0, is written; after
jax.clear_caches() its next call is a hit (still a compilation to jit: it is read back)."""
# doctor-cause: unknown
# doctor-expect: small_op
# doctor-expect: kept_op unknown
# doctor-persistent: small_op miss=1 hit=0 not_written=1
# doctor-persistent: kept_op miss=1 hit=1 written=1

import shutil
import tempfile

import jax
import jax.numpy as jnp

folder = tempfile.mkdtemp(prefix="jitlab-pcache-")
saved = (
    jax.config.jax_compilation_cache_dir,
    jax.config.jax_persistent_cache_min_compile_time_secs,
)
jax.config.update("jax_compilation_cache_dir", folder)


@jax.jit
def small_op(x):
    return x * 3


@jax.jit
def kept_op(x):
    return x * 4


try:
    small_op(jnp.ones(3))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    kept_op(jnp.ones(3))
    jax.clear_caches()
    kept_op(jnp.ones(3))  # read back from the disk cache
finally:
    jax.config.update("jax_compilation_cache_dir", saved[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", saved[1])
    shutil.rmtree(folder, ignore_errors=True)
