"""The compiling-less grader passes right answers and rejects each kind of wrong one.

Every learner function here is defined inside its test, so no test depends on what
another compiled; the grader makes a fresh kernel each round.
"""

from __future__ import annotations

import bisect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.graders import compiling_less
from jitlab.grading import GradingFailure

LENGTH = jax.ShapeDtypeStruct((), jnp.int32)
REPEAT = 5  # wrong answers that could pass by luck are graded this many times


def warm_up(fn, bucket_sizes, dtype):
    jitted = jax.jit(fn)
    return {
        size: jitted.lower(jax.ShapeDtypeStruct((size,), dtype), LENGTH).compile()
        for size in bucket_sizes
    }


def smallest_bucket(compiled, n):
    return min(size for size in compiled if size >= n)


def pad_numpy(x, size):
    padded = np.zeros(size, dtype=x.dtype)
    padded[: len(x)] = x
    return padded


def serve(requests, compiled):
    results = []
    for x in requests:
        size = smallest_bucket(compiled, len(x))
        results.append(compiled[size](pad_numpy(x, size), np.int32(len(x))))
    return results


# --- right answers ---------------------------------------------------------------------


def test_reference_solution_passes(capsys):
    compiling_less.grade(warm_up, serve)
    assert "All checks passed" in capsys.readouterr().out


def test_a_different_right_answer_passes():
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

    compiling_less.grade(warm_up_in_stages, serve_grouped)


# --- unsolved, crashed, switched off ---------------------------------------------------


def test_rejects_jit_switched_off_in_the_config():
    def warm_up_then_off(fn, bucket_sizes, dtype):
        executables = warm_up(fn, bucket_sizes, dtype)
        jax.config.update("jax_disable_jit", True)
        return executables

    try:
        with pytest.raises(GradingFailure, match="jit is on") as caught:
            compiling_less.grade(warm_up_then_off, serve)
    finally:
        jax.config.update("jax_disable_jit", False)
    assert "jit is switched off" in caught.value.seen


def test_rejects_serving_inside_disable_jit():
    def serve_without_jit(requests, compiled):
        with jax.disable_jit():
            return serve(requests, compiled)

    with pytest.raises(GradingFailure, match="jit is on") as caught:
        compiling_less.grade(warm_up, serve_without_jit)
    assert "disable_jit" in caught.value.hint


# --- warm_up ---------------------------------------------------------------------------


def test_rejects_lazy_jit_without_warm_up():
    def lazy_warm_up(fn, bucket_sizes, dtype):
        return {size: jax.jit(fn) for size in bucket_sizes}  # compiles on the first call

    with pytest.raises(GradingFailure, match="compiled executables"):
        compiling_less.grade(lazy_warm_up, serve)


def test_rejects_executables_of_another_function():
    # Compiled, one per bucket, but of the learner's own copy of summarise.
    def own_summarise(padded, n):
        valid = jnp.arange(padded.shape[0]) < n
        x = jnp.where(valid, padded.astype(jnp.float32), 0.0)
        return jnp.stack([x.sum() / n, x.std(), x.max()])

    def warm_up_own(fn, bucket_sizes, dtype):
        return warm_up(own_summarise, bucket_sizes, dtype)

    with pytest.raises(GradingFailure, match="compiles fn once per bucket"):
        compiling_less.grade(warm_up_own, serve)


def test_rejects_warm_up_for_the_wrong_dtype():
    def float32_only(fn, bucket_sizes, dtype):
        return warm_up(fn, bucket_sizes, jnp.float32)  # ignores `dtype`

    with pytest.raises(GradingFailure, match="size and dtype") as caught:
        compiling_less.grade(float32_only, serve)
    assert "float16" in caught.value.expected


# --- serve: compilation, types, the caller's data ---------------------------------------


def test_rejects_compiling_in_the_serving_loop():
    def lazy_summary(padded, n):
        valid = jnp.arange(padded.shape[0]) < n
        return jnp.sum(jnp.where(valid, padded, 0.0))

    lazy = jax.jit(lazy_summary)

    def serve_lazily(requests, compiled):  # a jitted call of its own in the loop
        out = serve(requests, compiled)
        for x in requests:
            lazy(pad_numpy(x, smallest_bucket(compiled, len(x))), len(x))
        return out

    with pytest.raises(GradingFailure, match="traces and compiles nothing") as caught:
        compiling_less.grade(warm_up, serve_lazily)
    assert "lazy_summary" in caught.value.seen


def test_rejects_padding_with_jnp_pad():
    def serve_jnp_pad(requests, compiled):
        results = []
        for x in requests:
            size = smallest_bucket(compiled, len(x))
            padded = jnp.pad(jnp.asarray(x), (0, size - len(x)))  # compiles per length
            results.append(compiled[size](padded, len(x)))
        return results

    with pytest.raises(GradingFailure, match="traces and compiles nothing") as caught:
        compiling_less.grade(warm_up, serve_jnp_pad)
    assert "pad" in caught.value.seen


