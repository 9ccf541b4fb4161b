# ---
# jupyter:
#   jitlab:
#     fix: define functions once, reuse one partial, pass data instead of functions
#     instructor_notes:
#     - 'The one question to drill: is this the same object as last time? Ask it aloud
#       before every Predict cell.'
#     - Learners expect two identical lambdas to share a compilation because they "are
#       the same function". Run the equality cell before the static-argument demo.
#     - The bound-method section surprises people twice, first with one compilation
#       per instance, then with the stale attribute. Demo the stale value live; it is
#       the bug that ships.
#     - The "same line" hint depends on what ran before in the kernel - re-running a
#       cell moves it. The lesson asserts it only where a second function is certain
#       to meet a call site that already traced one.
#     - jax.jit(jax.grad(loss)) inside a training loop is a common real-world form of
#       this bug, and the exercise is built on it. Point at it in the first section.
#     - Timings vary by laptop; the compile counts do not. Ask the room to compare counts,
#       not milliseconds.
#     keypoints:
#     - jit's cache is keyed on the function object, not its source code. A lambda,
#       a nested def, a fresh functools.partial or jax.grad(f) built in a loop is a
#       new object each time, so it retraces each time.
#     - Re-wrapping the same top-level function with jax.jit is harmless; building a
#       new function to wrap is what costs.
#     - A callable passed as a static argument costs one compilation per distinct object;
#       the same lambda written twice is two objects.
#     - jax.jit(self.method) in __init__ compiles once per instance and bakes in the
#       attributes it reads; changing them later silently returns old results.
#     - jit's caches hold the function weakly - jax.jit(self.method)(x) on every call
#       compiles every time because the temporary bound method, and its cache entries,
#       die after the call (equal bound methods kept alive share one entry).
#     - jax.jit(jax.grad(f)) is one program; jax.grad(jax.jit(f)) compiles a forward
#       and a backward program and runs grad's machinery in Python on every call.
#     - '"seen another function defined on the same line" names the call site - any
#       never-seen function traced from a line that traced one before gets it.'
#     - Define functions once at top level, build partials once and reuse them, and
#       pass data (an index for lax.switch, an array of coefficients) rather than functions.
#     minutes:
#       exercises: 15
#       teaching: 40
#     objectives:
#     - Predict whether a loop that builds jitted functions retraces, by asking "is
#       this the same function object as last time?"
#     - Read JAX's cache-miss explanation for a function re-defined on every iteration.
#     - Keep jitted methods cheap and correct by passing the object's state as arguments.
#     - Replace "pass a different function" with "pass different data" (an index with
#       lax.switch, coefficients as an array, a jax.tree_util.Partial).
#     prerequisites:
#       lessons:
#       - what_jit_caches
#       - static_arguments
#     questions:
#     - Why does jax.jit(lambda ...) inside a loop compile on every iteration?
#     - When is a functools.partial a stable function, and when is it a new one?
#     - What does jit cost when a class jits its own methods, and what happens to attributes
#       read from self?
#     - How do I choose between functions (activations, losses) without one compilation
#       each?
#     title: Functions as arguments
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
# # 07 · Functions as arguments
#
# `jax.jit` remembers compiled programs per *function object*. Every time your code
# makes a new function (a `lambda`, a `def` inside another function, a fresh
# `functools.partial`, the result of `jax.grad`), the cache has never seen it and JAX
# traces and compiles again, even if the new function does exactly what the old one did.
# This lesson measures where new function objects sneak in, and how to keep them stable.

# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import functools
import gc

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# %% [markdown]
# ## The cache is keyed on the function object
#
# Start with a plain function defined once, at top level. Some code calls
# `jax.jit(scale)` again on every iteration, for instance inside a helper that is
# called often.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The loop below wraps the same <code>scale</code> in a brand-new <code>jax.jit</code>
# five times and calls it. How many compilations?</p></div>

