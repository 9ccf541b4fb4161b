"""The compiling-less grader passes right answers and rejects each kind of wrong one. Each
row builds its answer in its test, and the grader makes a fresh kernel each round, so no
test depends on what another compiled."""

from __future__ import annotations

import bisect
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tables import fails, passes, rows

from jitlab.graders import compiling_less as cl
from jitlab.grading.checks import JIT_ON

LENGTH = jax.ShapeDtypeStruct((), jnp.int32)
jit_off = partial(jax.config.update, "jax_disable_jit", True)


@pytest.fixture(autouse=True)
def jit_back_on():  # after a row that switches jit off in the config
    yield
    jax.config.update("jax_disable_jit", False)


def warm_up(fn, bucket_sizes, dtype, length=LENGTH):
    jitted = jax.jit(fn)
    return {
        size: jitted.lower(jax.ShapeDtypeStruct((size,), dtype), length).compile()
        for size in bucket_sizes
    }


def smallest_bucket(compiled, n):
    return min(size for size in compiled if size >= n)


def pad_numpy(x, size):
    padded = np.zeros(size, dtype=x.dtype)
    padded[: len(x)] = x
    return padded


def serving(bucket=smallest_bucket, pad=pad_numpy, n=lambda x, size: np.int32(len(x))):
    """A ``serve`` built from its three choices; each wrong answer swaps one."""

    def serve(requests, compiled):
        results = []
        for x in requests:
            size = bucket(compiled, len(x))
            results.append(compiled[size](pad(x, size), n(x, size)))
        return results

    return serve


serve = serving()


def first_number(result):
    return np.asarray(result)[0]


def test_the_solution_and_a_different_right_answer_pass():
    # trace() then lower() then compile(), bisect on sorted sizes, np.pad, a Python int
    # for n, requests grouped by bucket and put back in order, results as NumPy arrays.
    def warm_up_in_stages(fn, bucket_sizes, dtype):
        out = {}
        for size in sorted(bucket_sizes, reverse=True):
            traced = jax.jit(fn).trace(jax.ShapeDtypeStruct((size,), dtype), LENGTH)
            out[size] = traced.lower().compile()
        return out

    def serve_grouped(requests, compiled):
        sizes = sorted(compiled)
        chosen = [sizes[bisect.bisect_left(sizes, len(x))] for x in requests]
        results = [None] * len(requests)
        for size in sizes:
            for i, x in enumerate(requests):
                if chosen[i] == size:
                    padded = np.pad(x, (0, size - len(x)))
                    results[i] = np.asarray(compiled[size](padded, len(x)))
        return results

    # lowered by keyword (JAX then keeps the arguments sorted by name: n before padded),
    # and called by keyword, as such an executable must be
    def warm_up_by_keyword(fn, bucket_sizes, dtype):
        specs = {s: jax.ShapeDtypeStruct((s,), dtype) for s in bucket_sizes}
        return {s: jax.jit(fn).lower(padded=spec, n=LENGTH).compile() for s, spec in specs.items()}

    def serve_by_keyword(requests, compiled):
        sizes = sorted(compiled)
        results = []
        for x in requests:
            size = sizes[bisect.bisect_left(sizes, len(x))]
            results.append(compiled[size](padded=pad_numpy(x, size), n=np.int32(len(x))))
        return results

    passes(cl.grade, warm_up, serve)
    passes(cl.grade, warm_up_in_stages, serve_grouped)
    passes(cl.grade, warm_up_by_keyword, serve_by_keyword)


# --- wrong answers ---------------------------------------------------------------------


def own_summarise(padded, n):  # not the fn warm_up was given
    x = jnp.where(jnp.arange(padded.shape[0]) < n, padded.astype(jnp.float32), 0.0)
    return jnp.stack([x.sum() / n, x.std(), x.max()])


def compile_in_the_loop():
    def lazy_summary(padded, n):
        return jnp.sum(jnp.where(jnp.arange(padded.shape[0]) < n, padded, 0.0))

    lazy = jax.jit(lazy_summary)

    def serve_lazily(requests, compiled):  # a jitted call of its own in the loop
        out = serve(requests, compiled)
        for x in requests:
            lazy(pad_numpy(x, smallest_bucket(compiled, len(x))), len(x))
        return out

    return serve_lazily


def serve_without_jit(requests, compiled):
    with jax.disable_jit():
        return serve(requests, compiled)


def padded_by_id():
    """Padded copies kept by id(x): the executables run on stale data once the caller
    refills its arrays (every call still goes through an executable)."""
    memo = {}
    return serving(pad=lambda x, size: memo.setdefault(id(x), pad_numpy(x, size)))


