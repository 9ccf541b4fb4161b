# ---
# jupyter:
#   jitlab:
#     fix: arrays for hyperparameters, framework objects created once, an optimizer
#       state whose structure never changes
#     instructor_notes:
#     - Start from the table at the end. Every row is a lesson the room has done; the
#       frameworks only hide where the Python value lives.
#     - 'The NNX epoch loop is the demo to run live: ask who re-creates the optimizer
#       each epoch, then show that re-creating the model alone is free. The surprise
#       is that the culprit is optax.adam(...), not the model.'
#     - Flax 0.12 has two modes. Graph mode (the default, nnx.jit) supports shared references
#       and structural changes inside the step; tree mode (graph=False) treats modules
#       as ordinary pytrees (Variable updates still come back; a shared reference raises).
#       nnx.jit_partial refuses graph mode's write-back (graph_updates), so with its
#       defaults it raises ValueError; it accepts graph=False, or graph=True with graph_updates=False.
#       Expect questions on which to use; the overhead table answers with numbers.
#     - Optax's own docstring for inject_hyperparams assigns a Python float to a hyperparameter.
#       It works, at the price of one extra trace (weak type). Point at it when someone
#       copies the example.
#     - Timings vary with the laptop and the load; compile counts do not. The lesson
#       asserts only that graph mode costs more than twice the fastest way per call,
#       and that nnx.cached_partial costs less than graph mode.
#     keypoints:
#     - eqx.filter_jit traces array leaves and makes every other leaf static. A float
#       field compiles once per value, a lambda or jax.jit object made per instance
#       compiles once per instance. Store hyperparameters as arrays; re-created modules
#       of the same structure share one program.
#     - eqx.debug.assert_max_traces raises RuntimeError inside the trace that goes over
#       the limit and names the argument; count_compiles tells you how many traces and
#       compilations happened.
#     - nnx.jit puts each module's and optimizer's GraphDef in the cache key. Every
#       attribute that is not a Variable or an array (a float, a Variable's metadata,
#       the optimizer's Optax transformation) is part of it, compared with ==.
#     - nnx.Optimizer(model, optax.adam(lr)) built every epoch compiles every epoch,
#       because each optax.adam(...) is a new pair of functions. Re-creating the model
#       is free; create the transformation once.
#     - An Optax transformation is a pair of closures compared by identity. As a static
#       argument, or closed over by a step built per run, it compiles once per object;
#       reassigned as a global, it is silently stale.
#     - The learning rate belongs in the optimizer state. optax.inject_hyperparams stores
#       it as an array; set it with jnp.asarray(lr, jnp.float32), since a Python float
#       is weakly typed and costs one more trace.
#     - The state a step returns must have the same structure and types as the state
#       it received. An init that leaves None or Python scalars for the first update
#       to fill retraces at the second step.
#     - nnx.jit walks the object graph in Python on every call. nnx.jit_partial (tree
#       mode) or jax.jit of the split/merge form remove most of that overhead; nnx.cached_partial
#       removes part of it.
#     minutes:
#       exercises: 20
#       teaching: 45
#     objectives:
#     - Predict which fields of an Equinox module eqx.filter_jit treats as static, and
#       store a hyperparameter so it is traced.
#     - Read an NNX GraphDef mismatch in JAX's cache-miss explanation and find the attribute
#       that differs.
#     - Keep one Optax transformation for a whole sweep, with the learning rate in the
#       optimizer state (optax.inject_hyperparams).
#     - Write an optimizer state whose pytree structure and types are the same before
#       and after every step.
#     - Measure nnx.jit's per-call overhead against jax.jit of the split/merge form,
#       nnx.cached_partial and nnx.jit_partial.
#     prerequisites:
#       lessons:
#       - python_scalars
#       - pytree_structure
#       - static_arguments
#       - functions_as_arguments
#       - closures_and_globals
#     questions:
#     - Which parts of an Equinox module, a Flax NNX module or an Optax optimizer end
#       up in jit's cache key?
#     - Why does a training loop that re-creates its model and optimizer every epoch
#       compile every epoch?
#     - How do I sweep learning rates without one compilation per value?
#     - What does nnx.jit cost on every call, and how do I get that time back?
#     title: 'Frameworks: Equinox, Flax NNX and Optax'
#   jupytext:
#     formats: py:percent
#     notebook_metadata_filter: jitlab,kernelspec,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 13 · Frameworks: Equinox, Flax NNX and Optax
#
# Most people meet `jax.jit` through a framework: `eqx.filter_jit`, `nnx.jit`, an
# Optax optimizer. The frameworks wrap `jax.jit`, and they decide which parts of your
# objects become traced arrays and which become Python values in the cache key. Every
# recompilation in this lesson is a cause you already know from lessons 03 to 08; the
# framework only hides where the Python value lives. The question to ask each time:
# **what does this framework put in the static part of the key?**

# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import dataclasses
import functools
import re
import warnings
from typing import Any, NamedTuple

import equinox as eqx
import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

# %%
print(*(f"{lib.__name__} {lib.__version__}" for lib in (eqx, flax, optax)), sep=", ")
rng = np.random.default_rng(0)
features = 4


def draw(*shape):
    return jnp.asarray(rng.normal(size=shape), jnp.float32)


