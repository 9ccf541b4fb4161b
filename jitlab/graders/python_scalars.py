"""Grader for python_scalars: ``init``, a jitted ``sgd_step`` and the ``train`` loop that
feeds it a schedule of mixed scalar types; train's calls of sgd_step are recorded.

What the drawing covers, every run, and the wrong rule it breaks:

=========================================  ===========================================
every scalar kind twice, shuffled           lr passed through unconverted (one key each)
an lr value repeated                        a static lr vs. a cache cleared every step
a Python int 0 (the frozen phase)           an integer cast of lr (every step is 0)
one step from a state the grader builds     a wrong update, the average after the update
init's types against one step's             a weak or other-dtype avg_loss in init
the batches' own dtype and content          a batch cast (bfloat16) or out of order
train called twice from the same start      a train that resumes where the last one stopped
copies of the arrays handed to sgd_step     a donated argument (the grader's own survive;
                                            the caller's params, deleted, are named)
=========================================  ===========================================

The checks named from :mod:`jitlab.grading.kernel`'s templates, as the learner sees them:
- sgd_step is compiled with jax.jit
- train calls sgd_step with jit on
- train leaves the caller's arguments unchanged
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jitlab.grading import Call, Hints, fail_unless, grader, why
from jitlab.grading.calls import changed_arguments, same_content, type_changes, type_text
from jitlab.grading.checks import (
    Grading,
    GradingFailure,
    lost_digits,
    shorten,
)
from jitlab.grading.kernel import DONATED, JIT_ON, JITTED, UNCHANGED, KernelExercise
from jitlab.instruments.signature import KEYWORD, STATIC

TRAIN = KernelExercise("train", "sgd_step", "sgd_step(state, batch, lr)")
STEPS = 16
ONE_STEP = "one sgd_step matches the reference"
INIT = "init holds the params and a zero average"
SAME_TYPES = "init's state has the types sgd_step returns"
RUNS = "train runs over the schedule"
EVERY_BATCH = "train calls sgd_step once per batch, state to state"
FROM_STEP = "train returns the state sgd_step returned"
NUMBERS = "train's final state matches the reference"
ONCE = "sgd_step compiles once over the schedule"
CHECKS = (TRAIN.name(JITTED), ONE_STEP, INIT, SAME_TYPES, RUNS, TRAIN.name(JIT_ON))
CHECKS += (EVERY_BATCH, FROM_STEP, TRAIN.name(UNCHANGED), NUMBERS, ONCE)
SCALAR_KINDS: dict[str, Callable[[float], Any]] = {
    "Python int": lambda value: 0,  # a frozen phase, as a config file writes it
    "Python float": float,
    "NumPy float64": np.float64,
    "NumPy float32": np.float32,
    "jnp.float32": jnp.float32,
    "weak jnp scalar": lambda value: jnp.asarray(float(value)),
}
HINTS = {  # by check, by mistake, and by the kind (_kind) of a recompilation's cause
    ONE_STEP: "params - lr * jax.grad(loss)(params, batch) for w and b",
    INIT: "init(params) returns these params unchanged, and avg_loss equal to 0",
    NUMBERS: """use lr = schedule(step) for batch number step (from 0), unrounded: an integer
        or a 16-bit dtype changes the fractions""",
    "avg_loss": "avg_loss = 0.9 * avg_loss + 0.1 * loss(params, batch), before the update",
    "structure": "keep the state's keys, and avg_loss one number: a float32 array of shape ()",
    SAME_TYPES: "write each entry in init with the dtype and shape sgd_step returns",
    "weak init": """a weak type (~) where sgd_step returns a strong one of the same dtype:
        0.0 and jnp.asarray(0.0) are weakly typed float32; give init's entries the strong
        dtype sgd_step returns (jnp.zeros((), jnp.float32))""",
    "weak int init": """{name} is a weakly typed int32 (~int32: 0 or jnp.array(0), an integer
        with no dtype) where sgd_step returns {after}: an integer, and weak; give it the
        dtype sgd_step returns (jnp.zeros((), jnp.float32))""",
    "dtype init": """{name} is {before} where sgd_step returns {after}: another dtype; give it
        the dtype sgd_step returns""",
    "missing": "init must build every entry sgd_step returns: the same keys, no None slots",
    EVERY_BATCH: "call sgd_step (by that name) once per batch: the update happens in the step",
    "cast": """pass each batch as it is: a cast of the batch (to bfloat16, say) changes the
        numbers; only lr needs converting""",
    FROM_STEP: "return the state from the loop as it is; the work happens in sgd_step",
    "order": "go through the batches in order: for step, batch in enumerate(batches)",
    "steps": "the steps count from 0, one per batch: for step, batch in enumerate(batches)",
    "chain": "start from init(params); pass each call the state the previous call returned",
    "state": """the state's types changed after a step: start train from init(params), and make
        init return the types sgd_step returns""",
    "lr": """lr reached sgd_step as {avals}; convert it in train, before the call, to one dtype
        and weak flag on every step (inside sgd_step is too late; jitlab hint 03)""",
    KEYWORD: "call sgd_step one way every time (positionally, say)",
    STATIC: "lr looks static (every new value compiles): keep it a traced argument",
    "again": """sgd_step compiled again for arguments it had seen: do not clear its cache, or
        build a new jitted function, inside train""",
    "other": "give sgd_step the same abstract arguments at every call",
    "resumed": """the second call of train, from the same params and batches, ended elsewhere
        than the first: start every call from init(params) and keep nothing between calls
        (no state left in a global, a default or an attribute)""",
}
HINTS = Hints(HINTS)


def _make_problem(rng: np.random.Generator) -> tuple[dict, list, list]:
    """Initial params, STEPS batches of a fresh linear regression, and learning rates."""
    dim, size = int(rng.integers(3, 9)), int(rng.integers(16, 49))
    true_w, true_b = rng.normal(size=dim), rng.normal()
    xs = rng.normal(size=(STEPS, size, dim)).astype(np.float32)
    ys = (xs @ true_w + true_b + 0.1 * rng.normal(size=(STEPS, size))).astype(np.float32)
    batches = [(jnp.asarray(x), jnp.asarray(y)) for x, y in zip(xs, ys, strict=True)]
    params = {"w": jnp.asarray(rng.normal(size=dim), jnp.float32)}
    params["b"] = jnp.asarray(rng.normal(), jnp.float32)
    kinds = list(SCALAR_KINDS) * 2
    kinds += list(rng.choice(list(SCALAR_KINDS), size=STEPS - len(kinds)))
    rng.shuffle(kinds)
    return params, batches, [SCALAR_KINDS[k](float(rng.uniform(0.01, 0.15))) for k in kinds]


def _reference_step(state: dict[str, Any], batch: tuple[Any, Any], lr: float) -> dict:
    """One SGD step and running-average update, in float64 NumPy."""
    w, b = np.asarray(state["params"]["w"], np.float64), float(state["params"]["b"])
    x, y = np.asarray(batch[0], np.float64), np.asarray(batch[1], np.float64)
    residual = x @ w + b - y
    w, b = w - lr * 2.0 * x.T @ residual / len(y), b - lr * 2.0 * residual.mean()
    average = 0.9 * float(state["avg_loss"]) + 0.1 * float(np.mean(residual**2))
    return {"params": {"w": w, "b": np.float64(b)}, "avg_loss": np.float64(average)}


def _require_state(
    grading: Grading, check: str, got: Any, want: Any, who: str, tolerance: float = 1e-4
) -> None:
    """``got`` is a state like ``want``, entry by entry; a failure names the entries that differ."""
    p, average = (got.get("params"), got.get("avg_loss")) if isinstance(got, dict) else ({}, None)
    fail_unless(
        check,
        isinstance(p, dict) and set(p) == {"w", "b"} and set(got) == {"params", "avg_loss"}
        and average is not None and np.shape(average) == (),
        expected='a dict {"params": {"w": ..., "b": ...}, "avg_loss": a scalar}',
        seen=f"{who} returned {type(got).__name__}"
        + (f" with keys {sorted(got)}" if isinstance(got, dict) else "")
        + f", avg_loss {shorten(repr(average), 40)}",
        hint=HINTS["structure"],
    )  # fmt: skip
    mine = np.concatenate([np.ravel(p["w"]), np.ravel(p["b"]), np.ravel(average)])
    theirs = np.concatenate([np.ravel(want["params"][k]) for k in "wb"] + [[want["avg_loss"]]])
    names = [f"params['w'][{i}]" for i in range(theirs.size - 2)] + ["params['b']", "avg_loss"]
    # Within a few times float32's tolerance: the formula is right and digits were lost
    # on the way (lr in bfloat16), whichever entry crossed the line first.
    near = lost_digits([mine], [theirs])
    grading.require_close(
        check, mine, theirs, rtol=tolerance, atol=tolerance * 0.1, names=names,
        whose=f"{who}'s state", hint=lambda wrong: HINTS[
            "avg_loss" if wrong == ["avg_loss"] and check != INIT and not near else check],
    )  # fmt: skip


def _fresh(tree: Any) -> Any:
    """New device arrays with the content of ``tree``'s (weak types kept): what the grader
    hands sgd_step, which may donate them, while it keeps its own."""
    return jax.tree.map(lambda a: a.copy() if isinstance(a, jax.Array) else a, tree)


def _require_kept(grading: Grading, params: Any, batches: Any, mine: Any) -> None:
    """The caller's params and batches still hold what they held (``mine``), after both
    runs of train (the same objects): a donated argument deletes them, an assignment
    into them changes them."""
    seen, donated = changed_arguments(
        {"params": params, "batches": batches}, {"params": mine[0], "batches": mine[1]}
    )
    expected = "the caller's params and batches as they were, after train"
    hint = DONATED * donated
    TRAIN.require(grading, UNCHANGED, not seen, expected=expected, seen=seen, hint=hint)


def _state_differs(second: Any, first: Any) -> str:
    """How the second run's state differs from the first's ("" when it does not)."""
    if same_content(second, first):
        return ""
    try:
        a, b = (np.concatenate([np.ravel(x) for x in jax.tree.leaves(t)]) for t in (second, first))
        return f"largest difference {float(np.max(np.abs(a - b))):.3g}"
    except Exception:
        return "another structure"


def _kind(difference: Any) -> str:
    """Which of HINTS a difference of the doctor's signature calls for."""
    if difference.part in (KEYWORD, STATIC):
        return difference.part
    return next((k for k in ("state", "lr") if difference.where.startswith(k)), "other")


