# ---
# jupyter:
#   jitlab:
#     fix: arrays with an explicit dtype, or static where the value selects a program
#     half_day:
#       minutes:
#         exercises: 0
#         teaching: 25
#       read_before: the Key points box at the end of the page, two minutes a lesson
#       skip:
#       - '`3` then `jnp.int32(3)`'
#       - How weak types promote
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
    three = scale(x, 3)
    four = scale(x, 4)
print(n)
print("s was traced as:", traced_as)
print("scale(x, 3) =", three, "  scale(x, 4) =", four)

assert n.traces == 1 and n.compiles == 1, n.explanations
assert len(traced_as) == 1
assert (
    traced_as[0].dtype == jnp.int32
    and traced_as[0].shape == ()
    and traced_as[0].weak_type
)
assert np.allclose(
    four, 4 * np.arange(3.0)
)  # the new value is used: it was not baked in

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
print("traced:", traced, sep="\n")
print("in_avals:", traced.in_avals)
print("static:", static, sep="\n")

assert traced.in_avals[1].weak_type and traced.in_avals[1].dtype == jnp.int32
assert len(traced.in_avals) == 2  # s is an input of the traced program
assert len(static.in_avals) == 1  # ...and not an input of the static one

# %% [markdown]
# A traced value is unknown while Python runs the function, so Python cannot decide an
# `if` on it. If Python scalars were static, this would work.


# %%
@jax.jit
def scale_if_big(x, s):
    if s > 2:  # Python needs a real bool here
        return x * s
    return x


try:
    scale_if_big(x, 3)
except jax.errors.TracerBoolConversionError as err:
    caught = err
else:
    raise AssertionError("expected TracerBoolConversionError")
print(type(caught).__name__, "|", str(caught).splitlines()[0])
assert isinstance(caught, jax.errors.ConcretizationTypeError)

# %% [markdown]
# One more sign that a Python `int` becomes an int32 array: a value that does not fit in
# int32 is refused at the call. A static argument would have no such limit.

# %%
try:
    scale(x, 2**31)
except OverflowError as err:
    caught = err
else:
    raise AssertionError("expected OverflowError")
print(type(caught).__name__, "|", str(caught).splitlines()[0])

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
rows = []
for label, value in scalars.items():
    aval = jax.typeof(value)
    rows.append(
        {"value": label, "python type": type(value).__name__, "traced as": str(aval)}
    )
jitlab.print_table(rows)

weak = {label for label, value in scalars.items() if jax.typeof(value).weak_type}
assert weak == {"3", "3.0", "jnp.asarray(3.0)", "jnp.exp(-0.5)"}, weak
assert (
    str(jax.typeof(True)) == "bool[]"
)  # bool has no weak form, but is traced all the same:
with jitlab.count_compiles(scale) as n:
    scale(x, True)
    scale(x, False)
assert n.compiles == 1, n.explanations
assert (
    jax.typeof(np.float64(3)).dtype == jnp.float32
)  # x64 is off: float64 becomes float32
assert jax.typeof(np.int64(3)).dtype == jnp.int32  # ...and int64 becomes int32

# %% [markdown]
# Two surprises worth remembering. NumPy scalars are *strong*, like NumPy arrays: they
# carry a dtype on purpose. And a `jnp` value computed only from Python scalars
# (`jnp.asarray(3.0)`, `jnp.exp(-0.5)`) stays weak; only an explicit dtype makes it strong.
# With x64 off (the default), `np.float64` and `np.int64` are canonicalised to 32 bits.

# %% [markdown]
# ## `3` then `3.0`
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The same function, called with <code>3</code>, then <code>3.0</code>, then
# <code>5.0</code>. How many compilations?</p></div>

# %%
scale.clear_cache()  # start this experiment from an empty cache
with jitlab.count_compiles(scale) as n:
    scale(x, 3)
    scale(x, 3.0)
    scale(x, 5.0)
print(n)
print(n.explanations[-1])