# %%
x = jnp.arange(8, dtype=jnp.float32)


def scale(v):
    return 2.0 * v


with jitlab.count_compiles(scale) as rewrap:
    for _ in range(5):
        jax.jit(scale)(x)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(rewrap)
assert rewrap.compiles == 1, rewrap.explanations

# %% [markdown]
# One. The wrapper objects are different each time, but the cache behind them is keyed
# on the function they wrap (and on jit's options), and `scale` is the same object on
# every iteration.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Now the loop wraps a <code>lambda</code> that does the same arithmetic.
# How many compilations?</p></div>

# %%
with jitlab.count_compiles("<lambda>") as lambdas:
    for _ in range(5):
        jax.jit(lambda v: 2.0 * v)(x)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(lambdas, lambdas.explanations[-1], sep="\n")
assert lambdas.traces == 5 and lambdas.compiles == 5, lambdas.explanations
assert "never seen function" in lambdas.explanations[-1]

# %% [markdown]
# Five. Evaluating a `lambda` expression creates a new function object, so every
# iteration brings a function the cache has never seen. JAX's explanation says so
# ("never seen function"), and from the second lambda on it adds a guess: *"seen
# another function defined on the same line; maybe the function is being re-defined
# repeatedly"*. The guess is right here, but "the same line" means something other than
# it seems; we come back to it with bound methods below.
#
# **How the counter matched these.** `count_compiles` keeps the events whose function
# name matches: every lambda is reported as `<lambda>`, and a `functools.partial` is
# reported under the name of the function it wraps. Here that is exactly what we want:
# five different objects born from one line of source, counted together. (It also
# means you should not leave other lambdas compiling inside the same block.)
#
# Two lambdas with the same source are still two objects, and Python does not consider
# them equal:

# %%
first, second = (lambda v: 2.0 * v), (lambda v: 2.0 * v)
print("equal?", first == second, "| same object?", first is second)
assert first != second

# %% [markdown]
# ### `functools.partial`: a new one each time, or the same one kept
#
# Binding a parameter with `functools.partial` is the usual way to turn
# `affine(v, a, b)` into a one-argument function.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Loop A builds <code>partial(affine, a=2.0, b=1.0)</code> afresh on each of five
# iterations. Loop B builds it once before the loop. How many compilations each?</p></div>


# %%
def affine(v, a, b):
    return a * v + b


def jit_each(fn, times=5):
    """Call `jax.jit(fn())` on x `times` times: `fn` makes (or returns) the function."""
    return lambda: [jax.jit(fn())(x) for _ in range(times)]


one_partial = functools.partial(affine, a=2.0, b=1.0)
fresh_partials = jitlab.measure(
    "fresh partial per iteration",
    jit_each(lambda: functools.partial(affine, a=2.0, b=1.0)),
    count=affine,
)
kept_partial = jitlab.measure(
    "one partial, reused", jit_each(lambda: one_partial), count=affine
)

# %% tags=["answer"] jupyter={"source_hidden": true}
partials = jitlab.compare(fresh_partials, kept_partial)
assert fresh_partials.compiles == 5 and kept_partial.compiles == 1, partials.rows()
assert functools.partial(affine, a=2.0) != functools.partial(affine, a=2.0)

# %% [markdown]
# <div class="admonition warning"><p class="admonition-title">Where the source chapter
# is too kind to partial</p><p>The chapter recommends <code>functools.partial</code> as a
# way to get stable function objects. That holds only if you build the partial once and
# keep it: two partials with identical arguments are not equal (the last assertion
# above), so a partial built inside a loop, or inside a function called often, is a new
# cache key every time.</p></div>
#
# ### A function defined inside another function
#
# A `def` runs every time the enclosing function runs, and each run makes a new
# function object. The same goes for `jax.grad(loss)`, `jax.vmap(f)` and friends: each
# call returns a new function.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>shifted(v)</code> defines <code>add_one</code> inside itself and jits it.
# Calling <code>shifted</code> four times costs how many compilations? And what about
# <code>jax.jit(jax.grad(loss))</code> built four times in a loop, against once before
# it?</p></div>


