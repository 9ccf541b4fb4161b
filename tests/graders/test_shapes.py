"""The shapes grader (exercise 01) passes right answers and rejects each kind of wrong one.

Every test builds its own functions, so no test depends on what another compiled.
"""

from __future__ import annotations

import bisect
import itertools
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.graders import shapes
from jitlab.grading import GradingFailure, recording

# ------------------------------------------------------------------ right answers


def next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def make_kernel():
    @jax.jit
    def padded_rms(padded, n):
        mask = jnp.arange(padded.shape[0]) < n
        return jnp.sqrt(jnp.sum(jnp.where(mask, padded * padded, 0.0)) / n)

    return padded_rms


def make_rms(kernel, size_fn):
    """A wrapper that reaches the kernel through a closure cell."""

    def rms(x):
        padded = np.zeros(size_fn(len(x)), dtype=np.float32)
        padded[: len(x)] = x
        return kernel(padded, len(x))

    return rms


def test_reference_solution_passes(capsys):
    kernel = make_kernel()
    shapes.grade(next_power_of_two, kernel, make_rms(kernel, next_power_of_two))
    assert "All checks passed" in capsys.readouterr().out


def test_a_different_right_answer_passes():
    # A table of buckets (not powers of two), a multiplied mask, np.pad, n as an int32
    # array, a float returned, and the kernel reached through a default argument.
    table = [16, 30, 58, 112, 220, 430, 850, 1000]

    def bucket_from_table(n):
        return table[bisect.bisect_left(table, n)]

    @jax.jit
    def padded_rms(padded, n):
        keep = (jnp.arange(padded.shape[0]) < n).astype(padded.dtype)
        return jnp.sqrt(jnp.sum((padded * keep) ** 2) / n)

    def rms(x, kernel=padded_rms):
        padded = np.pad(x, (0, bucket_from_table(len(x)) - len(x)))
        return float(kernel(padded, np.int32(len(x))))

    shapes.grade(bucket_from_table, padded_rms, rms)


def test_passes_with_a_warm_cache():
    kernel = make_kernel()
    rms = make_rms(kernel, next_power_of_two)
    for n in (3, 100, 700):
        rms(np.ones(n, np.float32))
    shapes.grade(next_power_of_two, kernel, rms)


# ------------------------------------------------------------------ buckets


def test_rejects_one_huge_bucket():
    def huge(n):
        return 4096

    kernel = make_kernel()
    with pytest.raises(GradingFailure, match="wastes less than half"):
        shapes.grade(huge, kernel, make_rms(kernel, huge))


def test_rejects_a_bucket_per_length():
    def exact(n):
        return n  # wastes nothing, but compiles once per length

    kernel = make_kernel()
    with pytest.raises(GradingFailure, match="lengths share a few buckets") as failure:
        shapes.grade(exact, kernel, make_rms(kernel, exact))
    assert "at most 12" in failure.value.expected  # the bound the exercise states


def test_rejects_more_buckets_than_the_stated_bound():
    sizes = [16]
    while sizes[-1] < 1000:
        sizes.append(int(sizes[-1] * 1.3) + 1)  # wastes little, but 15 sizes

    def fine_grained(n):
        return sizes[bisect.bisect_left(sizes, n)]

    kernel = make_kernel()
    with pytest.raises(GradingFailure, match="lengths share a few buckets"):
        shapes.grade(fine_grained, kernel, make_rms(kernel, fine_grained))


def test_rejects_a_bucket_one_too_big_for_powers_of_two():
    def doubling(n):
        return 1 << n.bit_length()  # 2n for a power of two: wastes exactly half

    kernel = make_kernel()
    with pytest.raises(GradingFailure, match="wastes less than half"):
        shapes.grade(doubling, kernel, make_rms(kernel, doubling))


# ------------------------------------------------------------------ the kernel


def test_rejects_unmasked_padding():
    @jax.jit
    def padded_rms(padded, n):
        return jnp.sqrt(jnp.mean(padded * padded))

    with pytest.raises(GradingFailure, match="ignores the padding") as failure:
        shapes.grade(next_power_of_two, padded_rms, make_rms(padded_rms, next_power_of_two))
    assert "mask" in failure.value.hint


def test_rejects_a_mask_that_keeps_one_padded_value():
    @jax.jit
    def padded_rms(padded, n):
        mask = jnp.arange(padded.shape[0]) <= n
        return jnp.sqrt(jnp.sum(jnp.where(mask, padded * padded, 0.0)) / n)

    for _ in range(5):  # never by luck: a length with padding is drawn every run
        with pytest.raises(GradingFailure, match="ignores the padding"):
            shapes.grade(next_power_of_two, padded_rms, make_rms(padded_rms, next_power_of_two))


