"""jax.jit of a library's function, called by the user: a jax.export.Exported with a
symbolic batch size, served by jax.jit(exported.call). Exported.call is defined inside
JAX, but the user called jax.jit, so the jit is the user's and is watched: three batch
sizes compile three times, then a jit made per solver compiles each size again. The row
is named Exported.call, at the line that called jax.jit."""
# doctor-cause: shape
# doctor-expect: Exported.call causes=shape,function compiles=6
# doctor-says: shape_7_jit_of_exported_call.py:25 (jax.jit of a library function)
# doctor-says: jax.jit made it again at

import jax
import jax.numpy as jnp
from jax import export


def mlp(x):
    return jnp.tanh(x @ jnp.ones((4, 4))).sum(axis=1)


(b,) = export.symbolic_shape("b")
exported = export.export(jax.jit(mlp))(jax.ShapeDtypeStruct((b, 4), jnp.float32))


def solve(sizes):
    serve = jax.jit(exported.call)
    return [serve(jnp.ones((n, 4))) for n in sizes]


solve((2, 3, 5))
for n in (2, 3, 5):  # a jit made per solver: a new function object each time
    solve((n,))
