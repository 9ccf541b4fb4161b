"""The shapes grader passes right answers and rejects each kind of wrong one.

Every answer builds its own functions, so no test depends on what another compiled. Each
wrong answer fails the check of its row, with the key words of its verdict and hint.
"""

from __future__ import annotations

import bisect
import itertools
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tables import fails, passes, rows

from jitlab.graders import shapes


def next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def make_kernel(mask=lambda padded, n: jnp.arange(padded.shape[0]) < n):
    def padded_rms(padded, n):
        return jnp.sqrt(jnp.sum(jnp.where(mask(padded, n), padded * padded, 0.0)) / n)

    return jax.jit(padded_rms)


def make_rms(kernel, size_fn=next_power_of_two):
    """A wrapper that reaches the kernel through a closure cell."""

    def rms(x):
        padded = np.zeros(size_fn(len(x)), dtype=np.float32)
        padded[: len(x)] = x
        return kernel(padded, len(x))

    return rms


def answer(bucket_size=next_power_of_two, kernel=None, rms=None):
    """(bucket_size, padded_rms, rms), the right ones where not given."""
    kernel = kernel or make_kernel()
    return bucket_size, kernel, rms or make_rms(kernel, bucket_size)


def reference_rms(x):
    return np.float32(np.sqrt(np.mean(np.square(np.asarray(x, np.float64)))))


# ------------------------------------------------------------------ right answers

TABLE = [16, 30, 58, 112, 220, 430, 850, 1000]


def from_a_table():
    # A table of buckets (not powers of two), a mask cast to 0/1 and multiplied (XLA
    # turns it into a select: inf * 0 never happens), np.pad, n as an int32 array, a
    # float returned, and the kernel reached through a default argument.
    def bucket_from_table(n):
        return TABLE[bisect.bisect_left(TABLE, n)]

    @jax.jit
    def padded_rms(padded, n):
        keep = (jnp.arange(padded.shape[0]) < n).astype(padded.dtype)
        return jnp.sqrt(jnp.sum((padded * keep) ** 2) / n)

    def rms(x, kernel=padded_rms):
        padded = np.pad(x, (0, bucket_from_table(len(x)) - len(x)))
        return float(kernel(padded, np.int32(len(x))))

    return bucket_from_table, padded_rms, rms


def warm_cache():
    bucket_size, kernel, rms = answer()
    for n in (3, 100, 700):
        rms(np.ones(n, np.float32))
    return bucket_size, kernel, rms


def by_keyword():
    # The kernel called by keyword, padded by jnp.pad on a jax array, n as a NumPy int.
    bucket_size, kernel, _ = answer()

    def rms(x):
        x = jnp.asarray(x)
        padded = jnp.pad(x, (0, bucket_size(x.shape[0]) - x.shape[0]))
        return padded_rms(n=np.int64(x.shape[0]), padded=padded)

    padded_rms = kernel
    return bucket_size, kernel, rms


def n_as(kind, pad):
    """rms that pads with ``pad(x, size)`` and passes n as ``kind(len(x))``, by position."""

    def build():
        bucket_size, kernel, _ = answer()

        def rms(x):
            return kernel(pad(x, bucket_size(len(x))), kind(len(x)))

        return bucket_size, kernel, rms

    return build


def by_concatenation(x, size):
    return np.concatenate([x, np.zeros(size - len(x))])  # float64 padding: float32 inside jit


def only_n_by_keyword():
    bucket_size, kernel, _ = answer()

    def rms(x):
        return kernel(by_concatenation(x, bucket_size(len(x))), n=len(x))

    return bucket_size, kernel, rms


def through_a_dict():
    # The kernel reached through a dict: the grader never looks for it among rms's names.
    bucket_size, kernel, _ = answer()
    table = {"kernel": kernel}

    def rms(x):
        return table["kernel"](np.pad(x, (0, bucket_size(len(x)) - len(x))), len(x))

    return bucket_size, kernel, rms


RIGHT = {
    "reference": answer,
    "from a table": from_a_table,
    "warm cache": warm_cache,
    "by keyword": by_keyword,
    "only n by keyword": only_n_by_keyword,
    "jnp.int32 n, jnp.pad": n_as(jnp.int32, lambda x, size: jnp.pad(x, (0, size - len(x)))),
    "np.int32 n, concatenated": n_as(np.int32, by_concatenation),
    "int n, np.pad": n_as(int, lambda x, size: np.pad(x, (0, size - len(x)))),
    "through a dict": through_a_dict,
}


