# ---
# jupyter:
#   jitlab:
#     fix: static_argnames, or jnp.where / lax.cond / lax.switch / lax.fori_loop / lax.scan
#     half_day:
#       minutes:
#         exercises: 15
#         teaching: 20
#       skip:
#       - Loops and indexes hit the same wall
#       - Shapes that depend on values
#       - Trade-offs, measured
#     instructor_notes:
#     - Start live with the chapter's claim and let the room predict two compilations;
#       the error is the surprise, and reading its message together is the first skill.
#     - Learners reach for static_argnames on values that come from data (an epoch,
#       a threshold, a tolerance). Ask how many distinct values it will see in one run.
#     - lax.cond and lax.switch branches must return the same shapes and dtypes; expect
#       the TypeError "cond branches must have equal output types" ("switch branches
#       ..." for lax.switch) during the exercise.
#     - The vmap and unrolling timings vary by machine. The vmap cell times the two
#       calls in alternation and compares the median per-pair ratio; the jaxpr (select_n
#       present, cond gone) is the claim, and the compile counts elsewhere.
#     - For a changed static value JAX 0.12 writes "cache miss explanation unavailable";
#       point learners at the count and at which arguments are static.
#     keypoints:
#     - A Python if, while, range() or list index on a traced value does not recompile
#       - tracing stops with TracerBoolConversionError or TracerIntegerConversionError,
#       and the message names the argument.
#     - An output shape that depends on values fails while tracing too - x[x > 0] raises
#       NonConcreteBooleanIndexError (an IndexError), jnp.arange(n) with a traced n
#       a ConcretizationTypeError. Keep the size fixed - a mask, or size= (fill_value=
#       is optional).
#     - static_argnames / static_argnums make the value part of the cache key - one
#       compilation per distinct value, right for a few modes, ruinous for values that
#       come from data.
#     - jnp.where, lax.cond, lax.switch, lax.fori_loop, lax.while_loop and lax.scan
#       keep the decision inside one program - one compilation for every value (of the
#       same type).
#     - lax.cond runs one branch, but under vmap with a batched predicate it becomes
#       select_n and runs both.
#     - A Python loop over a static count is unrolled - compile time grows with the
#       count; lax.fori_loop and lax.scan keep it flat.
#     minutes:
#       exercises: 15
#       teaching: 35
#     objectives:
#     - Recognise TracerBoolConversionError and TracerIntegerConversionError, and read
#       which argument they name.
#     - Recognise the errors of a shape that depends on values (NonConcreteBooleanIndexError,
#       ConcretizationTypeError from jnp.arange) and keep the size fixed instead.
#     - Choose between a static argument (one compilation per value) and a decision
#       kept inside the program (one compilation for every value).
#     - Rewrite a Python if, for or while on a traced value with jnp.where, lax.cond,
#       lax.switch, lax.fori_loop, lax.while_loop or lax.scan
#     - Weigh the costs - compilations per value, both branches under vmap, compile
#       time of unrolled loops.
#     prerequisites:
#       lessons:
#       - what_jit_caches
#       - python_scalars
#     questions:
#     - Does a Python `if` on an argument's value make jit compile one program per value?
#     - How do I branch or loop on a value inside a jitted function?
#     - What does each fix cost, in compilations, in compile time and in work at run
#       time?
#     title: Value-dependent Python control flow
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
# # 05 · Value-dependent Python control flow
#
# Inside a jitted function your arguments are *tracers*: they carry a shape and a dtype,
# not a value. So what happens when Python code asks for the value, in an `if`, a
# `while`, a `range()` or a list index? This lesson answers by experiment, then shows
# the two ways out (make the value static, or move the decision into the program) and
# measures what each one costs.

# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import functools

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from jax import lax

# %% [markdown]
# ## The claim: "a different value takes a different path, so it recompiles"
#
# The source chapter tells it like this: a jitted function that tests an argument with
# a Python `if` (its example: `size_param > 5`) is traced with the value 3, takes the
# `else` path and compiles it; called later with 7, it takes the other path and compiles
# a second program. Here is the same situation in a loss that adds an L1 penalty once
# training is past epoch 5.


# %%
@jax.jit
def penalised_loss(w, epoch):
    loss = jnp.mean((w - 1.0) ** 2)
    if epoch > 5:  # a Python `if` on the *value* of an argument
        loss = loss + 0.1 * jnp.sum(jnp.abs(w))
    return loss