x, y, weight = draw(32, features), draw(32, 1), draw(features, 1)
batches = [(draw(32, features), draw(32, 1)) for _ in range(4)]

# %% [markdown]
# ## Equinox: `filter_jit` makes every non-array static
#
# An Equinox module is a pytree whose leaves are its fields (except those marked
# `static=True`, which go into its structure). `eqx.filter_jit` splits the
# arguments into arrays, which it traces, and *everything else*, which it passes to
# `jax.jit` as one static argument. Python floats, ints, strings and functions in a
# module are therefore part of the cache key, hashed and compared by value (or, for a
# function, by identity).
#
# ### A float field compiles once per value


# %%
class Scaled(eqx.Module):
    """A linear map times a scale, where the scale is a plain Python float."""

    weight: jax.Array
    scale: float

    def __call__(self, v):
        return self.scale * (v @ self.weight)


class ScaledArray(Scaled):
    """The same model with the scale stored as a 0-d array: a traced leaf."""

    scale: jax.Array


# %%
@eqx.filter_jit
def loss_float_field(model, v):
    return jnp.mean(model(v) ** 2)


@eqx.filter_jit
def loss_array_field(model, v):
    return jnp.mean(model(v) ** 2)


scales = (0.1, 0.2, 0.3, 0.1)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>Scaled</code> keeps its <code>scale</code> as a Python float. A jitted loss
# is called with four models whose scales are 0.1, 0.2, 0.3 and 0.1 again. How many
# compilations? And with the scale stored as a 0-d array?</p></div>

# %%
float_field = jitlab.measure(
    "eqx float field, 4 calls",
    lambda: [loss_float_field(Scaled(weight, s), x) for s in scales],
    count=loss_float_field)  # fmt: skip
array_field = jitlab.measure(
    "eqx array field, 4 calls",
    lambda: [loss_array_field(ScaledArray(weight, jnp.float32(s)), x) for s in scales],
    count=loss_array_field)  # fmt: skip

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.compare(float_field, array_field)
assert float_field.compiles == 3, float_field.counts.explanations  # 0.1 again: a hit
assert array_field.compiles == 1, array_field.counts.explanations
assert np.allclose(float_field.result, array_field.result, rtol=1e-6)

# %% [markdown]
# Three compilations for three distinct values, and the repeated 0.1 is a cache hit:
# exactly a static argument (lesson 06). `eqx.partition` shows the split that
# `filter_jit` makes. The float sits in the static half; the array does not:

# %%
_, static_half = eqx.partition(Scaled(weight, 0.1), eqx.is_array)
_, static_half_fixed = eqx.partition(
    ScaledArray(weight, jnp.float32(0.1)), eqx.is_array
)
print("static half, float field:", static_half, "| array field:", static_half_fixed)
assert static_half.scale == 0.1 and static_half.weight is None
assert static_half_fixed.scale is None

# %% [markdown]
# JAX's explanation is no help here: the miss is in `filter_jit`'s internal static
# argument, and JAX 0.12 reports static-argument misses as "cache miss explanation
# unavailable" (lesson 06 met the same text). Look at the module's non-array fields
# instead.

# %%
print(float_field.counts.explanations[-1].splitlines()[-1].strip())
assert "explanation unavailable" in float_field.counts.explanations[-1]

# %% [markdown]
# ### Re-created modules: same structure, same program
#
# Building a fresh module is not a problem in itself. The arrays are new, but the
# static half (the module's class, its sizes, its activation function) compares equal.
# What breaks it is a field that is a *new object* in every instance.
#
# `TinyMLP` keeps its activation function as a field, as `eqx.nn.MLP` does. (It draws
# its weights with NumPy only to keep this page fast: `eqx.nn.MLP` would compile its
# random initialisers first.)


# %%
def leaky(v):
    return jnp.maximum(v, 0.1 * v)


class TinyMLP(eqx.Module):
    """One hidden layer, and the activation function kept as a field."""

    hidden: jax.Array
    out: jax.Array
    activation: Any

    def __init__(self, seed, activation):
        weights = np.random.default_rng(seed)
        self.hidden = jnp.asarray(weights.normal(size=(features, 8)), jnp.float32)
        self.out = jnp.asarray(weights.normal(size=(8, 1)), jnp.float32)
        self.activation = activation

    def __call__(self, v):
        return self.activation(v @ self.hidden) @ self.out


# %%
class Projector(eqx.Module):
    """Keeps a jitted helper as a field, built anew in every instance."""

    weight: jax.Array
    squash: Any

    def __init__(self, weight):
        self.weight = weight
        self.squash = jax.jit(lambda v: jnp.tanh(v))

    def __call__(self, v):
        return self.squash(v @ self.weight)


# %%
@eqx.filter_jit
def mlp_loss_named(model, v):
    return jnp.mean(model(v) ** 2)


@eqx.filter_jit
def mlp_loss_lambda(model, v):
    return jnp.mean(model(v) ** 2)


@eqx.filter_jit
def projector_loss(model, v):
    return jnp.mean(model(v) ** 2)


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Four <code>TinyMLP</code> models with four different seeds, then four with
# <code>activation=lambda v: ...</code>, then three modules that build
# <code>jax.jit(lambda ...)</code> in <code>__init__</code>. How many compilations
# each?</p></div>