assert n.compiles == 2, n.explanations
miss = n.explanations[-1]
assert "now f32[] and before i32[]" in miss, miss

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
    scale(x, 3)
    scale(x, jnp.int32(3))
print(n)
print(n.explanations[-1])

assert n.compiles == 2, n.explanations
miss = n.explanations[-1]
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
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Two epochs of four steps each, same shapes throughout. How many compilations of
# <code>train_step</code>?</p></div>


# %%
def squared_error(w, batch):
    inputs, targets = batch
    return jnp.mean((inputs @ w - targets) ** 2)


@jax.jit
def train_step(w, batch, lr):
    return w - lr * jax.grad(squared_error)(w, batch)


data_rng = np.random.default_rng(0)
true_w = data_rng.normal(size=4).astype(np.float32)
batches = []
for _ in range(4):
    inputs = data_rng.normal(size=(32, 4)).astype(np.float32)
    batches.append((jnp.asarray(inputs), jnp.asarray(inputs @ true_w)))

DECAY = jnp.float32(0.5)  # "a float32 constant, to be safe"
w = jnp.zeros(4, jnp.float32)
lr = 0.1  # from the config file: a Python float
with jitlab.count_compiles(train_step) as n:
    for epoch in range(2):
        for batch in batches:
            w = train_step(w, batch, lr)
        print(f"epoch {epoch}: lr is {type(lr).__name__} {jax.typeof(lr)}")
        lr = lr * DECAY  # now a strong float32 array
print(n)
print(n.explanations[-1])

assert n.compiles == 2, n.explanations
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
# only half of the rule. JAX decides the result of `a * b` on a *promotion lattice*, a
# graph of types in which the result is the lowest type above both operands. A Python
# scalar enters the lattice as a weak kind, `int*` or `float*`, placed just below the
# narrowest dtype of its kind; and every integer dtype sits below `float*`. So:
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
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The abstract values of <code>x * 2.0</code> for a float32 <code>x</code>, of
# <code>h * 2.0</code> and <code>h * jnp.float32(2)</code> for a bfloat16 <code>h</code>,
# of <code>i * 2.0</code> for an int32 <code>i</code>, and of <code>b + 1</code> for a
# bool <code>b</code>?</p></div>

# %%
x32 = jnp.ones(3, jnp.float32)
h = jnp.ones(3, jnp.bfloat16)
u8 = jnp.ones(3, jnp.uint8)
i = jnp.ones(3, jnp.int32)
b = jnp.ones(3, jnp.bool_)
# expression -> (its value, the abstract value the rule above predicts)
products = {
    "float32 * 2": (x32 * 2, "float32[3]"),
    "float32 * 2.0": (x32 * 2.0, "float32[3]"),
    "bfloat16 * 2.0": (h * 2.0, "bfloat16[3]"),
    "uint8 + 2": (u8 + 2, "uint8[3]"),
    "bfloat16 * jnp.float32(2)": (h * jnp.float32(2), "float32[3]"),
    "int32 * 2.0": (i * 2.0, "~float32[3]"),
    "uint8 * 2.0": (u8 * 2.0, "~float32[3]"),
    "bool + 1": (b + 1, "~int32[3]"),
    "int32 * np.float32(2)": (i * np.float32(2), "float32[3]"),
}
jitlab.print_table(
    [
        {"expression": k, "result": str(jax.typeof(v)), "the rule predicts": want}
        for k, (v, want) in products.items()
    ]
)
for k, (v, want) in products.items():
    assert str(jax.typeof(v)) == want, (k, jax.typeof(v))
# "takes the dtype of the other operand" would say int32 here; the lattice says ~float32
assert products["int32 * 2.0"][0].dtype != i.dtype