w = jnp.linspace(-1.0, 1.0, 8)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>We call <code>penalised_loss(w, 3)</code>, then <code>penalised_loss(w, 7)</code>.
# How many compilations will <code>count_compiles</code> report, and what will the two
# calls return?</p></div>

# %%
with jitlab.count_compiles(penalised_loss) as n:
    tried = [jitlab.attempt(penalised_loss, w, epoch) for epoch in (3, 7)]

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n, *tried, sep="\n")
bool_error = jax.errors.TracerBoolConversionError
assert [type(t.error) for t in tried] == [bool_error] * 2  # a failed trace: not cached
assert n.compiles == 0 and n.lowerings == 0  # nothing ever reached the compiler
assert issubclass(bool_error, jax.errors.ConcretizationTypeError)

# %% [markdown]
# <div class="admonition warning"><p class="admonition-title">The source chapter is wrong here</p>
# <p>It says this function compiles once for <code>3</code> and again for <code>7</code>.
# With JAX 0.12 (as with 0.10.2) it never compiles at all: the first call stops while
# tracing, with
# <code>jax.errors.TracerBoolConversionError</code> (a subclass of
# <code>ConcretizationTypeError</code>), and so does every later call. A Python
# <code>if</code> on a traced value is not a cause of recompilation; it is an error.
# Recompilation enters only once you "fix" the error with a static argument, below.</p></div>
#
# Read the message with me. It is the best diagnostic you will get:

# %%
message = str(tried[0].error)
print(message)
assert "bool[]" in message  # what Python asked for: the truth value of a bool tracer
assert "argument epoch" in message  # and which argument's value it would have needed

# %% [markdown]
# Three things to take from it:
#
# - *"boolean conversion of traced array with shape bool[]"*: `epoch > 5` did not give
#   `True` or `False`. It gave another tracer, a 0-d boolean with no value yet, and
#   `if` asked it for `bool(...)`.
# - *"depends on the value of the argument epoch"*: JAX names the argument to look at.
# - the link at the end leads to the documented fixes, the same two this lesson teaches.
#
# Why no value? Because `jit` traces with abstract stand-ins, so that one program serves
# every value of the same shape and dtype. Here is what Python sees during tracing:

# %%
seen_while_tracing = []


@jax.jit
def peek(w, epoch):
    seen_while_tracing.extend([repr(epoch), repr(epoch > 5)])
    return w * epoch


peek(w, 3)
print(seen_while_tracing)
assert "Tracer" in seen_while_tracing[0] and "~int32[]" in seen_while_tracing[0]
assert "bool[]" in seen_while_tracing[1]  # a comparison of tracers is a tracer

# %% [markdown]
# The `~` marks a *weakly typed* value (a Python `int` became `int32`, lesson 03). There
# is no `3` anywhere: only "some int32 scalar".
#
# ## Loops and indexes hit the same wall
#
# `if` and `while` need a `bool`; `range(n)` and `my_list[i]` need a Python `int`, which
# they get through `__index__`.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Three more functions: a <code>for</code> loop over <code>range(window)</code>, a
# list of learning rates indexed by <code>phase</code>, and a <code>while</code> that
# halves until a value is small. Which error does each raise, and are they all
# <code>ConcretizationTypeError</code>s?</p></div>


# %%
@jax.jit
def window_sum(x, window):
    total = 0.0
    for i in range(window):
        total = total + x[i]
    return total


LEARNING_RATES = [1e-2, 1e-3, 1e-4]


@jax.jit
def rate_for_phase(phase):
    return jnp.float32(LEARNING_RATES[phase])


@jax.jit
def halvings(x):
    count = 0
    while x > 1.0:
        x = x / 2.0
        count += 1
    return count


# %%
x = jnp.arange(1.0, 9.0)
loops = [jitlab.attempt(window_sum, x, 3), jitlab.attempt(rate_for_phase, 1)]
loops.append(jitlab.attempt(halvings, 20.0))

# %% tags=["answer"] jupyter={"source_hidden": true}
print(*loops, sep="\n")
int_error = jax.errors.TracerIntegerConversionError
assert [type(t.error) for t in loops] == [int_error, int_error, bool_error], loops
# Careful when catching: the integer error is NOT a ConcretizationTypeError (JAX 0.12);
# both are TypeErrors.
assert not issubclass(int_error, jax.errors.ConcretizationTypeError)
assert issubclass(int_error, TypeError) and issubclass(bool_error, TypeError)