# %%
with jitlab.count_compiles(mlp_loss_named) as named:
    for seed in range(4):
        mlp_loss_named(TinyMLP(seed, activation=leaky), x)
with jitlab.count_compiles(mlp_loss_lambda) as lambdas:
    for seed in range(4):
        mlp_loss_lambda(TinyMLP(seed, activation=lambda v: jnp.maximum(v, 0.1 * v)), x)
with jitlab.count_compiles(projector_loss) as projectors:
    for scale in (1.0, 2.0, 3.0):
        projector_loss(Projector(scale * weight), x)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(named, lambdas, projectors, sep="\n")
assert named.compiles == 1, named.explanations
assert lambdas.compiles == 4, lambdas.explanations
assert projectors.compiles == 3, projectors.explanations
assert "activation" in {field.name for field in dataclasses.fields(eqx.nn.MLP)}

# %% [markdown]
# One program for every MLP whose activation is the same function object; one per
# instance when each instance brings a new lambda or a new `jax.jit` object. That is
# lesson 07 (a new function object is a new key), reached through a module field. Define
# the function once, at top level, and let every instance point at it.
#
# ### A guard beside the counter: `eqx.debug.assert_max_traces`
#
# `count_compiles` tells you how many times a function was traced and compiled. In a test
# you want the opposite: fail at the first extra trace. Equinox's guard counts how often
# the Python function runs (which, under `filter_jit`, means how often it is traced) and
# raises past the limit, naming the argument that changed.


# %%
@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=1)
def guarded_loss(model, v):
    return jnp.mean(model(v) ** 2)


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The guarded loss is called with scales 0.1 and then 0.2, stored as floats. Where
# does it fail, with what, and what do the counters show: how many traces, how many
# compilations?</p></div>

# %%
with jitlab.count_compiles(guarded_loss) as guard:
    guarded_loss(Scaled(weight, 0.1), x)
    second = jitlab.attempt(guarded_loss, Scaled(weight, 0.2), x)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(guard, "|", type(second.error).__name__, *str(second.error).split()[-12:])
assert type(second.error) is RuntimeError, second
assert "'model' argument is responsible" in str(second.error)
assert guard.traces == 2 and guard.compiles == 1
assert eqx.debug.get_num_traces(guarded_loss) == 2

# %% [markdown]
# The guard raises *inside* the second trace, so JAX never lowers or compiles it: two
# traces, one compilation. Its message prints the module before and after
# (`scale=0.1`, `scale=0.2`), which is the diagnosis. With the scale as an array, the
# same guard stays quiet over all four scales:


# %%
@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=1)
def guarded_loss_fixed(model, v):
    return jnp.mean(model(v) ** 2)


with jitlab.count_compiles(guarded_loss_fixed) as guard_fixed:
    for s in scales:
        guarded_loss_fixed(ScaledArray(weight, jnp.float32(s)), x)
assert guard_fixed.traces == 1 and eqx.debug.get_num_traces(guarded_loss_fixed) == 1

# %% [markdown]
# Put the guard on the step function in your tests; keep the counter for measuring.
#
# ### Arrays in static fields
#
# `eqx.field(static=True)` moves a field into the static half on purpose. It is meant for
# sizes and flags. An array there becomes part of the cache key (lesson 06).


# %%
class Lookup(eqx.Module):
    table: jax.Array = eqx.field(static=True)

    def __call__(self, index):
        return self.table[index]


@eqx.filter_jit
def look_up(model, index):
    return model(index)


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A lookup table is marked static. The first call works. What happens when the
# same table, rebuilt, comes in again (the next epoch, say)?</p></div>

# %%
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    first_table = Lookup(jnp.arange(5.0))
    rebuilt_table = Lookup(jnp.arange(5.0))  # the same table, built again
first_call = jitlab.attempt(look_up, first_table, jnp.int32(2))
second_call = jitlab.attempt(look_up, rebuilt_table, jnp.int32(2))

# %% tags=["answer"] jupyter={"source_hidden": true}
print("warning:", seen[0].category.__name__, "-", seen[0].message)
print("first call:", first_call, "\nsecond call:", str(second_call).split(".")[0])
assert issubclass(seen[0].category, UserWarning) and "static" in str(seen[0].message)
assert not first_call.raised and float(first_call.value) == 2.0
assert type(second_call.error) is ValueError, second_call
assert "arrays cannot be passed as metadata fields" in str(second_call.error)

# %% [markdown]
# Equinox warns when the module is built, the first epoch runs, and the second raises
# `ValueError`. The static field lives in the module's pytree structure, and hashing
# that structure skips the array, so the rebuilt table lands on the first entry's hash;
# JAX then compares the two with `==`, and arrays cannot answer. Checked directly:

# %%
first_structure = jax.tree.structure(first_table)
rebuilt_structure = jax.tree.structure(rebuilt_table)
compared = jitlab.attempt(lambda: first_structure == rebuilt_structure)
print("equal hashes:", hash(first_structure) == hash(rebuilt_structure), "|", compared)
assert hash(first_structure) == hash(rebuilt_structure)
assert type(compared.error) is ValueError, compared