def memo_by_id(decoy):
    """Results kept by id(x): stale once the caller refills its arrays."""
    memo = {}

    def serve_memo(requests, compiled):
        fresh = serve(requests, compiled) if decoy else [None] * len(requests)
        out = []
        for x, result in zip(requests, fresh, strict=True):
            if id(x) not in memo:
                memo[id(x)] = result if decoy else serve([x], compiled)[0]
            out.append(memo[id(x)])
        return out

    return serve_memo


def kept_executables():
    """Executables kept by (size, dtype) across calls of warm_up: a new fn never compiles."""
    kept = {}

    def warm_up_kept(fn, bucket_sizes, dtype):
        fresh = [s for s in bucket_sizes if (s, np.dtype(dtype)) not in kept]
        kept.update({(s, np.dtype(dtype)): c for s, c in warm_up(fn, fresh, dtype).items()})
        return {s: kept[s, np.dtype(dtype)] for s in bucket_sizes}

    return warm_up_kept


def memo_by_contents():
    """Results kept by the request's bytes: a new fn's executables never see that request."""
    memo = {}

    def serve_memo(requests, compiled):
        for x in requests:
            if x.tobytes() not in memo:
                memo[x.tobytes()] = serve([x], compiled)[0]
        return [memo[x.tobytes()] for x in requests]

    return serve_memo


def popping(requests, compiled):  # the caller's list emptied
    return [serve([requests.pop(0)], compiled)[0] for _ in range(len(requests))]


def generating(requests, compiled):  # yield, not a list: nothing runs during the call
    yield from serve(requests, compiled)


def sorting(requests, compiled):  # the caller's list sorted, the results in its new order
    requests.sort(key=len)
    return serve(requests, compiled)


def beside_decoys(answer):  # the executables called, their results thrown away
    return lambda requests, compiled: serve(requests, compiled) and list(map(answer, requests))


def jnp_pad(x, size):
    return jnp.pad(jnp.asarray(x), (0, size - len(x)))


def right_aligned(x, size):  # at the end: the mask keeps the zeros
    return np.concatenate([np.zeros(size - len(x), x.dtype), x])


def strictly_greater(compiled, n):  # `>` for `>=`: told apart by the lengths drawn on purpose
    return min([s for s in compiled if s > n] or [max(compiled)])


def power_of_two(compiled, n):  # KeyError: the grader's sizes are not powers of two
    return 1 << max(n - 1, 1).bit_length()


def bisect_right(compiled, n):  # IndexError for a request as long as the largest bucket
    return sorted(compiled)[bisect.bisect_right(sorted(compiled), n)]