# %% [markdown]
# Loops over a *fixed* Python count are fine: `for i in range(3)` inside a jitted
# function just runs three times while tracing. Only a count or an index that comes
# from a traced argument fails.
#
# ## Shapes that depend on values
#
# A compiled program has fixed shapes: every array's shape is known when it is traced.
# Code whose *output shape* depends on the values hits the same wall, with two more
# errors. Keeping the positive entries, `x[x > 0]`, returns as many elements as there
# are positives; `jnp.arange(n)` returns `n` elements.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Under <code>jit</code>, what do <code>x[x > 0]</code> and
# <code>jnp.arange(n)</code> with a traced <code>n</code> raise? Are they
# <code>TypeError</code>s like the two above?</p></div>


# %%
@jax.jit
def positives(x):
    return x[x > 0]  # how many elements? it depends on the values


@jax.jit
def first_n(x, n):
    return x[jnp.arange(n)]  # a length that is a traced value


boolean_index, arange_n = (
    jitlab.attempt(positives, x - 4.0),
    jitlab.attempt(first_n, x, 3),
)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(boolean_index, arange_n, sep="\n")
assert type(boolean_index.error) is jax.errors.NonConcreteBooleanIndexError
# Boolean indexing raises an IndexError, not a TypeError: `except TypeError` misses it.
assert isinstance(boolean_index.error, IndexError)
assert not isinstance(boolean_index.error, TypeError)
# jnp.arange raises the base class itself, and names its argument.
assert type(arange_n.error) is jax.errors.ConcretizationTypeError
assert "jnp.arange argument 'stop'" in str(arange_n.error)

# %% [markdown]
# The fix is a **fixed size**: keep the full length and carry a mask (or a count)
# beside the values. `jnp.where` zeroes what you would have dropped, and
# `jnp.nonzero`, `jnp.argwhere` and `jnp.unique` take `size=` to return a fixed number
# of entries (`fill_value=` chooses the padding; it is optional). A comparison with the
# static `x.shape[0]` replaces `jnp.arange(n)`.


# %%
@jax.jit
def positives_fixed(x):
    keep = x > 0
    (index,) = jnp.nonzero(keep, size=x.shape[0])  # always x.shape[0] entries
    packed = jnp.where(jnp.arange(x.shape[0]) < keep.sum(), x[index], 0.0)
    return packed, keep.sum()  # the positives first, then zeros; and how many


@jax.jit
def first_n_fixed(x, n):
    return jnp.where(jnp.arange(x.shape[0]) < n, x, 0.0)  # a mask, not a length


# %%
samples = [x - 4.0, 4.0 - x, x - 0.5, -x]
with jitlab.count_compiles(positives_fixed) as n_positives:
    packed = [positives_fixed(v) for v in samples]
with jitlab.count_compiles(first_n_fixed) as n_first:
    masked = [first_n_fixed(x, k) for k in (1, 3, 8)]
print(n_positives, "|", n_first)
assert n_positives.compiles == 1 and n_first.compiles == 1  # every value, one program

# %%
for v, (values, count) in zip(samples, packed, strict=True):
    kept = np.asarray(v)[np.asarray(v) > 0]
    assert int(count) == kept.size
    np.testing.assert_allclose(values[: kept.size], kept)
    assert not np.asarray(values[kept.size :]).any()  # the padding is zeros
np.testing.assert_allclose(masked[1], [1.0, 2.0, 3.0, 0, 0, 0, 0, 0])

# %% [markdown]
# Making `n` static would also work, at one compilation per distinct `n`: the trade
# of the next section. [Lesson 01](../01_shapes/) measures the two side by side, with
# padding, masking and buckets for data whose length really does vary.
#
# For `if`, `while`, `range()` and indexes there are two ways out.
#
# ## Fix one: make the value static
#
# `static_argnames` (by name) or `static_argnums` (by position) tell `jit` to pass that
# argument through as a plain Python value. Tracing can then read it, so the `if` works,
# and the value becomes part of the cache key. Since jax 0.8.1 `jax.jit` accepts the
# options on their own and returns a decorator, so `@jax.jit(static_argnames=...)` works.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>With <code>epoch</code> static, we call with epochs 3, 3, 7, 7, 3, 9.
# How many compilations?</p></div>