# %% [markdown]
# Keep arrays as ordinary fields; mark static only what is small, hashable and compares
# by value.
#
# ## Flax NNX: the `GraphDef` is the static key
#
# `nnx.jit` takes modules and optimizers as arguments. On every call it splits each one
# into a **`GraphDef`** and a **`State`**. The state holds the `Variable`s (parameters,
# optimizer moments), which become traced arrays. The GraphDef holds everything else:
# the classes, the structure, and every attribute that is not a Variable or an array,
# including a Variable's metadata. The GraphDef goes into the cache key and is compared
# with `==`.
#
# ### Re-creating the model and the optimizer every epoch
#
# A common pattern, in reports of NNX "recompiling every epoch until memory runs out":
# a fresh model and a fresh `nnx.Optimizer` per epoch (a new run of a sweep, a restart
# after divergence), with one `nnx.jit` step at top level.


# %%
class TwoLayer(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(features, 16, rngs=rngs)
        self.out = nnx.Linear(16, 1, rngs=rngs)

    def __call__(self, v):
        return self.out(nnx.relu(self.hidden(v)))


def mse(model, v, target):
    return jnp.mean((model(v) - target) ** 2)


def train_step(model, optimizer, v, target):
    loss, grads = nnx.value_and_grad(mse)(model, v, target)
    optimizer.update(model, grads)
    return loss


# %%
epoch_step = nnx.jit(train_step)
epoch_step_fixed = nnx.jit(train_step)


def run_epochs(step, make_transformation, epochs=3):
    """A fresh model and optimizer per epoch, four steps each; the losses."""
    losses = []
    for epoch in range(epochs):
        model = TwoLayer(nnx.Rngs(epoch))
        optimizer = nnx.Optimizer(model, make_transformation(), wrt=nnx.Param)
        losses += [step(model, optimizer, v, target) for v, target in batches]
    return losses


ADAM = optax.adam(1e-2)  # built once, shared by every epoch's optimizer

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Three epochs, each with a new <code>TwoLayer</code> model and a new
# <code>nnx.Optimizer(model, optax.adam(1e-2))</code>, four steps each. How many
# compilations? What if <code>optax.adam(1e-2)</code> is built once, before the loop,
# and only the model and the <code>nnx.Optimizer</code> are re-created?</p></div>

# %%
problem = jitlab.measure("nnx: fresh optax.adam each epoch",
                         lambda: run_epochs(epoch_step, lambda: optax.adam(1e-2)),
                         count=train_step)  # fmt: skip
fix = jitlab.measure("nnx: optax.adam built once",
                     lambda: run_epochs(epoch_step_fixed, lambda: ADAM),
                     count=train_step)  # fmt: skip

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.compare(problem, fix)
assert problem.compiles == 3, problem.counts.explanations
assert fix.compiles == 1, fix.counts.explanations
assert np.allclose(problem.result, fix.result)

# %% [markdown]
# Re-creating the model is not what costs: the fix re-creates it too. JAX's explanation
# is a page of GraphDef, so pull out the two lines that matter: which argument
# differs, and the `tx` attribute (the Optax transformation) on each side.


# %%
def static_attribute(explanation, name):
    """The function address of one static attribute, for each GraphDef JAX compares."""
    pattern = rf"\('{name}', Static\(value=\w+\(init=<function [\w.<>]+ at (0x\w+)>"
    return re.findall(pattern, explanation)


miss = problem.counts.explanations[-1]
print(
    "JAX:", miss.splitlines()[3].strip(), re.search(r"at input path \S+", miss).group()
)
print("tx.init now and before:", static_attribute(miss, "tx"))
assert "at input path [0][1]._graphdef" in miss  # argument 1: the optimizer
now, before = static_attribute(miss, "tx")
assert now != before

# %% [markdown]
# The differing input is argument 1, the optimizer, and the difference is its `tx`
# attribute: two `init` functions at two addresses. `optax.adam(1e-2)` returns a new
# pair of closures every time it is called, and functions compare by identity. The
# GraphDefs, checked directly:


# %%
def optimizer_graphdef(model, tx):
    return nnx.graphdef(nnx.Optimizer(model, tx, wrt=nnx.Param))


model_a, model_b = TwoLayer(nnx.Rngs(0)), TwoLayer(nnx.Rngs(1))
same_model_structure = nnx.graphdef(model_a) == nnx.graphdef(model_b)
fresh_adam_equal = optax.adam(1e-2) == optax.adam(1e-2)
fresh_tx = optimizer_graphdef(model_a, optax.adam(1e-2)) == (
    optimizer_graphdef(model_b, optax.adam(1e-2)))  # fmt: skip
shared_tx = optimizer_graphdef(model_a, ADAM) == optimizer_graphdef(model_b, ADAM)

# %%
print(f"models: {same_model_structure}, adam == adam: {fresh_adam_equal}, "
      f"optimizers with fresh adam: {fresh_tx}, sharing ADAM: {shared_tx}")  # fmt: skip
assert same_model_structure and shared_tx
assert not fresh_adam_equal and not fresh_tx

# %% [markdown]
# Each compilation also stays in the cache: one executable per epoch, kept alive by the
# jitted function long after the epoch's optimizer is gone. That is the "until memory
# runs out" part of the reports. (`jitted_fn` is the `jax.jit` function inside
# `nnx.jit`, and `_cache_size()` a private method, as in lesson 06.)

# %%
sizes = epoch_step.jitted_fn._cache_size(), epoch_step_fixed.jitted_fn._cache_size()
print("cache entries:", sizes)
assert sizes == (3, 1)

# %% [markdown]
# ### What else lives in the GraphDef


# %%
class Shifted(nnx.Module):
    def __init__(self, shift, rngs):
        self.linear = nnx.Linear(features, 1, rngs=rngs)
        self.shift = shift  # a Python float or a 0-d array

    def __call__(self, v):
        return self.linear(v) + self.shift


def apply(model, v):
    return model(v)


predict_float_shift, predict_array_shift = nnx.jit(apply), nnx.jit(apply)
predict_metadata = nnx.jit(apply)
shifts = (0.0, 0.5, 1.0)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>Shifted</code> adds a constant <code>shift</code> to its output. Three models
# with shifts 0.0, 0.5 and 1.0 as Python floats; the same with 0-d arrays; then one
# model whose kernel gets new metadata (<code>set_metadata(note="frozen")</code>) between
# two calls. How many compilations each?</p></div>


# %%
def count_calls(step, models):
    with jitlab.count_compiles(apply) as n:
        for model in models:
            step(model, x)
    return n


float_shift = count_calls(
    predict_float_shift, [Shifted(s, nnx.Rngs(0)) for s in shifts]
)
array_models = [Shifted(jnp.float32(s), nnx.Rngs(0)) for s in shifts]
array_shift = count_calls(predict_array_shift, array_models)
tagged = Shifted(jnp.float32(0.0), nnx.Rngs(0))
graphdef_before = nnx.graphdef(tagged)
with jitlab.count_compiles(apply) as metadata:
    predict_metadata(tagged, x)
    tagged.linear.kernel.set_metadata(note="frozen")
    predict_metadata(tagged, x)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(f"float: {float_shift.compiles}, array: {array_shift.compiles}, "
      f"metadata: {metadata.compiles} compilations")  # fmt: skip
assert float_shift.compiles == 3, float_shift.explanations
assert array_shift.compiles == 1, array_shift.explanations
assert metadata.compiles == 2, metadata.explanations
assert graphdef_before != nnx.graphdef(tagged)
assert "shift" not in nnx.state(Shifted(0.5, nnx.Rngs(0)))
assert "shift" in nnx.state(Shifted(jnp.float32(0.5), nnx.Rngs(0)))

# %% [markdown]
# A float attribute is in the GraphDef (it is not in `nnx.state(model)`), so each value
# is a new key: lesson 06's static argument, reached through an attribute. An array
# attribute is data, in the state. A Variable's metadata is structure, like a dict key in
# lesson 04. Changing the module's structure (tagging a Variable, as here) is meant to
# compile again. Changing a hyperparameter should not: store it as an array or a
# Variable.
#
# ### The price of `nnx.jit` on every call
#
# `nnx.jit` has work to do before and after every call: walk the object graph in Python,
# split each module into GraphDef and State, run the compiled program, and write the
# new values back into your objects. For a small model that walk can cost more than the
# computation. Flax 0.12.12 offers three ways to do less of it, measured below against
# the default:
#
# * `nnx.cached_partial(step, model, optimizer)` (graph mode only): caches the graph
#   walk for the arguments you bind;
# * `nnx.jit_partial(step, model, optimizer, graph=False)`: flattens the bound objects
#   once, when it is built, and passes only their arrays on each call (it refuses graph
#   mode's write-back: the defaults raise `ValueError`, so pass `graph=False`, or
#   `graph=True, graph_updates=False`);
# * the functional form: `nnx.split` once, then `jax.jit` a function of the state that
#   calls `nnx.merge` inside and returns the new state.


# %%
def fresh_pair():
    model = TwoLayer(nnx.Rngs(0))
    return model, nnx.Optimizer(model, ADAM, wrt=nnx.Param)


def graph_mode():
    model, optimizer = fresh_pair()
    step = nnx.jit(train_step)
    return lambda: step(model, optimizer, x, y)


def cached_partial():
    step = nnx.cached_partial(nnx.jit(train_step), *fresh_pair())
    return lambda: step(x, y)


def jit_partial():
    step = nnx.jit_partial(train_step, *fresh_pair(), graph=False)
    return lambda: step(x, y)


# %%
def split_merge():
    graphdef, state = nnx.split(fresh_pair())

    @jax.jit
    def train_step(state, v, target):  # the same name, so the counter finds it
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(mse)(model, v, target)
        optimizer.update(model, grads)
        return loss, nnx.state((model, optimizer))

    carry = {"state": state}

    def call():
        loss, carry["state"] = train_step(carry["state"], x, y)
        return loss

    return call


ways = {
    "nnx.jit": graph_mode,
    "nnx.cached_partial": cached_partial,
    "nnx.jit_partial": jit_partial,
    "jax.jit split/merge": split_merge,
}

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>All four run the same step and compile once. Rank them by time per cached
# call.</p></div>

# %%
calls, compiles, overhead_losses = {}, {}, {}
for label, make_call in ways.items():
    with jitlab.count_compiles(train_step) as compiles[label]:
        calls[label] = make_call()
        overhead_losses[label] = [float(calls[label]()) for _ in range(3)]
# Time the four in turns, so a burst of load on a shared machine hits them all alike.
samples = {label: [] for label in calls}
for _ in range(60):
    for label, call in calls.items():
        samples[label].append(jitlab.time_once(call))
steady = {label: 1e6 * float(np.median(times)) for label, times in samples.items()}

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.print_table({"way": w, "compiles": compiles[w].compiles, "steady_us": steady[w]}
                   for w in calls)  # fmt: skip
for way in calls:
    compiled = compiles[way].compiles
    jitlab.record(f"per-call overhead: {way}", compiles=compiled, steady_us=steady[way])
    assert compiles[way].compiles == 1, (way, compiles[way].explanations)
    assert np.allclose(overhead_losses[way], overhead_losses["nnx.jit"], rtol=1e-5)
fastest_fix = min(steady["nnx.jit_partial"], steady["jax.jit split/merge"])
print(f"on this machine, nnx.jit / fastest fix: {steady['nnx.jit'] / fastest_fix:.1f}x")
# On an accelerator all four also launch the step on the chip and wait for it on
# every timed call (hundreds of microseconds), so graph mode's extra Python is a
# smaller share.
assert (
    steady["nnx.jit"] > (2 if jax.default_backend() == "cpu" else 1.4) * fastest_fix
), steady
# cached_partial saves part of the walk: a margin, as every recorded machine clears it
assert 1.2 * steady["nnx.cached_partial"] < steady["nnx.jit"], steady

# %% [markdown]
# The same four on the course's other machines, from their committed results files. On
# the TPU every way is slower per call than on a CPU, since each call also launches the
# step on the chip and waits for it, and the gap between graph mode and the fastest fix
# is of the same order, hundreds of microseconds: it is Python work on the host either
# way.

# %%
jitlab.print_table(
    {"way": way, **row}
    for way in ways
    for row in jitlab.measured_on_machines(f"per-call overhead: {way}", "steady_us")
)

# %% [markdown]
# Same losses, one compilation each, and on a CPU a difference of two-fold or more in
# the time per call (the exact numbers move with the machine and its load; on the TPU
# less, as the table shows). None of this is a recompilation: it is Python work on the
# cache-hit path, paid on every call. On a CPU, for a step this small, it is most of the
# time: graph mode takes more than twice as long as the fastest way.
# `nnx.jit_partial` and the split/merge form do the graph walk once, up front, and then
# hand `jax.jit` only the state (Variables and arrays) on each call, which is why they
# come out ahead; `nnx.cached_partial` keeps graph mode's features (shared references,
# structural changes) and saves part of the walk.
#
# ## Optax: a transformation is a pair of functions
#
# `optax.adam(1e-2)` returns a `GradientTransformation`: a named tuple of two closures,
# `init` and `update`, with the learning rate captured inside them as a Python float.
# Everything about Optax and recompilation follows from that sentence.

# %%
params = {"w": jnp.zeros((features, 1), jnp.float32), "b": jnp.zeros((1,), jnp.float32)}


def linear_loss(p, v, target):
    return jnp.mean((v @ p["w"] + p["b"] - target) ** 2)


sgd = optax.sgd(0.1)
print(type(sgd).__name__, "| fields:", sgd._fields, "| init is", sgd.init.__qualname__)
assert optax.sgd(0.1) != optax.sgd(0.1)  # same numbers, new closures

# %% [markdown]
# ### As a static argument, or closed over and re-created
#
# Three runs. In A, each run builds `optax.sgd(0.1)` and passes it to a jitted step as a
# static argument. In B, each run builds it and a jitted step that closes over it. In C,
# one global optimizer is read by the step, and the script reassigns the global to
# `optax.sgd(0.5)` between two calls.


# %%
def sgd_update(tx, p, opt_state, v, target):
    grads = jax.grad(linear_loss)(p, v, target)
    updates, opt_state = tx.update(grads, opt_state, p)
    return optax.apply_updates(p, updates), opt_state


@functools.partial(jax.jit, static_argnames="tx")
def step_static_tx(p, opt_state, v, target, tx):
    return sgd_update(tx, p, opt_state, v, target)


def make_closed_step(tx):
    @jax.jit
    def step_closed_tx(p, opt_state, v, target):
        return sgd_update(tx, p, opt_state, v, target)

    return step_closed_tx


# %%
optimizer = optax.sgd(0.1)


@jax.jit
def step_global_tx(p, opt_state, v, target):
    return sgd_update(optimizer, p, opt_state, v, target)


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Compilations for A, B and C, three runs or two calls each? And which learning rate
# does C's second call use?</p></div>

# %%
with jitlab.count_compiles(step_static_tx) as as_static:
    for tx in (optax.sgd(0.1) for _ in range(3)):
        step_static_tx(params, tx.init(params), x, y, tx=tx)
with jitlab.count_compiles("step_closed_tx") as as_closure:
    for tx in (optax.sgd(0.1) for _ in range(3)):
        make_closed_step(tx)(params, tx.init(params), x, y)
with jitlab.count_compiles(step_global_tx) as as_global:
    before, _ = step_global_tx(params, optimizer.init(params), x, y)
    optimizer = optax.sgd(0.5)  # the global now names another transformation
    after, _ = step_global_tx(params, optimizer.init(params), x, y)
at_half, _ = make_closed_step(optax.sgd(0.5))(params, optimizer.init(params), x, y)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(f"A: {as_static.compiles}, B: {as_closure.compiles}, C: {as_global.compiles}")
assert as_static.compiles == 3, as_static.explanations
assert as_closure.compiles == 3 and "never seen function" in as_closure.explanations[-1]
assert as_global.compiles == 1
assert np.allclose(after["w"], before["w"]), "still the learning rate 0.1"
assert not np.allclose(after["w"], at_half["w"])

# %% [markdown]
# A and B compile once per run: the transformation is a new object each time, and a
# static argument or a closure is keyed by identity (lessons 06 and 07). C compiles once
# and is *wrong*: the step baked in the first transformation, with its learning rate
# 0.1, and the reassignment changed nothing that jit looks at (lesson 08). Build the
# transformation once, and give the step the optimizer *state*, never the
# transformation.
#
# ### The learning rate belongs in the state: `optax.inject_hyperparams`
#
# A learning-rate sweep needs one transformation per rate, as long as the rate lives in
# a closure. `optax.inject_hyperparams(optax.sgd)(learning_rate=...)` builds one
# transformation whose hyperparameters are arrays in the optimizer state, so a new rate
# is new data for the same program.

# %%
learning_rates = (0.3, 0.1, 0.03, 0.01)
INJECTED = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)  # built once