# %%
def shifted(v):
    def add_one(u):
        return u + 1.0

    return jax.jit(add_one)(v)


def loss(w, v):
    return jnp.sum((w * v - 1.0) ** 2)


# %%
with jitlab.count_compiles("add_one") as nested:
    for _ in range(4):
        shifted(x)
grad_loss = jax.jit(jax.grad(loss))  # built once, outside the loop
grad_in_loop = jitlab.measure(
    "jax.jit(jax.grad(loss)) in the loop",
    lambda: [jax.jit(jax.grad(loss))(0.5, x) for _ in range(4)],
    count=loss,
)
grad_hoisted = jitlab.measure(
    "jax.jit(jax.grad(loss)) hoisted",
    lambda: [grad_loss(0.5, x) for _ in range(4)],
    count=loss,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
print("def inside the called function:", nested)
hoisting = jitlab.compare(grad_in_loop, grad_hoisted)
assert nested.compiles == 4, nested.explanations
assert grad_in_loop.compiles == 4 and grad_hoisted.compiles == 1, hoisting.rows()

# %% [markdown]
# The rule is the same in all four cases: **jit asks "have I seen this function object
# before?"**, never "have I seen this code before?".
#
# ### Transform order: `jax.jit(jax.grad(f))` or `jax.grad(jax.jit(f))`
#
# The two spellings compute the same gradient and compile different things.
# `jax.jit(jax.grad(f))` traces the whole gradient computation into **one** program.
# `jax.grad(jax.jit(f))` differentiates *through* a jitted `f`: on each call `grad`
# runs its machinery in Python and calls two compiled programs, one for the forward
# pass (which also saves what the backward pass needs) and one for the backward pass.
# Both are named `jit(loss_order)`, so the counter below sees both.


# %%
def loss_order(w, v):
    return jnp.sum(jnp.tanh(w * v) ** 2)


jit_of_grad = jax.jit(jax.grad(loss_order))
grad_of_jit = jax.grad(jax.jit(loss_order))
ws = (0.5, 0.7, 0.9)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Three calls of each version with new values of <code>w</code>: how many programs
# does each compile? What does a rebuilt <code>jax.grad(jax.jit(f))</code> cost, and
# which version is faster per call once warm?</p></div>

# %%
with jitlab.count_compiles(loss_order) as n_jit_of_grad:
    outer_jit = [jit_of_grad(w, x) for w in ws]
with jitlab.count_compiles(loss_order) as n_grad_of_jit:
    inner_jit = [grad_of_jit(w, x) for w in ws]
with jitlab.count_compiles(loss_order) as n_grad_rebuilt:
    rebuilt = [jax.grad(jax.jit(loss_order))(w, x) for w in ws]  # new wrappers
warm_pairs = [
    (jitlab.time_once(jit_of_grad, 0.5, x), jitlab.time_once(grad_of_jit, 0.5, x))
    for _ in range(15)
]  # timed in alternation, so a busy machine slows both alike

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n_jit_of_grad, n_grad_of_jit, n_grad_rebuilt, sep="\n")
per_pair = float(np.median([slow / fast for fast, slow in warm_pairs]))
print(f"warm call: jax.grad(jax.jit(f)) takes {per_pair:.0f}x jax.jit(jax.grad(f))")
assert n_jit_of_grad.compiles == 1  # the whole gradient, one program
assert n_grad_of_jit.compiles == 2  # a forward program and a backward program
assert n_grad_of_jit.traces == 0  # traced under grad, not at top level: not counted
assert n_grad_rebuilt.compiles == 0  # the cache belongs to the jitted loss_order
# grad's Python runs every call, and two programs run instead of one (wide margins). On
# an accelerator every timed call also launches its programs on the chip and waits for
# them (hundreds of microseconds: lesson 00's cached call), which both versions pay, so
# the ratio is smaller there than on a CPU.
assert per_pair > (5 if jax.default_backend() == "cpu" else 1.5), warm_pairs
np.testing.assert_allclose(np.r_[outer_jit], np.r_[inner_jit], rtol=1e-5)
np.testing.assert_allclose(np.r_[outer_jit], np.r_[rebuilt], rtol=1e-5)
jitlab.record(
    "jax.grad(jax.jit(f)) vs jax.jit(jax.grad(f)), warm call", speedup=per_pair
)