def _types_hint(before: Any, after: Any) -> str:
    """The hint for the first entry whose type init got wrong, from what it was: a weak
    float, a weak integer (0, jnp.array(0)), another dtype; "" (the check's own) if else."""
    paths = jax.tree_util.tree_leaves_with_path(before)
    later = jax.tree.leaves(after)
    for (path, old), new in zip(paths, later, strict=True) if len(paths) == len(later) else ():
        try:
            was, now = jax.typeof(old), jax.typeof(new)
        except TypeError:  # not an array: the verdict's text says what it is
            return ""
        name = "state" + jax.tree_util.keystr(path)
        if was.dtype == now.dtype and was.weak_type and not now.weak_type:
            return HINTS["weak init"]
        kind = "weak int init" if was.weak_type and was.dtype == np.int32 else "dtype init"
        if was.dtype != now.dtype:
            return HINTS[kind].format(name=name, before=was, after=now)
    return ""


@grader("python_scalars", checks=CHECKS, hints=HINTS)
def grade(
    grading: Grading,
    init: Callable[..., Any],
    sgd_step: Callable[..., Any],
    train: Callable[..., Any],
) -> None:
    """Grade ``init``, ``sgd_step`` and ``train`` on a fresh problem and schedule."""
    rng = grading.rng
    params, batches, lrs = _make_problem(rng)
    mine = jax.tree.map(np.array, (params, batches))  # for the references: never donated
    TRAIN.jitted(grading, sgd_step)

    lr = float(rng.uniform(0.01, 0.15))
    state = {"params": mine[0], "avg_loss": np.float32(rng.uniform(0.5, 2.0))}
    want = _reference_step(state, mine[1][0], lr)
    one = grading.call_learner(ONE_STEP, sgd_step, _fresh(state), _fresh(batches[0]), lr)
    _require_state(grading, ONE_STEP, one, want, "sgd_step")

    start = grading.call_learner(INIT, init, _fresh(params))
    _require_state(grading, INIT, start, {"params": mine[0], "avg_loss": 0.0}, "init", tolerance=0)
    before = _fresh(start)  # sgd_step may donate what it is given
    stepped = grading.call_learner(SAME_TYPES, sgd_step, start, _fresh(batches[1]), lr)
    labels = ("from init", "after one step")
    text = "; ".join(type_changes(before, stepped, name="state", labels=labels, limit=4))
    missing = any(key in text for key in ("None", ": absent ", ": present ", "containers"))
    expected = "jax.tree.map(jax.typeof, state) the same before and after one step"
    hint = HINTS["missing"] if missing else _types_hint(before, stepped)
    grading.require(SAME_TYPES, not text, expected, text, hint)

    def schedule(step: int) -> Any:
        expected = f"schedule(step) for each step from 0 to {len(lrs) - 1}"
        fine = not isinstance(step, int | np.integer) or 0 <= step < len(lrs)
        fail_unless(RUNS, fine, expected=expected, seen=f"schedule({step})", hint=HINTS["steps"])
        return lrs[step]

    twice = [((params, batches, schedule), {})] * 2  # the same start: nothing carried over
    try:
        run = TRAIN.run(grading, train, sgd_step, twice, check=RUNS)
    except GradingFailure:
        _require_kept(grading, params, batches, mine)  # a donated argument: named as such
        raise
    _require_kept(grading, params, batches, mine)
    grading.passed(RUNS)
    final, calls = run.outputs[0], run.calls[0]
    TRAIN.jit_on(grading, run.recorder)
    _require_every_batch(grading, calls, before, mine[1], run)
    expected = "train to return the state the last sgd_step call returned"
    seen = "train's result differs from the output of its last sgd_step call"
    grading.require(FROM_STEP, same_content(final, calls[-1].returned()), expected, seen)
    reference = {"params": mine[0], "avg_loss": 0.0}
    for batch, value in zip(mine[1], lrs, strict=True):
        reference = _reference_step(reference, batch, float(value))
    _require_state(grading, NUMBERS, final, reference, "train")
    again = _state_differs(run.outputs[1], final)
    fail_unless(NUMBERS, not again, expected="the same final state from the same start twice",
                seen=f"the second call of train ended with other numbers ({again})",
                hint=HINTS["resumed"])  # fmt: skip
    found = why(calls)
    avals = sorted({type_text(c.arguments["lr"]) if "lr" in c.arguments else "?" for c in calls})
    hint = found.hint_for(HINTS, HINTS["other"], most=1, kind=_kind)
    hint = hint.format(avals=f"{len(avals)} abstract values ({', '.join(avals)})")
    what = f"compilations of sgd_step over {STEPS} steps"
    TRAIN.compiles(grading, ONCE, run.count, exactly=1, what=what, hint=hint, cause=found.text)


