"""Grader for the capstone exercise: a training loop with several causes at once.

The exercise's naive ``train(params, batches)`` recompiles on every step. It builds
``jax.jit(jax.value_and_grad(lambda ...))`` per step, and its batches vary in length.
Their ``"weights"`` entry is an array, ``None`` or absent. The schedule returns a
Python float during warm-up and a NumPy ``float64`` afterwards, and the loss reads its
weight decay from a global that the script switches on halfway. The learner writes
``bucket_size(n)``, a jitted ``train_step`` and ``train_fast(params, batches)``, which
must return the same final parameters and per-step losses as ``train``, as they come
out of ``train_step``, while compiling ``train_step`` at most once per bucket.

Every run draws fresh parameters and batches (``fresh_rng``), built so that every cause
shows up and the edge cases are there on purpose: the first batch needs padding; one
length is exactly a bucket size of the learner's own scheme (no padding at all) and one
is a bucket size plus one (the most padding); the batch at ``DECAY_FROM`` has the first
batch's length, but another learning-rate type, weights form and weight decay.

While ``train_fast`` runs, every name in its globals, closure cells and defaults that
refers to ``train_step`` is rebound to a recording proxy (:func:`jitlab.grading.recording`)
that forwards each call to the same jitted object (so JAX's caches and counts are
unchanged) and keeps a copy of what went in and what came out. The checks:

- the caller's batches are left as they were (content, not identity);
- jit on: a ``train_fast`` that calls ``train_step`` under ``jax.disable_jit()`` or with
  ``jax_disable_jit`` set is named as such;
- ``train_step`` is called at every step, with concrete arrays (not inside another
  ``jax.jit`` built per step), and never replaced: a loop that never calls it fails;
- numbers: every step's loss and the final parameters match a float64 NumPy reference
  of the naive loop (padding without a mask, a mean over the padded length, a stale
  global weight decay and hard-coded answers fail);
- the outputs come from ``train_step``: every loss is one of its outputs, the final
  ``w`` is one of its outputs, and a chain of calls, each fed the ``w`` the previous one
  returned, leads from the starting ``w`` to it, one call per step. A NumPy loop plus a
  decoy call fails here, and so does returning a reference computed elsewhere;
- ``train_step`` computes the update: fed the same inputs with a perturbed ``w`` it
  returns another ``w`` (a step that hands back a precomputed answer fails);
- compile behaviour: at most one compilation of ``train_step`` per bucket used, from a
  cleared cache. The verdict names the cause from the arguments the proxy saw (several
  structures, several types of one argument, more shapes than buckets, or one
  signature compiled once per value: a static argument), with JAX's explanation quoted
  as a second opinion only;
- steady state: a second run, with fresh data whose lengths fall in the buckets already
  compiled (many of them new lengths), compiles nothing at all, counted over every
  function (an eager ``jnp.pad`` per length fails).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jitlab.grading import Call, Leaf, Recorder, call_learner, fail, fresh_rng, grader, passed
from jitlab.grading.checks import (
    BUCKETS_FEW,
    BUCKETS_HOLD,
    require,
    require_buckets,
    require_close,
    shorten,
)
from jitlab.grading.kernel import JIT_ON, JITTED, UNCHANGED, KernelExercise
from jitlab.instruments.counting import ANY_FUNCTION, count_compiles

# These must equal the constants in the setup cell of the capstone exercise.
# tests/graders/test_capstone.py checks the reference against the exercise's own loop.
B, F, H = 8, 3, 8
STEPS, WARMUP, DECAY_FROM = 12, 3, 6
BASE_LR, WEIGHT_DECAY = 0.3, 0.02
MIN_LENGTH, MAX_LENGTH = 3, 24
SMALLEST_BUCKET_ALLOWED = 16
BUCKETS_UP_TO = 2 * MAX_LENGTH
MOST_BUCKETS = 7  # the exercise text states it: at most 7 sizes for lengths 1 to 48

STEP = KernelExercise(
    wrapper="train_fast",
    kernel="train_step",
    call="train_step(params, batch, lr, weight_decay)",
    hints={
        UNCHANGED.name: "build a new dict at the boundary ({**batch, ...}) and pad into a new "
        "array; never assign into the caller's batch",
    },
)
RUNS = "train_fast runs on fresh batches"
RETURNS = "train_fast returns (params, losses)"
CALLED = "train_fast calls train_step at every step"
LOSSES = "the loss at each step matches the original loop"
PARAMS = "the final params match the original loop"
FROM_STEP = "the losses and params come from train_step"
UPDATES = "train_step computes the update from the params it is given"
PER_BUCKET = "at most one compilation of train_step per bucket"
RUNS_AGAIN = "train_fast runs a second time"
RETURNS_AGAIN = "the second run returns (params, losses) too"
LOSSES_AGAIN = "the second run's losses match the original loop"
NOTHING_NEW = "a second run in the same buckets compiles nothing"
CHECKS = (
    BUCKETS_HOLD,
    BUCKETS_FEW,
    STEP.name(JITTED),
    RUNS,
    RETURNS,
    *STEP.names(UNCHANGED, JIT_ON),
    CALLED,
    LOSSES,
    PARAMS,
    FROM_STEP,
    UPDATES,
    PER_BUCKET,
    RUNS_AGAIN,
    RETURNS_AGAIN,
    LOSSES_AGAIN,
    NOTHING_NEW,
)

Batch = dict[str, Any]


# ------------------------------------------------------------------ the reference


def _learning_rate(step: int) -> float:
    """The exercise's schedule, with the same types (Python float, then NumPy float64)."""
    if step < WARMUP:
        return BASE_LR * (step + 1) / WARMUP
    return BASE_LR * np.exp(-0.2 * (step - WARMUP))


