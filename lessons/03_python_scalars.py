# ---
# jupyter:
#   jitlab:
#     fix: arrays with an explicit dtype, or static where the value selects a program
#     half_day:
#       minutes:
#         exercises: 20
#         teaching: 20
#       skip:
#       - '`3` then `jnp.int32(3)`'
#       - How weak types promote
#       - State that changes its type after one step
#       - When static is the right call
#     instructor_notes:
#     - Learners arrive believing Python scalars are static (the source chapter says
#       so). Start with the 3-then-4 experiment and ask for a prediction before running
#       it.
#     - '`jax.typeof(v)` is the fastest live demo: type a few values, read the `~`.'
#     - Learners often expect `jnp.asarray(0.1)` to be strong; it is weak. Only an explicit
#       dtype (or a NumPy scalar) makes it strong.
#     - The static-lr variant is the slowest cell (14 compilations, one per distinct
#       learning-rate value of the 30-step schedule; the lesson asserts both numbers);
#       it is the point, do not shorten it away.
#     - The init/step mismatch is the one learners meet in their own code. Have them
#       print `jax.tree.map(jax.typeof, state)` before and after one step of their own
#       loop.
#     keypoints:
#     - A Python int, float or bool passed to a jitted function is traced, not static;
#       its value can change without a retrace.
#     - An int or a float is traced as a weakly typed 0-d array (`~int32[]`, `~float32[]`),
#       a bool as a plain `bool[]`; dtype and weak flag are both part of the cache key.
#     - int then float, or Python scalar then NumPy/jnp scalar, is a new cache key and
#       a new compilation.
#     - 'Promotion joins the two types in JAX''s lattice, where a Python scalar is a
#       weak kind (`int*`, `float*`) just below the narrowest dtype of its kind: with
#       an array of the same kind it takes the array''s dtype (`float32 * 2.0` is float32),
#       with an integer or bool array it gives a weak float or int at the default width
#       (`int32 * 2.0` is `~float32`). A strong float64 scalar widens a float32 array
#       (with x64 on).'
#     - State carried from step to step must keep its types. An `init` that returns
#       Python scalars or `jnp.asarray(0.0)` (weak) where the step returns strong float32
#       makes step 2 compile again; compare `jax.tree.map(jax.typeof, state)` before
#       and after one step.
#     - Convert scalar hyperparameters once, at the boundary, with an explicit dtype
#       (`jnp.asarray(lr, jnp.float32)`); make a value static only when it selects a
#       different program.
#     minutes:
#       exercises: 20
#       teaching: 35
#     objectives:
#     - Read a traced abstract value and tell a weak type (`~float32[]`) from a strong
#       one.
#     - Predict which changes in the type of a scalar argument cost a compilation.
#     - Explain how weak types promote, and why a strong float64 scalar widens a float32
#       array.
#     - Check that an `init` function returns the state types that a step returns, with
#       `jax.tree.map(jax.typeof, state)` before and after one step.
#     - Pass scalar hyperparameters as arrays with an explicit dtype, and keep static
#       arguments for values that select a different program.
#     prerequisites:
#       lessons:
#       - what_jit_caches
#       - dtypes
#     questions:
#     - Is a Python number passed to a jitted function static?
#     - Why do `3` and `3.0`, or `3` and `jnp.int32(3)`, compile two programs?
#     - Why can a learning-rate schedule cost a compilation per phase, or per step?
#     title: Python scalars and weak types
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
# # 03 · Python scalars and weak types
#
# A learning rate, a temperature, a step count: scalar arguments are everywhere, and they
# arrive as Python `int`s and `float`s, NumPy scalars or 0-d `jnp` arrays, often mixed in
# the same loop. This lesson shows what `jax.jit` does with each kind, why some changes
# cost a new compilation, and how to pass scalars so that none do.

# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

# %% [markdown]
# ## Are Python scalars static?
#
# If a Python number were *static*, jit would build one program per value, as it does for
# `static_argnames`. Below, `scale` is called with `3` and then with `4`. It also records
# the abstract value it sees while being traced (the body runs in Python only while
# tracing).
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How many traces and compilations do <code>scale(x, 3)</code> and then
# <code>scale(x, 4)</code> cost?</p></div>

# %%
traced_as = []  # filled only while JAX traces `scale`


@jax.jit
def scale(x, s):
    traced_as.append(jax.typeof(s))  # the abstract value standing in for `s`
    return x * s


