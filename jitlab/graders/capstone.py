"""Grader for the capstone exercise: a training loop with several causes at once.

``train_fast(params, batches)`` must return the naive loop's final params and per-step
losses as ``train_step`` computes them (the grader records its calls: ``KernelExercise``),
compiling it at most once per bucket.

What every run draws, on purpose (``_problem``; the learner's own buckets decide):
  step 0   weights an array, a length exactly on a bucket   a wrong weighted mean
  step 1   weights None, a length on a bucket               None is not weights of one
  step 2   weights absent, a bucket size + 1 (most padding)  a missing or off-by-one mask
  step DECAY_FROM  step 0's length, another lr type, weights form and decay: the causes
           of a recompilation in one bucket, and a stale global from this step on; weight
           decay a step late or early, or on b and v too (each recomputed to name it)
  run 2    lengths in the compiled buckets (half of them new), in the first run's dicts
           and arrays refilled (a loader may reuse them: a memo by id() is stale)

The checks named from :mod:`jitlab.grading.kernel`'s templates, as the learner sees them:
- train_step is compiled with jax.jit
- train_fast leaves the caller's arguments unchanged
- train_fast calls train_step with jit on
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from jitlab.doctor import classify
from jitlab.grading import BUCKETS_FEW, BUCKETS_HOLD, Hints, fail, grader
from jitlab.grading.calls import Call, Recorder
from jitlab.grading.causes import why
from jitlab.grading.checks import Grading, shorten
from jitlab.grading.kernel import JIT_ON, JITTED, UNCHANGED, KernelExercise
from jitlab.instruments.counting import ANY_FUNCTION, count_compiles

# The constants of the exercise's setup cell (a test compares the reference with its loop).
B, F, H = 8, 3, 8
STEPS, WARMUP, DECAY_FROM = 12, 3, 6
BASE_LR, WEIGHT_DECAY = 0.3, 0.02
MIN_LENGTH, MAX_LENGTH = 3, 24
BUCKETS_UP_TO, MOST_BUCKETS = 2 * MAX_LENGTH, 7  # the exercise states both

RUNS = "train_fast runs on fresh batches"
RETURNS = "train_fast returns (params, losses)"
CALLED = "train_fast calls train_step at every step"
LOSSES = "the loss at each step matches the original loop"
PARAMS = "the final params match the original loop"
PADDED = "each batch reaches train_step padded to bucket_size(its length)"
PER_BUCKET = "at most one compilation of train_step per bucket"
RUNS_AGAIN = "train_fast runs a second time"
RETURNS_AGAIN = "the second run returns (params, losses) too"
LOSSES_AGAIN = "the second run's losses match the original loop"
PARAMS_AGAIN = "the second run's final params match the original loop"
NOTHING_NEW = "a second run in the same buckets compiles nothing"

HINTS = Hints(
    {  # by check, by mistake, and by what changed between calls in one bucket (doctor's cause)
        RETURNS: "return params, np.array(losses), as train does, with float(loss) of every step",
        UNCHANGED.name: """build a new dict at the boundary ({**batch, ...}) and pad into a new
            array; never assign into the caller's batch""",
        CALLED: """call train_step itself in the loop, by its name. A jax.jit(lambda ...) or
            jax.jit(partial(...)) built per step is a new function each time""",
        PARAMS: "return the params from the last train_step call",
        NOTHING_NEW: """pad in NumPy at the boundary (np.zeros, then assign the slice). Eager jnp
            calls on arrays of a new length, such as jnp.pad, compile again for each length""",
        "second run": """the first run was right: the second gets the same dicts and arrays
            again, refilled with new data; remember nothing from an earlier call (by id())""",
        "again": """train_step compiled again for arguments it had compiled for: do not clear
            its cache, nor build a new jax.jit of it inside train_fast""",
        "update": """the loss at step {k} is right for the params train_step was given, but they
            differ from the loop's: the update at step {before} is wrong (params - lr *
            gradient, with that step's lr and weight decay)""",
        # Weight decay's mistakes, each named only when its recomputed losses match
        # (_decay_mistake); "decay" says what is right when none does.
        "decay from": """the losses match the original loop with weight decay switched on from
            step {start}, not {DECAY_FROM}: update_config switches it on when step >=
            DECAY_FROM; use that rule, or read CONFIG after update_config(step).""",
        "decay on all": """the losses match the original loop with weight decay on every
            parameter: the penalty is weight_decay * sum(params['w'] ** 2), on w only""",
        "stale decay": """the losses match a train_step that kept the weight decay CONFIG held
            when it was traced ({stale} ran with a stale value): a global read inside a
            jitted function is frozen at trace time. Read CONFIG in train_fast on every step
            and pass the value in""",
        "or stale": """Or train_step reads CONFIG: a global read inside a jitted function is
            frozen at trace time, and {traced} gives these losses too. Read CONFIG in train_fast
            on every step and pass the value in""",
        "no decay": """the losses match the original loop without weight decay: from step
            {DECAY_FROM} on, the loss adds weight_decay * sum(params['w'] ** 2), with CONFIG's
            value at that step (after update_config(step)), and the update its gradient.""",
        "decay": """the losses are right until step {k} and wrong from there; from step
            {DECAY_FROM} on, the loss adds weight_decay * sum(params['w'] ** 2) (weight decay
            {decay} at step {k}, CONFIG's value after update_config(step)), and the update
            subtracts lr times its gradient too""",
        "padded": """batch {k} is padded from {n} to {size} time steps: mask the padding out of
            the mean (tanh of a zero row is tanh(b), not 0) and divide by the true length;
            check the mask's bound, < length""",
        "weights": """batch {k} has no padding: with weights the data term is sum(weights * err)
            / sum(weights); weights None or absent mean weights of one, the plain mean""",
        classify.PYTREE: """the batch's structure changes: always pass the same keys, with
            weights of one when they are missing or None""",
        classify.WEAK_TYPE: """give every scalar one type at every step: convert it at the
            boundary with np.float32(...), and keep it traced""",
        classify.DTYPE: "give every argument one dtype at every step: convert at the boundary",
        classify.SHAPE: "pad every batch to bucket_size(length) and pass the length as an array",
        classify.STATIC_VALUE: """a static argument compiles once per value: keep it traced
            (remove it from static_argnums / static_argnames), an np.float32 or np.int32""",
    }
)
STEP = KernelExercise(
    "train_fast", "train_step", "train_step(params, batch, lr, weight_decay)", HINTS
)
CHECKS = (BUCKETS_HOLD, BUCKETS_FEW, STEP.name(JITTED), RUNS, RETURNS,
          *STEP.names(UNCHANGED, JIT_ON), CALLED, LOSSES, PARAMS,
          PADDED, PER_BUCKET, RUNS_AGAIN, RETURNS_AGAIN, LOSSES_AGAIN, PARAMS_AGAIN,
          NOTHING_NEW)  # fmt: skip