def _weight_decay(step: int) -> float:
    """What the exercise's ``update_config`` writes into the global at this step."""
    return WEIGHT_DECAY if step >= DECAY_FROM else 0.0


def _reference_step(
    params: dict[str, np.ndarray], batch: Batch, lr: float, decay: float
) -> tuple[dict[str, np.ndarray], float]:
    """One step of the naive loop in float64 NumPy, gradients written out by hand."""
    w, b, v = params["w"], params["b"], params["v"]
    x = batch["x"].astype(np.float64)
    y = batch["y"].astype(np.float64)
    weights = batch.get("weights")
    weights = np.ones_like(y) if weights is None else weights.astype(np.float64)
    length = x.shape[1]

    hidden = np.tanh(x @ w + b)  # (batch, time, hidden)
    pooled = hidden.mean(axis=1)
    err = pooled @ v - y
    value = float(np.sum(weights * err**2) / np.sum(weights) + decay * np.sum(w**2))

    d_pred = 2.0 * weights * err / np.sum(weights)
    d_v = pooled.T @ d_pred
    d_pooled = d_pred[:, None] * v[None, :]
    d_z = (d_pooled[:, None, :] / length) * (1.0 - hidden**2)
    d_w = np.einsum("blf,blh->fh", x, d_z) + 2.0 * decay * w
    d_b = d_z.sum(axis=(0, 1))
    new = {"w": w - lr * d_w, "b": b - lr * d_b, "v": v - lr * d_v}
    return new, value