# %% [markdown]
# The int32 row is worth remembering: an integer array times a Python float is a float32
# array that is itself *weak* (`~float32[3]`), because its float-ness came from a weak
# operand. Fed to a jitted function, it is a different key from a strong float32 array
# of the same shape: weak types are not only about scalars.


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
# With x64 on, a Python float is `~float64[]`. Being weak, it still adopts float32 from a
# float32 array, while with an int32 array it now lands on a weak float64 (the default
# float width has changed). A strong float64 scalar (a NumPy `float64` counts) widens the
# array to float64. We switch x64 on for this cell only, with the `jax.enable_x64`
# context manager.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>With x64 on and <code>x</code> float32: the dtypes of <code>x * 2.0</code>,
# <code>x * jnp.ones((), jnp.float64)</code> and <code>x * np.float64(2.0)</code>? And of
# <code>i * 2.0</code> for an int32 <code>i</code>?</p></div>

# %%
with jax.enable_x64(True):
    x32 = jnp.ones(3, jnp.float32)
    wide = {
        "typeof(2.0)": jax.typeof(2.0),
        "float32 * 2.0": jax.typeof(x32 * 2.0),
        "float32 * jnp.ones((), float64)": jax.typeof(x32 * jnp.ones((), jnp.float64)),
        "float32 * np.float64(2.0)": jax.typeof(x32 * np.float64(2.0)),
        "int32 * 2.0": jax.typeof(jnp.ones(3, jnp.int32) * 2.0),
    }
jitlab.print_table(
    [{"with x64 on": k, "abstract value": str(v)} for k, v in wide.items()]
)

assert wide["typeof(2.0)"].dtype == jnp.float64 and wide["typeof(2.0)"].weak_type
assert wide["float32 * 2.0"].dtype == jnp.float32
assert wide["float32 * jnp.ones((), float64)"].dtype == jnp.float64
assert wide["float32 * np.float64(2.0)"].dtype == jnp.float64
assert str(wide["int32 * 2.0"]) == "~float64[3]"  # float* at the x64 default width
assert not jax.config.jax_enable_x64  # the context manager restored the default

# %% [markdown]
# ### Why that costs a compilation too
#
# In a loop, a widened result is fed back in. With x64 on, a `np.float64` learning rate
# turns float32 weights into float64 weights after the first step, and the second step
# sees a new input dtype.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Three steps with <code>lr = np.float64(0.1)</code>, then three with
# <code>lr = 0.1</code>, each from float32 weights. Compilations, and the final dtype of
# <code>w</code>?</p></div>

# %%
with jax.enable_x64(True):
    runs = {}
    for label, lr in [("np.float64(0.1)", np.float64(0.1)), ("0.1", 0.1)]:
        train_step.clear_cache()
        w = jnp.zeros(4, jnp.float32)
        with jitlab.count_compiles(train_step) as n:
            for step in range(3):
                w = train_step(w, batches[step], lr)
        runs[label] = (n, w.dtype)
        print(f"lr = {label:16s} {n.compiles} compilation(s), w ends as {w.dtype}")
    print(runs["np.float64(0.1)"][0].explanations[-1])

assert (
    runs["np.float64(0.1)"][0].compiles == 2
    and runs["np.float64(0.1)"][1] == jnp.float64
)
assert runs["0.1"][0].compiles == 1 and runs["0.1"][1] == jnp.float32
assert not jax.config.jax_enable_x64

# %% [markdown]
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
    return {"w": w, "avg_loss": 0.0, "steps": 0}  # Python scalars: both weak


@jax.jit
def fit_step(state, batch):
    loss, grad = jax.value_and_grad(squared_error)(state["w"], batch)
    return {
        "w": state["w"] - 0.1 * grad,
        "avg_loss": 0.9 * state["avg_loss"] + 0.1 * loss,  # loss is a strong float32
        "steps": state["steps"] + 1,  # a weak int plus a Python int stays weak
    }


def fit(init, n_steps=8):
    state = init(jnp.zeros(4, jnp.float32))
    for step in range(n_steps):
        state = fit_step(state, batches[step % len(batches)])
    return jax.block_until_ready(state)


