# ---
# jupyter:
#   jitlab:
#     fix: log_compiles, explain_cache_misses, no_tracing, trace-count guards in tests,
#       jitlab doctor
#     instructor_notes:
#     - Run the worked diagnosis live, and ask the room to predict the cause from the
#       code before showing any tool; almost nobody spots the class defined inside make_batch.
#     - The log lines are long; read one explanation aloud, top to bottom, and point
#       at the call site, the function, the closest previous key, and the '* at' line.
#     - Learners often create inputs (jnp.ones) inside a no_tracing block and are surprised
#       that broadcast_in_dim is the function that 'retraced'.
#     - A changed static argument gets no reason at all on JAX 0.12 ('cache miss explanation
#       unavailable'); 0.10.2 showed it as 'different input pytree' with Static(val=...).
#       Worth saying out loud, since the count is the evidence.
#     - Every experiment cell defines the functions it studies, so it can be run again
#       on its own. The one exception is by design, the 'defined on the same line' hint,
#       which depends on what the process has run before; the cell says so.
#     - The timings of the fast-path cells move a lot on a busy laptop; the assertions
#       are on the guard's behaviour and on ratios with a wide margin.
#     - Before running the doctor on split_report, ask the room for its causes. Most
#       find the namedtuple (they have just seen it) and the short batches; few see
#       the int 2 against the float 1.0. Then read one "JAX says" line aloud, where
#       JAX names only the pytree, next to the doctor's verdict.
#     - 'jitlab.doctor.install() is counted: running its cell twice needs two uninstall()
#       calls. Run the doctor section from its first cell to its last.'
#     keypoints:
#     - jax.log_compiles says that a function compiled, and with which shapes and types.
#       The tracing, lowering and XLA lines carry a time; the "Compiling" line does
#       not.
#     - jax_explain_cache_misses says why. The line after 'For the closest previous
#       key' names the part of the cache key that differed; the '* at' line names the
#       argument.
#     - '''different input types'' is a shape, a dtype or a weak type; ''different input
#       pytree'' is a container, a keyword or a class; ''Tracing context doesn''t match''
#       is a config option or context manager; ''Debug info doesn''t match'' is the
#       same function traced before by another transformation; ''never seen function''
#       is a new function object; ''cache miss explanation unavailable'' is often a
#       changed static value.'
#     - JAX compares a call with one earlier key. For each key it finds the first kind
#       of difference in the order context, pytree, debug info, types, and it reports
#       the key whose difference comes earliest in that order. A context or structure
#       difference with any earlier key hides a change of shape.
#     - '''seen another function defined on the same line'' is about the call site:
#       JAX remembers, for the whole process, each line from which a function it had
#       never seen was called.'
#     - jax.no_tracing() raises RuntimeError on any miss of jit's C++ fast path, before
#       JAX knows whether it must trace. A retrace raises; so do a new executable for
#       a committed array, every call of a warm function with effects (jax.debug.print,
#       io_callback), and every call with an argument signature that once failed in
#       the slow path, until f.clear_cache().
#     - The fast path runs a warm call without any of JAX's Python. A function with
#       effects never takes it, and a call through the Python path costs several times
#       more.
#     - chex.assert_max_traces raises AssertionError when a function traces too often,
#       which turns a retrace into a failing test.
#     - A jax.monitoring listener on backend_compile_duration, keyed by fun_name, finds
#       the function that compiles too often in a long job.
#     - Two classes with the same name are different pytree node types; define containers
#       once, at module level.
#     - jitlab doctor (jitlab doctor -- python train.py, or jitlab.doctor.watch() around
#       a block) names, for every miss of every jitted function, each part of the cache
#       key that changed, the call site and the lesson with the fix. JAX's explanation
#       names one kind of difference; the doctor names them all.
#     - The doctor explains only functions jitted while it watches, because it wraps
#       jax.jit; it counts the others by name. In a notebook, call jitlab.doctor.install()
#       (or %load_ext jitlab) before the code is defined.
#     - A compile budget (--max-compiles NAME=N, watch(["NAME=N"]) then doctor.check(),
#       or @pytest.mark.max_compiles) turns an extra compilation into a failure that
#       says why.
#     minutes:
#       exercises: 15
#       teaching: 65
#     objectives:
#     - Turn on jax.log_compiles and jax_explain_cache_misses and read what they print.
#     - Name the part of the cache key that changed from one explanation (tracing context,
#       input pytree, debug info, input types, or a function never seen before), and
#       recognise the explanation that gives no reason.
#     - Predict which earlier key an explanation compares with, and check its claim
#       against what the caller passed.
#     - Guard a steady-state loop with jax.no_tracing, knowing that it watches jit's
#       fast path rather than tracing, and a test with chex.assert_max_traces.
#     - Compare two traces with jax.make_jaxpr.
#     - Record compile time per function in a long job with a jax.monitoring listener.
#     - Run jitlab doctor on code you did not write, read each cause and lesson it names,
#       and set a compile budget that fails with the reasons.
#     prerequisites:
#       lessons:
#       - what_jit_caches
#       - shapes
#       - dtypes
#       - python_scalars
#       - pytree_structure
#       - control_flow
#       - static_arguments
#       - functions_as_arguments
#       - closures_and_globals
#     questions:
#     - A program compiles more often than it should. Which function, and why?
#     - How do I read JAX's cache-miss explanations, and when do they mislead?
#     - How do I make a test fail when a function starts to retrace?
#     title: Diagnosing a recompilation in code you did not write
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
# # 09 · Diagnosing a recompilation in code you did not write
#
# So far every lesson showed a cause and then measured it. In real work it goes the
# other way round: a job is slow, or a step pauses now and then, and the code belongs to
# somebody else. This lesson is about the tools JAX gives you to go from the symptom to
# the cause: logs that say *that* a function compiled, explanations that say *why*,
# guards that turn a retrace into an error, and a listener that finds the culprit in a
# long job. It ends with a worked diagnosis.

# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import collections
import difflib
import logging

import chex
import jax
import jax.numpy as jnp
import jitlab.doctor
import numpy as np
from jax.experimental import io_callback

# %% [markdown]
# ## The toolbox
#
# - `jax.log_compiles`: *did* it compile, with which shapes and types, in how long?
#   `with jax.log_compiles():` or `jax.config.update("jax_log_compiles", True)`.
# - `jax_explain_cache_misses`: *why* did the tracing cache miss?
#   `with jax.explain_cache_misses(True):` or
#   `jax.config.update("jax_explain_cache_misses", True)`.
# - `jax.no_tracing()`: is this loop really in a steady state? Raises if not.
# - `chex.assert_max_traces`: makes a test fail when a function starts retracing.
# - `jax.make_jaxpr`: what exactly differs between two traces?
# - `jax.monitoring`: in a long job, which function compiles, how often, at what cost?
#
# The first two write to Python's `logging`, on loggers under `"jax"` (such as
# `jax._src.dispatch`), at level WARNING, so they show with no logging set-up at all: in
# a terminal they land on stderr. In this notebook we catch the records with a small
# handler on the `"jax"` logger, so the page can show them and the assertions can read
# them.