# %%
@jax.jit(static_argnames="epoch")  # the decorator-factory form
def penalised_loss_static(w, epoch):
    loss = jnp.mean((w - 1.0) ** 2)
    if epoch > 5:  # epoch is a plain Python int here
        loss = loss + 0.1 * jnp.sum(jnp.abs(w))
    return loss


def penalised_loss_numpy(w, epoch):
    loss = np.mean((np.asarray(w, np.float64) - 1.0) ** 2)
    return loss + 0.1 * np.sum(np.abs(np.asarray(w))) if epoch > 5 else loss


# %%
epochs = [3, 3, 7, 7, 3, 9]
with jitlab.count_compiles(penalised_loss_static) as n_static:
    static_results = [float(penalised_loss_static(w, epoch=e)) for e in epochs]

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n_static, n_static.explanations[-1], sep="\n")
assert n_static.compiles == len(set(epochs)) == 3  # one per distinct value
# JAX 0.12 gives no reason for a changed static value (0.10.2 printed both values).
assert "cache miss explanation unavailable" in n_static.explanations[-1]
expected = [penalised_loss_numpy(w, e) for e in epochs]
np.testing.assert_allclose(static_results, expected, rtol=1e-6)

# %% [markdown]
# Now the chapter's "compiles for 3, then for 7" is true: the static value is stored in
# the cache key, so each distinct value gets one executable, reused on every repeat.
# Do not expect JAX's cache-miss text to say so: for a changed static value JAX 0.12
# writes only "cache miss explanation unavailable". The count, and knowing which
# argument is static, are the evidence.
#
# Static is the right tool when the value picks *which program* you want and takes only
# a few values: an activation's name, a training/evaluation flag, a layer count. A
# string cannot be traced at all, so it must be static. Here is the older spelling,
# `functools.partial(jax.jit, ...)`, which every jax version understands:


# %%
@functools.partial(jax.jit, static_argnames="kind")
def activate(x, kind):
    if kind == "relu":
        return jax.nn.relu(x)
    if kind == "tanh":
        return jnp.tanh(x)
    return jax.nn.gelu(x)


with jitlab.count_compiles(activate) as n_kinds:
    for kind in ["relu", "tanh", "gelu"] * 4:  # 12 calls, 3 distinct values
        activate(x - 4.0, kind=kind)
print(n_kinds)
assert n_kinds.compiles == 3  # and it stays 3 however long the run
np.testing.assert_allclose(activate(x - 4.0, kind="relu"), np.maximum(x - 4.0, 0))

# %%
as_array = jitlab.attempt(jax.jit(activate.__wrapped__), x, "relu")  # not static
print(as_array)
assert type(as_array.error) is TypeError  # a str is not a valid array argument

# %% [markdown]
# `epoch` is a different story: it takes a new value every epoch, so a static `epoch`
# costs one compilation per epoch, for the whole run. For values like that, keep the
# decision in the program.
#
# ## Fix two: keep the decision inside the program
#
# `jax.numpy` and `jax.lax` have control flow that *is* part of the traced program: the
# value is read when the compiled program runs, not when Python traces. One
# compilation then serves every value.
#
# ### `jnp.where`: compute both, select one
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The same epochs 3, 3, 7, 7, 3, 9, with <code>epoch</code> traced and the
# <code>if</code> replaced by <code>jnp.where</code>. How many compilations?</p></div>


# %%
@jax.jit
def penalised_loss_where(w, epoch):
    loss = jnp.mean((w - 1.0) ** 2)
    penalty = 0.1 * jnp.sum(jnp.abs(w))  # always computed
    return loss + jnp.where(epoch > 5, penalty, 0.0)  # then selected


with jitlab.count_compiles(penalised_loss_where) as n_where:
    where_results = [float(penalised_loss_where(w, e)) for e in epochs]

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n_where)
assert n_where.compiles == 1
np.testing.assert_allclose(where_results, static_results, rtol=1e-6)

# %% [markdown]
# `jnp.where` is also the fix for an *elementwise* `if` (`x if x > 0 else 0.1 * x` on
# an array). Both sides are evaluated; that is cheap when they are cheap.
#
# ### `lax.cond`: run one of two functions
#
# `lax.cond(pred, true_fun, false_fun, *operands)` runs only the chosen branch (when
# the predicate is not batched, more on that below). Both branches must return the same
# shapes and dtypes.