@pytest.mark.parametrize("right", RIGHT)
def test_right_answer_passes(right):
    passes(shapes.grade, *RIGHT[right]())


# ------------------------------------------------------------------ wrong answers

FINE = [16]
while FINE[-1] < 1000:
    FINE.append(int(FINE[-1] * 1.3) + 1)  # wastes little, but 15 sizes
SHORT_TABLE = [16, 32, 64, 128, 256, 512]  # forgets the lengths past 512
UP_TO_223 = {n: next_power_of_two(n) for n in range(1, 224)}


@partial(jax.jit, static_argnums=1)
def static_n(padded, n):
    return jnp.sqrt(jnp.sum(padded[:n] ** 2) / n)


@partial(jax.jit, static_argnames="n")
def static_by_name(padded, n):
    return jnp.sqrt(jnp.sum(padded[:n] ** 2) / n)


def n_by_name(kernel):
    def rms(x):
        padded = np.zeros(next_power_of_two(len(x)), np.float32)
        padded[: len(x)] = x
        return kernel(padded, n=len(x))

    return rms


def rms_of(make):
    """An answer whose rms is ``make(kernel)``."""

    def build():
        kernel = make_kernel()
        return answer(kernel=kernel, rms=make(kernel))

    return build


def two_types_of_n(kernel):
    calls = itertools.count()

    def rms(x):
        padded = np.zeros(next_power_of_two(len(x)), np.float32)
        padded[: len(x)] = x
        return kernel(padded, len(x) if next(calls) % 2 else np.int32(len(x)))

    return rms


def own_table(kernel):
    pads = {size: np.zeros(size, np.float32) for size in SHORT_TABLE}

    def rms(x):
        padded = pads[next_power_of_two(len(x))].copy()
        padded[: len(x)] = x
        return kernel(padded, len(x))

    return rms


def jit_off(kernel):
    def rms(x):
        with jax.disable_jit():
            return make_rms(kernel)(x)

    return rms


def numpy_when_short(kernel):
    def rms(x):
        return reference_rms(x) if len(x) < 100 else make_rms(kernel)(x)

    return rms


def numpy_when_odd(kernel):
    def rms(x):
        return reference_rms(x) if len(x) % 2 else make_rms(kernel)(x)

    return rms


def at(p):
    return jnp.arange(p.shape[0])


def multiplied(weights):
    """A kernel that multiplies the squares by ``weights(padded, n)`` instead of selecting."""
    return lambda: answer(kernel=jax.jit(lambda p, n: jnp.sqrt(jnp.sum(p * p * weights(p, n)) / n)))


def buckets(fn):
    return lambda: answer(fn)


def kernel(fn):
    return lambda: answer(kernel=fn)