# %% [markdown]
# `jax.jit(jax.grad(f))` compiles once and then runs at cached speed. `jax.grad(jax.jit(f))`
# compiles two programs, and every call pays for `grad` working in Python around them.
# Its one advantage: the cache belongs to the jitted `f`, so rebuilding `jax.grad(...)`
# around it compiles nothing, where rebuilding `jax.jit(jax.grad(loss))` compiled every
# time (the section above). For a training step, jit the outermost function.
#
# `count_compiles` shows one more limit here: it counts a trace only when JAX traces at
# the top level. Under `grad` the jitted `f` is traced inside grad's own trace, so the
# two compilations come with "0 traces".
#
# ## Passing a callable to a jitted higher-order function
#
# A model that takes its activation as a parameter is natural Python. A function,
# though, is not an array: `jax.jit` cannot trace it, so passing one as an ordinary
# argument fails straight away.


# %%
@jax.jit
def activate_traced(act, v):
    return jnp.sum(act(v))


as_array = jitlab.attempt(activate_traced, jnp.tanh, x)
print(as_array)
assert type(as_array.error) is TypeError

# %% [markdown]
# The usual fix is to mark the callable static. A static argument is part of the cache
# key by hash and equality, and a plain function is hashed and compared by identity.


# %%
@functools.partial(jax.jit, static_argnames="act")
def activate(act, v):
    return jnp.sum(act(v))


square = lambda v: v * v  # noqa: E731  (one object, named, reused)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Call <code>activate(act, x)</code> with <code>tanh</code>, <code>relu</code>,
# <code>tanh</code>, <code>relu</code>. How many compilations? Then call it twice with
# <code>lambda v: v * v</code>, written out twice; and twice with <code>square</code>,
# one lambda kept in a name. How many more?</p></div>

# %%
with jitlab.count_compiles(activate) as two_named:
    for act in (jnp.tanh, jax.nn.relu, jnp.tanh, jax.nn.relu):
        activate(act, x)
with jitlab.count_compiles(activate) as two_lambdas:
    activate(lambda v: v * v, x)
    activate(lambda v: v * v, x)
with jitlab.count_compiles(activate) as one_lambda:
    activate(square, x)
    activate(square, x)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(two_named, two_lambdas, one_lambda, two_lambdas.explanations[-1], sep="\n")
assert two_named.compiles == 2, two_named.explanations
assert two_lambdas.compiles == 2 and one_lambda.compiles == 1
assert "cache miss explanation unavailable" in two_lambdas.explanations[-1]

# %% [markdown]
# One compilation per distinct function object: a plain function hashes and compares
# by identity, so the second lambda is a different key. JAX 0.12 does not say so. For a
# changed static value its explanation reads only "cache miss explanation unavailable",
# so the count, and knowing that `act` is static, are the evidence.
#
# ## Bound methods and `self`
#
# Classes meet jit in two common ways: jit a bound method in `__init__`, or decorate
# the method in the class body. Each has a surprise.


# %%
class Scaler:
    def __init__(self, factor):
        self.factor = factor
        self.apply = jax.jit(self._apply)

    def _apply(self, v):
        return self.factor * v


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>Scaler</code> jits <code>self._apply</code> in <code>__init__</code>. Two
# instances with the <em>same</em> factor each make two calls. How many
# compilations?</p></div>

