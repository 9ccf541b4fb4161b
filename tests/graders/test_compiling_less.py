"""The compiling-less grader passes the solution and rejects the plausible wrong answers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.graders import compiling_less
from jitlab.grading import GradingFailure

LENGTH = jax.ShapeDtypeStruct((), jnp.int32)


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


def test_reference_solution_passes():
    compiling_less.grade(warm_up, serve)


def test_rejects_unfinished_stub():
    def stub(*args):
        raise NotImplementedError

    with pytest.raises(GradingFailure, match="not solved yet"):
        compiling_less.grade(stub, stub)


def test_rejects_lazy_jit_without_warm_up():
    def lazy_warm_up(fn, bucket_sizes, dtype):
        return {size: jax.jit(fn) for size in bucket_sizes}  # compiles on the first request

    with pytest.raises(GradingFailure, match="compiled executables"):
        compiling_less.grade(lazy_warm_up, serve)


lazy_summarise = jax.jit(compiling_less.make_summarise("lazy_summarise"))


def test_rejects_compiling_in_the_serving_loop():
    def serve_lazily(requests, compiled):  # ignores the executables it is given
        return [
            lazy_summarise(pad_numpy(x, smallest_bucket(compiled, len(x))), len(x))
            for x in requests
        ]

    with pytest.raises(GradingFailure, match="traces and compiles nothing") as caught:
        compiling_less.grade(warm_up, serve_lazily)
    assert "lazy_summarise" in caught.value.seen


def test_rejects_warm_up_for_the_wrong_dtype():
    def float32_only(fn, bucket_sizes, dtype):
        return warm_up(fn, bucket_sizes, jnp.float32)  # ignores `dtype`

    with pytest.raises(GradingFailure, match="takes a padded float16 request"):
        compiling_less.grade(float32_only, serve)


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

    with pytest.raises(GradingFailure, match=r"types it was compiled for") as caught:
        compiling_less.grade(warm_up, serve_float64_padding)
    assert "float16" in caught.value.seen


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


def test_rejects_the_largest_bucket_for_everything():
    def serve_largest(requests, compiled):
        size = max(compiled)
        return [compiled[size](pad_numpy(x, size), len(x)) for x in requests]

    with pytest.raises(GradingFailure, match="smallest bucket"):
        compiling_less.grade(warm_up, serve_largest)


def test_rejects_answers_computed_without_the_executables():
    def serve_numpy(requests, compiled):
        return [compiling_less.reference(x) for x in requests]

    with pytest.raises(GradingFailure, match="smallest bucket"):
        compiling_less.grade(warm_up, serve_numpy)


def test_rejects_bucket_size_as_length():
    def serve_wrong_n(requests, compiled):
        results = []
        for x in requests:
            size = smallest_bucket(compiled, len(x))
            results.append(compiled[size](pad_numpy(x, size), size))  # n should be len(x)
        return results

    with pytest.raises(GradingFailure, match="match the reference"):
        compiling_less.grade(warm_up, serve_wrong_n)