Batch = dict[str, Any]
Params = dict[str, np.ndarray]


def _learning_rate(step: int) -> float:
    """The exercise's schedule, with its types (Python float, then NumPy float64)."""
    if step < WARMUP:
        return BASE_LR * (step + 1) / WARMUP
    return BASE_LR * np.exp(-0.2 * (step - WARMUP))


def _weight_decay(step: int) -> float:
    """What the exercise's ``update_config`` writes into the global at this step."""
    return WEIGHT_DECAY if step >= DECAY_FROM else 0.0


def _reference_step(
    params: Params, batch: Batch, lr: float, decay: float, decayed: str = "w"
) -> tuple[Params, float]:
    """One step of the naive loop in float64 NumPy, gradients written out by hand;
    ``decayed``: the parameters weight decay applies to (w alone in the exercise)."""
    p = {k: np.asarray(params[k], np.float64) for k in "wbv"}
    x, y = batch["x"].astype(np.float64), batch["y"].astype(np.float64)
    weights = batch.get("weights")
    weights = np.ones_like(y) if weights is None else weights.astype(np.float64)
    hidden = np.tanh(x @ p["w"] + p["b"])  # (batch, time, hidden)
    pooled = hidden.mean(axis=1)
    err = pooled @ p["v"] - y
    penalty = sum(np.sum(p[k] ** 2) for k in decayed)
    value = float(np.sum(weights * err**2) / np.sum(weights) + decay * penalty)
    d_pred = 2.0 * weights * err / np.sum(weights)
    d_z = (d_pred[:, None, None] * p["v"] / x.shape[1]) * (1.0 - hidden**2)
    d_w, d_b, d_v = np.einsum("blf,blh->fh", x, d_z), d_z.sum(axis=(0, 1)), pooled.T @ d_pred
    grads = {"w": d_w, "b": d_b, "v": d_v}
    new = {k: p[k] - lr * (grads[k] + (2.0 * decay * p[k] if k in decayed else 0.0)) for k in p}
    return new, value