x = jnp.arange(3.0)
with jitlab.count_compiles(scale) as n:
    three, four = scale(x, 3), scale(x, 4)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n, f"s was traced as: {traced_as}", f"scale(x, 4) = {four}", sep="\n")
assert n.traces == 1 and n.compiles == 1, n.explanations
assert [str(aval) for aval in traced_as] == ["~int32[]"]  # one trace, a weak int32
assert np.allclose(four, 4 * np.arange(3.0))  # the new value is used, not baked in

# %% [markdown]
# One trace, one compilation, and the second call still computes with `4`. The value is
# not part of the program: `s` is an input, seen during tracing as `~int32[]`, a 0-d
# int32 array whose `~` marks it as *weakly typed*.
#
# <div class="admonition warning"><p class="admonition-title">The source chapter is wrong
# here</p><p>It says a Python scalar argument is "treated as static". In current JAX
# (checked here with the version printed at the top) a Python <code>int</code>,
# <code>float</code> or <code>bool</code> is <em>traced</em>: an int or a float becomes a
# weakly typed 0-d array (a bool a plain <code>bool[]</code>), its value may change freely
# without a retrace, and Python code cannot branch on it. What does cost a retrace is a
# change of its <em>type</em>, as the next sections show.</p></div>
#
# The jaxpr says the same thing in its own words. Traced, the `3` is an input variable
# `b:i32[]` (and `in_avals` shows its weak flag); marked static, it is a constant folded
# into the program.


# %%
def times(x, s):
    return x * s


traced = jax.make_jaxpr(times)(x, 3)
static = jax.make_jaxpr(times, static_argnums=1)(x, 3)
print("traced:", traced, "in_avals:", traced.in_avals, "static:", static, sep="\n")
assert [str(aval) for aval in traced.in_avals] == ["float32[3]", "~int32[]"]
assert len(static.in_avals) == 1  # s is not an input of the static program

# %% [markdown]
# A traced value is unknown while Python runs the function, so Python cannot decide an
# `if` on it. If Python scalars were static, this would work.


# %%
@jax.jit
def scale_if_big(x, s):
    if s > 2:  # Python needs a real bool here
        return x * s
    return x


tried = jitlab.attempt(scale_if_big, x, 3)
print(tried)
assert type(tried.error) is jax.errors.TracerBoolConversionError, tried
assert isinstance(tried.error, jax.errors.ConcretizationTypeError)

# %% [markdown]
# One more sign that a Python `int` becomes an int32 array: a value that does not fit in
# int32 is refused at the call. A static argument would have no such limit.

# %%
too_big = jitlab.attempt(scale, x, 2**31)
print(too_big)
assert type(too_big.error) is OverflowError, too_big

# %% [markdown]
# ## Which scalars are weak?
#
# `jax.typeof(v)` shows the abstract value jit would trace `v` as; that abstract value
# (dtype, shape, weak flag) is what goes into the cache key. A leading `~` means weak.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Which of these are weak: <code>3</code>, <code>3.0</code>, <code>True</code>,
# <code>np.float64(3)</code>, <code>jnp.int32(3)</code>, <code>jnp.asarray(3.0)</code>,
# <code>jnp.asarray(3.0, jnp.float32)</code>, <code>jnp.exp(-0.5)</code>?</p></div>

# %%
scalars = {
    "3": 3,
    "3.0": 3.0,
    "True": True,
    "np.float64(3)": np.float64(3),
    "np.int64(3)": np.int64(3),
    "jnp.int32(3)": jnp.int32(3),
    "jnp.asarray(3.0)": jnp.asarray(3.0),
    "jnp.asarray(3.0, jnp.float32)": jnp.asarray(3.0, jnp.float32),
    "jnp.exp(-0.5)": jnp.exp(-0.5),
}

# %% tags=["answer"] jupyter={"source_hidden": true}
traced_types = {label: str(jax.typeof(value)) for label, value in scalars.items()}
jitlab.print_table([{"value": k, "traced as": t} for k, t in traced_types.items()])
weak = {label for label, value in scalars.items() if jax.typeof(value).weak_type}
assert weak == {"3", "3.0", "jnp.asarray(3.0)", "jnp.exp(-0.5)"}, weak
assert traced_types["True"] == "bool[]"  # bool has no weak form
assert traced_types["np.float64(3)"] == "float32[]"  # x64 off: float64 becomes float32
assert traced_types["np.int64(3)"] == "int32[]"  # ...and int64 becomes int32