def _require_every_batch(
    grading: Grading, calls: list[Call], start: Any, batches: list, run: Any
) -> None:
    """One call per batch, in order and uncast, each from the state the previous call returned."""
    hint = HINTS[EVERY_BATCH]
    if not calls and run.recorder.traced:
        hint += "; sgd_step was only called while another function was being traced"
    elif not calls and run.count.compiles:
        hint += "; sgd_step compiled, but not through a name train holds"
    fail_unless(EVERY_BATCH, len(calls) == len(batches), hint=hint,
                expected=f"{len(batches)} calls of sgd_step, one per batch",
                seen=f"{len(calls)} call(s) of sgd_step")  # fmt: skip
    for i, call in enumerate(calls):
        state, batch = [*call.copied().values(), None, None][:2]
        cast = "; ".join(type_changes(batches[i], batch, name="batch", labels=("given", "passed")))
        given = "(" + ", ".join(map(type_text, batches[i])) + ")"
        previous, origin = (calls[i - 1].returned(), f"call {i}") if i else (start, "init(params)")
        for wrong, expected, seen, kind in (
            (bool(cast), f"batch number {i} as the loader gave it {given}", cast, "cast"),
            (not same_content(batch, batches[i]), f"batch number {i}", "another batch", "order"),
            (not same_content(state, previous), f"the state {origin} returned",
             "a different state", "chain"),
        ):  # fmt: skip
            fail_unless(EVERY_BATCH, not wrong, expected=f"call {i + 1} with {expected}",
                        seen=f"call {i + 1} got {seen}", hint=HINTS[kind])  # fmt: skip
    grading.passed(EVERY_BATCH)
