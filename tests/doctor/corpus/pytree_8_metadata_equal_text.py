"""Node metadata that prints the same and is not equal. An Equinox layer rebuilt on every
step with a fresh functools.partial as its static activation (partials compare by
identity), and a pytree node whose metadata holds a schedule object without __eq__."""
# doctor-cause: pytree_structure
# doctor-expect: apply pytree_structure pytree_structure
# doctor-expect: scaled_step pytree_structure
# doctor-says: state['schedule']: Schedule(rate=0.1) (equal text, not equal) now

import functools

import equinox as eqx
import jax
import jax.numpy as jnp


class Layer(eqx.Module):
    weight: jax.Array
    activation: object = eqx.field(static=True)


@jax.jit
def apply(layer, x):
    return layer.activation(x @ layer.weight)


x, weight = jnp.ones(3), jnp.ones((3, 3))
for _ in range(3):
    apply(Layer(weight, functools.partial(jax.nn.leaky_relu, negative_slope=0.1)), x)


class Schedule:
    def __init__(self, rate):
        self.rate = rate

    def __repr__(self):
        return f"Schedule(rate={self.rate})"


@jax.tree_util.register_pytree_node_class
class State:
    def __init__(self, params, schedule):
        self.params, self.schedule = params, schedule

    def tree_flatten(self):
        return (self.params,), {"schedule": self.schedule}

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], aux["schedule"])


@jax.jit
def scaled_step(state):
    return state.params * state.schedule.rate


params = jnp.ones(4)
scaled_step(State(params, Schedule(0.1)))
scaled_step(State(params, Schedule(0.1)))  # a new Schedule: equal text, not equal