# %%
with jitlab.count_compiles("_apply") as per_instance:
    first_scaler, second_scaler = Scaler(3.0), Scaler(3.0)
    for model in (first_scaler, second_scaler):
        model.apply(x)
        model.apply(x)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(per_instance, per_instance.explanations[-1], sep="\n")
assert per_instance.compiles == 2, per_instance.explanations

# %% [markdown]
# One compilation per instance. `self._apply` is a *bound method*: a small object that
# pairs the function with this particular `self`. Bound methods of two different
# instances are never equal (Python compares their `self` by identity), so the second
# instance brings a key the cache has never seen. A thousand small objects cost a
# thousand compilations.
#
# JAX's explanation says "never seen function" and adds "seen another function defined
# on the same line". Look at what "line" it means: the `TRACING CACHE MISS at ...` line
# names the *call site*, the line `model.apply(x)` in the loop, not where `_apply` is
# defined. JAX remembers, in one set for the whole process, every call site where a
# never-seen function was traced, and adds the guess when a call site comes round
# again. The next cell shows it with two functions defined on different lines.


# %%
def run_jitted(fn, v):
    return jax.jit(fn)(v)  # one call site for every function passed in


def halve(v):
    return v / 2.0


def negate(v):
    return -v


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>halve</code> and <code>negate</code> are defined on different lines, and
# one helper jits and calls each of them. Does either explanation say "seen another
# function defined on the same line"?</p></div>

# %%
with jitlab.count_compiles(halve) as n_halve:
    run_jitted(halve, x)
with jitlab.count_compiles(negate) as n_negate:
    run_jitted(negate, x)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(n_halve.explanations[-1], n_negate.explanations[-1], sep="\n")
explained = n_negate.explanations[-1]
assert "never seen function" in explained
assert "seen another function defined on the same line" in explained  # another line
assert "run_jitted" in explained  # the call site is the helper's line

# %% [markdown]
# `negate` gets the guess although nothing was re-defined: it is a different function,
# from a different line, called from the line that already traced `halve`. Run the cell
# a second time and `halve` gets the guess too, because the call site is still in the
# process-wide set from the first run. So read the phrase as "this line has traced
# another never-seen function before": a strong hint when the same code keeps creating
# functions (lambdas, partials, bound methods in a loop), and noise when one helper
# legitimately jits many different functions.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>After the first call, set <code>first_scaler.factor = 10.0</code> and call
# again. Does JAX retrace, and what comes back?</p></div>

# %%
first_scaler.factor = 10.0
with jitlab.count_compiles("_apply") as after_mutation:
    after = first_scaler.apply(x)

# %% tags=["answer"] jupyter={"source_hidden": true}
print("factor", first_scaler.factor, "| result", after[:4], "|", after_mutation)
assert after_mutation.traces == 0
assert np.allclose(after, 3.0 * x), "the old factor 3.0 is baked into the executable"

# %% [markdown]
# No retrace, and the **old** answer. While tracing, `self.factor` was an ordinary
# Python float read from the object, so it became a constant inside the compiled
# program. Nothing about the call's arguments changed, so the cache hit, and the new
# value is silently ignored. (Lesson 08 meets the same effect with globals.)
#
# There is a third trap: calling `jax.jit(self._method)` inside a method that runs
# often.

# %%
rescale_runs = []  # one entry each time JAX runs the Python of _rescale


class Rescaler:
    def __init__(self, factor):
        self.factor = factor

    def _rescale(self, v):
        rescale_runs.append(1)
        return self.factor * v

    def __call__(self, v):
        return jax.jit(self._rescale)(v)  # a temporary bound method, every call


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>Rescaler.__call__</code> runs <code>jax.jit(self._rescale)(v)</code>. Four
# calls on one instance: how many compilations?</p></div>

