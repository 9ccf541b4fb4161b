"""Equinox: every step the module is rebuilt from its weights with equal static fields (the
same activation name, a tuple made again): filter_jit finds the compiled program."""
# doctor-cause: none
# doctor-expect: train_step compiles=1

import equinox as eqx
import jax
import jax.numpy as jnp


class Layer(eqx.Module):
    w: jax.Array
    act: str = eqx.field(static=True)
    sizes: tuple = eqx.field(static=True)

    def __call__(self, x):
        return jnp.tanh(x @ self.w) if self.act == "tanh" else x @ self.w


@eqx.filter_jit
def train_step(layer, x):
    loss, g = eqx.filter_value_and_grad(lambda m: m(x).sum())(layer)
    return eqx.tree_at(lambda m: m.w, layer, layer.w - 0.1 * g.w), loss


layer = Layer(jnp.ones((3, 3)), "tanh", (3, 3))
x = jnp.ones((2, 3))
for _ in range(4):
    layer, loss = train_step(layer, x)
    layer = Layer(layer.w, "tanh", tuple([3, 3]))