@jax.jit
def step_injected(p, opt_state, v, target):
    return sgd_update(INJECTED, p, opt_state, v, target)


# %%
def sweep_per_rate():
    finals = []
    for tx in map(optax.sgd, learning_rates):
        p, state = params, tx.init(params)
        for _ in range(5):
            p, state = step_static_tx(p, state, x, y, tx=tx)
        finals.append(p["w"])
    return finals


def sweep_injected():
    finals = []
    for lr in learning_rates:
        p, state = params, INJECTED.init(params)
        state.hyperparams["learning_rate"] = jnp.asarray(lr, jnp.float32)
        for _ in range(5):
            p, state = step_injected(p, state, x, y)
        finals.append(p["w"])
    return finals


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Four learning rates, five steps each. How many compilations with
# <code>optax.sgd(lr)</code> per rate, and with one injected transformation?</p></div>

# %%
per_rate = jitlab.measure(
    "optax.sgd(lr) per rate", sweep_per_rate, count=step_static_tx
)
injected = jitlab.measure(
    "inject_hyperparams sweep", sweep_injected, count=step_injected
)

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.compare(per_rate, injected)
print("injected state:", INJECTED.init(params).hyperparams)
assert per_rate.compiles == len(learning_rates), per_rate.counts.explanations
assert injected.compiles == 1, injected.counts.explanations
assert np.allclose(per_rate.result, injected.result, rtol=1e-5)