# %%
rescaler = Rescaler(3.0)
with jitlab.count_compiles("_rescale") as per_call:
    for _ in range(4):
        rescaler(x)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(per_call, "| Python runs:", len(rescale_runs))
assert per_call.compiles == 4 and len(rescale_runs) == 4, per_call.explanations

# %% [markdown]
# Four. The tempting explanation is "every `self._rescale` builds a new bound-method
# object". It does build a new one each time, but that alone costs nothing: bound
# methods of one live instance compare equal and hash alike, and jit's caches find an
# equal key. Keep the four bound methods alive and count again.

# %%
first_method, second_method = rescaler._rescale, rescaler._rescale
assert first_method is not second_method and first_method == second_method
assert hash(first_method) == hash(second_method)

kept_alive = [rescaler._rescale for _ in range(4)]  # four new objects, kept
rescale_runs.clear()
with jitlab.count_compiles("_rescale") as kept:
    for method in kept_alive:
        jax.jit(method)(x)
print(kept, "| Python runs:", len(rescale_runs))
assert len({id(m) for m in kept_alive}) == 4  # four distinct objects
assert kept.compiles == 1 and len(rescale_runs) == 1  # one trace of the Python, reused

# %% [markdown]
# Four distinct objects, one compilation, the Python traced once. (`count_compiles`
# still reports four traces: it counts misses of JAX's tracing caches, and each new
# `jax.jit(...)` wrapper misses the outer one, while the inner one, which runs your
# Python, hits.)
#
# What made the first loop compile four times is what happens *after* each call. JAX
# keys its caches **weakly** on the function, so that a function which is garbage
# collected does not keep its traces and executables alive. The temporary bound method
# dies as soon as `__call__` returns, and its cache entries die with it. The next call
# brings an equal method, but nothing is left to find. Let the kept methods go and the
# entries go too:

# %%
del method, first_method, second_method
kept_alive.clear()
gc.collect()
rescale_runs.clear()
with jitlab.count_compiles("_rescale") as after_collect:
    jax.jit(rescaler._rescale)(x)
print(after_collect, "| Python runs:", len(rescale_runs))
assert after_collect.compiles == 1 and len(rescale_runs) == 1  # compiled from scratch

# %% [markdown]
# The fix is the same as for lambdas: make the jitted callable once and keep it, as
# `Scaler` does in `__init__` (one compilation per instance), or better, as a top-level
# function (one compilation for every instance, below).
#
# Decorating the method in the class body does not work as is: `self` becomes an
# argument, and an arbitrary object is not an array.


# %%
class ClassLevel:
    def __init__(self, factor):
        self.factor = factor

    @jax.jit
    def apply(self, v):
        return self.factor * v


class_level = jitlab.attempt(ClassLevel(3.0).apply, x)
print(class_level)
assert type(class_level.error) is TypeError

# %% [markdown]
# Making `self` static (`static_argnums=0`) silences the error but brings back both
# traps: a plain object is hashed by identity, so each instance compiles once, and a
# changed attribute does not change the hash, so the old value stays baked in
# (lesson 06 has the details of hash and equality).


# %%
class StaticSelf:
    def __init__(self, factor):
        self.factor = factor

    @functools.partial(jax.jit, static_argnums=0)
    def apply_static(self, v):
        return self.factor * v


with jitlab.count_compiles("apply_static") as static_self:
    one, two = StaticSelf(3.0), StaticSelf(3.0)
    one.apply_static(x)
    two.apply_static(x)
    one.factor = 10.0
    stale = one.apply_static(x)
print(static_self)
assert static_self.compiles == 2 and np.allclose(stale, 3.0 * x), static_self

# %% [markdown]
# **The fix for classes:** keep the jitted function at top level, where it is one
# object for the whole program, and pass the state it needs as arguments. The method
# becomes a thin wrapper.


# %%
@jax.jit
def scale_by(factor, v):
    return factor * v


class GoodScaler:
    def __init__(self, factor):
        self.factor = jnp.float32(factor)

    def apply(self, v):
        return scale_by(self.factor, v)  # state goes in as an argument