def _reference_train(
    params: dict[str, Any],
    batches: list[Batch],
    decays: list[float] | None = None,
    decayed: str = "w",
) -> tuple[Params, np.ndarray]:
    """The naive loop's results: final parameters and the loss at every step (``decays``,
    ``decayed``: another weight decay per step, on other parameters: a mistake's results)."""
    if decays is None:
        decays = [_weight_decay(step) for step in range(len(batches))]
    losses = []
    for step, batch in enumerate(batches):
        params, value = _reference_step(params, batch, _learning_rate(step), decays[step], decayed)
        losses.append(value)
    return params, np.array(losses)


def _traced_decays(calls: list[Call]) -> list[float]:
    """The weight decay each step's call of train_step would use had it read CONFIG while
    tracing: the value at the step whose call compiled the program it ran (one call a step)."""
    programs: list[tuple[Any, float]] = []
    decays = []
    for step, call in enumerate(calls):
        key = call.key if call.key is not None else [(x.path, x.type) for x in call.inputs]
        if call.compiled:
            programs.append((key, _weight_decay(step)))
        decays.append(next((d for k, d in reversed(programs) if k == key), _weight_decay(step)))
    return decays


def _decay_mistake(
    got: np.ndarray, params: dict, batches: list[Batch], calls: list[Call]
) -> tuple[str, dict[str, Any]] | None:
    """(the hint, its fields) for the weight-decay mistakes whose recomputed losses are
    ``got``: switched on from another step, on every parameter, never on, or frozen where
    train_step was traced (``calls``: one a step). Where a stale global gives the same
    losses as another mistake, the hint names both; None when none matches."""
    steps = range(len(batches))

    def matches(decays: list[float] | None = None, decayed: str = "w") -> bool:
        return _close(got, _reference_train(params, batches, decays, decayed)[1])

    frozen = _traced_decays(calls) if len(calls) == len(batches) else None
    stale = [k for k in steps if frozen is not None and frozen[k] != _weight_decay(k)]
    starts = (DECAY_FROM + 1, DECAY_FROM - 1, 0)
    candidates = [("decay from", {"start": start}, [WEIGHT_DECAY * (k >= start) for k in steps])
                  for start in starts]  # fmt: skip
    candidates.append(("no decay", {}, [0.0 for _ in steps]))
    found = [(name, fields, decays) for name, fields, decays in candidates if matches(decays)]
    if matches(decayed="wbv"):
        return "decay on all", {}
    at = ", ".join(map(str, stale))
    steps_at = f"step{'s' * (len(stale) > 1)} {at}"
    traced = f"the stale value at {steps_at} (traced at another step)"
    if stale and matches(frozen):
        same = [(n, f) for n, f, decays in found if decays == frozen]
        if not same:
            return "stale decay", {"stale": steps_at}
        name, fields = same[0]
        return f"{name}+or stale", {**fields, "traced": traced}
    constant = [(n, f) for n, f, d in found if frozen is None and len(set(d)) == 1]
    if constant:  # programs traced before the loop (a warm-up) hold one value: a stale global
        name, fields = constant[0]
        return f"{name}+or stale", {
            **fields,
            "traced": "one value, read where each program was traced before the loop,",
        }
    return (found[0][0], found[0][1]) if found else None