# %%
def with_penalty(w):
    return jnp.mean((w - 1.0) ** 2) + 0.1 * jnp.sum(jnp.abs(w))


def without_penalty(w):
    return jnp.mean((w - 1.0) ** 2)


@jax.jit
def penalised_loss_cond(w, epoch):
    return lax.cond(epoch > 5, with_penalty, without_penalty, w)


# %%
with jitlab.count_compiles(penalised_loss_cond) as n_cond:
    cond_results = [float(penalised_loss_cond(w, e)) for e in epochs]
print(n_cond)
assert n_cond.compiles == 1
np.testing.assert_allclose(cond_results, static_results, rtol=1e-6)

# %% [markdown]
# ### `lax.switch`: one of many, by index
#
# The activation choice again, this time as a traced integer: one program holds all
# three branches and picks one at run time.


# %%
@jax.jit
def activate_switch(x, kind_index):
    return lax.switch(kind_index, [jax.nn.relu, jnp.tanh, jax.nn.gelu], x)


with jitlab.count_compiles(activate_switch) as n_switch:
    switched = [activate_switch(x - 4.0, i) for i in (0, 1, 2, 0, 1, 2)]
print(n_switch)
assert n_switch.compiles == 1
for i, kind in enumerate(["relu", "tanh", "gelu"]):
    np.testing.assert_allclose(switched[i], activate(x - 4.0, kind=kind), rtol=1e-6)

# %% [markdown]
# An index out of range does not raise: `lax.switch` clamps it, to the last branch above
# the range and to the first below it.

# %%
np.testing.assert_allclose(activate_switch(x - 4.0, 7), switched[2], rtol=1e-6)
np.testing.assert_allclose(activate_switch(x - 4.0, -1), switched[0], rtol=1e-6)

# %% [markdown]
# The list of learning rates from earlier needs no `lax` at all: make it an array.
# Indexing a `jnp` array with a traced integer is an ordinary array operation (and an
# index past the end is clamped, not an error).


# %%
@jax.jit
def rate_for_phase_array(phase):
    return jnp.asarray(LEARNING_RATES, dtype=jnp.float32)[phase]


with jitlab.count_compiles(rate_for_phase_array) as n_rate:
    rates = [float(rate_for_phase_array(p)) for p in (0, 1, 2, 1)]
print(n_rate, rates)
assert n_rate.compiles == 1
np.testing.assert_allclose(rates, [1e-2, 1e-3, 1e-4, 1e-3], rtol=1e-6)
assert float(rate_for_phase_array(9)) == rates[2]  # clamped

# %% [markdown]
# ### `lax.fori_loop`: a loop whose count is a traced value
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>window_sum</code> rewritten with <code>lax.fori_loop</code>, called with
# windows 1 to 8. How many compilations?</p></div>


# %%
@jax.jit
def window_sum_fori(x, window):
    return lax.fori_loop(0, window, lambda i, total: total + x[i], 0.0)


with jitlab.count_compiles(window_sum_fori) as n_fori:
    sums = [float(window_sum_fori(x, k)) for k in range(1, 9)]

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n_fori, sums)
assert n_fori.compiles == 1
np.testing.assert_allclose(sums, np.cumsum(x), rtol=1e-6)


# %% [markdown]
# With a traced trip count, `fori_loop` becomes a `while` in the jaxpr. The price: a
# `while` loop has no fixed length, so reverse-mode differentiation cannot go through
# it. With Python-int bounds `fori_loop` becomes a `scan`, which it can.


# %%
def jaxpr_text(fn, *args):
    """The jaxpr of fn(*args) as plain text (no terminal colours), to assert on."""
    return jax.make_jaxpr(fn)(*args).pretty_print(use_color=False)


def first_three_sum(x):
    return lax.fori_loop(0, 3, lambda i, t: t + x[i], 0.0)  # Python-int bounds


# %%
assert "while[" in jaxpr_text(window_sum_fori, x, 3)
static_bounds = jaxpr_text(first_three_sum, x)
assert "scan[" in static_bounds and "while[" not in static_bounds
np.testing.assert_allclose(jax.grad(first_three_sum)(x), [1, 1, 1, 0, 0, 0, 0, 0])
no_grad = jitlab.attempt(jax.grad(window_sum_fori), x, 3)
print(no_grad)
assert type(no_grad.error) is ValueError  # no reverse mode through a traced count