# %% [markdown]
# One compilation for the whole sweep, the same final weights. The rate is a float32
# array in `opt_state.hyperparams`.
#
# Optax's own docstring for `inject_hyperparams` changes a hyperparameter by assigning a
# Python float. That works, but a Python float is *weakly typed* (lesson 03), and the
# state that `init` and `update` produce holds a strongly typed float32.


# %%
@jax.jit
def step_injected_float(p, opt_state, v, target):
    return sgd_update(INJECTED, p, opt_state, v, target)


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A fresh jitted step is called with the state from <code>init</code>, then with
# <code>hyperparams["learning_rate"] = 0.05</code>. How many traces?</p></div>

# %%
with jitlab.count_compiles(step_injected_float) as python_float:
    state = INJECTED.init(params)
    p, state = step_injected_float(params, state, x, y)
    state.hyperparams["learning_rate"] = 0.05  # a Python float
    p, state = step_injected_float(p, state, x, y)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(python_float.last_reason)
assert "state.hyperparams['b2'] = 0.95" in optax.inject_hyperparams.__doc__
assert not jax.typeof(INJECTED.init(params).hyperparams["learning_rate"]).weak_type
assert python_float.traces == 2, python_float.explanations
assert "weak_type=True" in python_float.last_reason

# %% [markdown]
# One extra trace, with JAX naming the leaf: `opt_state.hyperparams['learning_rate']`,
# weak `f32[]` against strong `f32[]`. Assign `jnp.asarray(lr, jnp.float32)` and the
# types never change.
#
# ### An optimizer state whose structure changes after the first step
#
# Hand-written transformations follow the same contract as Optax's. Two tempting
# shortcuts: an `init` that leaves the momentum as `None` until the first update, and a
# counter that starts at the Python int `0`.