HOLDS, FEW, PAD, ONE = "wastes less", "a few", "ignores the padding", "per bucket"
COMPILED = "runs padded_rms compiled"
PADS = "rms pads x"
CALL_ITSELF = ["call padded_rms(padded, n) itself"]
# fmt: off
WRONG = {  # answer: (the check it fails, words in expected + seen, in hint)
    "one huge bucket": (buckets(lambda n: 4096), HOLDS, [], []),
    "a bucket per length": (buckets(lambda n: n), FEW, ["at most 12"], []),
    "15 sizes": (buckets(lambda n: FINE[bisect.bisect_left(FINE, n)]), FEW, [], []),
    "2n for powers of two": (buckets(lambda n: 1 << n.bit_length()), HOLDS, [], []),
    "short table": (buckets(lambda n: SHORT_TABLE[bisect.bisect_left(SHORT_TABLE, n)]), HOLDS,
                    ["bucket_size(513) to return", "IndexError"], ["n=513"]),
    "dict to 223": (buckets(UP_TO_223.__getitem__), HOLDS, ["KeyError: 224"], ["n=224"]),
    "no mask": (multiplied(lambda p, n: 1.0 / p.shape[0] * n), PAD, [], ["from n on"]),
    "mask <= n": (kernel(make_kernel(lambda p, n: at(p) <= n)), PAD, [], ["< n, not <="]),
    "0/1 mask": (multiplied(lambda p, n: jnp.where(at(p) < n, 1.0, 0)), PAD, ["nan"],
                 ["inf or nan reached the result"]),
    "clipped mask": (multiplied(lambda p, n: jnp.clip(n - at(p), 0, 1)), PAD, ["inf and nan"], []),
    "unjitted kernel": (kernel(make_kernel().__wrapped__), "jax.jit", [], []),
    "static n": (kernel(static_n), ONE, ["n is static"], ["static"]),
    "static n by name": (lambda: answer(kernel=static_by_name, rms=n_by_name(static_by_name)),
                         ONE, ["n is static"], ["static_argnames"]),
    "numpy rms": (lambda: answer(rms=reference_rms), COMPILED,
                  ["0 compilations", "returned a float32"], CALL_ITSELF),
    "numpy when short": (rms_of(numpy_when_short), COMPILED,
                         ["the first of its bucket, compiled nothing", "returned a float32"],
                         CALL_ITSELF),
    "numpy when odd": (rms_of(numpy_when_odd), COMPILED, ["compiled nothing", "returned a float32"],
                       CALL_ITSELF),
    "jit off inside": (rms_of(jit_off), COMPILED, ["0 compilations", "jit switched off"],
                       CALL_ITSELF),
    "inside a jit": (rms_of(lambda k: make_rms(jax.jit(lambda p, n: k(p, n)))), COMPILED,
                     ["inside another jitted function in rms", "inlined"],
                     ["not inside a jax.jit"]),
    "jitted rms": (rms_of(lambda k: jax.jit(make_rms(k))), "plain Python", [], []),
    "one spare slot": (rms_of(lambda k: make_rms(k, lambda n: n + 1)), PADS,
                       ["compiled it", "a size other than bucket_size("], ["bucket_size(len(x))"]),
    # One compilation, right numbers: only the calls' compilations show it (every run).
    "largest bucket": (rms_of(lambda k: make_rms(k, lambda n: 1024)), PADS,
                       ["bucket_size(", "compiled nothing", "an array of 1024"],
                       ["the largest bucket"]),
    "bucket of len+1": (rms_of(lambda k: make_rms(k, lambda n: next_power_of_two(n + 1))), PADS,
                        ["the first of its bucket, compiled nothing", "one shape"],
                        ["was padded to bucket_size("]),
    # Finer than the buckets in one small bucket only (9..12 padded to 12): every bucket's
    # shortest and longest length are drawn, so this shows on every run.
    "finer in one bucket": (rms_of(lambda k: make_rms(k, lambda n: 12 if 9 <= n <= 12
                                                      else next_power_of_two(n))),
                            PADS, ["had compiled it", "a size other than bucket_size("],
                            ["bucket_size(len(x))"]),
    "n as two types": (rms_of(two_types_of_n), ONE, ["changing kinds", "weak_type"], ["same way"]),
    "sorts in place": (rms_of(lambda k: lambda x: (x.sort(), make_rms(k)(x))[1]), "unchanged",
                       ["x was changed in place"], []),  # the RMS does not change, the data does
    "hard-coded": (rms_of(lambda k: lambda x: k(np.ones(8, np.float32), 8) * 0 + 1.0),
                   "rms matches", [], []),
    "own table": (rms_of(own_table), "rms matches", ["KeyError: ", "x of length", "bucket_size("],
                  ["bucket_size(len(x))"]),  # the first length it has no pad for: any draw
}
# fmt: on
EVERY_DRAW = ["mask <= n", "0/1 mask", "clipped mask", "sorts in place", "own table"]
EVERY_DRAW += ["largest bucket", "bucket of len+1", "static n", "n as two types", "one spare slot"]
EVERY_DRAW += ["numpy when short", "numpy when odd", "finer in one bucket"]


@pytest.mark.parametrize(("wrong", "seed"), rows(WRONG, EVERY_DRAW))
def test_wrong_answer_is_rejected_and_named(wrong, seed):
    make, check, words, hint = WRONG[wrong]
    found = fails(shapes.grade, *make(), check=check, hint=hint, seed=seed)
    assert all(word in found.expected + found.seen for word in words), found


# ------------------------------------------------------------------ part 2


def positions_of(loud=lambda x, t: x > t, fill=-1, count=jnp.sum, **jit_options):
    def loud_positions(x, threshold):
        mask = loud(x, threshold)
        (positions,) = jnp.nonzero(mask, size=x.shape[0], fill_value=fill)
        return positions, count(mask)

    return jax.jit(loud_positions, **jit_options)


