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
=========================================  ===========================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from jitlab.grading import Call, Hints, call_learner, fail_unless, fresh_rng, grader, why
from jitlab.grading.calls import same_content, type_changes, type_text
from jitlab.grading.checks import lost_digits, passed, require_close, shorten
from jitlab.grading.kernel import JIT_ON, JITTED, UNCHANGED, KernelExercise
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
    "structure": "keep the state's keys, and avg_loss one number: jnp.zeros((), jnp.float32)",
    SAME_TYPES: "write each entry in init with the dtype and shape sgd_step returns",
    "weak init": """a weak type (~) where sgd_step returns a strong one: 0.0 and
        jnp.asarray(0.0) are weak; write jnp.zeros((), jnp.float32) in init""",
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
        and weak flag: jnp.asarray(lr, jnp.float32) (inside sgd_step is too late)""",
    KEYWORD: "call sgd_step one way every time (positionally, say)",
    STATIC: "lr looks static (every new value compiles): keep it a traced argument",
    "again": """sgd_step compiled again for arguments it had seen: do not clear its cache, or
        build a new jitted function, inside train""",
    "other": "give sgd_step the same abstract arguments at every call",
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


def _require_state(check: str, got: Any, want: Any, who: str, tolerance: float = 1e-4) -> None:
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
    require_close(
        check, mine, theirs, rtol=tolerance, atol=tolerance * 0.1, names=names,
        whose=f"{who}'s state", hint=lambda wrong: HINTS[
            "avg_loss" if wrong == ["avg_loss"] and check != INIT and not near else check],
    )  # fmt: skip


def _kind(difference: Any) -> str:
    """Which of HINTS a difference of the doctor's signature calls for."""
    if difference.part in (KEYWORD, STATIC):
        return difference.part
    return next((k for k in ("state", "lr") if difference.where.startswith(k)), "other")


@grader("python_scalars", checks=CHECKS)
def grade(
    init: Callable[..., Any], sgd_step: Callable[..., Any], train: Callable[..., Any]
) -> None:
    """Grade ``init``, ``sgd_step`` and ``train`` on a fresh problem and schedule."""
    rng = fresh_rng()
    params, batches, lrs = _make_problem(rng)
    TRAIN.jitted(sgd_step)

    lr = float(rng.uniform(0.01, 0.15))
    state = {"params": params, "avg_loss": jnp.float32(rng.uniform(0.5, 2.0))}
    one = call_learner(ONE_STEP, sgd_step, state, batches[0], lr)
    _require_state(ONE_STEP, one, _reference_step(state, batches[0], lr), "sgd_step")

    start, reference = call_learner(INIT, init, params), {"params": params, "avg_loss": 0.0}
    _require_state(INIT, start, reference, "init", tolerance=0)
    stepped = call_learner(SAME_TYPES, sgd_step, start, batches[1], lr)
    labels = ("from init", "after one step")
    text = "; ".join(type_changes(start, stepped, name="state", labels=labels, limit=4))
    missing = any(key in text for key in ("None", ": absent ", ": present ", "containers"))
    expected = "jax.tree.map(jax.typeof, state) the same before and after one step"
    hint = HINTS["missing"] if missing else HINTS["weak init"] if "~" in text else ""
    HINTS.require(SAME_TYPES, not text, expected, text, hint)

    def schedule(step: int) -> Any:
        expected = f"schedule(step) for each step from 0 to {len(lrs) - 1}"
        fine = not isinstance(step, int | np.integer) or 0 <= step < len(lrs)
        fail_unless(RUNS, fine, expected=expected, seen=f"schedule({step})", hint=HINTS["steps"])
        return lrs[step]

    run = TRAIN.run(train, sgd_step, [((params, batches, schedule), {})], check=RUNS)
    passed(RUNS)
    (final,), calls = run.outputs, run.kernel_calls
    TRAIN.jit_on(run.recorder)
    _require_every_batch(calls, start, batches, run)
    expected = "train to return the state the last sgd_step call returned"
    seen = "train's result differs from the output of its last sgd_step call"
    HINTS.require(FROM_STEP, same_content(final, calls[-1].out), expected, seen)
    TRAIN.unchanged(run, what=lambda i: "params or batches")
    for batch, value in zip(batches, lrs, strict=True):
        reference = _reference_step(reference, batch, float(value))
    _require_state(NUMBERS, final, reference, "train")
    found = why(calls)
    avals = sorted({type_text(c.arguments["lr"]) if "lr" in c.arguments else "?" for c in calls})
    hint = found.hint_for(HINTS, HINTS["other"], most=1, kind=_kind)
    hint = hint.format(avals=f"{len(avals)} abstract values ({', '.join(avals)})")
    what = f"compilations of sgd_step over {STEPS} steps"
    TRAIN.compiles(ONCE, run.count, exactly=1, what=what, hint=hint, cause=found.text)


def _require_every_batch(calls: list[Call], start: Any, batches: list, run: Any) -> None:
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
        state, batch = [*call.arguments.values(), None, None][:2]
        cast = "; ".join(type_changes(batches[i], batch, name="batch", labels=("given", "passed")))
        given = "(" + ", ".join(map(type_text, batches[i])) + ")"
        previous, origin = (calls[i - 1].out, f"call {i}") if i else (start, "init(params)")
        for wrong, expected, seen, kind in (
            (bool(cast), f"batch number {i} as the loader gave it {given}", cast, "cast"),
            (not same_content(batch, batches[i]), f"batch number {i}", "another batch", "order"),
            (not same_content(state, previous), f"the state {origin} returned",
             "a different state", "chain"),
        ):  # fmt: skip
            fail_unless(EVERY_BATCH, not wrong, expected=f"call {i + 1} with {expected}",
                        seen=f"call {i + 1} got {seen}", hint=HINTS[kind])  # fmt: skip
    passed(EVERY_BATCH)
