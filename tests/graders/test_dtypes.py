"""The dtypes grader passes right answers and rejects each kind of wrong one.

The generic cheats (jit off, a copy of the kernel, a decoy, a callback, an in-place
change) are in test_generic_cheats.py. Every answer builds fresh jitted functions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tables import SEEDS, fails, passes

from jitlab.graders import dtypes


def standard(x):
    return (x - x.mean(axis=0)) / x.std(axis=0)


def kernel(body=lambda x, w: standard(x) @ w):
    def score_core(x, weights):  # count_compiles knows a function by its name
        return body(x, weights)

    return jax.jit(score_core)


def casting(core, cast=lambda b: jnp.asarray(b, jnp.float32)):
    return lambda batch, weights: core(cast(batch), weights)


def solution():
    core = kernel()
    return casting(core), core


def numpy_score(batch, weights):
    x = np.asarray(batch, np.float64)
    return (x - x.mean(axis=0)) / x.std(axis=0) @ np.asarray(weights, np.float64)


# ------------------------------------------------------------------ right answers


def right_answers():
    score, core = solution()
    yield score, core

    @jax.jit
    def own_arithmetic(x, weights):  # its own standardisation, through helpers
        centred = x - jnp.mean(x, axis=0, keepdims=True)
        return jnp.einsum("rc,c->r", centred / jnp.sqrt(jnp.mean(centred**2, axis=0)), weights)

    def prepare(batch):
        return batch.astype(np.float32)

    yield lambda b, w: np.asarray(own_arithmetic(prepare(b), jnp.asarray(w))), own_arithmetic
    core = kernel()
    yield casting(core, lambda b: np.asarray(b, np.float32)), core  # a NumPy cast
    score, core = solution()
    score(np.arange(12.0).reshape(4, 3), jnp.ones(3, jnp.float32))  # a warm cache
    yield score, core
    core = kernel()  # called by keyword, the batch cast by NumPy's astype on a copy
    yield lambda b, w: core(weights=jnp.asarray(w), x=np.array(b).astype(np.float32)), core


def memo_by_content(core, key=lambda b, w: b.tobytes()):
    """Scores remembered by the batch's bytes (and dtype): the same content, the old score."""
    memo = {}

    def score(batch, weights):
        found = (batch.dtype.str, key(batch, weights))
        if found not in memo:
            memo[found] = core(jnp.asarray(batch, F32), weights)
        return memo[found]

    return score


def test_right_answers_pass():
    for score, core in right_answers():
        passes(dtypes.grade, score, core)


# ------------------------------------------------------------------ wrong answers


def in_place(core):
    def score(batch, weights):
        x = jnp.asarray(batch, jnp.float32)
        batch[...] = 0  # the scores come from x; the caller's batch is wiped
        return core(x, weights)

    return score


def pure_callback_core():
    def on_host(x, weights):
        return numpy_score(x, weights).astype(np.float32)

    out = jax.ShapeDtypeStruct
    return kernel(lambda x, w: jax.pure_callback(on_host, out(x.shape[:1], jnp.float32), x, w))


def inside_a_jit(core):
    return casting(lambda b, w: jax.jit(lambda x, v: core(x, v))(b, w))


def per_column(core):
    return lambda b, w: jnp.zeros(b.shape[1]) + core(jnp.asarray(b, jnp.float32), w).mean()


def sample_std(x, w):
    return (x - x.mean(axis=0)) / jnp.std(x, axis=0, ddof=1) @ w


def uncast(core):
    return lambda b, w: core(b, w), core


def cast_to(dtype):
    return lambda c: (casting(c, lambda b: jnp.asarray(b, dtype)), c)


def kernel_of(body):
    return lambda _: (casting(core := kernel(body)), core)