def test_rejects_a_kernel_that_is_not_jitted():
    def padded_rms(padded, n):
        mask = jnp.arange(padded.shape[0]) < n
        return jnp.sqrt(jnp.sum(jnp.where(mask, padded * padded, 0.0)) / n)

    with pytest.raises(GradingFailure, match="padded_rms is compiled with jax.jit"):
        shapes.grade(next_power_of_two, padded_rms, make_rms(padded_rms, next_power_of_two))


def test_rejects_a_look_alike_of_a_jitted_function():
    class LooksJitted:
        def __call__(self, padded, n):
            return np.sqrt(np.sum(np.square(padded[:n])) / n)

        def lower(self, *args):
            raise NotImplementedError

        def trace(self, *args):
            raise NotImplementedError

        def clear_cache(self):
            pass

    fake = LooksJitted()
    with pytest.raises(GradingFailure, match="padded_rms is compiled with jax.jit"):
        shapes.grade(next_power_of_two, fake, make_rms(fake, next_power_of_two))


def test_rejects_a_kernel_that_calls_back_into_numpy():
    def numpy_rms(padded, n):
        return np.float32(np.sqrt(np.sum(np.square(padded[:n])) / n))

    @jax.jit
    def padded_rms(padded, n):
        out = jax.ShapeDtypeStruct((), jnp.float32)
        return jax.pure_callback(numpy_rms, out, padded, n)

    with pytest.raises(GradingFailure, match="computes inside its compiled program"):
        shapes.grade(next_power_of_two, padded_rms, make_rms(padded_rms, next_power_of_two))


def test_rejects_static_length():
    @partial(jax.jit, static_argnums=1)
    def padded_rms(padded, n):
        return jnp.sqrt(jnp.sum(padded[:n] ** 2) / n)

    # Two lengths in one bucket are drawn on purpose every run (checked 5 runs in a row;
    # one here, as each run compiles about 45 programs).
    with pytest.raises(GradingFailure, match="one compilation per bucket") as failure:
        shapes.grade(next_power_of_two, padded_rms, make_rms(padded_rms, next_power_of_two))
    assert "static" in failure.value.seen and "static" in failure.value.hint


# ------------------------------------------------------------------ the wrapper


def test_rejects_work_outside_jit():
    def numpy_rms(x):
        return np.sqrt(np.mean(np.square(x)))

    with pytest.raises(GradingFailure, match="rms returns what padded_rms computed"):
        shapes.grade(next_power_of_two, make_kernel(), numpy_rms)


def test_rejects_a_numpy_path_with_a_decoy_call():
    kernel = make_kernel()

    def rms(x):
        kernel(np.ones(next_power_of_two(len(x)), np.float32), 1)  # counted, then ignored
        return np.float32(np.sqrt(np.mean(np.square(x.astype(np.float64)))))

    with pytest.raises(GradingFailure, match="rms returns what padded_rms computed"):
        shapes.grade(next_power_of_two, kernel, rms)


def test_rejects_returning_the_graders_reference_with_a_decoy_call():
    kernel = make_kernel()
    honest = make_rms(kernel, next_power_of_two)

    def rms(x):
        honest(np.ones(3, np.float32))  # a real call, on other data
        return shapes._reference_rms(x)

    with pytest.raises(GradingFailure, match="rms returns what padded_rms computed"):
        shapes.grade(next_power_of_two, kernel, rms)


def test_rejects_an_answer_from_another_jitted_function():
    kernel = make_kernel()
    other = jax.jit(lambda x: jnp.sqrt(jnp.mean(x * x)))

    def rms(x):
        make_rms(kernel, next_power_of_two)(x)  # the right call, thrown away
        return other(x)

    with pytest.raises(GradingFailure, match="rms returns what padded_rms computed"):
        shapes.grade(next_power_of_two, kernel, rms)


def test_rejects_rms_that_never_calls_the_kernel_and_names_the_first_length():
    kernel = make_kernel()

    def rms(x):  # the right number, computed in NumPy: padded_rms is never called
        return np.float32(np.sqrt(np.mean(np.square(np.asarray(x, np.float32)))))

    with pytest.raises(GradingFailure, match="rms returns what padded_rms computed") as failure:
        shapes.grade(next_power_of_two, kernel, rms)
    assert "never called padded_rms (the first for length" in failure.value.seen
    assert "by that name" in failure.value.hint


