"""Grader for dtypes: the plain ``score(batch, weights)`` casts each of the loader's
batches and calls the jitted ``score_core(x, weights)`` (standardised columns @ weights),
which must compile once for the pass. A wrong number names the dtypes it is wrong for.

What the drawing covers, every run, and the wrong rule it breaks:

===================================================  ======================================
two batches of each of six source dtypes, shuffled   a dtype left uncast
float batches with fractions                         a cast to an integer type (truncates)
int16 readings below zero, uint8 up to 255           a cast through a narrower integer type
a column with a spread of TINY in each float batch   an eps added to the std or the variance
                                                     (jax.nn.standardize adds 1e-5 to it)
a counter column at 50,000-100,000 (int32, int64)  a one-pass variance, mean(x**2) -
                                                     mean(x)**2, in float32 (loses its digits)
no constant column                                   (the z-scores are defined)
each dtype's second batch in its first one's array   a memo keyed by id(batch): a loader's
(refilled in place)                                  freed batch's id comes back too
new weights with every batch                         weights kept from an earlier call
an earlier batch's content again, in a new array,   a memo keyed by the batch's content
with new weights; another with its own weights      (bytes): an old score, or no call
===================================================  ======================================

The checks named from :mod:`jitlab.grading.kernel`'s templates, as the learner sees them:
- score_core is compiled with jax.jit
- score is a plain Python function
- score_core computes inside its compiled program
- score leaves the caller's arguments unchanged
- score calls score_core with jit on
- score calls score_core at every call
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

from jitlab.grading import Call, Hints, fail, grader, why
from jitlab.grading import kernel as k
from jitlab.grading.checks import Grading, as_numbers, shorten, wrong_cases
from jitlab.instruments import signature as sig

SOURCE_DTYPES: tuple[type, ...] = (np.float64, np.float32, np.int32, np.int64, np.uint8, np.int16)
RTOL = ATOL = 1e-4  # float32 accuracy, with room; float16 and integer casts miss by far more
TINY = 1e-4  # the spread of one column of every float batch
COUNTERS = ("int32", "int64")  # one column of theirs is at 50,000 to 100,000, spread 1,000
HINTS = {  # by standard check, by the doctor's cause (for the count), by kind of wrong number
    k.PLAIN.name: """remove @jax.jit from score; the cast happens in score, the arithmetic in
        score_core""",
    k.UNCHANGED.name: "work on a converted copy (jnp.asarray makes one); never write into batch",
    sig.DTYPE: """in score, before calling score_core, convert every batch to one float dtype
        (jnp.asarray takes a dtype); a cast inside score_core comes after the cache lookup,
        which already used the dtype x had when it reached score_core""",
    sig.WEAK_TYPE: """score_core received x in one dtype, but weakly typed (~) at some calls
        and not at others, and a weak type is another cache key: arithmetic with a Python
        number on an integer batch (jnp.asarray(batch) * 1.0) gives a weakly typed float32;
        convert with a dtype instead, jnp.asarray(batch, dtype=jnp.float32)""",
    sig.KEYWORD: "pass x and weights the same way on every call",
    "rows": "return one score per row: z @ weights has shape (rows,)",
    "narrow": """score_core received {narrow}, which keeps only about three significant
        digits: cast to float32""",
    "integer": """the float batches lose their fractions: cast to float32, not to an integer
        type (which truncates)""",
    "eps": f"""each float batch has a column whose spread is about {TINY}: an eps added to the
        standard deviation or the variance (jax.nn.standardize adds one) changes its
        z-scores; divide by jnp.std itself""",
    "overflow": """the int32 and int64 batches' counter column (50,000 to 100,000) came out as
        inf or nan: a cast through float16 on the way (its largest value is 65,504)
        overflows it; cast each batch straight to float32""",
    "one pass": """the int32 and int64 batches have a counter column in the tens of thousands
        with a spread of hundreds: a variance taken as mean(x**2) - mean(x)**2 in float32
        loses its digits (jax.nn.standardize takes it so); subtract the mean first, as
        jnp.std does""",
    "formula": """the formula is wrong whatever the dtype: standardise each column (axis=0)
        with the population standard deviation (jnp.std, ddof=0), then z @ weights""",
    "other": "compute every batch in float32; the {wrong} batches come out wrong",
    "weights": """the scores match the weights of the first call, not the weights each call
        was given: use the weights you are given on every call, and remember nothing
        between calls""",
    "content": """only the batches whose content an earlier call had (handed over again, in
        a new array) come out wrong: remember nothing between calls (a memo keyed by the
        batch's content returns the old score, whatever the weights); compute every call""",
    "memo": """only the batches handed over in an array that an earlier batch came in
        (refilled with new readings, as a loader may reuse its buffers) come out wrong:
        remember nothing between calls (a cache keyed by id(batch) returns the old batch's
        work), and convert the batch on every call""",
}
HINTS = Hints(HINTS)
SCORE = k.KernelExercise("score", "score_core", "score_core(x, weights)", HINTS)
NUMBERS = "score matches the reference for every source dtype"
ONCE = "score_core compiles once for a pass of the loader"
CHECKS = (*SCORE.names(k.JITTED, k.PLAIN, k.NO_CALLBACKS, k.UNCHANGED), NUMBERS)
CHECKS += (*SCORE.names(k.JIT_ON, k.CALLS_KERNEL), ONCE)