# %%
class JaxLog(logging.Handler):
    """Inside `with JaxLog() as log:`, keeps every record of the "jax" loggers."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.lines.append(record.getMessage())

    def misses(self, containing: str = "") -> list[str]:
        return [t for t in self.lines if "CACHE MISS" in t and containing in t]

    def __enter__(self) -> "JaxLog":
        logging.getLogger("jax").addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger("jax").removeHandler(self)


# %%
def reason(explanation: str) -> str:
    """The part of a cache-miss explanation after "For the closest previous key:"."""
    return explanation.split("For the closest previous key:")[-1].strip()


# %% [markdown]
# ## `jax.log_compiles`: did it compile?
#
# A small function, called with three arrays built beforehand (building them with
# `jnp.ones` inside the block would log `broadcast_in_dim` compiling as well).
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Calls with shapes (3,), (3,), (4,). How many "Compiling" lines for
# <code>scale_add</code>?</p></div>


# %%
@jax.jit
def scale_add(x, y):
    return 2.0 * x + y


a3, b3, a4, b4 = jnp.ones(3), jnp.ones(3), jnp.ones(4), jnp.ones(4)
i4 = jnp.ones(4, dtype=jnp.int32)

# %%
with JaxLog() as log, jax.log_compiles():
    scale_add(a3, b3)
    scale_add(a3, b3)
    scale_add(a4, b4)
ours = [line for line in log.lines if "scale_add" in line]  # JAX's helpers log too

# %% tags=["answer"] jupyter={"source_hidden": true}
print(*ours, sep="\n")
compiling = [line for line in ours if line.startswith("Compiling jit(scale_add)")]
assert len(compiling) == 2 and len(ours) == 8, ours  # four lines a compilation
assert "float32[3]" in compiling[0] and "float32[4]" in compiling[1]
stages = ("Finished tracing", "Finished jaxpr to MLIR", "Finished XLA compilation")
timed = [line for line in ours if line not in compiling]
assert [line.startswith(stages) and line.endswith(" sec") for line in timed] == [1] * 6
assert not any(" sec" in line for line in compiling)  # the signature, no time
assert {record.levelname for record in log.records} == {"WARNING"}  # shown unasked
assert all(record.name.startswith("jax.") for record in log.records)  # under "jax"

# %% [markdown]
# Four lines per compilation: tracing, the "Compiling" line with the **global shapes and
# types** of every argument, lowering to MLIR, and the XLA compilation. Three of them
# end with the time the stage took; the "Compiling" line has no time, only the
# signature. The cached second call printed nothing. When a long job pauses, this is the
# first thing to switch on: if the "Compiling" lines keep coming, the cache is missing.
#
# The same switch exists as a config option, for a whole script or from the environment
# (`JAX_LOG_COMPILES=1 python train.py`); the next section shows it set and put back.

# %% [markdown]
# ## `jax_explain_cache_misses`: why did it compile?
#
# The log says *that* the cache missed. The explanation says *why*: JAX compares the new
# call with the keys it has already seen and names what differs. Every explanation has
# the same shape:
#
# ```
# TRACING CACHE MISS at <file>:<line>:<column> (<caller>)    <- where the call was made
#   for <function> defined at <file>:<line>                   <- which function
#   all previously seen cache keys differ. For the closest previous key:
#   <kind of difference>                                      <- what part of the key
#   * at <argument>, now <new> and before <old>               <- which argument, and how
# ```
#
# There are six kinds to know by sight. We catch each one and pin its key phrase with an
# assertion. Every cell below defines the functions it studies, so each can be run again
# on its own and gives the same counts.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A jitted function is called for the very first time with explanations on, then
# again with the same array. Then a loop makes <code>jax.jit(lambda x: x - 1)</code>
# twice and calls each once. How many explanations, and what do they say?</p></div>


# %%
@jax.jit
def first_timer(x):
    return x - 1


with JaxLog() as log, jax.explain_cache_misses(True):
    first_timer(a3)
    first_timer(a3)
    for _ in range(2):
        jax.jit(lambda x: x - 1)(a3)  # a new function object each time round

# %% tags=["answer"] jupyter={"source_hidden": true}
SAME_LINE = "seen another function defined on the same line"
never = log.misses()
print(*never, sep="\n")
assert len(never) == 3 and all("never seen function" in text for text in never)
assert "first_timer id=" in never[0] and all("<lambda> id=" in t for t in never[1:])
assert SAME_LINE in never[2]  # the loop's call line was seen one miss earlier
assert "being re-defined repeatedly, preventing caching?" in never[2]
print("first lambda has the hint too (this cell ran before):", SAME_LINE in never[1])

# %% [markdown]
# **"never seen function"**: the cache has no entry at all for this function object. Once
# per function is normal. Seeing it *for the same name over and over* means a new
# function object is made each time: `jax.jit(lambda ...)` in a loop, a fresh
# `functools.partial`, a method bound to a new object (lesson 07). JAX adds a hint of its
# own: *"but seen another function defined on the same line; maybe the function is being
# re-defined repeatedly, preventing caching?"* (Do not count on the `id=` to differ:
# Python may give the new function the memory, and so the id, of the one it just
# discarded.)
#
# Despite its words, the hint is not about where the function is *defined*. JAX keeps
# one set, for the whole process, of the **call sites** (file, line and column of the
# call) at which a never-seen function was called, and adds the hint whenever a
# never-seen function is called from a site already in the set. Run the cell above a
# second time and the first lambda gets the hint too, and so does `first_timer`: both
# calls come from lines the process has seen before. That is why the cell asserts the
# hint only on the second lambda, and prints what happened to the first.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Two different functions, defined on different lines, are each called once through
# the same helper. Does the second one get the hint?</p></div>


# %%
def call_once(fn, x):
    """A helper that jits and calls whatever it is given, always from this line."""
    return jax.jit(fn)(x)


def add_one(x):
    return x + 1


def times_three(x):
    return x * 3


with JaxLog() as log, jax.explain_cache_misses(True):
    call_once(add_one, a3)
    call_once(times_three, a3)

# %% tags=["answer"] jupyter={"source_hidden": true}
print(log.misses()[-1])
assert add_one.__code__.co_firstlineno != times_three.__code__.co_firstlineno
assert "never seen function:\n    times_three" in log.misses()[-1]
assert SAME_LINE in log.misses()[-1]  # same call site, different definitions

# %% [markdown]
# `times_three` is defined on its own line and is called once: nothing is being
# re-defined. It gets the hint because it went through the same call site as
# `add_one`. Read the hint as "this *call site* keeps meeting new functions", then look
# at what is passed to it.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>shift(x, s)</code> is first called with a float32 array of shape (3,) and the
# Python float <code>1.0</code>. Then: shape (4,); then an int32 array; then
# <code>jnp.float32(1.0)</code> for <code>s</code>; then the Python int <code>1</code>.
# What does each explanation say?</p></div>


# %%
@jax.jit
def shift(x, s):
    return x + s


with JaxLog() as log, jax.explain_cache_misses(True):
    shift(a3, 1.0)  # first call: never seen
    shift(a4, 1.0)  # new shape
    shift(i4, 1.0)  # new dtype
    shift(a4, jnp.float32(1.0))  # a strong float32 scalar where a Python float was
    shift(a4, 1)  # a Python int where a Python float was

# %% tags=["answer"] jupyter={"source_hidden": true}
types = log.misses()[1:]
print(*[reason(text) for text in types], sep="\n")
assert len(types) == 4 and all("different input types" in t for t in types), types
assert "* at x, now f32[4] and before f32[3]" in types[0]
assert "* at x, now i32[4] and before f32[3]" in types[1]
assert "* at s, now f32[]{weak_type=False} and before f32[]{weak_type=True}" in types[2]
assert "{weak_type=True}https://docs.jax.dev/" in types[2]  # the link, glued on
assert "* at s, now i32[] and before f32[]" in types[3]

# %% [markdown]
# **"different input types"**: the shape or dtype of an array argument changed (lessons
# 01 and 02), or a scalar's *weak type* did (lesson 03). The `* at s` line names the
# argument, so you know which value to chase in the caller. Three details to read with
# care:
#
# - `f32[]{weak_type=True}` is a Python float, `f32[]{weak_type=False}` a float32 array
#   or NumPy scalar: the shape and dtype print the same, only the braces differ. A link
#   to the type-promotion docs is glued to the end of that line, with no space.
# - A Python int against a Python float prints as `i32[]` against `f32[]`: both are weak,
#   so no braces.
# - "The closest previous key" is one of the keys seen so far, not necessarily the last
#   call: the int32 array above was compared with the shape-(3,) call. How JAX picks it
#   comes below.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Same shapes and dtypes throughout, but: a dict gains a key; the call switches from
# positional to keyword; a static argument changes value. What kind of difference is
# each?</p></div>


# %%
@jax.jit
def total(batch):
    return batch["x"].sum()


@jax.jit
def pair_sum(x, y):
    return x + y


@jax.jit(static_argnames="power")
def powered(x, power):
    return x**power


# %%
with JaxLog() as log, jax.explain_cache_misses(True):
    total({"x": a3})
    total({"x": a3, "mask": a3})  # one more key
    pair_sum(a3, b3)
    pair_sum(x=a3, y=b3)  # the same arrays, by keyword
    powered(a3, power=2)
    powered(a3, power=3)  # a new static value

# %% tags=["answer"] jupyter={"source_hidden": true}
trees = [text for text in log.misses() if "never seen" not in text]
print(*[reason(text) for text in trees], sep="\n\n")
assert len(trees) == 3 and all("different input pytree" in t for t in trees[:2])
assert "symmetric difference of key sets: {'mask'}" in trees[0]
assert "now tuple of length 0 and before tuple of length 2" in trees[1]
keyword_keys = trees[1].replace("'y' 'x'", "'x' 'y'")  # a set: either order
assert "symmetric difference of key sets: {'x' 'y'}" in keyword_keys
# A changed static value: JAX 0.12 gives no reason at all (0.10.2 named Static(val=3)).
assert "cache miss explanation unavailable" in trees[2]

# %% [markdown]
# **"different input pytree"**: the *structure* of the arguments changed while the
# arrays did not: a key added or removed, `None` in place of an array, a list in place of
# a tuple (lesson 04). Positional and keyword arguments are two branches of one tree
# (input path `[0]` is the positional tuple, `[1]` the keyword dict), so `f(x)` versus
# `f(x=x)` shows up here too.
#
# **"cache miss explanation unavailable"**: JAX found a difference in none of the parts
# it knows how to compare. On 0.12 a **static argument** with a new value lands here
# (0.10.2 showed it as a `Static(val=...)` node in the tree; lesson 06). The count of
# compilations is then the only evidence, so look for `static_argnums` and
# `static_argnames` in the function's definition.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Same function, same arrays, but called inside
# <code>jax.default_matmul_precision("highest")</code>, then inside
# <code>jax.enable_x64(True)</code>. Any misses?</p></div>


# %%
@jax.jit
def blend(x, y):
    return 0.5 * x + y


with JaxLog() as log, jax.explain_cache_misses(True):
    blend(a3, b3)  # first call: never seen
    blend(a3, b3)
    with jax.default_matmul_precision("highest"):
        blend(a3, b3)
    with jax.enable_x64(True):
        blend(a3, b3)

# %% tags=["answer"] jupyter={"source_hidden": true}
contexts = log.misses()[1:]
print(*[reason(text) for text in contexts], sep="\n")
assert len(contexts) == 2, contexts
assert all("Tracing context doesn't match" in text for text in contexts)
precision = "jax_default_matmul_precision differs: now highest and before None"
assert precision in contexts[0]
assert "jax_enable_x64 differs: now True and before False" in contexts[1]
assert jax.config.jax_enable_x64 is False  # the context manager put it back

# %% [markdown]
# **"Tracing context doesn't match, e.g. due to config or context manager."**: nothing
# about the arguments changed, but a setting that can change the traced program did
# (here matmul precision and x64). The `*` line names the config option. In someone
# else's code, look for a context manager around *some* of the calls: an evaluation
# helper that raises precision, a test fixture that enables x64.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A function is first used as a branch of <code>lax.cond</code>, then jitted and
# called on the same array. Is the jitted call a cache hit?</p></div>


# %%
def negate(x):
    return -x


with JaxLog() as log, jax.explain_cache_misses(True):
    jax.lax.cond(True, negate, negate, a3)  # traces negate as a branch
    with jitlab.count_compiles(negate, explain=False) as jitted_negate:
        jax.jit(negate)(a3)

# %% tags=["answer"] jupyter={"source_hidden": true}
(about_negate,) = log.misses("for negate defined at")
print(reason(about_negate), jitted_negate, sep="\n")
assert "Debug info doesn't match." in about_negate
assert jitted_negate.traces == 1 and jitted_negate.compiles == 1

# %% [markdown]
# **"Debug info doesn't match."**: JAX keeps one tracing cache per Python function,
# shared by `jit` and by the transformations that trace functions (`lax.cond`,
# `jax.checkpoint`, ...). The key includes *debug info*: what the trace was for, and the
# argument names. Here `negate` had been traced for `cond`, so the `jit` call is a miss,
# explained by the debug info alone. It is rare, and costs one extra trace per use.
#
# Both switches have a config form, handy at the top of a script
# (`JAX_LOG_COMPILES=1` and `JAX_EXPLAIN_CACHE_MISSES=1` in the environment do the same).
# Set them, and put them back:


# %%
@jax.jit
def halve(x):
    return x / 2


halve(a3)
SWITCHES = ("jax_log_compiles", "jax_explain_cache_misses")
for switch in SWITCHES:
    jax.config.update(switch, True)
try:
    with JaxLog() as log:
        halve(a4)
finally:
    for switch in SWITCHES:
        jax.config.update(switch, False)

# %%
print(*log.lines, sep="\n")
(compiling,) = [line for line in log.lines if line.startswith("Compiling jit(halve)")]
assert "float32[4]" in compiling
assert "* at x, now f32[4] and before f32[3]" in reason(log.misses()[0])
assert not any(getattr(jax.config, switch) for switch in SWITCHES)

# %% [markdown]
# ### Which earlier key? The closest by kind, not by time
#
# An explanation compares the new call with *one* earlier key and reports what differs
# from that one. JAX's rule, from its source (`diff_tracing_cache_keys` in
# `jax/_src/interpreters/partial_eval.py`): for each earlier key, look for a difference
# in this order and stop at the first found: the **tracing context**, then the **input
# pytree**, then the **debug info**, then the **input types**. Then report the key whose
# first difference comes earliest in that order. A tie goes to the key with fewer
# differing items, and then to the explanation that sorts first as text: that is why the
# int32 array above was compared with `f32[3]`, not `f32[4]`. "Closest" is a ranking by
# kind: a key that differs in context beats a key that differs in a shape only.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>One function receives a dict. Its cache holds <code>{"x": f32[3]}</code>. A call
# with shape (5,) comes in; then the dict gains a <code>"mask"</code> key; then a call
# with shape (7,); then a call under <code>default_matmul_precision</code>; then one
# with shape (9,). What does each explanation blame?</p></div>


# %%
@jax.jit
def ranked(batch):
    return batch["x"].sum()


a5, a7, a9 = jnp.ones(5), jnp.ones(7), jnp.ones(9)
with JaxLog() as log, jax.explain_cache_misses(True):
    ranked({"x": a3})  # never seen
    ranked({"x": a5})  # only shapes to compare with
    ranked({"x": a3, "mask": a3})  # a second structure enters the cache
    ranked({"x": a7})  # a new shape; one earlier key differs in structure
    with jax.default_matmul_precision("highest"):
        ranked({"x": a3})  # a context enters the cache
    ranked({"x": a9})  # a new shape; one earlier key differs in context

# %% tags=["answer"] jupyter={"source_hidden": true}
blamed = [reason(text).splitlines()[0] for text in log.misses()[1:]]
print(*blamed, sep="\n")
context = "Tracing context doesn't match, e.g. due to config or context manager."
pytree, types_ = "different input pytree:", "different input types:"
assert blamed == [types_, pytree, pytree, context, context]  # (7,), (9,): not shapes
assert not any("f32[9]" in text for text in log.misses())

# %% [markdown]
# The calls with shapes (7,) and (9,) changed only a shape. Their explanations blame the
# structure, then the context, because the cache held a key that differed in that way,
# and JAX ranks those kinds first. Read an explanation as *a* difference with *some*
# earlier key, not the change since the last call. When it looks odd, check the shapes in
# the `log_compiles` line for the same call, and check the `* at` line against what the
# caller actually passes.

# %% [markdown]
# | the explanation says | what changed | lesson |
# | --- | --- | --- |
# | `never seen function`, again and again | a new function object per call | 07 |
# | `... seen another function defined on the same line` | a call site that keeps meeting new functions | 07 |
# | `different input types`, a shape | an array's shape | 01 |
# | `different input types`, a dtype | an array's dtype | 02 |
# | `different input types`, `weak_type` | a Python scalar against an array | 03 |
# | `different input pytree` | keys, `None`, list/tuple, keyword/positional, class | 04 |
# | `cache miss explanation unavailable` | often a static argument's value (JAX gives no reason) | 06 |
# | `Tracing context doesn't match` | a config option or context manager | 12 |
# | `Debug info doesn't match.` | the function was traced before for another transformation | 09 |
#
# A row higher in JAX's ranking (context, pytree, debug info, types) can hide a row
# lower in it: fix what the explanation names, run again, and read the next one.

# %% [markdown]
# ## Guards: make a retrace an error
#
# Logs are for looking. In a training loop you want something stronger: once the loop is
# warm, any retrace is a bug, and should stop the program where it happens.
# `jax.no_tracing()` does that, and a little more, as the next section shows. The
# helpers below run a call inside the guard and keep what happened.


# %%
def under_guard(call):
    with jax.no_tracing():
        return call()


def guarded(call) -> jitlab.Attempt:
    """Run `call()` inside jax.no_tracing(); keep what it returned or raised."""
    return jitlab.attempt(under_guard, call)


def refused(call) -> bool:
    """Whether `call()` raises RuntimeError inside jax.no_tracing()."""
    return type(guarded(call).error) is RuntimeError


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A function is warmed up on shape (8,) outside the guard. Inside the guard it runs
# three times on shape (8,), then once on shape (9,). What happens at each call?</p></div>


# %%
@jax.jit
def steady(x):
    return jnp.sin(x) * 2


x8, x9 = jnp.ones(8), jnp.ones(9)
steady(x8)  # warm up outside the guard
tried = [guarded(lambda: steady(x)) for x in (x8, x8, x8, x9)]  # noqa: B023

# %% tags=["answer"] jupyter={"source_hidden": true}
print(*tried, sep="\n")
assert [type(attempt.error) for attempt in tried] == [type(None)] * 3 + [RuntimeError]
assert "re-tracing function steady" in str(tried[-1].error)
assert "'no_tracing' is set" in str(tried[-1].error)

# %% [markdown]
# The exception is a plain `RuntimeError` and its message names the function and where
# it is defined. Two things to know before you rely on it:
#
# - **Warm up outside the guard.** A first call is a trace too, and raises.
# - **Build inputs outside the guard.** `jnp.ones(n)` with a new `n` traces a small
#   helper of JAX's own, and the guard blames *that* function.


# %%
@jax.jit
def cold(x):
    return x + 1


first_call, new_input = guarded(lambda: cold(x8)), guarded(lambda: steady(jnp.ones(10)))
print(first_call, new_input, sep="\n")
assert "re-tracing function cold" in str(first_call.error)  # a first call is refused
assert "re-tracing function broadcast_in_dim" in str(new_input.error)  # jnp.ones first

# %% [markdown]
# In a test suite, the usual guard is a trace counter. `chex.assert_max_traces(n=...)`
# wraps the Python function (put it *under* `jax.jit`) and counts how often JAX traces it.


# %%
@jax.jit
@chex.assert_max_traces(n=1)
def guarded_step(x):
    return x * 0.5 + 1.0


def test_guarded_step_same_shape():
    guarded_step(x8)
    guarded_step(x8)


def test_guarded_step_new_shape():
    guarded_step(x9)


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The first test calls the step twice on the same shape, the second once on a new
# shape, with <code>n=1</code>. Which test fails, and with what exception?</p></div>

# %%
same_shape = jitlab.attempt(test_guarded_step_same_shape)
new_shape = jitlab.attempt(test_guarded_step_new_shape)
chex.clear_trace_counter()  # counters are global: reset between tests

# %% tags=["answer"] jupyter={"source_hidden": true}
print(same_shape, new_shape, sep="\n")
assert not same_shape.raised, same_shape
assert type(new_shape.error) is AssertionError, new_shape
assert "is traced > 1 times" in str(new_shape.error)

# %% [markdown]
# An `AssertionError` is exactly what pytest reports as a test failure, so a retrace
# introduced by a later change breaks a named test instead of slowing a job down. The
# counters are global to the process; a pytest fixture that calls
# `chex.clear_trace_counter()` keeps tests independent.
#
# ## Which calls skip the fast path
#
# The guard's message says "re-tracing", but the guard does not wait for a trace. Every
# call of a jitted function first looks up its **argument signature** (types, shapes,
# shardings, whether each array is committed to a device, static values) in a cache
# kept in C++. On a hit, C++ runs the compiled executable directly, without any of
# JAX's Python: this is jit's **fast path**. On a miss, the call goes to Python, which
# consults the tracing cache, lowers, compiles if it must, runs the program, and, when
# the program allows it, teaches the C++ cache the new signature.
# `jax.no_tracing()` raises at the door of that Python path, before JAX knows whether
# it will trace at all.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Four functions, each warmed up outside the guard on an uncommitted array. Inside
# it: one calls <code>jax.debug.print</code>; one calls the host through
# <code>io_callback</code>; one through <code>jax.pure_callback</code>; the last is
# called on a <em>committed</em> copy of the array it was warmed with. Which calls are
# refused, and how many traces and compilations do they cost?</p></div>


# %%
SCALAR = jax.ShapeDtypeStruct((), jnp.float32)


@jax.jit
def doubled_and_said(x):
    jax.debug.print("doubling, x[0] = {}", x[0])
    return 2 * x


@jax.jit
def doubled_via_io(x):
    return 2 * x + 0 * io_callback(np.asarray, SCALAR, x[0])


@jax.jit
def doubled_via_pure(x):
    return 2 * x + 0 * jax.pure_callback(np.asarray, SCALAR, x[0])


@jax.jit
def doubled(x):
    return 2 * x


# %%
on_device = jax.device_put(np.ones(8, np.float32), jax.devices()[0])
cases = {
    "debug.print": (doubled_and_said, x8),
    "io_callback": (doubled_via_io, x8),
    "pure_callback": (doubled_via_pure, x8),
    "committed array": (doubled, on_device),
}
rows = []
for label, (fn, x) in cases.items():
    fn(x8)  # warm up, outside the guard, on the uncommitted x8
    with jitlab.count_compiles(fn) as inside:
        refusals = sum(refused(lambda: fn(x)) for _ in range(3))  # noqa: B023
    rows.append({"call": label, "refused (of 3)": refusals, "traces": inside.traces})
    rows[-1]["compiles"] = inside.compiles

# %% tags=["answer"] jupyter={"source_hidden": true}
jitlab.print_table(rows)
assert [row["refused (of 3)"] for row in rows] == [3, 3, 0, 3], rows
assert all(row["traces"] == row["compiles"] == 0 for row in rows)
assert not x8.committed and on_device.committed

# %% [markdown]
# - **A program with effects** never takes the fast path. `jax.debug.print`,
#   `jax.debug.callback` and `io_callback` (ordered or not) put an effect in the
#   program, and JAX gives the C++ cache no entry for a program with effects
#   (`_get_fastpath_data` in `jax/_src/pjit.py`), so every call goes through Python.
#   Inside the guard, *every* call is refused, with nothing traced and nothing
#   compiled. A debug print left in a training step makes the guard useless.
# - **A host callback as such is not the reason.** `jax.pure_callback` declares no
#   effect, so its program keeps the fast path, although it calls the host every time.
# - **A committed array** where the function was warmed on an uncommitted one is a
#   tracing-cache *hit* that still needs a new executable (the next cell): committedness
#   is part of the key further down (lessons 10 and 12). The guard refuses it all the
#   same. With several devices (lesson 12's setting), an array committed to a device the
#   function has not run on yet does the same: 0 traces, 1 compilation, refused. This
#   page runs on one device, so that case is not asserted here.

# %%
doubled.clear_cache()
doubled(x8)  # warm on the uncommitted array, outside the guard
with jitlab.count_compiles(doubled) as committed_call:
    doubled(on_device)
print("committed array, outside the guard:", committed_call)
assert committed_call.traces == 0 and committed_call.compiles == 1

# %% [markdown]
# So the guard is a stricter test than "no retrace": it asks that every call take the
# fast path. Count with `count_compiles` when you need to know *what* happened.
#
# ### The fast path, timed
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How much does a warm call cost on the fast path, and how much when it has to go
# through Python every time?</p></div>


# %%
@jax.jit
def doubled_with_effect(x):
    jax.debug.callback(lambda first: None, x[0])  # an effect, silent
    return 2 * x


# %%
def warm_calls(fn, x, calls=500):
    """Many warm calls of fn on x, as one workload for jitlab.measure."""
    return lambda: [fn(x) for _ in range(calls)]


doubled_with_effect(x8)
fast = jitlab.measure("no effect: fast path", warm_calls(doubled, x8), count=doubled)
effect_calls = warm_calls(doubled_with_effect, x8)
slow = jitlab.measure("an effect", effect_calls, count=doubled_with_effect)

# %% tags=["answer"] jupyter={"source_hidden": true}
effect = jitlab.compare(slow, fast, bench="warm call: fast path vs an effect")
assert slow.compiles == fast.compiles == 0, (slow, fast)
assert effect.speedup > 3, effect  # a wide margin; measured far above it

# %% [markdown]
# A warm call on the fast path costs microseconds (the table shows this machine's). The
# function with an effect pays for the Python path and for a trip to the host on every
# call. Keep effects out of hot loops, or behind a flag that is off in production runs.
#
# ### A refused call leaves a mark
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>A function warm on shape (8,) is refused on shape (9,) inside the guard, as
# <code>steady</code> was above. Compile it on (9,) outside the guard, then guard it
# again. Is it refused? And on shape (8,)?</p></div>


# %%
@jax.jit
def marked(x):
    return jnp.cos(x) * 2


marked(x8)  # warm on (8,)
first_refusal = refused(lambda: marked(x9))
with jitlab.count_compiles(marked) as late:
    marked(x9)  # outside the guard, after the refusal
again = {"(9,)": refused(lambda: marked(x9)), "(8,)": refused(lambda: marked(x8))}

# %% tags=["answer"] jupyter={"source_hidden": true}
print("outside the guard:", late, "| refused again:", again)
assert first_refusal and late.traces == 1 and late.compiles == 1, late
assert again == {"(9,)": True, "(8,)": False}

# %% [markdown]
# An exception on the Python path (the guard's `RuntimeError` here) takes that argument
# signature off the fast path for good: the C++ cache keeps sending it to Python, even
# once the program is compiled. So the guard keeps refusing shape (9,), while shape
# (8,) is fine, and every call on (9,) costs the Python path:

# %%
refused_once = jitlab.measure("(9,): refused", warm_calls(marked, x9), count=marked)
fast_again = jitlab.measure("(8,): fast path", warm_calls(marked, x8), count=marked)
mark = jitlab.compare(
    refused_once, fast_again, bench="warm call: fast path vs a signature refused once"
)
assert mark.speedup > 2, mark  # a wide margin

# %% [markdown]
# The cure is `f.clear_cache()`, which empties the function's caches (and compiles
# again on the next call); no restart is needed.

# %%
marked.clear_cache()
marked(x9)  # warm again, from an empty cache
assert not refused(lambda: marked(x9))

# %% [markdown]
# Any exception does it, not only the guard's. Here the first call fails while
# tracing, a setting is fixed, and the same call then succeeds:

# %%
SETTINGS = {"max_length": 4}


@jax.jit
def checked(x):
    if x.shape[0] > SETTINGS["max_length"]:  # read while tracing
        raise ValueError(f"sequence longer than {SETTINGS['max_length']}")
    return x + 1


too_long = jitlab.attempt(checked, x8)
SETTINGS["max_length"] = 16
checked(x8)
print(too_long, "| refused after it:", refused(lambda: checked(x8)))
assert type(too_long.error) is ValueError and refused(lambda: checked(x8))

# %%
checked.clear_cache()
checked(x8)
assert not refused(lambda: checked(x8))

# %% [markdown]
# A guard failure, or any error in a call, is therefore best treated as the end of a
# run: fix the code, then `clear_cache()` (or restart) and warm up again.
#
# ## `jax.make_jaxpr`: compare two traces
#
# When an explanation is not enough, trace both calls yourself and compare the programs.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p><code>x * s</code> with <code>s = 2.0</code> (Python float) and with
# <code>s = jnp.float32(2.0)</code>. Do the two jaxprs differ, and where?</p></div>


# %%
def times(x, s):
    return x * s + 1.0


weak = jax.make_jaxpr(times)(a4, 2.0)
strong = jax.make_jaxpr(times)(a4, jnp.float32(2.0))
weak_text = weak.pretty_print(use_color=False)  # plain text: no terminal colours
strong_text = strong.pretty_print(use_color=False)

# %% tags=["answer"] jupyter={"source_hidden": true}
diff = difflib.unified_diff(
    weak_text.splitlines(), strong_text.splitlines(), "s=2.0", "s=f32", lineterm=""
)
print(*diff, sep="\n")
print("input types:", weak.in_avals, "vs", strong.in_avals)
assert weak.in_avals[1].weak_type and not strong.in_avals[1].weak_type
assert "convert_element_type[new_dtype=float32 weak_type=False] b" in weak_text
assert "convert_element_type" not in strong_text
assert "b:f32[]. let" in weak_text and "b:f32[]. let" in strong_text  # print alike

# %% [markdown]
# The weakly typed scalar needs one extra instruction (a conversion to a strong float32)
# before it can be multiplied; the strong one goes straight in. The printed types of the
# inputs look the same (`b:f32[]`), which is why the cache's explanation, and
# `in_avals`, are where the weak type shows. When two jaxprs are *identical* yet the
# cache missed, the difference is in the key, not the program: a pytree, a static value,
# or the context.

# %% [markdown]
# ## A worked diagnosis
#
# A colleague's evaluation helper is slow: a pass over 6 batches of identical shape
# takes far longer than 6 calls should. Here is their code. We may not change
# `eval_loss`; the loader is theirs too.


# %%
def make_batch(x, y):
    """Bundle inputs and targets so the model can read them by name."""
    Batch = collections.namedtuple("Batch", ["x", "y"])
    return Batch(x=x, y=y)


def batches(xs, ys, size=64, bundle=make_batch):
    for start in range(0, len(xs) - size + 1, size):
        yield bundle(xs[start : start + size], ys[start : start + size])


# %%
@jax.jit
def normalise(x):
    return (x - x.mean(axis=1, keepdims=True)) / (x.std(axis=1, keepdims=True) + 1e-6)


@jax.jit
def eval_loss(params, batch):
    hidden = jnp.tanh(batch.x @ params["w1"])
    return jnp.mean((hidden @ params["w2"] - batch.y) ** 2)


def evaluate(params, xs, ys, bundle=make_batch):
    """Mean loss over one pass of the data."""
    losses = []
    for batch in batches(xs, ys, bundle=bundle):
        batch = batch._replace(x=normalise(batch.x))
        losses.append(eval_loss(params, batch))
    return jnp.mean(jnp.stack(losses))


# %%
rng = np.random.default_rng(9)
XS = rng.normal(size=(6 * 64, 16)).astype(np.float32)
YS = rng.normal(size=(6 * 64, 4)).astype(np.float32)
W1, W2 = rng.normal(size=(16, 32)) / 4, rng.normal(size=(32, 4)) / 6
PARAMS = {"w1": jnp.asarray(W1, jnp.float32), "w2": jnp.asarray(W2, jnp.float32)}
N_BATCHES = len(XS) // 64
FEW = 3 * 64  # the first three batches: enough to read the logs

# %% [markdown]
# ### Step 1: which function compiles? A listener on the whole job
#
# We do not know yet which function is at fault, so we listen to all of them. JAX
# reports the duration of every backend compilation as the monitoring event
# `/jax/core/compile/backend_compile_duration`, with the function's name in the keyword
# argument `fun_name`. A listener that files each event under its name is a profiler
# for compilation that you can leave running in a long job.

# %%
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


compile_seconds: dict[str, list[float]] = collections.defaultdict(list)


def listener(event: str, duration: float, **kwargs) -> None:
    """Files every backend compilation's duration under its function's name."""
    if event == BACKEND_COMPILE:
        compile_seconds[kwargs.get("fun_name", "?")].append(duration)


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Before reading what the listener heard: how many times will <code>eval_loss</code>
# compile in one pass over the data? Can you see why from the code?</p></div>

# %%
normalise.clear_cache()  # start as a fresh process would, even when re-run
eval_loss.clear_cache()
compile_seconds.clear()
jax.monitoring.register_event_duration_secs_listener(listener)
try:
    before_loss = jax.block_until_ready(evaluate(PARAMS, XS, YS))
finally:
    jax.monitoring.unregister_event_duration_listener(listener)

# %% tags=["answer"] jupyter={"source_hidden": true}
for name, seconds in compile_seconds.items():
    print(f"{name:16} {len(seconds)} compilations, {1e3 * sum(seconds):4.0f} ms")
assert len(compile_seconds["jit(eval_loss)"]) == N_BATCHES
assert len(compile_seconds["jit(normalise)"]) == 1

# %% [markdown]
# One line of the table stands out: `eval_loss` compiled once per batch, while
# `normalise`, fed the very same arrays, compiled once. (The other rows are JAX's own
# small programs for `jnp.stack` and `jnp.mean`.) The listener is unregistered in a
# `finally`, so it stops collecting when the job ends, even if the job fails.

# %% [markdown]
# ### Step 2: what does it compile with? `log_compiles`
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Every batch has the same shapes and dtypes. Over the first three batches, what will
# the "Compiling jit(eval_loss)" lines say?</p></div>

# %%
with JaxLog() as log, jax.log_compiles():
    evaluate(PARAMS, XS[:FEW], YS[:FEW])
compiling = [line for line in log.lines if line.startswith("Compiling jit(eval_loss)")]

# %% tags=["answer"] jupyter={"source_hidden": true}
print(compiling[0])
print(len(compiling), "lines,", len(set(compiling)), "distinct")
assert len(compiling) == 3 and len(set(compiling)) == 1  # the same, three times

# %% [markdown]
# Three identical lines: the same shapes and dtypes compile again and again. So this
# is not lesson 01 or 02. Something other than the arrays changes between calls.
#
# ### Step 3: why? `explain_cache_misses`

# %%
with JaxLog() as log, jax.explain_cache_misses(True):
    evaluate(PARAMS, XS[:FEW], YS[:FEW])
misses = log.misses("for eval_loss defined at")
print(misses[-1])

# %%
assert len(misses) == 3 and all("different input pytree" in t for t in misses)
assert all("so their Python types differ" in text for text in misses)
assert "now <class '__main__.Batch'> and before <class '__main__.Batch'>" in misses[-1]

# %% [markdown]
# "Different input pytree" at input path `[0][1]` (the second positional argument, the
# batch): *now `Batch` and before `Batch`, so their Python types differ*. Two types with
# the same name. That sentence only makes sense if there are two classes called `Batch`.
#
# ### Step 4: confirm the hypothesis

# %%
first, second = make_batch(XS[:2], YS[:2]), make_batch(XS[:2], YS[:2])
same_class = type(first) is type(second)
same_tree = jax.tree_util.tree_structure(first) == jax.tree_util.tree_structure(second)
print("same class:", same_class, "| same pytree structure:", same_tree)
assert not same_class and not same_tree

# %% [markdown]
# There it is: `make_batch` runs `collections.namedtuple(...)` on every call, which
# creates a brand-new class each time. A namedtuple is a pytree whose node type is its
# class, so each batch has a new tree structure and a new cache key, while its arrays
# never change. Nothing in `eval_loss` is wrong, and no array-level tool (shapes,
# dtypes) could see it.
#
# ### Step 5: fix and measure, side by side
#
# The fix belongs upstream: define the class once, at module level. (Until their release
# ships, the same class can be applied at our boundary by passing `bundle=`.)
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>With the class defined once, how many compilations of <code>eval_loss</code> in one
# pass? And how much faster is the pass?</p></div>

# %%
Batch = collections.namedtuple("Batch", ["x", "y"])  # once, at module level


def make_batch_once(x, y):
    return Batch(x=x, y=y)


# %%
theirs = jitlab.measure(
    "namedtuple class made per call", lambda: evaluate(PARAMS, XS, YS), count=eval_loss
)
fixed = jitlab.measure(
    "namedtuple class defined once",
    lambda: evaluate(PARAMS, XS, YS, bundle=make_batch_once),
    count=eval_loss,
)

# %% tags=["answer"] jupyter={"source_hidden": true}
class_once = jitlab.compare(theirs, fixed)
assert theirs.compiles == N_BATCHES and fixed.compiles == 1, class_once.rows()
assert class_once.speedup > 2, class_once  # a wide margin; the counts are the claim
assert np.allclose(fixed.result, before_loss, rtol=1e-6)  # the same loss

# %% [markdown]
# ### Step 6: keep it fixed
#
# A fix that nothing checks comes undone. Two guards, one for the running job and one
# for the test suite. Inside `jax.no_tracing()` the fixed pass runs (everything is warm),
# and the old loader is stopped at its first batch, naming `eval_loss`.

# %%
with jax.no_tracing():
    guarded_loss = evaluate(PARAMS, XS, YS, bundle=make_batch_once)
their_loader = guarded(lambda: evaluate(PARAMS, XS, YS))
print(their_loader)
assert np.allclose(guarded_loss, fixed.result)
assert "re-tracing function eval_loss" in str(their_loader.error)


# %%
def test_eval_loss_traces_once_per_pass(bundle=make_batch_once):
    counted = jax.jit(chex.assert_max_traces(eval_loss.__wrapped__, n=1))
    for batch in batches(XS, YS, bundle=bundle):
        counted(PARAMS, batch)


passed = jitlab.attempt(test_eval_loss_traces_once_per_pass)
chex.clear_trace_counter()
failed = jitlab.attempt(test_eval_loss_traces_once_per_pass, bundle=make_batch)
chex.clear_trace_counter()
print("fixed loader:", passed, "| their loader:", failed)
assert not passed.raised and type(failed.error) is AssertionError, failed

# %% [markdown]
# ## The doctor on code you did not write
#
# Steps 1 to 4 took four tools and some careful reading, and each explanation named one
# kind of difference with one earlier key (at one place or several: the keyword call
# above had two `*` lines). The course's own tool, `jitlab doctor`, does the first three
# steps in one run. For every jitted function it reports the calls, traces and
# compilations, and the seconds they cost. For every miss it names **every** part of
# the cache key that changed, the line that made the call, and the lesson that teaches
# the fix. It decides from its own record of each call's arguments; JAX's explanation
# is shown next to its verdict, as a second opinion. On a script, from a terminal:
#
# ```console
# $ jitlab doctor -- python evaluate.py
# $ jitlab doctor --max-compiles eval_loss=1 -- python evaluate.py
# ```
#
# The second form exits with code 1 when `eval_loss` compiles more than once, which is
# what a CI job needs. From Python, put `with jitlab.doctor.watch() as doctor:` around
# the job and read `doctor.report()`.
#
# One rule decides what it can explain. The doctor learns each call's arguments by
# wrapping `jax.jit`, so it explains only functions that were jitted while it watched.
# The command watches from the program's first line. In this notebook, `eval_loss` was
# jitted long before:

# %%
with jitlab.doctor.watch() as doctor:
    evaluate(PARAMS, XS[:FEW], YS[:FEW])
too_late = doctor.report()
(counted,) = [other for other in too_late.unwatched if other.name == "eval_loss"]
print("eval_loss:", counted.compiles, "compilations, counted by name")
assert counted.compiles == FEW // 64  # one per batch, as in step 2
assert too_late.functions == []  # jitted before the watch: nothing explained

# %% [markdown]
# The doctor still counts `eval_loss`'s compilations, from JAX's events, but it never
# saw the arguments, so it cannot say why. To explain a notebook's code, start the
# doctor *before* the cells that define it: `jitlab.doctor.install()` wraps `jax.jit`
# from then on, and `jitlab.doctor.uninstall()` puts it back. (`%load_ext jitlab` does
# the same, and adds a cell magic, `%%jitlab_doctor`, that prints the report for one
# cell.)
#
# The colleague now sends their next script: the loss on each split of the data. The
# held-out split counts double, and every example is used, the short last batch
# included. It still bundles batches with their `make_batch`.

# %%
jitlab.doctor.install()  # from here on, jax.jit is watched


def all_batches(xs, ys, size=64, bundle=make_batch):
    """Every example: the short last batch too."""
    for start in range(0, len(xs), size):
        yield bundle(xs[start : start + size], ys[start : start + size])


def split_weight(name):
    """The held-out split counts double."""
    return 2 if name == "held_out" else 1.0


# %%
@jax.jit
def split_loss(params, batch, weight):
    hidden = jnp.tanh(batch.x @ params["w1"])
    return weight * jnp.mean((hidden @ params["w2"] - batch.y) ** 2)


def split_report(params, splits, bundle=make_batch):
    """Weighted mean loss per split."""
    report = {}
    for name, (xs, ys) in splits.items():
        weight = split_weight(name)
        batches_ = all_batches(xs, ys, bundle=bundle)
        losses = [split_loss(params, batch, weight) for batch in batches_]
        report[name] = float(jnp.mean(jnp.stack(losses)))
    return report


# %%
SPLITS = {"validation": (XS[:200], YS[:200]), "held_out": (XS[200:300], YS[200:300])}
CALLS = [  # (rows, the weight's Python type) of each call split_report makes
    (len(batch.x), type(split_weight(name)).__name__)
    for name, (xs, ys) in SPLITS.items()
    for batch in all_batches(xs, ys)
]

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>Six calls of <code>split_loss</code>. How many compilations? Which causes should
# the doctor name, with which lessons? And what will JAX's own explanation name?</p>
# </div>

# %%
with jitlab.doctor.watch() as doctor:
    split_losses = split_report(PARAMS, SPLITS)
report = doctor.report()
record = report.function("split_loss")

# %% tags=["answer"] jupyter={"source_hidden": true}
print(report)
assert record.calls == record.compiles == len(CALLS)  # every call compiled
assert set(report.causes("split_loss")) == {"shape", "weak_type", "pytree_structure"}
lessons = {"01 shapes", "03 python_scalars", "04 pytree_structure"}
assert report.lessons("split_loss") == lessons
for miss in record.recompiles:
    rows, weight_type = CALLS[miss.number - 1]
    earlier = CALLS[: miss.number - 1]
    assert "pytree_structure" in miss.causes  # a new Batch class at every call
    assert ("shape" in miss.causes) == (rows not in {r for r, _ in earlier})
    assert ("weak_type" in miss.causes) == (weight_type not in {t for _, t in earlier})
    assert miss.jax_causes == [
        "pytree_structure"
    ]  # JAX names the structure, and only that
    assert miss.call_site.endswith("in split_report")  # where their code made the call
assert "pytree        o" + "t" * (len(CALLS) - 1) in str(report)  # the timeline's row

# %% tags=["answer"] jupyter={"source_hidden": true}
differences = [d for miss in record.recompiles for d in miss.differences]
(weight_change,) = [d for d in differences if d.where == "weight"]
print(weight_change)
assert "(Python int)" in weight_change.now and "(Python float)" in weight_change.before

# %% [markdown]
# Six calls, six compilations, and three causes, each with its lesson:
#
# - **pytree structure** at every miss (lesson 04): `batch` is a `Batch` of another
#   class each time, the bug of the worked diagnosis, found without reading a line of
#   their code;
# - **array types (shape)** at the two short batches, 8 and 36 rows (lesson 01);
# - **array types (weak type)** at the first held-out call (lesson 03): the weight is
#   the Python int `2` there, and the Python float `1.0` for validation.
#
# Each paragraph gives the call site and the source line. Now read the "JAX says"
# lines: on every miss JAX names the pytree, and nothing else. It compares a call with
# one earlier key, and a structure difference ranks before a type difference, so the
# new class hides the shapes and the weight. The doctor compares the call with every
# earlier compilation and names every part that changed from the closest. The
# timeline shows it at a glance: a `t` in every column, an `s` or a `w` on top.
#
# The first fix is ours to make at the boundary: the class defined once, as in step 5.
# Run it again with a **budget**: `watch(["split_loss=1"])` allows one compilation,
# and `doctor.check()` raises `BudgetExceeded`, an `AssertionError` with the reasons,
# when the run used more. In a test that is a failure with an explanation; in pytest,
# `@pytest.mark.max_compiles(split_loss=1)` does the same.

# %%
split_loss.clear_cache()  # so JAX's explanations compare with this run only
with jitlab.doctor.watch(["split_loss=1"]) as doctor:
    fixed_split_losses = split_report(PARAMS, SPLITS, bundle=make_batch_once)
over_budget = jitlab.attempt(doctor.check).error
left = doctor.report()
print(over_budget)

# %%
assert type(over_budget) is jitlab.doctor.BudgetExceeded
assert isinstance(over_budget, AssertionError)  # pytest reports it as a failure
assert left.function("split_loss").compiles == len(set(CALLS))  # one per signature
assert set(left.causes("split_loss")) == {"shape", "weak_type"}
shape_misses = left.causes("split_loss")["shape"]
why = f"why: array types (shape) {shape_misses} (lesson 01); array types (weak type)"
assert why in " ".join(str(over_budget).split())  # the message names both causes
for name in SPLITS:  # same numbers, fewer compilations
    assert np.isclose(fixed_split_losses[name], split_losses[name], rtol=1e-6)
jitlab.doctor.uninstall()  # jax.jit is the real one again

# %% [markdown]
# With the class defined once, `split_loss` compiles once per distinct signature, and
# the budget's message names the two causes that remain, both in their code: pad the
# short batch and mask it (lesson 01), and write the weight as `2.0` (lesson 03). That
# message is the bug report to send them.

# %% [markdown]
# ## The procedure, in short
#
# 1. **Find the function.** `jitlab doctor -- python train.py` (or
#    `jitlab.doctor.watch()` around the job) lists every jitted function with its
#    compilations, and names the causes and the lessons. Without it: a
#    `jax.monitoring` listener on `backend_compile_duration` (or
#    `count_compiles(None)`), grouped by `fun_name`. Which function compiles more
#    often than it has distinct inputs? Whatever the doctor names, steps 2 to 4 check
#    it against the code.
# 2. **Look at what it compiles with.** `jax.log_compiles()`: do the shapes and dtypes
#    in the "Compiling" lines change? If they are identical, the cause is not the arrays.
# 3. **Ask why.** `jax.explain_cache_misses(True)`: read the kind of difference and the
#    `* at` line, then go to the caller and find where that argument is built.
# 4. **Confirm** with a one-line experiment (`type(a) is type(b)`, `make_jaxpr`, a dtype
#    print), fix, and **measure** the same way as before.
# 5. **Guard it**: `jax.no_tracing()` around the warm loop (it refuses any call that
#    misses the fast path, so keep effects such as `jax.debug.print` out of the guarded
#    loop; see [Which calls skip the fast path](#which-calls-skip-the-fast-path)), and
#    `chex.assert_max_traces` in a test.

# %% tags=["remove-input"]
jitlab.outro()