def _reference_train(
    params: dict[str, Any], batches: list[Batch]
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The naive loop's results: final parameters and the loss at every step."""
    current = {k: np.asarray(p, np.float64) for k, p in params.items()}
    losses = []
    for step, batch in enumerate(batches):
        current, value = _reference_step(
            current, batch, float(_learning_rate(step)), _weight_decay(step)
        )
        losses.append(value)
    return current, np.array(losses)


# ------------------------------------------------------------------ fresh problems


def _make_params(rng: np.random.Generator) -> dict[str, Any]:
    return {
        "w": jnp.asarray(rng.normal(size=(F, H)) / np.sqrt(F), jnp.float32),
        "b": jnp.asarray(0.5 * rng.normal(size=H), jnp.float32),
        "v": jnp.asarray(rng.normal(size=H) / np.sqrt(H), jnp.float32),
    }


def _make_batch(rng: np.random.Generator, length: int, form: str) -> Batch:
    x = rng.normal(size=(B, length, F)).astype(np.float32)
    y = (np.tanh(x.sum(axis=(1, 2)) / length) + 0.1 * rng.normal(size=B)).astype(np.float32)
    batch: Batch = {"x": x, "y": y}
    if form == "array":
        batch["weights"] = rng.uniform(0.5, 1.5, size=B).astype(np.float32)
    elif form == "None":
        batch["weights"] = None
    return batch


def _edge_lengths(rng: np.random.Generator, bucket_size: Callable[[int], int]) -> list[int]:
    """A length that is exactly one of the learner's bucket sizes, and one just above."""
    lengths = range(MIN_LENGTH, MAX_LENGTH + 1)
    exact = [n for n in lengths if int(bucket_size(n)) == n]
    above = [n for n in lengths if n - 1 >= MIN_LENGTH and int(bucket_size(n - 1)) == n - 1]
    chosen = []
    if exact:
        chosen.append(int(rng.choice(exact)))
    if above:
        chosen.append(int(rng.choice(above)))
    return chosen


def _make_problem(
    rng: np.random.Generator,
    lengths: list[int] | None = None,
    steps: int = STEPS,
    edges: list[int] = (),  # type: ignore[assignment]
) -> list[Batch]:
    """Fresh batches in which every cause and edge case shows up (see the docstring)."""
    if lengths is None:
        lengths = [int(n) for n in rng.integers(MIN_LENGTH, MAX_LENGTH + 1, size=steps)]
        lengths[0] = int(rng.choice([5, 7, 9, 11, 13]))  # padded in any bucket scheme
        for slot, edge in zip((2, 3), edges, strict=False):
            lengths[slot] = edge
    lengths = list(lengths)
    forms = [str(f) for f in rng.choice(["array", "None", "absent"], size=steps)]
    forms[0], forms[1] = "array", "None"
    if steps > DECAY_FROM:
        lengths[DECAY_FROM] = lengths[0]  # same bucket; other lr type, weights, decay
        forms[DECAY_FROM] = "absent"
    return [_make_batch(rng, n, form) for n, form in zip(lengths, forms, strict=True)]


def _same_bucket_lengths(
    rng: np.random.Generator, bucket_size: Callable[[int], int], buckets: set[int], avoid: set[int]
) -> list[int]:
    """STEPS lengths whose buckets were all compiled in the first run, new ones first."""
    inside = [n for n in range(MIN_LENGTH, MAX_LENGTH + 1) if int(bucket_size(n)) in buckets]
    new = [n for n in inside if n not in avoid] or inside
    lengths = [int(n) for n in rng.choice(new, size=STEPS)]
    lengths[0] = int(rng.choice(inside))
    return lengths


# ------------------------------------------------------------------ checks


def _unpack(result: Any, check: str) -> tuple[dict[str, Any], np.ndarray]:
    ok = isinstance(result, tuple | list) and len(result) == 2
    params = result[0] if ok else None
    if not ok or not isinstance(params, dict) or set(params) != {"w", "b", "v"}:
        raise fail(
            check,
            expected='a pair (params, losses), params a dict with keys "w", "b", "v"',
            seen=shorten(f"{type(result).__name__}: {result!r}", 200),
            hint="return params, np.array(losses), as train does",
        )
    losses = np.asarray(result[1], dtype=np.float64).reshape(-1)
    if losses.shape != (STEPS,):
        raise fail(
            check,
            expected=f"one loss per batch: {STEPS} numbers",
            seen=f"{losses.size} numbers",
            hint="append float(loss) at every step, before moving to the next batch",
        )
    passed(check)
    return params, losses


def _changes(before: list[Batch], after: list[Batch]) -> list[str]:
    found = []
    for index, (old, new) in enumerate(zip(before, after, strict=True)):
        if set(old) != set(new):
            gained, lost = sorted(set(new) - set(old)), sorted(set(old) - set(new))
            found.append(f"batch {index}: keys gained {gained}, lost {lost}")
            continue
        for key, value in old.items():
            other = new[key]
            same = (value is None and other is None) or (
                value is not None
                and other is not None
                and np.shape(other) == value.shape
                and np.array_equal(np.asarray(other), value)
            )
            if not same:
                found.append(f"batch {index}: {key!r} changed")
    return found


def _numbers_hint(got: np.ndarray, want: np.ndarray) -> str:
    bad = np.flatnonzero(~np.isclose(got, want, rtol=1e-3, atol=1e-5))
    first = int(bad[0]) if bad.size else 0
    if first >= DECAY_FROM:
        return (
            f"the losses go wrong from step {first}, after weight decay was switched on "
            f"at step {DECAY_FROM}: a global read inside a jitted function is frozen at "
            "trace time. Read CONFIG in train_fast on every step and pass the value in"
        )
    return (
        f"the losses are wrong from step {first}, before the weight decay changes: mask "
        "the padded time steps (tanh of a zero row is tanh(b), not 0) and divide by the "
        "true length, not the padded one; weights of one must give the plain mean"
    )


def _require_losses(check: str, got: np.ndarray, want: np.ndarray) -> None:
    require_close(check, got, want, rtol=1e-3, atol=1e-5, hint=_numbers_hint(got, want))


def _is_w(leaf: Any) -> bool:
    return isinstance(leaf, np.ndarray) and leaf.shape == (F, H)


def _same(a: Any, b: Any) -> bool:
    return np.asarray(a).shape == np.asarray(b).shape and np.array_equal(
        np.asarray(a, np.float32), np.asarray(b, np.float32)
    )


def _chain(calls: list[Call], start_w: np.ndarray, final_w: np.ndarray) -> list[int]:
    """Indices of a chain of calls leading from ``start_w`` to ``final_w``, each call fed
    the ``w`` the previous one returned (empty when there is none)."""
    chain: list[int] = []
    target = final_w
    upto = len(calls)
    while True:
        found = next(
            (
                i
                for i in range(upto - 1, -1, -1)
                if any(_is_w(out) and _same(out, target) for out in calls[i].outputs)
            ),
            None,
        )
        if found is None:
            return []
        chain.append(found)
        fed = [leaf for _, leaf, _ in calls[found].inputs if _is_w(leaf)]
        if any(_same(leaf, start_w) for leaf in fed):
            return chain[::-1]
        if not fed:
            return []
        target, upto = fed[0], found


def _require_from_step(
    recorder: Recorder, params0: dict[str, Any], got_params: dict[str, Any], losses: np.ndarray
) -> list[int]:
    """Check that the returned losses and params are train_step's own outputs."""
    scalars = {
        float(np.float32(out))
        for call in recorder.calls
        for out in call.outputs
        if isinstance(out, np.ndarray) and out.size == 1
    }
    foreign = [i for i, value in enumerate(losses) if float(np.float32(value)) not in scalars]
    chain = _chain(recorder.calls, np.asarray(params0["w"]), np.asarray(got_params["w"]))
    last = recorder.calls[chain[-1]] if chain else None
    others = [
        name
        for name in ("b", "v")
        if last is None or not any(_same(out, got_params[name]) for out in last.outputs)
    ]
    ok = not foreign and len(chain) >= STEPS and not others
    if ok:
        passed(FROM_STEP)
        return chain
    if foreign:
        seen = f"the losses at steps {foreign[:6]} are not among train_step's outputs"
    elif len(chain) < STEPS:
        seen = (
            f"the final params['w'] comes from a chain of {len(chain)} train_step calls "
            f"from the starting params, not {STEPS} (one per step)"
        )
    else:
        seen = f"the final params {others} are not what the last train_step call returned"
    raise fail(
        FROM_STEP,
        expected="each step's loss and the final params as train_step returned them, each "
        "step fed the params the previous step returned",
        seen=seen,
        hint="keep the loop's state in train_step's outputs: params, value = train_step("
        "params, ...), then losses.append(float(value)); no second computation outside it",
    )


def _require_real_update(recorder: Recorder, chain: list[int], rng: np.random.Generator) -> None:
    """Fed the same inputs with a perturbed ``w``, the step must return another ``w``."""
    call = recorder.calls[chain[-1]]
    given = next(leaf for _, leaf, _ in call.inputs if _is_w(leaf))
    nudged = (given + rng.normal(scale=0.5, size=given.shape)).astype(np.float32)

    def swap(leaf: Any) -> Any:
        if isinstance(leaf, np.ndarray | jax.Array) and np.shape(leaf) == (F, H):
            if _same(leaf, given):
                return nudged
        return leaf

    args, kwargs = jax.tree.map(swap, (call.args, call.kwargs))
    out = call_learner(UPDATES, recorder.target, *args, **kwargs)
    new_w = [
        np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(out) if np.shape(leaf) == (F, H)
    ]
    old_w = [out for out in call.outputs if _is_w(out)]
    require(
        UPDATES,
        bool(new_w) and not any(_same(a, b) for a in new_w for b in old_w),
        expected="another new w when train_step is given another w",
        seen="train_step returned the same w for a different w: it does not compute the "
        "update from the params it is given",
        hint="compute the gradient and the update inside train_step, from its params argument",
    )


def _arrays(call: Call) -> list[Leaf]:
    """The argument leaves of a call, without the ``None`` ones (a ``None`` shows in the
    structure as a missing leaf)."""
    return [leaf for leaf in call.inputs if leaf.type != "None"]


def _why(recorder: Recorder, buckets: set[int], compiles: int) -> tuple[str, str]:
    """(what the grader saw reach train_step, a hint that names that cause)."""
    calls = recorder.calls
    structures = Counter(tuple(leaf.path for leaf in _arrays(c)) for c in calls)
    if len(structures) > 1:
        names = [set(s) for s in structures]
        differ = sorted(set.union(*names) - set.intersection(*names))
        return (
            f"train_step received {len(structures)} argument structures; these appear in "
            f"some calls only: {', '.join(differ[:4]) or '-'}",
            "the batch's structure changes: always pass the same keys, with weights of one "
            "when they are missing or None",
        )
    kinds: dict[str, set[str]] = defaultdict(set)
    shapes: dict[str, set[tuple[int, ...]]] = defaultdict(set)
    for call in calls:
        for name, leaf, kind in _arrays(call):
            kinds[name].add(kind.split("[")[0])
            shapes[name].add(np.shape(leaf))
    for name, seen in kinds.items():
        if len(seen) > 1:
            return (
                f"{name} reached train_step as {len(seen)} types: {', '.join(sorted(seen))} "
                "('~' marks a weak type: a Python scalar)",
                f"give {name} one type at every step: convert it at the boundary with "
                "np.float32(...), and keep it traced",
            )
    for name, seen in shapes.items():
        if len(seen) > len(buckets):
            return (
                f"{name} reached train_step in {len(seen)} shapes for {len(buckets)} buckets",
                "pad every batch to bucket_size(length) and pass the length as an array",
            )
    # One signature per bucket, yet more compilations: a value is part of the key. The
    # static argument is the scalar whose (signature, value) pairs match the count. Two
    # scalars can match it by chance (a static length, and a decay with two values over
    # as many buckets): the static one is the one whose new pairs are exactly the calls
    # that compiled.
    pairs: dict[str, set[tuple[Any, ...]]] = defaultdict(set)
    consistent: dict[str, bool] = {}
    for call in calls:
        signature = tuple((name, kind) for name, _, kind in _arrays(call))
        for name, leaf, _ in _arrays(call):
            if np.size(leaf) == 1 and np.ndim(leaf) == 0:
                pair = (signature, float(np.asarray(leaf)))
                new = pair not in pairs[name]
                pairs[name].add(pair)
                consistent[name] = consistent.get(name, True) and new == call.compiled
    exact = [name for name, seen in pairs.items() if len(seen) == compiles]
    exact.sort(key=lambda name: not consistent[name])  # consistent ones first, else in order
    if exact:
        return (
            f"the argument types repeat, yet train_step compiled {compiles} times, once "
            f"per value of {exact[0]}",
            f"a static argument compiles once per value: keep {exact[0]} traced (remove it "
            "from static_argnums / static_argnames) as an np.float32 or np.int32 scalar",
        )
    return (
        f"the argument types repeat, yet train_step compiled {compiles} times",
        "look for static_argnums / static_argnames on train_step: a static argument "
        "compiles once per value",
    )


@grader("capstone", checks=CHECKS)
def grade(
    train_fast: Callable[..., Any],
    train_step: Callable[..., Any],
    bucket_size: Callable[[int], int],
) -> None:
    """Grade the exercise: the naive loop's numbers, from train_step, once per bucket."""
    rng = fresh_rng()
    require_buckets(
        bucket_size,
        up_to=BUCKETS_UP_TO,
        most=MOST_BUCKETS,
        smallest_allowed=SMALLEST_BUCKET_ALLOWED,
    )
    STEP.jitted(train_step)

    params = _make_params(rng)
    batches = _make_problem(rng, edges=_edge_lengths(rng, bucket_size))
    lengths = [b["x"].shape[1] for b in batches]
    buckets = {int(bucket_size(n)) for n in lengths}
    run = STEP.run(train_fast, train_step, [((params, batches), {})], check=RUNS)
    passed(RUNS)
    recorder, count = run.recorder, run.count
    got_params, got_losses = _unpack(run.outputs[0], RETURNS)
    changes = _changes(run.copies[0][0][1], batches)
    STEP.require(UNCHANGED, not changes, seen="; ".join(changes[:3]))
    STEP.jit_on(recorder)
    concrete = recorder.calls
    traced = len(recorder.traced)
    require(
        CALLED,
        len(concrete) >= STEPS,
        expected=f"train_step called by its name at least once per step ({STEPS} steps)",
        seen=f"{len(concrete)} calls"
        + (f", and {traced} more inside another jax.jit" if traced else "")
        + f"; {count.compiles} compilations of a function named like train_step",
        hint="call train_step itself in the loop, by its name. A jax.jit(lambda ...) or "
        "jax.jit(partial(...)) built per step is a new function each time",
    )

    want_params, want_losses = _reference_train(params, batches)
    _require_losses(LOSSES, got_losses, want_losses)
    wrong = [
        name
        for name in ("w", "b", "v")
        if not np.allclose(np.asarray(got_params[name]), want_params[name], 1e-3, 1e-5)
    ]
    require(
        PARAMS,
        not wrong,
        expected="params['w'], ['b'] and ['v'] as the original loop leaves them",
        seen=f"{', '.join(wrong)} differ from the original loop's",
        hint="return the params from the last train_step call",
    )
    chain = _require_from_step(recorder, params, got_params, got_losses)
    _require_real_update(recorder, chain, rng)

    saw, hint = ("", "")
    if count.compiles > len(buckets):
        saw, hint = _why(recorder, buckets, count.compiles)
    STEP.compiles(
        PER_BUCKET,
        count,
        at_most=len(buckets),
        what=f"compilations for {STEPS} steps ({len(set(lengths))} distinct lengths, "
        f"buckets {sorted(buckets)})",
        hint=hint,
        cause=saw,
    )

    params2 = _make_params(rng)
    batches2 = _make_problem(rng, _same_bucket_lengths(rng, bucket_size, buckets, set(lengths)))
    with count_compiles(ANY_FUNCTION) as everything:
        result2 = call_learner(RUNS_AGAIN, train_fast, params2, batches2)
    passed(RUNS_AGAIN)
    _, got_losses2 = _unpack(result2, RETURNS_AGAIN)
    _require_losses(LOSSES_AGAIN, got_losses2, _reference_train(params2, batches2)[1])
    compiled = ", ".join(f"{name} x{n}" for name, n in everything.compiled.most_common(4))
    require(
        NOTHING_NEW,
        everything.compiles == 0,
        expected="0 compilations of any function: every bucket is already compiled",
        seen=f"{everything.compiles} compilations: {compiled or '-'}",
        hint="pad in NumPy at the boundary (np.zeros, then assign the slice). Eager jnp "
        "calls on arrays of a new length, such as jnp.pad, compile again for each length",
    )