def test_rejects_the_kernel_called_only_inside_another_jit():
    kernel = make_kernel()

    def rms(x):
        padded = np.zeros(next_power_of_two(len(x)), dtype=np.float32)
        padded[: len(x)] = x
        n = len(x)
        return jax.jit(lambda p: kernel(p, n))(padded)  # traced: kernel is inlined

    with pytest.raises(GradingFailure, match="rms returns what padded_rms computed") as failure:
        shapes.grade(next_power_of_two, kernel, rms)
    assert "while another function was being traced" in failure.value.seen
    assert "not inside a jax.jit of your own" in failure.value.hint


def test_rejects_a_jitted_wrapper():
    kernel = make_kernel()
    with pytest.raises(GradingFailure, match="rms is a plain Python function"):
        shapes.grade(next_power_of_two, kernel, jax.jit(make_rms(kernel, next_power_of_two)))


def test_rejects_padding_to_the_wrong_length():
    kernel = make_kernel()

    def rms(x):
        padded = np.zeros(len(x) + 1, np.float32)  # one spare slot: one shape per length
        padded[: len(x)] = x
        return kernel(padded, len(x))

    with pytest.raises(GradingFailure, match="one compilation per bucket") as failure:
        shapes.grade(next_power_of_two, kernel, rms)
    assert "bucket_size(" in failure.value.seen and "pad x to bucket_size" in failure.value.hint


def test_rejects_n_passed_as_two_types():
    kernel = make_kernel()
    calls = itertools.count()

    def rms(x):
        padded = np.zeros(next_power_of_two(len(x)), np.float32)
        padded[: len(x)] = x
        # A weakly typed Python int on odd calls, a strongly typed int32 on even ones:
        # two cache entries per bucket (the largest bucket gets about 24 of 50 calls).
        n = len(x) if next(calls) % 2 else np.int32(len(x))
        return kernel(padded, n)

    with pytest.raises(GradingFailure, match="one compilation per bucket") as failure:
        shapes.grade(next_power_of_two, kernel, rms)
    assert "2 different types" in failure.value.seen


def test_rejects_sorting_the_callers_array_in_place():
    kernel = make_kernel()
    honest = make_rms(kernel, next_power_of_two)

    def rms(x):
        x.sort()  # the RMS does not change, the caller's data does
        return honest(x)

    for _ in range(5):
        with pytest.raises(GradingFailure, match="rms leaves the caller.s arguments unchanged"):
            shapes.grade(next_power_of_two, kernel, rms)


def test_rejects_hard_coded_answer():
    kernel = make_kernel()

    def constant(x):
        return kernel(np.ones(8, np.float32), 8) * 0 + 1.0

    with pytest.raises(GradingFailure, match="rms matches the reference"):
        shapes.grade(next_power_of_two, kernel, constant)


def test_watch_calls_puts_every_name_back():
    kernel = make_kernel()
    rms = make_rms(kernel, next_power_of_two)
    with recording(rms, kernel) as recorder:
        rms(np.ones(5, np.float32))
        assert rms.__closure__ is not None
        assert any(cell.cell_contents is not kernel for cell in rms.__closure__)
    assert len(recorder.calls) == 1 and recorder.calls[0].args[1] == 5
    assert any(cell.cell_contents is kernel for cell in rms.__closure__)


# ------------------------------------------------------------------ part 2


@jax.jit
def loud_positions(x, threshold):
    loud = x > threshold
    (positions,) = jnp.nonzero(loud, size=x.shape[0], fill_value=-1)
    return positions, jnp.sum(loud)


def fresh_reference():
    return jax.jit(loud_positions.__wrapped__)


def test_positions_reference_passes(capsys):
    shapes.grade_positions(fresh_reference())
    assert "All checks passed" in capsys.readouterr().out


def test_positions_solved_by_sorting_passes():
    @jax.jit
    def by_sorting(x, threshold):
        n = x.shape[0]
        index = jnp.arange(n)
        order = jnp.sort(jnp.where(x > threshold, index, n + index))
        return jnp.where(order < n, order, -1), jnp.count_nonzero(x > threshold)

    shapes.grade_positions(by_sorting)