def _make_params(rng: np.random.Generator) -> dict[str, Any]:
    w, b, v = rng.normal(size=(F, H)) / np.sqrt(F), 0.5 * rng.normal(size=H), rng.normal(size=H)
    return dict(zip("wbv", map(jnp.float32, (w, b, v / np.sqrt(H))), strict=True))


def _make_problem(rng: np.random.Generator, lengths: list[int]) -> list[Batch]:
    """Batches of these lengths; weights an array, None, absent, then drawn (docstring)."""
    forms = ["array", "None", "absent", *rng.choice(["array", "None", "absent"], len(lengths))]
    forms[DECAY_FROM] = "absent"
    batches = []
    for length, form in zip(lengths, forms, strict=False):
        x = rng.normal(size=(B, length, F)).astype(np.float32)
        y = np.tanh(x.sum(axis=(1, 2)) / length) + 0.1 * rng.normal(size=B)
        batches.append({"x": x, "y": y.astype(np.float32)})
        if form != "absent":
            weights = rng.uniform(0.5, 1.5, B).astype(np.float32) if form == "array" else None
            batches[-1]["weights"] = weights
    return batches


def _problem(rng: np.random.Generator, bucket: Callable[[int], int]) -> list[int]:
    """The first run's lengths: on a bucket, on a bucket, a bucket + 1, then drawn."""
    lengths = range(MIN_LENGTH, MAX_LENGTH + 1)
    exact = [n for n in lengths if bucket(n) == n] or list(lengths)
    above = [n for n in lengths if bucket(n) > n and bucket(n - 1) == n - 1]
    above = above or [n for n in lengths if bucket(n) > n]
    drawn = [int(n) for n in rng.integers(MIN_LENGTH, MAX_LENGTH + 1, size=STEPS)]
    drawn[:3] = int(rng.choice(exact)), int(rng.choice(exact)), int(rng.choice(above))
    drawn[DECAY_FROM] = drawn[0]
    return drawn


def _second(rng: np.random.Generator, bucket: Callable, first: list[int], old: list[Batch]):
    """The second run's batches, in the compiled buckets (new lengths at even steps), written
    into the first run's dicts and arrays (the odd steps' arrays are refilled in place)."""
    buckets = {bucket(n) for n in first}
    inside = [n for n in range(MIN_LENGTH, MAX_LENGTH + 1) if bucket(n) in buckets]
    new = [n for n in inside if n not in first] or inside
    lengths = [int(rng.choice(new)) if i % 2 == 0 else first[i] for i in range(STEPS)]
    for mine, fresh in zip(old, _make_problem(rng, lengths), strict=True):
        arrays = {k: v for k, v in mine.items() if isinstance(v, np.ndarray)}
        mine.clear()
        for key, value in fresh.items():
            kept = arrays.get(key)
            if kept is not None and value is not None and kept.shape == value.shape:
                kept[...], value = value, kept
            mine[key] = value
    return old


def _losses(grading: Grading, result: Any, check: str) -> np.ndarray:
    """The losses of the pair (params, losses) that ``check`` requires."""
    pair = isinstance(result, tuple | list) and len(result) == 2 and isinstance(result[0], dict)
    losses = np.asarray(result[1] if pair else (), np.float64).reshape(-1)
    grading.require(
        check,
        pair and set(result[0]) == {"w", "b", "v"} and losses.shape == (STEPS,),
        expected=f'(params, losses): params a dict with keys "w", "b", "v", and {STEPS} losses',
        seen=shorten(f"{type(result).__name__}: {result!r}", 200),
        hint=HINTS[RETURNS],
    )
    return losses


