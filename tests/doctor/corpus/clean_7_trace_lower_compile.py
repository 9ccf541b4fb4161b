"""The newer ahead-of-time path: jitted.trace(...).lower().compile() as the warm-up, then
the compiled object and the jitted function are called with the same types: one
compilation, made ahead of time (it was not watched at all: `trace` went to the real jit)."""
# doctor-cause: none
# doctor-expect: embed_rows compiles=1
# doctor-functions: embed_rows
# doctor-says: no recompilation; 1 compiled ahead of time

import jax
import jax.numpy as jnp


@jax.jit
def embed_rows(table, ids):
    return table[ids].sum(0)


embed = embed_rows  # the report names the function, not this alias
table = jnp.ones((10, 4))
ids = jnp.arange(3)
exe = embed.trace(table, ids).lower().compile()
exe(table, ids)
for _ in range(3):
    embed(table, ids)