fit_step.clear_cache()
with jitlab.count_compiles(fit_step) as weak_init, jitlab.stopwatch() as weak_sw:
    weak_final = fit(init_state)
print(weak_init)
print(weak_init.last_reason)
assert weak_init.compiles == 2, weak_init.explanations

# %% [markdown]
# Two compilations for one loop with fixed shapes. JAX's explanation points at
# `state['avg_loss']`, but an explanation is JAX's guess at the closest earlier key.
# The check that needs no guess compares the abstract values of the state before and
# after one step, entry by entry: `jax.tree.map(jax.typeof, state)`.

# %%
state = init_state(jnp.zeros(4, jnp.float32))
before = jax.tree.map(jax.typeof, state)
after = jax.tree.map(jax.typeof, fit_step(state, batches[0]))
jitlab.print_table(
    [
        {
            "entry": key,
            "init returns": str(before[key]),
            "one step returns": str(after[key]),
        }
        for key in before
    ]
)
changed = [key for key in before if before[key] != after[key]]
print("changes its type:", changed)

assert jax.tree.structure(before) == jax.tree.structure(after)  # same keys
assert changed == ["avg_loss"]
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
assert jax.tree.map(jax.typeof, state) == jax.tree.map(
    jax.typeof, fit_step(state, batches[0])
)

fit_step.clear_cache()
with jitlab.count_compiles(fit_step) as typed_init, jitlab.stopwatch() as typed_sw:
    typed_final = fit(init_state_typed)
jitlab.print_table(
    [
        {
            "init": label,
            "compiles": count.compiles,
            "compile_ms": 1e3 * count.total_seconds,
            "loop_total_ms": 1e3 * sw.seconds,
        }
        for label, count, sw in [
            ('"avg_loss": 0.0', weak_init, weak_sw),
            ('"avg_loss": jnp.zeros((), float32)', typed_init, typed_sw),
        ]
    ]
)
assert typed_init.compiles == 1, typed_init.explanations
for key in ("w", "avg_loss", "steps"):  # the same numbers either way
    np.testing.assert_allclose(weak_final[key], typed_final[key], rtol=1e-6)
jitlab.record(
    "state: init writes a weak 0.0",
    compiles=weak_init.compiles,
    total_s=weak_sw.seconds,
)
jitlab.record(
    "state: init writes the step's types",
    compiles=typed_init.compiles,
    total_s=typed_sw.seconds,
    speedup=weak_sw.seconds / typed_sw.seconds,
)

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
# stored as `jnp.float32`. Three ways to feed it to the same step:
#
# 1. **as it comes**: pass whatever the schedule returns;
# 2. **static**: `float(lr)` as a static argument, which many people reach for first;
# 3. **explicit dtype**: `jnp.asarray(lr, jnp.float32)` at the boundary.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How many compilations does each way cost over the 30 steps?</p></div>

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


lrs = [schedule(step) for step in range(STEPS)]
phases = {
    "frozen": 0,
    "warm-up": FROZEN,
    "cosine decay": FROZEN + WARMUP,
    "floor": DECAY_END,
}
jitlab.print_table(
    [
        {
            "phase": phase,
            "from step": start,
            "lr": f"{float(lrs[start]):.3f}",
            "python type": type(lrs[start]).__name__,
            "traced as": str(jax.typeof(lrs[start])),
        }
        for phase, start in phases.items()
    ]
)

# %% [markdown]
# The step is the same function in every variant; only how `lr` reaches it differs.
# `train_step_static` is the same computation with `lr` marked static (the decorator
# factory form `@jax.jit(static_argnames=...)` works in this JAX version).


# %%
@jax.jit(static_argnames="lr")
def train_step_static(w, batch, lr):
    return w - lr * jax.grad(squared_error)(w, batch)


variants = {
    "as it comes": (train_step, lambda lr: lr),
    "static float(lr)": (train_step_static, float),
    "jnp.asarray(lr, float32)": (train_step, lambda lr: jnp.asarray(lr, jnp.float32)),
}