def _reference(batch: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Standardise each column (population standard deviation), then weight and sum."""
    wide = np.asarray(batch, np.float64)
    return (wide - wide.mean(axis=0)) / wide.std(axis=0) @ np.asarray(weights, np.float64)


def make_batch(rng: np.random.Generator, dtype: type, shape: tuple[int, int]) -> np.ndarray:
    """One batch of ``dtype`` with values that suit it (and no constant column)."""
    if np.dtype(dtype).kind == "f":
        values = rng.normal(50.0, 12.0, size=shape)
        values[:, rng.integers(shape[1])] = rng.normal(0.0, TINY, size=shape[0])
    else:
        low, high = (0, 256) if dtype is np.uint8 else (-500, 500)
        values = rng.integers(low, high, size=shape)
        if np.dtype(dtype).name in COUNTERS:
            values[:, rng.integers(shape[1])] += rng.integers(50_000, 100_000)
    batch = values.astype(dtype)
    batch[0] = batch[1] + (TINY if np.dtype(dtype).kind == "f" else 1)  # no constant column
    return batch


def make_loader(rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """A shuffled pass of the loader (same shape, two batches of each dtype), and weights
    for each batch: the contract lets them change from call to call."""
    rows, cols = int(rng.integers(24, 65)), int(rng.integers(4, 13))
    dtypes = [d for d in SOURCE_DTYPES for _ in range(2)]
    batches = [make_batch(rng, dtypes[i], (rows, cols)) for i in rng.permutation(len(dtypes))]
    return batches, [rng.normal(size=cols).astype(np.float32) for _ in batches]


def with_repeats(
    rng: np.random.Generator, batches: list[np.ndarray], weights: list[np.ndarray]
) -> list[int]:
    """Append copies of two earlier batches, new arrays with the same content: the first
    with new weights, the second with its own weights again (copied). Returns, for each
    call, the earlier call whose batch content it repeats (-1 for none)."""
    first, second = (int(j) for j in rng.choice(len(batches), size=2, replace=False))
    repeats = [-1] * len(batches) + [first, second]
    batches += [batches[first].copy(), batches[second].copy()]
    weights += [rng.normal(size=weights[0].shape).astype(np.float32), weights[second].copy()]
    return repeats


def _x_dtype(call: Call) -> str:
    """The dtype ``x`` reached score_core with, as JAX canonicalised it."""
    x = next(iter(call.arguments.values()), None)
    try:
        return jax.typeof(x).dtype.name
    except TypeError:
        return type(x).__name__


def _finite(value: Any) -> bool:
    numbers = as_numbers(value)
    return numbers is None or bool(np.isfinite(numbers).all())


def _numbers_hint(
    wrong: list[str], right: list[str], shape_wrong: bool, reached: list[str], finite: bool
) -> str:
    """The likeliest cause, from the dtypes that went wrong and those x reached score_core
    as; ``finite``: whether every wrong result was finite (an overflow makes inf or nan)."""
    narrow = [name for name in reached if name in ("float16", "bfloat16")]
    floats = [name for name in wrong if np.dtype(name).kind == "f"]
    ints = set(wrong) - set(floats)
    if shape_wrong or narrow:
        kind = "rows" if shape_wrong else "narrow"
    elif not finite and set(COUNTERS) <= set(wrong):
        kind = "overflow"
    elif right and ints and ints <= set(COUNTERS):
        kind = "one pass"
        if floats:  # jax.nn.standardize: an eps and one pass
            return HINTS["eps"] + ". Also: " + HINTS["one pass"]
    elif right and all(np.dtype(name).kind == "f" for name in wrong):
        integer = reached and all(np.dtype(name).kind in "iu" for name in reached)
        kind = "integer" if integer else "eps"
    else:
        kind = "other" if right else "formula"
    return HINTS[kind].format(narrow=narrow[:1] and narrow[0], wrong=", ".join(wrong))


@grader("dtypes", checks=CHECKS, hints=HINTS)
def grade(grading: Grading, score: Callable[..., Any], score_core: Callable[..., Any]) -> None:
    """Grade the exercise. Raises ``GradingFailure`` at the first failed check."""
    rng = grading.rng
    batches, weights = make_loader(rng)
    repeats = with_repeats(rng, batches, weights)
    SCORE.jitted(grading, score_core)
    SCORE.plain(
        grading, score
    )  # the standard verdict: score compiles per signature, score_core inlined
    SCORE.no_callbacks(grading, score_core, np.asarray(batches[0], np.float32), weights[0])

    about = lambda i: f"a {np.asarray(batches[i]).dtype} batch"  # noqa: E731
    refilled: list[int] = []  # each dtype's second batch, written into its first one's array

    def loader() -> Iterator[tuple[tuple, dict]]:
        held: dict[np.dtype, np.ndarray] = {}
        for i, batch in enumerate(batches):
            if repeats[i] >= 0:  # an earlier content in a new array: not refilled
                yield (batch, weights[i]), {}
                continue
            if batch.dtype in held:
                held[batch.dtype][...], batch = batch, held[batch.dtype]
                refilled.append(i)
            held[batch.dtype] = batch
            yield (batch, weights[i]), {}

    run = SCORE.run(
        grading,
        score,
        score_core,
        loader(),
        check=NUMBERS,
        refills=True,
        about=about,
        callbacks=True,
    )
    copies = [args[0] for args, _ in run.copies]
    SCORE.unchanged(grading, run, what=lambda i: f"the {copies[i].dtype.name} batch")
    reached = sorted({_x_dtype(during[-1]) for during in run.calls if during})
    wants = [_reference(b, w) for b, w in zip(copies, weights, strict=True)]
    # The outputs that the first call's weights explain: a score that kept them.
    with_first = [_reference(b, weights[0]) for b in copies]
    kept = set(range(len(copies))) - set(wrong_cases(run.outputs, with_first, rtol=RTOL, atol=ATOL))
    bad = wrong_cases(run.outputs, wants, rtol=RTOL, atol=ATOL)
    wrong = list(dict.fromkeys(copies[i].dtype.name for i in bad))
    right = [name for name in dict.fromkeys(b.dtype.name for b in copies) if name not in wrong]
    if wrong:
        first, want = bad[0], wants[bad[0]]
        shapes = [np.shape(as_numbers(run.outputs[i])) for i in bad]  # () when not numbers
        raise fail(
            NUMBERS,
            expected=f"the reference for every dtype, e.g. for a {wrong[0]} batch: "
            f"{shorten(str(np.round(want, 4).tolist()), 90)} (shape {want.shape})",
            seen=(
                f"wrong for {len(bad)} of the {len(repeats) - repeats.count(-1)} batches whose "
                "content an earlier call had, handed over again in a new array"
                if all(repeats[i] >= 0 for i in bad)
                else f"wrong for {len(bad)} of the {len(refilled)} batches that came in an "
                "earlier batch's array, refilled, and right for every batch in a new array"
                if set(bad) <= set(refilled)
                else f"wrong for {', '.join(wrong)}"
                + (f"; right for {', '.join(right)}" if right else " (every source dtype)")
            )
            + f"; for that {wrong[0]} batch: {shorten(repr(run.outputs[first]), 90)}",
            hint=HINTS["content"]
            if all(repeats[i] >= 0 for i in bad)
            else HINTS["memo"]
            if set(bad) <= set(refilled)
            else HINTS["weights"]
            if set(bad) <= kept
            else _numbers_hint(
                wrong,
                right,
                any(s != want.shape for s in shapes),
                reached,
                all(_finite(run.outputs[i]) for i in bad),
            ),
        )
    grading.passed(NUMBERS)
    SCORE.jit_on(grading, run.recorder)
    again = lambda i: (  # noqa: E731
        f"call {i + 1}, a batch with call {repeats[i] + 1}'s content in a new array: a memo "
        "keyed by content answers it without score_core"
        if repeats[i] >= 0
        else f"call {i + 1}"
    )
    SCORE.calls_kernel(grading, run, first=again)
    found = why(run.recorder, label=lambda i: f"call {i + 1} of score_core")
    received = f"score_core received x as {len(reached)} dtypes ({', '.join(reached)}); "
    SCORE.compiles(
        grading,
        ONCE,
        run.count,
        exactly=1,
        what=f"compilations for {len(batches)} batches of {len(SOURCE_DTYPES)} source dtypes",
        hint=found.hint_for(HINTS, "convert every batch to one float dtype in score"),
        cause=(received if len(reached) > 1 else "") + found.text,
    )