# %%
class MomentumState(NamedTuple):
    count: Any
    velocity: Any


def lazy_momentum(learning_rate, decay):
    """Momentum SGD whose state is filled in by the first update."""

    def init(p):
        return MomentumState(count=0, velocity=None)

    def update(grads, state, p=None):
        velocity = grads
        if state.velocity is not None:
            velocity = jax.tree.map(lambda m, g: decay * m + g, state.velocity, grads)
        updates = jax.tree.map(lambda m: -learning_rate * m, velocity)
        return updates, MomentumState(count=state.count + 1, velocity=velocity)

    return optax.GradientTransformation(init, update)


# %%
def eager_init(p):
    """The same optimizer's state, every leaf created by init, in its final type."""
    zeros = jax.tree.map(jnp.zeros_like, p)
    return MomentumState(count=jnp.zeros([], jnp.int32), velocity=zeros)


LAZY = lazy_momentum(0.1, 0.9)  # built once
EAGER = optax.GradientTransformation(eager_init, LAZY.update)


@jax.jit
def step_lazy_state(p, opt_state, v, target):
    return sgd_update(LAZY, p, opt_state, v, target)


@jax.jit
def step_eager_state(p, opt_state, v, target):
    return sgd_update(EAGER, p, opt_state, v, target)


# %%
def run_momentum(step, tx):
    p, states = params, [tx.init(params)]
    for v, target in batches:
        p, state = step(p, states[-1], v, target)
        states.append(state)
    return p, states