def run(step_fn, convert):
    w = jnp.zeros(4, jnp.float32)
    for step in range(STEPS):
        w = step_fn(w, batches[step % len(batches)], lr=convert(schedule(step)))
    return w


results = {}
for label, (step_fn, convert) in variants.items():
    step_fn.clear_cache()  # every variant starts cold, as a fresh process would
    with jitlab.count_compiles(step_fn) as n, jitlab.stopwatch() as sw:
        w_final = jax.block_until_ready(run(step_fn, convert))
    results[label] = {"counts": n, "seconds": sw.seconds, "w": w_final}

table = [
    {
        "variant": label,
        "compiles": r["counts"].compiles,
        "compile_ms": 1e3 * r["counts"].total_seconds,
        "loop_total_ms": 1e3 * r["seconds"],
    }
    for label, r in results.items()
]
jitlab.print_table(table)

# %%
as_is, static_lr, fixed = (results[k] for k in variants)
distinct_values = len({float(lr) for lr in lrs})
print("distinct learning-rate values:", distinct_values)

assert as_is["counts"].compiles == 3, as_is["counts"].explanations  # ~i32, ~f32, f32
# one program per value: 14 distinct values among the 30 (the instructor notes quote it)
assert static_lr["counts"].compiles == distinct_values == 14
assert fixed["counts"].compiles == 1, fixed["counts"].explanations
# same numbers whichever way lr travelled
assert np.allclose(as_is["w"], fixed["w"], rtol=1e-5, atol=1e-6)
assert np.allclose(static_lr["w"], fixed["w"], rtol=1e-5, atol=1e-6)
# "faster", claimed only where the margin is wide: 14 compilations against one
assert static_lr["seconds"] > 3 * fixed["seconds"], (
    static_lr["seconds"],
    fixed["seconds"],
)
for label, r in [("as it comes", as_is), ("static", static_lr)]:
    print(f"{label} / explicit dtype: {r['seconds'] / fixed['seconds']:.1f}x the time")

for label, r in results.items():
    jitlab.record(
        f"lr schedule, {label}",
        compiles=r["counts"].compiles,
        total_s=r["seconds"],
        speedup=r["seconds"] / fixed["seconds"],
    )

# %% [markdown]
# The schedule's three scalar kinds (`~int32[]`, `~float32[]` and `float32[]`: NumPy
# float64 and `jnp.float32` share the last) cost three compilations. Static costs one per
# distinct value, and a real schedule has as many values as steps. The explicit dtype
# costs one, whatever the schedule returns, and computes the same weights.

# %%
labels = list(results)
seconds = [results[k]["seconds"] for k in labels]
fig, ax = plt.subplots(figsize=(7, 2.6))
bars = ax.barh(labels, seconds, color=["tab:orange", "tab:red", "tab:green"])
for bar, label in zip(bars, labels, strict=True):
    ax.text(
        bar.get_width(),
        bar.get_y() + bar.get_height() / 2,
        f"  {results[label]['counts'].compiles} compilation(s)",
        va="center",
    )
ax.invert_yaxis()
ax.set_xlabel(f"seconds for {STEPS} training steps, from a cold cache")
ax.set_xlim(0, 1.5 * max(seconds))
ax.set_title("Passing the learning rate three ways")
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
print(n)
assert n.compiles == 2, n.explanations  # one program per flag value, for all 30 steps

# %% [markdown]
# And a static argument must be hashable: a `jnp` array cannot be static, so the
# schedule's `jnp.float32` floor would not even run through `train_step_static` without
# the `float(...)` conversion used above.

# %%
try:
    train_step_static(w, batches[0], lr=FLOOR)
except ValueError as err:
    caught = err
else:
    raise AssertionError("expected ValueError")
print(type(caught).__name__, "|", str(caught).splitlines()[0])
assert "Non-hashable static arguments" in str(caught)

# %%
jitlab.outro()