# %% [markdown]
# ### `lax.while_loop`: stop when the data says so
#
# Newton's method for a square root stops when the answer is good enough, after a
# number of steps that depends on the value. `cond_fun` reads the carried state;
# `body_fun` takes one step.


# %%
@jax.jit
def newton_sqrt(a, tol):
    def not_done(state):
        y, steps = state
        return (jnp.abs(y * y - a) > tol * a) & (steps < 50)

    def step(state):
        y, steps = state
        return 0.5 * (y + a / y), steps + 1

    return lax.while_loop(not_done, step, (a, jnp.int32(0)))


# %%
problems = [(2.0, 1e-3), (2.0, 1e-6), (1e4, 1e-6), (0.01, 1e-4), (123.0, 1e-5)]
with jitlab.count_compiles(newton_sqrt) as n_while:
    answers = [newton_sqrt(a, tol) for a, tol in problems]
print(n_while, "steps:", [int(s) for _, s in answers])
assert n_while.compiles == 1
assert len({int(s) for _, s in answers}) > 1  # a data-dependent number of steps
for (a, tol), (root, _) in zip(problems, answers, strict=True):
    assert abs(float(root) ** 2 - a) <= 2 * tol * a, (a, tol, float(root))

# %% [markdown]
# ### `lax.scan`: a loop over data, carrying state
#
# A running total that resets whenever it passes a limit. The Python loop over the
# *elements* is fine under `jit` (the length is static); the `if total > limit` inside
# it is not. `scan` carries the total, and `jnp.where` makes the reset.


# %%
def resetting_total_python(xs, limit):
    total, out = 0.0, []
    for v in xs:
        total += v
        total = 0.0 if total > limit else total
        out.append(total)
    return np.array(out)


@jax.jit
def resetting_total(xs, limit):
    def step(total, v):
        total = jnp.where(total + v > limit, 0.0, total + v)
        return total, total  # (new carry, this step's output)

    return lax.scan(step, 0.0, xs)[1]


# %%
xs = jnp.asarray(np.random.default_rng(5).uniform(0.0, 1.0, size=32), jnp.float32)
limits = [1.0, 2.5, 4.0, 0.5]
with jitlab.count_compiles(resetting_total) as n_scan:
    totals = [resetting_total(xs, lim) for lim in limits]
print(n_scan)
assert n_scan.compiles == 1
for lim, got in zip(limits, totals, strict=True):
    np.testing.assert_allclose(got, resetting_total_python(xs, lim), atol=1e-5)

# %% [markdown]
# All six tools, side by side: each one compiled once, whatever the values.

# %%
tools = {"jnp.where": n_where, "lax.cond": n_cond, "lax.switch": n_switch}
tools |= {"lax.fori_loop": n_fori, "lax.while_loop": n_while, "lax.scan": n_scan}
rows = [
    {"tool": k, "function": n.name, "compiles": n.compiles} for k, n in tools.items()
]
jitlab.print_table(rows)
assert all(counted.compiles == 1 for counted in tools.values())

# %% [markdown]
# "Every value" has a fine print: every value *of the same type*. A Python `3` is a weak
# `int32`; `jnp.int32(3)` is a strong one; they are different cache keys (lesson 03).

# %%
with jitlab.count_compiles(penalised_loss_cond) as n_types:
    penalised_loss_cond(w, 4)  # weak int32: already compiled above
    penalised_loss_cond(w, jnp.int32(4))  # strong int32: a new key
print(n_types, n_types.explanations[-1], sep="\n")
assert n_types.compiles == 1 and "weak_type" in n_types.explanations[-1]

# %% [markdown]
# ## Trade-offs, measured
#
# ### Static per value against `lax.cond` once
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A 20-epoch run calls each version once per epoch (epochs 0 to 19). How many
# compilations for the static version, how many for <code>lax.cond</code>?</p></div>