def signature(tree):
    """Structure plus each leaf's type (shape, dtype, ~ for weak): what jit keys on."""
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, [str(jax.typeof(leaf)) for leaf in leaves]


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Four steps with a momentum whose <code>init</code> returns
# <code>MomentumState(count=0, velocity=None)</code>, then four with an <code>init</code>
# that builds zeros of the right shapes. How many traces each?</p></div>

# %%
with jitlab.count_compiles(step_lazy_state) as lazy_count:
    lazy_params, lazy_states = run_momentum(step_lazy_state, LAZY)
with jitlab.count_compiles(step_eager_state) as eager_count:
    eager_params, eager_states = run_momentum(step_eager_state, EAGER)

# %% tags=["answer"] jupyter={"source_hidden": true}
print("lazy:", lazy_count, "|", lazy_count.last_reason[:120], "\neager:", eager_count)
jitlab.record("optimizer state filled by first update", compiles=lazy_count.compiles)
jitlab.record("optimizer state built by init", compiles=eager_count.compiles)
assert lazy_count.traces == 2 and eager_count.traces == 1
assert jax.tree.structure(lazy_states[0]) != jax.tree.structure(lazy_states[1])
assert all(jax.typeof(s.count).weak_type for s in lazy_states)  # weak at every step
assert all(signature(s) == signature(eager_states[0]) for s in eager_states)
assert np.allclose(lazy_params["w"], eager_params["w"], rtol=1e-6)

# %% [markdown]
# The lazy state retraces once, at the second step (`None` became a dict of arrays, a
# new pytree structure: lesson 04), then stays put. The Python `0` happens not to cost a
# trace: `0 + 1` inside jit is still weakly typed (lesson 03), so the count is a weak
# `int32` at every step. The eager state never changes. `optax.adam` builds its whole
# state in `init`, with final dtypes; copy that habit:

# %%
adam_state = ADAM.init(params)
_, adam_after = ADAM.update(jax.tree.map(jnp.ones_like, params), adam_state, params)
print("optax.adam state before and after an update:", signature(adam_state)[1][:3])
assert signature(adam_state) == signature(adam_after)

# %% [markdown]
# The same rule applies to anything you thread through a jitted loop.
#
# ## Summary: the causes you know, in disguise
#
# | framework pattern | what lands in the cache key | cause | fix |
# | --- | --- | --- | --- |
# | Equinox: float or int field under `filter_jit` | its value, as a static argument | [03](../03_python_scalars/), [06](../06_static_arguments/) | `jnp.asarray(v, dtype)` field |
# | Equinox: `lambda` or `jax.jit(...)` built per instance, as a field | the function object | [07](../07_functions_as_arguments/) | define the function once, at top level |
# | Equinox: array in `eqx.field(static=True)` | an array that must be hashed and compared | [06](../06_static_arguments/) | an ordinary field |
# | NNX: `nnx.Optimizer(model, optax.adam(lr))` built every epoch | `tx` in the optimizer's GraphDef, by identity | [07](../07_functions_as_arguments/) | build the transformation once |
# | NNX: float attribute on a module | the value, in the GraphDef | [06](../06_static_arguments/), [03](../03_python_scalars/) | array attribute or `Variable` |
# | NNX: a `Variable`'s metadata changed | the structure, in the GraphDef | [04](../04_pytree_structure/) | change structure outside the loop |
# | Optax: transformation as a static argument, re-created | the closures, by identity | [06](../06_static_arguments/), [07](../07_functions_as_arguments/) | build it once |
# | Optax: step that closes over a fresh transformation | a new function object | [07](../07_functions_as_arguments/) | one step at top level |
# | Optax: global transformation reassigned | nothing: the old one stays baked in | [08](../08_closures_and_globals/) | never reassign; pass state |
# | Optax: learning rate in `optax.sgd(lr)` | a constant inside the closures | [08](../08_closures_and_globals/), [06](../06_static_arguments/) | `optax.inject_hyperparams` |
# | Optax: Python float assigned to a hyperparameter | a weak type | [03](../03_python_scalars/) | `jnp.asarray(lr, jnp.float32)` |
# | any: optimizer state filled in by the first update | the pytree structure and leaf types | [04](../04_pytree_structure/), [03](../03_python_scalars/) | `init` builds every leaf |
#
# Not a recompilation, but the same loop pays for it: `nnx.jit` walks the object graph on
# every call. Use `nnx.jit_partial` or the split/merge form when the step is small.
#
# The exercise gives you an NNX training loop that compiles on every run of a
# learning-rate sweep, for two of these reasons at once.

# %% tags=["remove-input"]
jitlab.outro()