# %%
with jitlab.count_compiles(scale_by) as shared:
    good_one, good_two = GoodScaler(3.0), GoodScaler(5.0)
    good_one.apply(x)
    good_two.apply(x)
    good_one.factor = jnp.float32(10.0)
    fresh = good_one.apply(x)
print(shared)
assert shared.compiles == 1, shared.explanations
assert np.allclose(fresh, 10.0 * x), "the new factor is used"

# %% [markdown]
# One compilation for every instance, and mutations are seen because the factor is an
# input, not a constant.
#
# If you would rather keep `@jax.jit` on the method, make `self` a pytree: register the
# class with `jax.tree_util.register_pytree_node_class` and say which attributes are
# arrays. Then `self` is an ordinary (traced) argument, its arrays are inputs, and only
# the class and the flattening's static part go into the cache key. Equinox modules
# work this way.


# %%
@jax.tree_util.register_pytree_node_class
class TreeScaler:
    def __init__(self, factor):
        self.factor = factor

    def tree_flatten(self):
        return (self.factor,), None  # (arrays, static part)

    @classmethod
    def tree_unflatten(cls, static, arrays):
        return cls(*arrays)

    @jax.jit
    def apply_tree(self, v):
        return self.factor * v


# %%
with jitlab.count_compiles("apply_tree") as as_pytree:
    tree_one, tree_two = TreeScaler(jnp.float32(3.0)), TreeScaler(jnp.float32(5.0))
    tree_one.apply_tree(x)
    tree_two.apply_tree(x)
    tree_one.factor = jnp.float32(10.0)
    tree_fresh = tree_one.apply_tree(x)
print(as_pytree)
assert as_pytree.compiles == 1 and np.allclose(tree_fresh, 10.0 * x), as_pytree

# %% [markdown]
# ## The fix, measured: pass data, not functions
#
# A sweep over twenty polynomials, written two ways.
#
# * **Problem:** a `partial` binds each set of coefficients, then gets jitted: a new
#   function per polynomial.
# * **Fix:** one top-level jitted function takes the coefficients as an array argument.
#   Twenty arrays of the same shape and dtype share one compiled program.


# %%
def polynomial(v, coeffs):
    return jnp.polyval(coeffs, v)


polynomial_jit = jax.jit(polynomial)  # built once
coefficient_sets = np.random.default_rng(7).normal(size=(20, 4)).astype(np.float32)
points = jnp.linspace(-1.0, 1.0, 64, dtype=jnp.float32)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How many compilations does each loop cost, and roughly how many times longer does
# the problem loop take?</p></div>