def _close(got: Any, want: np.ndarray) -> bool:
    return np.shape(got) == want.shape and np.allclose(got, want, rtol=1e-3, atol=1e-5)


def _fed(calls: list[Call], loss: float) -> Params | None:
    """The params fed to the call of train_step that returned ``loss``."""
    for call in calls:
        if any(np.size(o) == 1 and np.float32(o) == np.float32(loss) for o in call.outputs):
            fed = {p[-3]: v for p, v, _ in call.inputs if p[-5:] in ("['w']", "['b']", "['v']")}
            return fed if len(fed) == 3 else None
    return None


def _require_losses(
    grading: Grading,
    check: str, got: np.ndarray, params: dict, batches: list[Batch], calls: list[Call],
    bucket: Callable[[int], int],
) -> Params:  # fmt: skip
    """The losses match the naive loop's (its final params returned), else name the step,
    its batch and what to look at (no ``calls``: the second run's)."""
    want_params, want = _reference_train(params, batches)
    wrong = np.flatnonzero(~np.isclose(got, want, rtol=1e-3, atol=1e-5))
    if not wrong.size:
        grading.passed(check)
        return want_params
    k = int(wrong[0])
    batch, lr, decay = batches[k], _learning_rate(k), _weight_decay(k)
    n, weights = batch["x"].shape[1], batch.get("weights", "absent")
    form = "an array" if isinstance(weights, np.ndarray) else weights
    fed = _fed(calls, got[k])
    own = fed is not None and np.isclose(got[k], _reference_step(fed, batch, lr, decay)[1], 1e-3)
    decay_found = calls and _decay_mistake(got, params, batches, calls)
    cause = [(not calls, "second run"), (bool(decay_found), "found"), (own, "update"),
             (k >= DECAY_FROM, "decay"), (bucket(n) > n, "padded"), (True, "weights")]  # fmt: skip
    name = next(name for ok, name in cause if ok)
    name, fields = decay_found if name == "found" else (name, {})
    hint = " ".join(HINTS[part] for part in name.split("+"))
    raise fail(
        check,
        expected=f"the loss at step {k}: {want[k]:.6g} (the original loop)",
        seen=f"{got[k]:.6g}, and {wrong.size} of {STEPS} steps wrong (the first: {k}). "
        f"Batch {k}: length {n} (bucket {bucket(n)}), weights {form}, lr {lr:.4g}, "
        f"weight decay {decay}",
        hint=hint.format(
            k=k, before=k - 1, n=n, size=bucket(n), DECAY_FROM=DECAY_FROM, decay=decay, **fields
        ),
    )


def _padded_length(call: Call) -> int | None:
    """The time axis of the x this call of train_step got (a leaf of shape (B, t, F))."""
    shapes = [np.shape(v) for _, v, _ in call.inputs if np.ndim(v) == 3]
    found = [shape[1] for shape in shapes if shape[0] == B and shape[2] == F]
    return found[0] if found else None


def _require_padded(
    grading: Grading, calls: list[Call], lengths: list[int], bucket: Callable[[int], int]
) -> None:
    """Each step's x reached train_step padded to bucket_size(its length)."""
    grading.require_padded(
        PADDED,
        [_padded_length(call) for call in calls],
        lengths,
        bucket,
        largest=bucket(MAX_LENGTH),
        size=lambda size: f"{size} time steps",
        hint="pad x to bucket_size(length) time steps, not to a length of your own",
    )


