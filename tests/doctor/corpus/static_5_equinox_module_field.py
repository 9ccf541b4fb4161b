"""An Equinox model under eqx.filter_jit whose last block's rate, a float field, changes:
filter_jit makes every non-array leaf static, so the new rate compiles again. The doctor
names the user's function and line, and the leaf's path inside the Module. An optax
update inside a jitted step traces optax's own jitted helpers: folded into the step, not
watched functions of their own. Two staticmethods both named ``do`` are told apart by
their qualified names."""
# doctor-cause: static_argument
# doctor-expect: predict static_argument
# doctor-expect: step compiles=1
# doctor-expect: Left.do shape
# doctor-expect: Right.do
# doctor-functions: Left.do Right.do predict step

import equinox as eqx
import jax
import jax.numpy as jnp
import optax


class Block(eqx.Module):
    weight: jax.Array
    rate: float


class Model(eqx.Module):
    layers: list

    def __call__(self, x):
        for layer in self.layers:
            x = jnp.tanh(x @ layer.weight) * layer.rate
        return x


@eqx.filter_jit
def predict(model, x):
    return model(x)


def build(last_rate):
    return Model([Block(jnp.eye(3), 0.5), Block(jnp.eye(3), 0.5), Block(jnp.eye(3), last_rate)])


x = jnp.ones(3)
predict(build(0.5), x)
predict(build(0.5), x)  # equal floats: the same program
predict(build(0.25), x)

optimiser = optax.adam(1e-3)
params = {"w": jnp.ones(3)}
state = optimiser.init(params)


@jax.jit
def step(params, state):
    grads = jax.tree.map(jnp.ones_like, params)
    updates, state = optimiser.update(grads, state, params)
    return optax.apply_updates(params, updates), state


for _ in range(3):
    params, state = step(params, state)


class Left:
    @staticmethod
    @jax.jit
    def do(v):
        return v + 1


class Right:
    @staticmethod
    @jax.jit
    def do(v):
        return v - 1


Left.do(x)
Left.do(jnp.ones(4))
Right.do(x)