def test_rejects_skipping_the_padding():
    def serve_unpadded(requests, compiled):
        return [compiled[smallest_bucket(compiled, len(x))](x, len(x)) for x in requests]

    with pytest.raises(GradingFailure, match="types it was compiled for") as caught:
        compiling_less.grade(warm_up, serve_unpadded)
    assert "TypeError" in caught.value.seen


def test_rejects_float64_padding():
    def serve_float64_padding(requests, compiled):
        results = []
        for x in requests:
            size = smallest_bucket(compiled, len(x))
            padded = np.zeros(size)  # float64: becomes float32, never float16
            padded[: len(x)] = x
            results.append(compiled[size](padded, len(x)))
        return results

    with pytest.raises(GradingFailure, match="types it was compiled for") as caught:
        compiling_less.grade(warm_up, serve_float64_padding)
    assert "float16" in caught.value.seen


def test_rejects_padding_the_callers_array_in_place():
    def serve_resize(requests, compiled):
        results = []
        for x in requests:
            n = len(x)
            size = smallest_bucket(compiled, n)
            x.resize(size, refcheck=False)  # pads with zeros, in the caller's array
            results.append(compiled[size](x, n))
        return results

    with pytest.raises(GradingFailure, match="leaves the caller's requests") as caught:
        compiling_less.grade(warm_up, serve_resize)
    assert "resize" in caught.value.hint


# --- serve: the bucket -----------------------------------------------------------------


def test_rejects_the_largest_bucket_for_everything():
    def serve_largest(requests, compiled):
        size = max(compiled)
        return [compiled[size](pad_numpy(x, size), len(x)) for x in requests]

    with pytest.raises(GradingFailure, match="smallest bucket"):
        compiling_less.grade(warm_up, serve_largest)


def test_rejects_strictly_greater_every_time():
    # `>` instead of `>=`: only a request exactly as long as a bucket tells them apart,
    # and the grader draws those on purpose, every run.
    def serve_strict(requests, compiled):
        results = []
        for x in requests:
            fits = [s for s in compiled if s > len(x)] or [max(compiled)]
            size = min(fits)
            results.append(compiled[size](pad_numpy(x, size), len(x)))
        return results

    for _ in range(REPEAT):
        with pytest.raises(GradingFailure, match="smallest bucket"):
            compiling_less.grade(warm_up, serve_strict)


def test_rejects_first_fitting_key_in_dict_order_every_time():
    # Right only when the sizes arrive sorted; the grader never passes them sorted.
    def serve_first_fit(requests, compiled):
        results = []
        for x in requests:
            size = next(s for s in compiled if s >= len(x))
            results.append(compiled[size](pad_numpy(x, size), len(x)))
        return results

    for _ in range(REPEAT):
        with pytest.raises(GradingFailure, match="smallest bucket"):
            compiling_less.grade(warm_up, serve_first_fit)


# --- serve: where the answers come from --------------------------------------------------


def test_rejects_numpy_answers_with_a_decoy_call_per_request():
    # Every executable is called as expected, but the answers are computed in NumPy.
    def serve_decoy(requests, compiled):
        serve(requests, compiled)  # the decoy calls, results thrown away
        return [np.array([x.astype(np.float64).mean(), x.std(), x.max()]) for x in requests]

    with pytest.raises(GradingFailure, match="what an executable returned"):
        compiling_less.grade(warm_up, serve_decoy)


def test_rejects_the_graders_own_reference():
    def serve_reference(requests, compiled):
        serve(requests, compiled)
        return [compiling_less._reference(x, 1.0, 0.0) for x in requests]

    with pytest.raises(GradingFailure, match="what an executable returned"):
        compiling_less.grade(warm_up, serve_reference)


def test_rejects_answers_without_the_executables():
    def serve_nothing(requests, compiled):
        return [np.zeros(3, np.float32) for _ in requests]

    with pytest.raises(GradingFailure, match="smallest bucket"):
        compiling_less.grade(warm_up, serve_nothing)


def test_rejects_bucket_size_as_length_and_says_so():
    def serve_wrong_n(requests, compiled):
        results = []
        for x in requests:
            size = smallest_bucket(compiled, len(x))
            results.append(compiled[size](pad_numpy(x, size), size))  # n should be len(x)
        return results

    with pytest.raises(GradingFailure, match="match the reference") as caught:
        compiling_less.grade(warm_up, serve_wrong_n)
    assert "not the bucket size" in caught.value.hint


def test_rejects_request_copied_to_the_end_and_says_so():
    def serve_right_aligned(requests, compiled):
        results = []
        for x in requests:
            size = smallest_bucket(compiled, len(x))
            padded = np.zeros(size, dtype=x.dtype)
            padded[size - len(x) :] = x  # at the end: the mask keeps the zeros
            results.append(compiled[size](padded, len(x)))
        return results

    with pytest.raises(GradingFailure, match="match the reference") as caught:
        compiling_less.grade(warm_up, serve_right_aligned)
    assert "front" in caught.value.hint