# %% [markdown]
# Two surprises worth remembering. NumPy scalars are *strong*, like NumPy arrays: they
# carry a dtype on purpose. And a `jnp` value computed only from Python scalars
# (`jnp.asarray(3.0)`, `jnp.exp(-0.5)`) stays weak; only an explicit dtype makes it strong.
# With x64 off (the default), `np.float64` and `np.int64` are canonicalised to 32 bits.
# A bool has no weak form, but it is traced all the same: `True` then `False` share one
# program.

# %%
with jitlab.count_compiles(scale) as n:
    scale(x, True), scale(x, False)
print(n)
assert n.compiles == 1, n.explanations

# %% [markdown]
# ## `3` then `3.0`
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The same function, called with <code>3</code>, then <code>3.0</code>, then
# <code>5.0</code>. How many compilations?</p></div>

# %%
scale.clear_cache()  # start this experiment from an empty cache
with jitlab.count_compiles(scale) as n:
    scale(x, 3), scale(x, 3.0), scale(x, 5.0)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n, n.explanations[-1], sep="\n")
assert n.compiles == 2, n.explanations
assert "now f32[] and before i32[]" in n.explanations[-1], n.explanations

# %% [markdown]
# Two: `~int32[]` and `~float32[]` are different keys, while `3.0` and `5.0` share one.
# JAX's explanation names the dtypes; both sides are weak here, so it does not mention the
# weak flag.
#
# ## `3` then `jnp.int32(3)`
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Same dtype, same value, one Python and one JAX. How many compilations?</p></div>

# %%
scale.clear_cache()
with jitlab.count_compiles(scale) as n:
    scale(x, 3), scale(x, jnp.int32(3))

# %% tags=["answer"] jupyter={"source_hidden": true}
miss = n.explanations[-1]
print(n, miss, sep="\n")
assert n.compiles == 2, n.explanations
assert "i32[]{weak_type=False}" in miss and "i32[]{weak_type=True}" in miss, miss

# %% [markdown]
# Two again: both are int32, but one is weak and one is strong, and the explanation says
# exactly that (`weak_type=False` now, `weak_type=True` before).
#
# ## The same thing in a training loop
#
# A typical way to meet this: the learning rate starts as a Python float from a config
# file; after the first epoch it is decayed by a factor someone stored as a `float32`
# constant. Python does not complain, and the loss goes down as expected.


# %%
def squared_error(w, batch):
    inputs, targets = batch
    return jnp.mean((inputs @ w - targets) ** 2)


@jax.jit
def train_step(w, batch, lr):
    return w - lr * jax.grad(squared_error)(w, batch)


data_rng = np.random.default_rng(0)
true_w = data_rng.normal(size=4).astype(np.float32)
inputs = [data_rng.normal(size=(32, 4)).astype(np.float32) for _ in range(4)]
batches = [(jnp.asarray(a), jnp.asarray(a @ true_w)) for a in inputs]

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Two epochs of four steps each, same shapes throughout. How many compilations of
# <code>train_step</code>?</p></div>

# %%
DECAY = jnp.float32(0.5)  # "a float32 constant, to be safe"
w, lr, lr_types = jnp.zeros(4, jnp.float32), 0.1, []  # lr from the config file
with jitlab.count_compiles(train_step) as n:
    for _ in range(2):  # two epochs
        for batch in batches:
            w = train_step(w, batch, lr)
        lr_types.append(str(jax.typeof(lr)))
        lr = lr * DECAY

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n, f"lr per epoch: {lr_types}", n.explanations[-1], sep="\n")
assert n.compiles == 2, n.explanations
assert lr_types == ["~float32[]", "float32[]"]
assert (
    "weak_type=False" in n.explanations[-1] and "weak_type=True" in n.explanations[-1]
)

# %% [markdown]
# The second epoch compiled `train_step` again, because `lr` changed from `~float32[]` to
# `float32[]`. One extra compilation is cheap; the next sections show where it is not.
#
# ## How weak types promote
#
# Weak types exist so that a Python literal does not change the dtype of your arrays. It
# is tempting to say "a weak scalar takes the dtype of the other operand", but that is
# only half of the rule.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The abstract values of <code>x * 2.0</code> for a float32 <code>x</code>, of
# <code>h * 2.0</code> and <code>h * jnp.float32(2)</code> for a bfloat16 <code>h</code>,
# of <code>i * 2.0</code> for an int32 <code>i</code>, and of <code>b + 1</code> for a
# bool <code>b</code>?</p></div>