# %%
penalised_loss_static.clear_cache()
penalised_loss_cond.clear_cache()
static_run = jitlab.measure(
    "static epoch, 20 epochs: one compilation per value",
    lambda: [penalised_loss_static(w, epoch=e) for e in range(20)],
    count=penalised_loss_static,
)
cond_run = jitlab.measure(
    "lax.cond epoch, 20 epochs: one compilation",
    lambda: [penalised_loss_cond(w, e) for e in range(20)],
    count=penalised_loss_cond,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
per_epoch = jitlab.compare(static_run, cond_run, bench="static epoch vs lax.cond")
assert static_run.compiles == 20 and cond_run.compiles == 1, per_epoch.rows()

# %% [markdown]
# What the static version buys for its compilations: each program holds *only* the
# branch its value chose. The `lax.cond` program holds both and chooses at run time.

# %%
static_at_3 = penalised_loss_static.trace(w, epoch=3).jaxpr.pretty_print(
    use_color=False
)
static_at_7 = penalised_loss_static.trace(w, epoch=7).jaxpr.pretty_print(
    use_color=False
)
cond_text = jaxpr_text(penalised_loss_cond, w, 3)
print(cond_text)
assert "abs" not in static_at_3 and "abs" in static_at_7  # one branch per program
assert "cond[" in cond_text and "abs" in cond_text  # both branches, one program

# %% [markdown]
# ### `lax.cond` under `vmap` runs both branches
#
# Batch the epochs with `vmap` and the predicate becomes a vector: some rows want the
# penalty, some do not. A single device program cannot take both paths at once, so
# `vmap` rewrites the `cond` into `select_n`: compute both branches for every row,
# then select.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Will the jaxpr of <code>vmap(penalised_loss_cond)</code> over a vector of epochs
# still contain a <code>cond</code>?</p></div>

# %%
batched = jax.vmap(penalised_loss_cond, in_axes=(None, 0))
vmapped_text = jaxpr_text(batched, w, jnp.arange(4, 8))

# %% tags=["answer"] jupyter={"source_hidden": true}
print(vmapped_text)
assert "select_n" in vmapped_text and "cond[" not in vmapped_text  # select, no branch
assert "abs" in vmapped_text and "reduce_sum" in vmapped_text  # the penalty, computed

# %% [markdown]
# Batch only the weights and keep one scalar epoch, and the predicate is unbatched: the
# `cond` stays.

# %%
unbatched_pred = jaxpr_text(
    jax.vmap(penalised_loss_cond, in_axes=(0, None)), w[None], 3
)
assert "cond[" in unbatched_pred and "select_n" not in unbatched_pred

# %% [markdown]
# The cost shows in time when one branch is expensive. Comparing two timings fairly on
# a busy machine needs some care: we time the two calls in alternation, so that any
# slowdown of the machine hits both alike, and compare the median of the per-pair
# ratios.


# %%
def cheap(v):
    return v + 1.0


# On a chip, 400 steps on 256 numbers are lost in the time a call takes to launch and
# return: on an accelerator the costly branch gets enough work to dominate the launch.
steps, width = (400, 256) if jax.default_backend() == "cpu" else (4000, 65536)


def costly(v):
    return lax.fori_loop(0, steps, lambda i, u: jnp.sin(u) * 0.99 + 0.01, v)


@jax.jit
def one_row(v, take_costly):
    return lax.cond(take_costly, costly, cheap, v)


many_rows = jax.jit(jax.vmap(one_row))


# %%
def alternating_ratio(first, second, pairs=15):
    """The median, over calls timed in alternation, of first's time over second's
    (each call warmed up first). `first` and `second` are (fn, *args) tuples."""
    for fn, *args in (first, second):
        jitlab.time_once(fn, *args)
    ratios = [
        jitlab.time_once(*first) / jitlab.time_once(*second) for _ in range(pairs)
    ]
    return float(np.median(ratios))


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Without <code>vmap</code>, the cheap branch is much faster than the costly one.
# With <code>vmap</code> over 32 rows, is "all rows cheap" faster than "all rows
# costly"?</p></div>

# %%
v, rows32 = jnp.ones(width), jnp.ones((32, width))
single = alternating_ratio((one_row, v, False), (one_row, v, True))
all_cheap, all_costly = jnp.zeros(32, bool), jnp.ones(32, bool)
batched_ratio = alternating_ratio(
    (many_rows, rows32, all_cheap), (many_rows, rows32, all_costly)
)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(f"time cheap / costly: one row {single:.2f}, vmap of 32 rows {batched_ratio:.2f}")
jitlab.record(
    "vmap of lax.cond: all rows costly vs all cheap", speedup=1 / batched_ratio
)
jitlab.record("lax.cond, one row: costly vs cheap", speedup=1 / single, steps=steps)
assert single < 1 / 3, single  # unbatched: only the chosen branch runs
assert 2 / 3 < batched_ratio < 3 / 2, batched_ratio  # batched: both, for every row

# %% [markdown]
# If the costly branch is rare and the batch is large, take the decision outside the
# batch (split the rows) or restructure; if both branches are cheap, the select is
# harmless.
#
# ### Unrolled Python loop against `lax.fori_loop`: compile time
#
# A Python `for` over a *static* count is legal: tracing simply repeats the body, so
# the program grows with the count. `lax.fori_loop` puts one copy of the body in a loop.


# %%
def walk_step(v):
    return jnp.sin(v) * 0.9 + 0.1 * jnp.cos(v)


@jax.jit(static_argnames="steps")
def unrolled_walk(v, steps):
    for _ in range(steps):  # traced `steps` times: the program grows
        v = walk_step(v)
    return v


@jax.jit(static_argnames="steps")
def fori_walk_static(v, steps):
    return lax.fori_loop(0, steps, lambda i, u: walk_step(u), v)  # one body, any count


@jax.jit
def fori_walk(v, steps):  # the count traced: one program for every count
    return lax.fori_loop(0, steps, lambda i, u: walk_step(u), v)


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>From 1 to 240 steps, how does compile time grow for the unrolled loop, and for
# <code>fori_loop</code> with the same static count?</p></div>

# %%
start, step_counts = jnp.linspace(0.0, 1.0, 16), [1, 40, 80, 160, 240]
for fn in (unrolled_walk, fori_walk_static, fori_walk):
    fn.clear_cache()  # so that a second run of this cell compiles again


def first_calls(fn, label):
    """One measured first call of fn per step count."""
    call = functools.partial(fn, start)
    return [
        jitlab.measure(f"{label}, {k} steps", lambda k=k: call(steps=k), count=fn)
        for k in step_counts
    ]


unrolled = first_calls(unrolled_walk, "unrolled Python loop")
fori = first_calls(fori_walk_static, "lax.fori_loop")
with jitlab.count_compiles(fori_walk) as n_fori_walk:
    traced = [fori_walk(start, k) for k in step_counts]

# %% tags=["answer"] jupyter={"source_hidden": true}
longest = jitlab.compare(unrolled[-1], fori[-1])
unrolled_ms = [1e3 * r.counts.total_seconds for r in unrolled]
fori_ms = [1e3 * r.counts.total_seconds for r in fori]
assert [r.compiles for r in unrolled + fori] == [1] * 10  # one per static count each
assert n_fori_walk.compiles == 1  # a traced count: one program for every count
for u, f, t in zip(unrolled, fori, traced, strict=True):
    np.testing.assert_allclose(u.result, f.result, atol=1e-5)
    np.testing.assert_allclose(u.result, t, atol=1e-5)
# Flat against growing: the unrolled loop at 240 steps against fori_loop's typical
# (median) level, which one noisy measurement cannot move much.
assert unrolled_ms[-1] > 3 * float(np.median(fori_ms)), (unrolled_ms, fori_ms)
assert unrolled_ms[-1] > 3 * unrolled_ms[0], unrolled_ms  # it grew

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(step_counts, unrolled_ms, "o-", label="unrolled Python for")
ax.plot(step_counts, fori_ms, "s-", label="lax.fori_loop")
ax.set(xlabel="loop steps (static count)", ylabel="trace + lower + compile (ms)")
ax.set_title("Compile time against loop length")
ax.set_ylim(bottom=0)
ax.legend()
plt.show()

# %% [markdown]
# The compile times are the claim: unrolling makes compile time grow with the count;
# the loop primitive keeps it flat. What unrolling buys at run time depends on the
# machine: sometimes XLA fuses across the unrolled steps and wins, often it does not.
# `lax.fori_loop` and `lax.scan` take an `unroll=` argument for the middle ground.
#
# ## Which fix?
#
# | the value | fix | compilations |
# | --- | --- | --- |
# | picks a program, few values (a mode, a name, a flag) | `static_argnames` | one per value |
# | comes from data or a schedule (epoch, limit) | `jnp.where`, `lax.cond`, `lax.switch` | one |
# | a loop count or stopping rule from data | `lax.fori_loop`, `lax.while_loop` | one |
# | a loop over data with state | `lax.scan` | one per input shape |

# %% tags=["remove-input"]
jitlab.outro()