# %%
per_item = jitlab.measure(
    "jit(partial) per polynomial (problem)",
    lambda: [
        jax.jit(functools.partial(polynomial, coeffs=c))(points)
        for c in coefficient_sets
    ],
    count=polynomial,
)
as_data = jitlab.measure(
    "coefficients as an array (fix)",
    lambda: [polynomial_jit(points, c) for c in coefficient_sets],
    count=polynomial,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
sweep = jitlab.compare(per_item, as_data)
assert per_item.compiles == 20 and as_data.compiles == 1, sweep.rows()
assert sweep.speedup > 3, sweep  # several times faster (wide margin)
np.testing.assert_allclose(per_item.result, as_data.result, rtol=1e-5, atol=1e-6)

# %% [markdown]
# The problem loop pays one compilation per item; the fix pays once, then runs at
# cached speed.
#
# ### Choosing a function with data: `lax.switch`
#
# When the choice really is between different functions, a small integer can pick one
# inside a single compiled program. `lax.switch(index, branches, operand)` traces every
# branch once and runs the chosen one.

# %%
ACTIVATIONS = (jnp.tanh, jax.nn.relu, jax.nn.sigmoid)  # defined once, at top level


@functools.partial(jax.jit, static_argnames="act")
def layer_static(act, w, v):
    return act(w * v)


@jax.jit
def layer_switch(index, w, v):
    return lax.switch(index, ACTIVATIONS, w * v)


w = jnp.float32(0.7)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Twelve calls cycle through three activations. How many compilations with the
# activation as a static callable, and how many with an index and
# <code>lax.switch</code>?</p></div>

# %%
by_callable = jitlab.measure(
    "activation as static callable (problem)",
    lambda: [layer_static(ACTIVATIONS[i % 3], w, x) for i in range(12)],
    count=layer_static,
)
by_index = jitlab.measure(
    "activation index + lax.switch (fix)",
    lambda: [layer_switch(i % 3, w, x) for i in range(12)],
    count=layer_switch,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
choice = jitlab.compare(by_callable, by_index)
assert by_callable.compiles == 3 and by_index.compiles == 1, choice.rows()
np.testing.assert_allclose(by_callable.result, by_index.result, atol=1e-6)

# %% [markdown]
# Three compilations against one. The times are this machine's: with only three choices
# the gap is small, because the single `lax.switch` program holds all three branches.
# The count is what scales: with a per-layer choice in a deep network, or a loss picked
# per task, the static version compiles every combination that ever occurs. The index
# is traced, so a new choice is a new *value*, not a new program. The price: every
# branch is compiled into the program, so keep `lax.switch` for a handful of small
# alternatives.
#
# ### When a function must travel with numbers: `jax.tree_util.Partial`
#
# Sometimes an API really wants a callable (an optimiser taking a loss, a solver taking
# a right-hand side). `jax.tree_util.Partial` is a `functools.partial` that JAX treats as
# a pytree: the bound arrays are inputs, only the wrapped function is static. It can be
# passed as an ordinary (non-static) argument.


# %%
@jax.jit
def call_with(fn, v):
    return fn(v)


def bound_affine(a):
    """A fresh Partial each call: `affine` with arrays bound to a and b."""
    return jax.tree_util.Partial(affine, a=jnp.float32(a), b=jnp.float32(1.0))


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Three <em>fresh</em> <code>Partial(affine, a=..., b=...)</code> objects, each with
# different numbers, go into one jitted function. How many compilations?</p></div>

# %%
with jitlab.count_compiles(call_with) as tree_partials:
    results = [call_with(bound_affine(a), x) for a in (1.0, 2.0, 3.0)]

# %% tags=["answer"] jupyter={"source_hidden": true}
print(tree_partials)
assert tree_partials.compiles == 1, tree_partials.explanations
assert np.allclose(results[2], 3.0 * x + 1.0)

# %% [markdown]
# One: a fresh `Partial` each time is fine, because the cache sees the same wrapped
# function (`affine`, defined once) and arrays of the same shape and dtype. Bind arrays,
# not Python objects that must be hashed.
#
# ## Summary
#
# | you wrote | compilations | instead |
# | --- | --- | --- |
# | `jax.jit(f)` in a loop, `f` at top level | 1 | fine (hoisting is tidier) |
# | `jax.jit(lambda ...)` in a loop | one per iteration | define it once |
# | nested `def`, `jax.jit(jax.grad(f))` in a loop | one per iteration | build it once |
# | `jax.jit(partial(f, k=v))` per iteration | one per iteration | pass `v` as an argument |
# | callable as a static argument | one per object | same objects, or `lax.switch` |
# | `jax.jit(self.method)` in `__init__` | one per instance, stale | top-level jit, state in |
# | `jax.jit(self.method)(x)` on every call | one per call (the entry dies) | jit once, keep it |
# | `jax.grad(jax.jit(f))` | two programs, `grad` in Python per call | `jax.jit(jax.grad(f))` |
#
# The exercise turns a training loop that compiles on every batch into one that
# compiles once, for every batch and every weight-decay value.

# %% tags=["remove-input"]
jitlab.outro()