# %%
x32, h = jnp.ones(3, jnp.float32), jnp.ones(3, jnp.bfloat16)
u8, i, b = jnp.ones(3, jnp.uint8), jnp.ones(3, jnp.int32), jnp.ones(3, jnp.bool_)
products = {
    "float32 * 2": x32 * 2,
    "float32 * 2.0": x32 * 2.0,
    "bfloat16 * 2.0": h * 2.0,
    "uint8 + 2": u8 + 2,
    "bfloat16 * jnp.float32(2)": h * jnp.float32(2),
    "int32 * 2.0": i * 2.0,
    "uint8 * 2.0": u8 * 2.0,
    "bool + 1": b + 1,
    "int32 * np.float32(2)": i * np.float32(2),
}

# %% tags=["answer"] jupyter={"source_hidden": true}
promoted = {expression: str(jax.typeof(v)) for expression, v in products.items()}
jitlab.print_table([{"expression": k, "result": t} for k, t in promoted.items()])
assert list(promoted.values()) == [
    "float32[3]", "float32[3]", "bfloat16[3]", "uint8[3]", "float32[3]",
    "~float32[3]", "~float32[3]", "~int32[3]", "float32[3]",
]  # fmt: skip
# "takes the dtype of the other operand" would say int32 here; the lattice says ~float32

# %% [markdown]
# JAX decides the result of `a * b` on a *promotion lattice*, a graph of types in which
# the result is the lowest type above both operands. A Python
# scalar enters the lattice as a weak kind, `int*` or `float*`, placed just below the
# narrowest dtype of its kind; and every integer dtype of 8 bits or more sits below
# `float*`. (The 2- and 4-bit integers, `int4`, `uint4`, `int2` and `uint2`, promote
# with no other dtype and no Python float; a Python int, weak, takes their type. The
# cell below shows `int4 * 2.0` refused and `int4 * 2` kept as int4.) So:
#
# - a weak scalar of the array's kind, or of a lower kind (an int with a float array),
#   leaves the array's dtype alone: `float32 * 2.0` is float32, `bfloat16 * 2.0`
#   bfloat16, `uint8 + 2` uint8;
# - a weak *float* with an integer or bool array lands on `float*` itself: the result is
#   a float at the default width (float32, or float64 with x64 on), and it is still
#   weak. The int32 array does not pass on its dtype. A weak int with a bool array gives
#   a weak int the same way;
# - a strong scalar (a NumPy scalar, or `jnp` with a dtype) takes part with its own
#   dtype: `bfloat16 * jnp.float32(2)` is float32.
#
# The int32 row is worth remembering: an integer array times a Python float is a float32
# array that is itself *weak* (`~float32[3]`), because its float-ness came from a weak
# operand. Fed to a jitted function, it is a different key from a strong float32 array
# of the same shape: weak types are not only about scalars.

# %%
narrow = jitlab.attempt(lambda: jnp.ones(3, "int4") * 2.0)
by_int = jnp.ones(3, "int4") * 2
print(narrow, by_int.dtype)
assert type(narrow.error) is jax.dtypes.TypePromotionError, narrow
assert by_int.dtype == jnp.int4  # the weak int joins the 4-bit type


# %%
@jax.jit
def total(v):
    return v.sum()


with jitlab.count_compiles(total) as n:
    total(jnp.ones(3, jnp.int32) * 2.0)  # ~float32[3]
    total(jnp.ones(3, jnp.float32))  # float32[3]
print(n)
assert n.compiles == 2 and "weak_type=True" in n.explanations[-1], n.explanations

# %% [markdown]
# ### With 64-bit types switched on
#
# With x64 on, the default float width changes. We switch x64 on for this cell only,
# with the `jax.enable_x64` context manager.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>With x64 on and <code>x</code> float32: the dtypes of <code>x * 2.0</code>,
# <code>x * jnp.ones((), jnp.float64)</code> and <code>x * np.float64(2.0)</code>? And of
# <code>i * 2.0</code> for an int32 <code>i</code>?</p></div>