def test_positions_rejects_greater_or_equal():
    @jax.jit
    def at_least(x, threshold):
        (positions,) = jnp.nonzero(x >= threshold, size=x.shape[0], fill_value=-1)
        return positions, jnp.sum(x >= threshold)

    for _ in range(5):  # values equal to the threshold are drawn every run
        with pytest.raises(GradingFailure, match="above the threshold") as failure:
            shapes.grade_positions(at_least)
        assert ">=" in failure.value.hint


def test_positions_rejects_a_threshold_nudged_up():
    @jax.jit
    def nudged(x, threshold):
        loud = x > threshold + 1e-6  # misses values just above the threshold
        (positions,) = jnp.nonzero(loud, size=x.shape[0], fill_value=-1)
        return positions, jnp.sum(loud)

    for _ in range(5):
        with pytest.raises(GradingFailure, match="above the threshold"):
            shapes.grade_positions(nudged)


def test_positions_rejects_the_default_fill():
    @jax.jit
    def zero_filled(x, threshold):
        (positions,) = jnp.nonzero(x > threshold, size=x.shape[0])
        return positions, jnp.sum(x > threshold)

    with pytest.raises(GradingFailure, match="above the threshold") as failure:
        shapes.grade_positions(zero_filled)
    assert "fill_value=-1" in failure.value.hint


def test_positions_rejects_a_wrong_count():
    @jax.jit
    def slots(x, threshold):
        (positions,) = jnp.nonzero(x > threshold, size=x.shape[0], fill_value=-1)
        return positions, positions.shape[0]

    with pytest.raises(GradingFailure, match="above the threshold") as failure:
        shapes.grade_positions(slots)
    assert "count" in failure.value.expected


def test_positions_rejects_decreasing_order():
    @jax.jit
    def backwards(x, threshold):
        loud = x > threshold
        (positions,) = jnp.nonzero(loud, size=x.shape[0], fill_value=-1)
        flipped = jnp.sort(positions)[::-1]
        return jnp.where(jnp.arange(x.shape[0]) < jnp.sum(loud), flipped, -1), jnp.sum(loud)

    with pytest.raises(GradingFailure, match="above the threshold") as failure:
        shapes.grade_positions(backwards)
    assert "increasing order" in failure.value.hint


def test_positions_rejects_a_static_threshold():
    @partial(jax.jit, static_argnames="threshold")
    def static_threshold(x, threshold):
        loud = x > threshold
        (positions,) = jnp.nonzero(loud, size=x.shape[0], fill_value=-1)
        return positions, jnp.sum(loud)

    # A new threshold is drawn on purpose every run (checked 5 runs in a row).
    with pytest.raises(GradingFailure, match="compiles once") as failure:
        shapes.grade_positions(static_threshold)
    assert "threshold is static" in failure.value.seen


def test_positions_rejects_a_numpy_callback():
    def numpy_positions(x, threshold):
        found = np.flatnonzero(x > threshold)
        positions = np.full(x.shape[0], -1, np.int32)
        positions[: found.size] = found
        return positions, np.int32(found.size)

    @jax.jit
    def via_callback(x, threshold):
        shapes_out = (
            jax.ShapeDtypeStruct(x.shape, jnp.int32),
            jax.ShapeDtypeStruct((), jnp.int32),
        )
        return jax.pure_callback(numpy_positions, shapes_out, x, threshold)

    with pytest.raises(GradingFailure, match="computes inside its compiled program"):
        shapes.grade_positions(via_callback)


def test_positions_rejects_positions_without_a_count():
    @jax.jit
    def only_positions(x, threshold):
        return jnp.nonzero(x > threshold, size=x.shape[0], fill_value=-1)[0]

    with pytest.raises(GradingFailure, match="above the threshold") as failure:
        shapes.grade_positions(only_positions)
    assert "pair" in failure.value.expected


def test_positions_rejects_a_plain_function():
    with pytest.raises(GradingFailure, match="compiled with jax.jit"):
        shapes.grade_positions(loud_positions.__wrapped__)


def test_positions_rejects_disabled_jit():
    jax.config.update("jax_disable_jit", True)
    try:
        with pytest.raises(GradingFailure, match="jit is on"):
            shapes.grade_positions(fresh_reference())
    finally:
        jax.config.update("jax_disable_jit", False)


def test_positions_rejects_the_stub():
    @jax.jit
    def stub(x, threshold):
        raise NotImplementedError

    with pytest.raises(GradingFailure, match="computes inside") as failure:
        shapes.grade_positions(stub)
    assert "not solved yet" in failure.value.seen and "jitlab hint shapes" in failure.value.hint