@jax.jit
def by_sorting(x, threshold):
    n = x.shape[0]
    order = jnp.sort(jnp.where(x > threshold, jnp.arange(n), n + jnp.arange(n)))
    return jnp.where(order < n, order, -1), jnp.count_nonzero(x > threshold)


@jax.jit
def by_scatter(x, threshold):
    # Each loud index goes to its rank; the others to len(x), out of bounds, dropped.
    loud = x > threshold
    slot = jnp.where(loud, jnp.cumsum(loud) - 1, x.shape[0])
    start = jnp.full(x.shape[0], -1)
    return start.at[slot].set(jnp.arange(x.shape[0]), mode="drop"), jnp.sum(loud)


@jax.jit
def scatter_to_minus_one(x, threshold):  # -1 is the last slot to .at[]: it wraps around
    loud = x > threshold
    slot = jnp.where(loud, jnp.cumsum(loud) - 1, -1)
    return jnp.full(x.shape[0], -1).at[slot].set(jnp.arange(x.shape[0])), jnp.sum(loud)


@pytest.mark.parametrize(
    "right",
    [positions_of, lambda: by_sorting, lambda: by_scatter],
    ids=["nonzero", "sort", "scatter"],
)
def test_positions_right_answer_passes(right):
    passes(shapes.grade_positions, right())


@jax.jit
def backwards(x, threshold):
    loud = x > threshold
    flipped = jnp.sort(jnp.nonzero(loud, size=x.shape[0], fill_value=-1)[0])[::-1]
    return jnp.where(jnp.arange(x.shape[0]) < jnp.sum(loud), flipped, -1), jnp.sum(loud)


@jax.jit
def via_callback(x, threshold):
    def numpy_positions(x, threshold):
        found = np.flatnonzero(x > threshold)
        padded = np.pad(found, (0, x.size - found.size), constant_values=-1)
        return padded.astype(np.int32), np.int32(found.size)

    out = (jax.ShapeDtypeStruct(x.shape, jnp.int32), jax.ShapeDtypeStruct((), jnp.int32))
    return jax.pure_callback(numpy_positions, out, x, threshold)


@jax.jit
def stub(x, threshold):
    raise NotImplementedError


FINDS = "above the threshold"
# fmt: off
POSITIONS_WRONG = {  # answer: (the check it fails, words in expected + seen, in hint)
    ">=": (lambda: positions_of(lambda x, t: x >= t, count=lambda m: jnp.sum(m)), FINDS, [],
           [">="]),
    "nudged threshold": (lambda: positions_of(lambda x, t: x > t + 1e-6), FINDS, [], []),
    "default fill": (lambda: positions_of(fill=0), FINDS, [], ["hold 0, not -1", "-1"]),
    "scatter to -1": (lambda: scatter_to_minus_one, FINDS, [],
                      ["last slot", "mode='drop'"]),
    "count of slots": (lambda: positions_of(count=lambda m: m.shape[0]), FINDS, ["count"], []),
    "int8 count": (lambda: positions_of(count=lambda m: m.sum(dtype="int8")), FINDS, ["int8"],
                   ["wrapped around"]),
    "decreasing": (lambda: backwards, FINDS, [], ["increasing order"]),
    "static threshold": (lambda: positions_of(static_argnames="threshold"), "compiles once",
                         ["threshold is static"], []),
    "callback": (lambda: via_callback, "computes inside", [], []),
    "no count": (lambda: jax.jit(lambda x, t: jnp.nonzero(x > t, size=x.size, fill_value=-1)[0]),
                 FINDS, ["pair"], []),
    "plain function": (lambda: positions_of().__wrapped__, "jax.jit", [], []),
    "stub": (lambda: stub, "computes inside", ["not solved yet"], ["jitlab hint shapes"]),
}
# fmt: on
# by the drawing: on every seed
DRAWN = (">=", "nudged threshold", "static threshold", "scatter to -1")


@pytest.mark.parametrize(("wrong", "seed"), rows(POSITIONS_WRONG, DRAWN))
def test_positions_wrong_answer_is_rejected_on_every_draw(wrong, seed):
    make, check, words, hint = POSITIONS_WRONG[wrong]
    found = fails(shapes.grade_positions, make(), check=check, hint=hint, seed=seed)
    assert all(word in found.expected + found.seen for word in words), found


def test_positions_rejects_disabled_jit():
    jax.config.update("jax_disable_jit", True)
    try:
        fails(shapes.grade_positions, positions_of(), check="jit is on")
    finally:
        jax.config.update("jax_disable_jit", False)