# %%
with jax.enable_x64(True):
    wide = {
        "typeof(2.0)": jax.typeof(2.0),
        "float32 * 2.0": jax.typeof(x32 * 2.0),
        "float32 * jnp.ones((), float64)": jax.typeof(x32 * jnp.ones((), jnp.float64)),
        "float32 * np.float64(2.0)": jax.typeof(x32 * np.float64(2.0)),
        "int32 * 2.0": jax.typeof(i * 2.0),
    }

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.print_table(
    [{"with x64 on": k, "abstract value": str(v)} for k, v in wide.items()]
)
assert [str(aval) for aval in wide.values()] == [
    "~float64[]", "float32[3]", "float64[3]", "float64[3]", "~float64[3]"
]  # fmt: skip
assert not jax.config.jax_enable_x64  # the context manager restored the default

# %% [markdown]
# A Python float is now `~float64[]`. Being weak, it still adopts float32 from a float32
# array, while with an int32 array it lands on a weak float64 (the default float width
# has changed). A strong float64 scalar (a NumPy `float64` counts) widens the array to
# float64.
#
# ### Why that costs a compilation too
#
# In a loop, a widened result is fed back in as the next step's input.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Three steps with <code>lr = np.float64(0.1)</code>, then three with
# <code>lr = 0.1</code>, each from float32 weights. Compilations, and the final dtype of
# <code>w</code>?</p></div>

# %%
widened = {}
with jax.enable_x64(True):
    for label, lr in [("np.float64(0.1)", np.float64(0.1)), ("0.1", 0.1)]:
        train_step.clear_cache()
        w = jnp.zeros(4, jnp.float32)
        with jitlab.count_compiles(train_step) as n:
            for step in range(3):
                w = train_step(w, batches[step], lr)
        widened[label] = (n, w.dtype)

# %% tags=["answer"] jupyter={"source_hidden": true}
for label, (n, dtype) in widened.items():
    print(f"lr = {label:16s} {n.compiles} compilation(s), w ends as {dtype}")
assert [(n.compiles, dtype) for n, dtype in widened.values()] == [
    (2, jnp.float64),
    (1, jnp.float32),
], widened
assert not jax.config.jax_enable_x64

# %% [markdown]
# With x64 on, the `np.float64` learning rate turned float32 weights into float64
# weights after the first step, and the second step saw a new input dtype.
#
# ## State that changes its type after one step
#
# The weights above are *state*: what one step returns, the next step takes. Real loops
# carry more than weights (optimizer moments, a step counter, a running loss), and an
# `init` function writes the first state by hand. Whatever `init` writes is the
# signature of step 1; whatever the step returns is the signature of every step after.
# When the two differ, step 2 compiles again.
#
# Below, `init_state` starts a running average of the loss at `0.0` and a step counter
# at `0`, the way one writes them without thinking of types.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Eight steps of <code>fit_step</code> from <code>init_state</code>. How many
# compilations? Which entry of the state changes its type, if any: the weights, the
# average, the counter?</p></div>


# %%
def init_state(w):
    return {"w": w, "avg_loss": 0.0, "steps": 0}  # Python scalars


@jax.jit
def fit_step(state, batch):
    loss, grad = jax.value_and_grad(squared_error)(state["w"], batch)
    return {
        "w": state["w"] - 0.1 * grad,
        "avg_loss": 0.9 * state["avg_loss"] + 0.1 * loss,
        "steps": state["steps"] + 1,
    }


def fit(init, n_steps=8):
    state = init(jnp.zeros(4, jnp.float32))
    for step in range(n_steps):
        state = fit_step(state, batches[step % len(batches)])
    return state


# %%
fit_step.clear_cache()
weak_init = jitlab.measure(
    "state: init writes a weak 0.0", lambda: fit(init_state), count=fit_step
)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(weak_init.counts, weak_init.counts.last_reason, sep="\n")
assert weak_init.compiles == 2, weak_init.counts.explanations

# %% [markdown]
# Two compilations for one loop with fixed shapes. JAX's explanation points at
# `state['avg_loss']`, but an explanation is JAX's guess at the closest earlier key.
# The check that needs no guess compares the abstract values of the state before and
# after one step, entry by entry: `jax.tree.map(jax.typeof, state)`.