def _cause(recorder: Recorder, buckets: set[int]) -> tuple[str, str]:
    """(what changed between calls in one bucket, a hint), by the frame's ``why``: one
    compilation per bucket is allowed, so calls are compared within their x's shape."""
    groups: dict[tuple, list[Call]] = {}
    for call in recorder.calls:
        shape = tuple(np.shape(v) for _, v, _ in call.inputs if np.ndim(v) == 3)
        groups.setdefault(shape, []).append(call)
    if len(groups) > len(buckets):
        seen = f"x reached train_step in {len(groups)} shapes for {len(buckets)} buckets"
        return seen, HINTS[classify.SHAPE]
    step = {id(call): i for i, call in enumerate(recorder.calls)}
    found = [why(g, label=lambda i, g=g: f"call {step[id(g[i])] + 1}") for g in groups.values()]
    hints = dict.fromkeys(f.hint_for(HINTS) for f in found if f)
    return "; ".join(f.text for f in found if f), ". Also: ".join(hints)


@grader("capstone", checks=CHECKS, hints=HINTS)
def grade(
    grading: Grading, train_fast: Callable, train_step: Callable, bucket_size: Callable[[int], int]
) -> None:
    """Grade the exercise: the naive loop's numbers, from train_step, once per bucket."""
    rng = grading.rng
    bucket = grading.require_buckets(
        bucket_size, up_to=BUCKETS_UP_TO, most=MOST_BUCKETS
    ).__getitem__
    STEP.jitted(grading, train_step)

    params, lengths = _make_params(rng), _problem(rng, bucket)
    batches = _make_problem(rng, lengths)
    buckets = {bucket(n) for n in lengths}
    run = STEP.run(grading, train_fast, train_step, [((params, batches), {})], check=RUNS)
    grading.passed(RUNS)
    recorder, count, got = run.recorder, run.count, run.outputs[0]
    got_losses = _losses(grading, got, RETURNS)
    STEP.unchanged(grading, run)
    STEP.jit_on(grading, recorder)
    traced = len(recorder.traced)
    grading.require(
        CALLED,
        len(recorder.calls) >= STEPS,
        expected=f"train_step called by its name at least once per step ({STEPS} steps)",
        seen=f"{len(recorder.calls)} calls"
        + (f", and {traced} more inside another jax.jit" if traced else "")
        + f"; {count.compiles} compilations of a function named like train_step",
    )

    want_params = _require_losses(
        grading, LOSSES, got_losses, params, batches, recorder.calls, bucket
    )
    wrong = [k for k, p in want_params.items() if not _close(got[0][k], p)]
    grading.require(
        PARAMS,
        not wrong,
        expected="params['w'], ['b'] and ['v'] as the original loop leaves them",
        seen=f"{', '.join(wrong)} differ from the original loop's",
    )
    _require_padded(grading, recorder.calls, lengths, bucket)
    seen, hint = _cause(recorder, buckets) if count.compiles > len(buckets) else ("", "")
    STEP.compiles(
        grading,
        PER_BUCKET,
        count,
        at_most=len(buckets),
        what=f"compilations for {STEPS} steps ({len(set(lengths))} distinct lengths, "
        f"buckets {sorted(buckets)})",
        hint=hint,
        cause=seen,
    )

    params2, batches2 = _make_params(rng), _second(rng, bucket, lengths, batches)
    with count_compiles(ANY_FUNCTION) as everything:
        result2 = grading.call_learner(RUNS_AGAIN, train_fast, params2, batches2)
    grading.passed(RUNS_AGAIN)
    want2 = _require_losses(
        grading,
        LOSSES_AGAIN,
        _losses(grading, result2, RETURNS_AGAIN),
        params2,
        batches2,
        [],
        bucket,
    )
    wrong = [k for k, p in want2.items() if not _close(result2[0][k], p)]
    grading.require(
        PARAMS_AGAIN,
        not wrong,
        expected="the second run's final params['w'], ['b'] and ['v'] as the original loop's",
        seen=f"{', '.join(wrong)} differ from the original loop's",
        hint="return the params the second run's last step returned, not the first run's",
    )
    compiled = ", ".join(f"{name} x{n}" for name, n in everything.compiled.most_common(4))
    grading.require(
        NOTHING_NEW,
        everything.compiles == 0,
        expected="0 compilations of any function: every bucket is already compiled",
        seen=f"{everything.compiles} compilations: {compiled or '-'}",
    )
