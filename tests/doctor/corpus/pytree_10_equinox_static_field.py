"""A jitted __call__ on an eqx.Module whose field marked eqx.field(static=True) changes
value (0.1, then 0.2): the field lives in the Module's pytree node metadata, the part of
jit's key that changed is the pytree structure, and the report says in the user's words
that it is a static field of self."""

# doctor-cause: pytree_structure
# doctor-expect: __call__ pytree_structure
# doctor-says: self.dropout: 0.2 now, 0.1 before (a static field of self)
import equinox as eqx
import jax
import jax.numpy as jnp


class MLP(eqx.Module):
    w: jax.Array
    dropout: float = eqx.field(static=True)

    @eqx.filter_jit
    def __call__(self, x):
        return jnp.tanh(self.w @ x) * (1 - self.dropout)


x = jnp.ones(3)
m = MLP(jnp.ones((3, 3)), 0.1)
for _ in range(3):
    m(x)
m2 = MLP(jnp.ones((3, 3)), 0.2)
m2(x)