# %%
state = init_state(jnp.zeros(4, jnp.float32))
before = jax.tree.map(jax.typeof, state)
after = jax.tree.map(jax.typeof, fit_step(state, batches[0]))
for key in before:
    print(f"{key:>8}: init returns {before[key]}, one step returns {after[key]}")
changed = [key for key in before if before[key] != after[key]]
assert jax.tree.structure(before) == jax.tree.structure(after)  # same keys
assert changed == ["avg_loss"], changed
assert str(before["avg_loss"]) == "~float32[]" and str(after["avg_loss"]) == "float32[]"
assert before["steps"].weak_type and after["steps"].weak_type  # weak, but it stays weak

# %% [markdown]
# Only the average changes: `0.9 * ~float32[] + 0.1 * float32[]` is a strong float32,
# so from step 2 on the state carries `float32[]` where step 1 had `~float32[]`. The
# counter is weak too, but it *stays* weak (a weak int plus a Python int), so its key
# never changes: the problem is not weakness, it is a type that changes between the
# first state and the rest. `jnp.asarray(0.0)` would not help, since it is weak as well.
#
# The fix is in `init`: write each entry with the type the step returns.


# %%
def init_state_typed(w):
    return {"w": w, "avg_loss": jnp.zeros((), jnp.float32), "steps": 0}


state = init_state_typed(jnp.zeros(4, jnp.float32))
same = jax.tree.map(jax.typeof, fit_step(state, batches[0]))
assert jax.tree.map(jax.typeof, state) == same

# %%
fit_step.clear_cache()
typed_init = jitlab.measure(
    "state: init writes the step's types", lambda: fit(init_state_typed), count=fit_step
)
jitlab.compare(weak_init, typed_init)
assert typed_init.compiles == 1, typed_init.counts.explanations
for key in ("w", "avg_loss", "steps"):  # the same numbers either way
    np.testing.assert_allclose(weak_init.result[key], typed_init.result[key], rtol=1e-6)

# %% [markdown]
# One extra compilation of the whole step is the price here, paid at step 2: the first
# call that receives a state the step itself returned. Lesson 04 meets the same problem
# in the state's *structure*.

# %% [markdown]
# ## The fix, measured
#
# Now a realistic schedule over 30 steps, the kind a config system or a scheduler library
# hands you: `0` (a Python `int`) while the weights are frozen, Python floats during
# warm-up, a cosine decay computed with `np.cos` (NumPy `float64` scalars), and a floor
# stored as `jnp.float32`.

# %%
STEPS, FROZEN, WARMUP, DECAY_END = 30, 2, 4, 16
FLOOR = jnp.float32(0.005)


def schedule(step):
    """A learning rate whose Python type changes with the phase of training."""
    if step < FROZEN:
        return 0  # Python int
    if step < FROZEN + WARMUP:
        return 0.1 * (step - FROZEN + 1) / WARMUP  # Python float
    if step < DECAY_END:
        progress = (step - FROZEN - WARMUP) / (DECAY_END - FROZEN - WARMUP)
        return 0.05 * (1 + np.cos(np.pi * progress))  # NumPy float64
    return FLOOR  # jnp float32


# %%
lrs = [schedule(step) for step in range(STEPS)]
phases = {"frozen": 0, "warm-up": FROZEN, "cosine": FROZEN + WARMUP, "floor": DECAY_END}
for phase, start in phases.items():
    lr = lrs[start]
    print(f"{phase:>7} from step {start:2}: {type(lr).__name__:8} {jax.typeof(lr)}")

# %% [markdown]
# Three ways to feed it to the same step:
#
# 1. **as it comes**: pass whatever the schedule returns;
# 2. **static**: `float(lr)` as a static argument, which many people reach for first;
# 3. **explicit dtype**: `jnp.asarray(lr, jnp.float32)` at the boundary.
#
# `train_step_static` is the same computation with `lr` marked static (the decorator
# factory form `@jax.jit(static_argnames=...)` works in this JAX version). Every variant
# starts from an empty cache, as a fresh process would.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How many compilations does each way cost over the 30 steps?</p></div>


# %%
@jax.jit(static_argnames="lr")
def train_step_static(w, batch, lr):
    return w - lr * jax.grad(squared_error)(w, batch)


def run(label, step_fn, convert):
    """30 steps from a cold cache, ``lr`` passed through ``convert``."""
    step_fn.clear_cache()

    def loop():
        w = jnp.zeros(4, jnp.float32)
        for step in range(STEPS):
            w = step_fn(w, batches[step % len(batches)], lr=convert(schedule(step)))
        return w

    return jitlab.measure(f"lr schedule, {label}", loop, count=step_fn)