F32 = jnp.float32
# fmt: off
WRONG = {  # name: (make (score, score_core) from a right score_core, the check, words in seen+hint)
    "no cast": (uncast, "compiles once", "received x as 4 dtypes"),
    "cast inside the kernel": (lambda _: uncast(kernel(lambda x, w: standard(x.astype(F32)) @ w)),
                               "compiles once", "a cast inside score_core comes after the cache"),
    "asarray without a dtype": (lambda c: (casting(c, jnp.asarray), c), "compiles once", "(dtype)"),
    "weak type from * 1.0": (lambda c: (casting(c, lambda b: jnp.asarray(b) * 1.0), c),
                             "compiles once", "weakly typed"),  # blind set 2
    "integer cast": (cast_to(jnp.int32), "matches the reference", "wrong for float"),
    "float16 cast": (cast_to(jnp.float16), "matches the reference", "float16"),
    "through float16 on the host": (lambda c: (casting(c, lambda b: jnp.asarray(
        np.asarray(b, np.float16), F32)), c), "matches the reference", "65,504"),
    "sample standard deviation": (kernel_of(sample_std), "matches the reference", "formula"),
    "one score per column": (lambda c: (per_column(c), c), "matches the reference", "per row"),
    "hard-coded zeros": (lambda c: (lambda b, w: np.zeros(64, np.float32)[: b.shape[0]], c),
                         "matches the reference", "every source dtype"),
    "NumPy instead of jit": (lambda _: (numpy_score, numpy_score), "compiled with jax.jit", ""),
    "a host callback": (lambda _: (casting(core := pure_callback_core()), core),
                        "computes inside its compiled program", ""),
    "bypass": (lambda c: (numpy_score, c), "calls score_core at every call", "never called"),
    "called inside another jit": (lambda c: (inside_a_jit(c), c), "calls score_core at every call",
                                  "not inside a jax.jit of your own"),
    "jitted boundary": (lambda c: (jax.jit(casting(c)), c), "plain Python function", ""),
    "batch wiped in place": (lambda c: (in_place(c), c), "arguments unchanged", ""),
    "memo by id(batch)": (lambda c: (lambda b, w, m={}: c(m.setdefault(id(b), jnp.asarray(
        b, F32)), w), c), "matches the reference", "id(batch)"),
    "memo by the batch's bytes": (lambda c: (memo_by_content(c), c), "matches the reference",
                                  "content an earlier call had"),
    "memo by the batch's and weights' bytes": (
        lambda c: (memo_by_content(c, lambda b, w: (b.tobytes(), np.asarray(w).tobytes())), c),
        "calls score_core at every call", "a memo keyed by content"),
    "batch sorted in place": (lambda c: (lambda b, w: b.sort(axis=0) or c(jnp.asarray(b, F32), w),
                                         c), "arguments unchanged", ""),
    "weights kept from the first call": (lambda c: (lambda b, w, kept=[]: c(jnp.asarray(b, F32),
        (kept or kept.append(jnp.asarray(w)) or kept)[0]), c), "matches the reference",
        "weights of the first call"),  # blind set 9
}
# fmt: on


@pytest.mark.parametrize("name", WRONG)
def test_a_wrong_answer_fails_its_check(name):
    make, check, words = WRONG[name]
    found = fails(dtypes.grade, *make(kernel()), check=check)
    assert words in found.seen + found.hint, found


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("standardise, words", [
    (lambda x: (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-6), ["eps", "spread"]),
    (lambda x: jax.nn.standardize(x, axis=0), ["eps", "mean(x**2)"]),  # 1e-5, and one pass
    (lambda x: (x - x.mean(0)) / jnp.sqrt((x * x).mean(0) - x.mean(0) ** 2), ["mean(x**2)"]),
], ids=["eps on the std", "jax.nn.standardize", "one-pass variance"])  # fmt: skip
def test_rejects_an_eps_or_a_one_pass_variance(standardise, words, seed):
    core = kernel(lambda x, w: standardise(x) @ w)
    fails(dtypes.grade, casting(core), core, check=dtypes.NUMBERS, hint=words, seed=seed)


def test_loader_yields_six_dtypes_of_one_shape():
    batches, weights = dtypes.make_loader(np.random.default_rng(0))
    assert {b.dtype for b in batches} == {np.dtype(d) for d in dtypes.SOURCE_DTYPES}
    assert len({b.shape for b in batches}) == 1
    assert all(w.dtype == np.float32 and w.shape == (batches[0].shape[1],) for w in weights)
    assert len({w.tobytes() for w in weights}) == len(batches)  # new weights with every batch
    assert all(np.all(b.std(axis=0) > 0) for b in batches)