# fmt: off
WRONG_WARM_UP = {  # name: (warm_up, the check it fails), served by the right serve
    "jit off in the config": (lambda f, b, d: (warm_up(f, b, d), jit_off())[0], JIT_ON),
    "lazy jit": (lambda f, b, d: {s: jax.jit(f) for s in b}, cl.COMPILED_VALUES),
    "another function": (lambda f, b, d: warm_up(own_summarise, b, d), cl.COMPILES_ONCE),
    "ignores dtype": (lambda f, b, d: warm_up(f, b, jnp.float32), cl.TAKES_DTYPE),
    "n as float32": (lambda f, b, d: warm_up(f, b, d, jax.ShapeDtypeStruct((), jnp.float32)),
                     cl.TAKES_DTYPE),
    "n as int16, used so in serve too": (  # stop 42's weak spot: consistent, but not int32
        lambda f, b, d: warm_up(f, b, d, jax.ShapeDtypeStruct((), jnp.int16)), cl.TAKES_DTYPE),
    "executables kept by size and dtype": (kept_executables(), cl.COMPILES_ONCE),
}
WRONG_SERVE = {  # name: (a factory of serve, the check it fails), after the right warm_up
    "serve under disable_jit": (lambda: serve_without_jit, JIT_ON),
    "jit in the loop": (compile_in_the_loop, cl.NOTHING_COMPILED),
    "jnp.pad": (lambda: serving(pad=jnp_pad), cl.NOTHING_COMPILED),
    "no padding": (lambda: serving(pad=lambda x, size: x), cl.RIGHT_TYPES),
    "float64 padding": (lambda: serving(pad=lambda x, s: pad_numpy(x.astype(float), s)),
                        cl.RIGHT_TYPES),
    "resize in place": (lambda: serving(pad=lambda x, s: x.resize(s, refcheck=False) or x),
                        cl.REQUESTS_KEPT),
    "largest bucket": (lambda: serving(bucket=lambda c, n: max(c)), cl.SMALLEST_BUCKET),
    "no executables": (lambda: lambda r, c: [np.zeros(3, np.float32) for _ in r],
                       cl.SMALLEST_BUCKET),
    "NumPy beside decoys": (lambda: beside_decoys(
        lambda x: np.array([x.astype(np.float64).mean(), x.std(), x.max()])), cl.FROM_EXECUTABLES),
    "the grader's reference": (lambda: beside_decoys(lambda x: cl._reference(x, 1.0, 0.0)),
                               cl.FROM_EXECUTABLES),
    "bucket size as n": (lambda: serving(n=lambda x, size: size), cl.NUMBERS),
    "copied to the end": (lambda: serving(pad=right_aligned), cl.NUMBERS),
    "jnp.int32 for n": (lambda: serving(n=lambda x, size: jnp.int32(len(x))), cl.NOTHING_COMPILED),
    "pops the caller's list": (lambda: popping, cl.REQUESTS_KEPT),
    "sorts the caller's list": (lambda: sorting, cl.REQUESTS_KEPT),
    "a generator": (lambda: generating, cl.SMALLEST_BUCKET),
    "results kept by contents": (memo_by_contents, cl.SMALLEST_BUCKET),
}
ON_EVERY_DRAW = {  # rules only some inputs expose, graded on three seeds
    ">": (lambda: serving(bucket=strictly_greater), cl.SMALLEST_BUCKET),
    "first key that fits": (lambda: serving(bucket=lambda c, n: next(s for s in c if s >= n)),
                            cl.SMALLEST_BUCKET),
    "memo by id": (lambda: memo_by_id(False), cl.SMALLEST_BUCKET),
    "memo by id, decoys": (lambda: memo_by_id(True), cl.FROM_EXECUTABLES),
    "padded copies by id": (padded_by_id, cl.NUMBERS),
    "powers of two": (lambda: serving(bucket=power_of_two), cl.SMALLEST_BUCKET),
    "bisect_right": (lambda: serving(bucket=bisect_right), cl.SMALLEST_BUCKET),
    "results as lists": (lambda: lambda r, c: [np.asarray(y).tolist() for y in serve(r, c)],
                         cl.ONE_RESULT_EACH),  # blind set 9
    "results out of order": (lambda: lambda r, c: sorted(serve(r, c), key=first_number),
                             cl.NUMBERS),
}
# fmt: on
HINT = {  # what a verdict's hint must hold
    "executables kept by size and dtype": ["kept from an earlier call"],
    "jnp.int32 for n": ["np.int32(len(x))"],
    "pops the caller's list": ["requests.pop()"],
    "sorts the caller's list": ["sorted(requests, key=len)"],
    "a generator": ["generator", "return a list"],
    "results kept by contents": ["contents", "new fn"],
}
WORDS = {  # what a verdict must hold, where more than its check
    "jit off in the config": ["jit is switched off"],
    "ignores dtype": ["float16["],
    "n as float32": ["float32[]", "int32 scalar"],
    "n as int16, used so in serve too": ["int16[]", "int32 scalar"],
    "serve under disable_jit": ["disable_jit"],
    "jit in the loop": ["lazy_summary"],
    "jnp.pad": ["pad"],
    "no padding": ["TypeError"],
    "float64 padding": ["float16"],
    "resize in place": ["resize"],
    "bucket size as n": ["not the bucket size"],
    "copied to the end": ["front"],
    ">": ["calls per bucket"],
    "first key that fits": ["not arrive sorted"],
    "memo by id": ["refilled", "id(x)"],
    "memo by id, decoys": ["refilled", "id(x)"],
    "padded copies by id": ["padded copy"],
    "powers of two": ["KeyError", "keys of"],
    "bisect_right": ["IndexError", "length"],
    "results as lists": ["list", "tolist"],
    "results out of order": ["order of the requests"],
    "executables kept by size and dtype": ["0 compilation(s)"],
    "jnp.int32 for n": ["convert_element_type"],
    "pops the caller's list": ["0 left in it"],
    "sorts the caller's list": ["another order"],
}
WRONG = WRONG_WARM_UP | WRONG_SERVE


@pytest.mark.parametrize(("name", "seed"), rows(WRONG) + rows(ON_EVERY_DRAW, ON_EVERY_DRAW))
def test_wrong_answers_fail_their_check(name, seed):
    answer, check = (WRONG | ON_EVERY_DRAW)[name]
    warm, serve_fn = (answer, serve) if name in WRONG_WARM_UP else (warm_up, answer())
    words, hint = WORDS.get(name, ()), HINT.get(name, ())
    fails(cl.grade, warm, serve_fn, check=check, words=words, hint=hint, seed=seed)