# %%
as_is = run("as it comes", train_step, lambda lr: lr)
static_lr = run("static float(lr)", train_step_static, float)
explicit = run(
    "jnp.asarray(lr, float32)", train_step, lambda lr: jnp.asarray(lr, jnp.float32)
)

# %% tags=["answer"] jupyter={"source_hidden": true}
vs_static = jitlab.compare(static_lr, explicit)
vs_as_is = jitlab.compare(as_is, explicit)
assert as_is.compiles == 3, as_is.counts.explanations  # ~i32, ~f32, f32
assert static_lr.compiles == len({float(lr) for lr in lrs}) == 14  # one per value
assert explicit.compiles == 1, explicit.counts.explanations
for other in (as_is, static_lr):  # the same weights whichever way lr travelled
    np.testing.assert_allclose(other.result, explicit.result, rtol=1e-5, atol=1e-6)
assert vs_static.speedup > 3, vs_static.rows()  # 14 compilations against one

# %% [markdown]
# The schedule's three scalar kinds (`~int32[]`, `~float32[]` and `float32[]`: NumPy
# float64 and `jnp.float32` share the last) cost three compilations. Static costs one per
# distinct value, and a real schedule has as many values as steps. The explicit dtype
# costs one, whatever the schedule returns, and computes the same weights.
#
# Only the static ratio is asserted, with a wide margin. Three compilations against one
# shows in the time too, but a 3-to-1 difference in a short loop is what a loaded machine
# can blur. Where each run's time went says why the ratios follow the compile counts:
# the 30 steps themselves are cheap, and nearly all of every run is compiling.

# %%
runs = [as_is, static_lr, explicit]
for r in runs:
    compiling = f"{r.counts.total_seconds:.2f} s compiling"
    print(f"{r.label:38} {r.compiles:2} compiles, {compiling} of {r.seconds:.2f} s")
assert all(r.counts.total_seconds > 0.75 * r.seconds for r in runs), "compiling"

# %%
fig, ax = plt.subplots(figsize=(7, 2.6))
ax.barh([r.label for r in runs], [r.seconds for r in runs], color=["C1", "C3", "C2"])
ax.bar_label(ax.containers[0], [f"  {r.compiles} compilation(s)" for r in runs])
ax.invert_yaxis()
ax.set_xlim(0, 1.6 * max(r.seconds for r in runs))
ax.set(
    xlabel=f"seconds for {STEPS} steps, cold cache",
    title="The learning rate, three ways",
)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## When static is the right call
#
# Static arguments are for values that select a *different program*: a flag that adds or
# removes an operation, a layer count, a mode. Those take few values, so the number of
# compilations is bounded however long the loop runs. Here gradient clipping is switched
# by a static `clip` flag while `lr` stays a float32 array.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>30 steps, <code>clip</code> alternating between <code>True</code> and
# <code>False</code>, <code>lr</code> from the schedule as float32 arrays: how many
# compilations?</p></div>


# %%
@jax.jit(static_argnames="clip")
def train_step_clip(w, batch, lr, clip):
    grad = jax.grad(squared_error)(w, batch)
    if clip:  # fine: `clip` is a Python bool at trace time
        grad = grad / jnp.maximum(1.0, jnp.linalg.norm(grad))
    return w - lr * grad


w = jnp.zeros(4, jnp.float32)
with jitlab.count_compiles(train_step_clip) as n:
    for step in range(STEPS):
        lr = jnp.asarray(schedule(step), jnp.float32)
        w = train_step_clip(w, batches[step % len(batches)], lr, clip=step % 2 == 0)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n)
assert n.compiles == 2, n.explanations  # one program per flag value, for all 30 steps

# %% [markdown]
# And a static argument must be hashable: a `jnp` array cannot be static, so the
# schedule's `jnp.float32` floor would not even run through `train_step_static` without
# the `float(...)` conversion used above.

# %%
unhashable = jitlab.attempt(train_step_static, w, batches[0], lr=FLOOR)
print(unhashable)
assert type(unhashable.error) is ValueError, unhashable
assert "Non-hashable static arguments" in str(unhashable.error)

# %% tags=["remove-input"]
jitlab.outro()
