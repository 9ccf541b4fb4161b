"""Grader for the Python scalars exercise: an SGD loop whose learning-rate schedule
returns mixed scalar types, and whose state is built by ``init``.

The learner writes ``init(params)``, ``sgd_step(state, batch, lr)`` (jitted) and
``train(params, batches, schedule)``. The grader draws a fresh linear-regression problem
and a fresh schedule whose learning rates arrive as Python ints, Python floats, NumPy
float64 and float32 scalars, and strong and weak ``jnp`` scalars, every kind at least
twice, in a random order. It checks, in this order:

1. ``sgd_step`` is jitted, and one step on a state the grader builds matches a float64
   NumPy reference (the reference is computed here, privately);
2. ``init(params)`` holds these params and a zero average, and one ``sgd_step`` from it
   returns a state with the same structure and abstract values (weak flags included);
3. ``train`` runs; while it runs, every reference to ``sgd_step`` it holds is rebound
   to a recorder (:mod:`jitlab.grading.calls`) that forwards to the real function, so
   the grader sees each call: jit must be on at every call, ``sgd_step`` must be called
   once per batch, in order, each time with the state the previous call returned, and
   ``train`` must return the state the last call returned (a NumPy path plus a decoy
   call, a loop that never calls the step, or the grader's reference all fail here);
4. the caller's params are unchanged (by content), and the final state matches the
   reference;
5. ``sgd_step`` compiled exactly once over the schedule. When it did not, the verdict
   names the cause from what the recorder saw (the state's types changed after a step,
   ``lr`` arrived with several abstract values, a new ``lr`` value compiled under the
   same signature, i.e. a static ``lr``, or a signature seen before compiled again)
   and quotes JAX's own explanation only as a second opinion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from jitlab.grading import Call, Signature, call_learner, differences, fail, fresh_rng, grader
from jitlab.grading.calls import same_content, signature
from jitlab.grading.checks import passed, require, require_close
from jitlab.grading.kernel import JIT_ON, JITTED, UNCHANGED, KernelExercise

TRAIN = KernelExercise(
    wrapper="train",
    kernel="sgd_step",
    call="sgd_step(state, batch, lr)",
    hints={
        JITTED.name: "keep the @jax.jit decorator on sgd_step",
        UNCHANGED.name: "build new dicts for each state; never assign into the params you "
        "were given",
    },
)
STEPS = 16

ONE_STEP = "one sgd_step matches the reference"
INIT = "init holds the params and a zero average"
SAME_TYPES = "init's state has the types sgd_step returns"
RUNS = "train runs over the schedule"
EVERY_BATCH = "train calls sgd_step once per batch, state to state"
FROM_STEP = "train returns the state sgd_step returned"
NUMBERS = "train's final state matches the reference"
ONCE = "sgd_step compiles once over the schedule"
CHECKS = (
    TRAIN.name(JITTED),
    ONE_STEP,
    INIT,
    SAME_TYPES,
    RUNS,
    TRAIN.name(JIT_ON),
    EVERY_BATCH,
    FROM_STEP,
    TRAIN.name(UNCHANGED),
    NUMBERS,
    ONCE,
)

# How the grader's schedule hands out learning rates. The first entry stands for a
# frozen phase ("lr = 0"), which a config file writes as a Python int; it appears at
# least twice, so a repeated value is always drawn (a static lr does not compile again
# for it, while a cache that is cleared every call does).
SCALAR_KINDS: dict[str, Callable[[float], Any]] = {
    "Python int": lambda value: 0,
    "Python float": float,
    "NumPy float64": np.float64,
    "NumPy float32": np.float32,
    "jnp.float32": jnp.float32,
    "weak jnp scalar": lambda value: jnp.asarray(float(value)),
}


def _make_problem(rng: np.random.Generator) -> dict[str, Any]:
    """A fresh linear-regression problem: initial params, batches, and learning rates."""
    dim = int(rng.integers(3, 9))
    batch_size = int(rng.integers(16, 49))
    true_w = rng.normal(size=dim)
    true_b = rng.normal()
    batches = []
    for _ in range(STEPS):
        inputs = rng.normal(size=(batch_size, dim)).astype(np.float32)
        noise = 0.1 * rng.normal(size=batch_size)
        targets = (inputs @ true_w + true_b + noise).astype(np.float32)
        batches.append((jnp.asarray(inputs), jnp.asarray(targets)))
    params = {
        "w": jnp.asarray(rng.normal(size=dim), jnp.float32),
        "b": jnp.asarray(rng.normal(), jnp.float32),
    }
    kinds = list(SCALAR_KINDS) * 2
    kinds += list(rng.choice(list(SCALAR_KINDS), size=STEPS - len(kinds)))
    rng.shuffle(kinds)
    lrs = [SCALAR_KINDS[kind](float(rng.uniform(0.01, 0.15))) for kind in kinds]
    return {"params": params, "batches": batches, "lrs": lrs}


def _reference_step(state: dict[str, Any], batch: tuple[Any, Any], lr: float) -> dict:
    """One SGD step and running-average update, in float64 NumPy."""
    w = np.asarray(state["params"]["w"], np.float64)
    b = float(state["params"]["b"])
    x = np.asarray(batch[0], np.float64)
    y = np.asarray(batch[1], np.float64)
    residual = x @ w + b - y
    value = float(np.mean(residual**2))
    grad_w = 2.0 * x.T @ residual / len(y)
    grad_b = 2.0 * residual.mean()
    return {
        "params": {"w": w - lr * grad_w, "b": np.float64(b - lr * grad_b)},
        "avg_loss": np.float64(0.9 * float(state["avg_loss"]) + 0.1 * value),
    }


def _vector(state: Any, check: str, who: str) -> np.ndarray:
    """``state`` as one vector [w..., b, avg_loss], or a failed check naming its shape."""
    ok = (
        isinstance(state, dict)
        and set(state) == {"params", "avg_loss"}
        and isinstance(state["params"], dict)
        and set(state["params"]) == {"w", "b"}
    )
    if not ok:
        keys = sorted(state) if isinstance(state, dict) else None
        raise fail(
            check,
            expected='a dict {"params": {"w": ..., "b": ...}, "avg_loss": ...}',
            seen=f"{who} returned {type(state).__name__}"
            + (f" with keys {keys}" if keys is not None else ""),
            hint="keep the state's structure: the same two keys, params as given",
        )
    if state["avg_loss"] is None or np.shape(state["avg_loss"]) != ():
        raise fail(
            check,
            expected="avg_loss as a scalar (shape ())",
            seen=f"{who} returned avg_loss as "
            + ("None" if state["avg_loss"] is None else f"shape {np.shape(state['avg_loss'])}"),
            hint="avg_loss is one number: jnp.zeros((), jnp.float32) to start with",
        )
    p = state["params"]
    return np.concatenate([np.ravel(p["w"]), np.ravel(p["b"]), np.ravel(state["avg_loss"])])


def _state_of(state: Any) -> Any:
    return state


def _types(state: Any) -> Signature:
    """The state's structure and abstract values, as ``jax.tree.map(jax.typeof, ...)``."""
    return signature(_state_of, (state,), {})


def _types_hint(found: list[str]) -> str:
    text = " ".join(found)
    if "None" in text or ": absent " in text or ": present " in text or "containers" in text:
        return (
            "init must build every entry sgd_step returns, with the same keys and no None "
            "slots for the first step to fill"
        )
    if "~" in text:
        return (
            "a weak type (~) where sgd_step returns a strong one: a Python 0.0, or "
            "jnp.asarray(0.0), is weak; write jnp.zeros((), jnp.float32) in init"
        )
    return "write each entry in init with the dtype and shape sgd_step returns"


def _arguments(call: Call) -> list[Any]:
    """(state, batch, lr) as the call passed them, by name or by position."""
    named = list(call.arguments.values())
    return named + [None] * (3 - len(named))


def _compile_causes(calls: list[Call]) -> tuple[list[str], str]:
    """What the recorder saw at each compilation after the first, and the main cause.

    A compilation for a signature seen before is a static ``lr`` when only calls with a
    new value compiled, and a cleared cache (or a new function) when a call repeating
    both an earlier signature and an earlier value compiled too. The schedule always
    repeats a value, so the two are told apart on every run.
    """

    def seen_before(i: int) -> tuple[bool, bool]:
        value = _value(_arguments(calls[i])[2])
        same = [c for c in calls[:i] if c.signature == calls[i].signature]
        return bool(same), any(_value(_arguments(c)[2]) == value for c in same)

    cleared = any(call.compiled and all(seen_before(i)) for i, call in enumerate(calls) if i > 0)
    causes: list[str] = []
    kinds: list[str] = []
    repeats = same_value = 0
    for i, call in enumerate(calls):
        if not call.compiled or i == 0:
            continue
        signature_seen, value_seen = seen_before(i)
        if signature_seen:
            if cleared:
                repeats += 1
                same_value += value_seen
                kinds.append("cleared")
            else:
                value = _value(_arguments(call)[2])
                causes.append(f"call {i + 1}: a new lr value ({value:.4g}), same types")
                kinds.append("static")
            continue
        found = differences(calls[i - 1].signature, call.signature)
        causes.append(f"call {i + 1}: " + "; ".join(found))
        found_kinds = {_category(phrase) for phrase in found}
        kinds.append(next(k for k in ("state", "lr", "style", "other") if k in found_kinds))
    if repeats:
        causes.insert(
            0,
            f"{repeats} calls compiled again for types compiled before, {same_value} of "
            "them with an lr value seen before too",
        )
    for kind in ("state", "lr", "style", "static", "cleared", "other"):
        if kind in kinds:
            return causes, kind
    return causes, "other"


def _category(phrase: str) -> str:
    """Which argument a phrase of :func:`differences` is about."""
    if phrase.startswith("called as"):
        return "style"
    path = phrase.split(":")[0]
    if path.startswith("state"):
        return "state"
    return "lr" if path == "lr" else "other"


def _value(lr: Any) -> float:
    try:
        return float(np.asarray(lr))
    except (TypeError, ValueError):
        return float("nan")


def _hint_for(kind: str, calls: list[Call]) -> str:
    if kind == "state":
        return (
            "the state's types changed after a step: start train from init(params), "
            "and make init return the types sgd_step returns (compare "
            "jax.tree.map(jax.typeof, state) before and after one step)"
        )
    if kind == "lr":
        avals = sorted({call.signature.leaf("lr") or "?" for call in calls})
        return (
            f"lr reached sgd_step as {len(avals)} abstract values ({', '.join(avals)}); "
            "convert it in train, before the call, to one dtype and weak flag, e.g. "
            "jnp.asarray(lr, jnp.float32) (inside sgd_step is too late)"
        )
    if kind == "style":
        return "call sgd_step one way every time (positionally, say)"
    if kind == "static":
        return (
            "lr looks static (every new value compiles): keep it a traced argument; "
            "static is for values that select a different program"
        )
    if kind == "cleared":
        return (
            "sgd_step compiled again for arguments it had compiled for already: do not "
            "clear its cache, or build a new jitted function, inside train"
        )
    return "give sgd_step the same abstract arguments at every call"


@grader("python_scalars", checks=CHECKS)
def grade(
    init: Callable[..., Any], sgd_step: Callable[..., Any], train: Callable[..., Any]
) -> None:
    """Grade the exercise (see the module docstring for what is checked)."""
    rng = fresh_rng()
    problem = _make_problem(rng)
    params, batches, lrs = problem["params"], problem["batches"], problem["lrs"]

    TRAIN.jitted(sgd_step)

    # 1. One step from a state the grader builds, with a plain Python float.
    lr = float(rng.uniform(0.01, 0.15))
    state = {"params": params, "avg_loss": jnp.float32(rng.uniform(0.5, 2.0))}
    one = call_learner(ONE_STEP, sgd_step, state, batches[0], lr)
    require_close(
        ONE_STEP,
        _vector(one, ONE_STEP, "sgd_step"),
        _vector(_reference_step(state, batches[0], lr), ONE_STEP, "the reference"),
        rtol=1e-4,
        hint="params - lr * jax.grad(loss)(params, batch) for w and b, and "
        "avg_loss = 0.9 * avg_loss + 0.1 * loss(params, batch) with the params before "
        "the update",
    )

    # 2. init: the right content, and the types one step returns.
    start = call_learner(INIT, init, params)
    got = _vector(start, INIT, "init")
    want = np.concatenate([np.ravel(params["w"]), np.ravel(params["b"]), [0.0]])
    require_close(
        INIT,
        got,
        want,
        rtol=0,
        atol=0,
        hint="init(params) returns these params unchanged, and avg_loss equal to 0",
    )
    stepped = call_learner(SAME_TYPES, sgd_step, start, batches[1], lr)
    before, after = _types(start), _types(stepped)
    found = differences(before, after, limit=4, then_label="from init", now_label="after one step")
    require(
        SAME_TYPES,
        not found,
        expected="jax.tree.map(jax.typeof, state) the same before and after one step",
        seen="; ".join(found),
        hint=_types_hint(found),
    )

    # 3. train, with every call to sgd_step seen by the recorder.
    def schedule(step: int) -> Any:
        return lrs[step]

    run = TRAIN.run(train, sgd_step, [((params, batches, schedule), {})], check=RUNS)
    passed(RUNS)
    (final,), calls, count = run.outputs, run.kernel_calls, run.count
    TRAIN.jit_on(run.recorder)
    _require_every_batch(calls, start, batches, count.compiles, len(run.recorder.traced))
    require(
        FROM_STEP,
        same_content(final, calls[-1].out),
        expected="train to return the state the last sgd_step call returned",
        seen="train's result differs from the output of its last sgd_step call",
        hint="return the state from the loop as it is; the work happens in sgd_step",
    )
    TRAIN.unchanged(run, what=lambda i: "params or batches")

    reference = {"params": params, "avg_loss": 0.0}
    for batch, value in zip(batches, lrs, strict=True):
        reference = _reference_step(reference, batch, float(value))
    require_close(
        NUMBERS,
        _vector(final, NUMBERS, "train"),
        _vector(reference, NUMBERS, "the reference"),
        rtol=1e-4,
        hint="use lr = schedule(step) for batch number step (from 0), unrounded: the "
        "learning rates are fractions, so an integer dtype turns them into 0",
    )

    # 5. Compile behaviour, with the causes the recorder saw.
    causes, kind = _compile_causes(calls)
    TRAIN.compiles(
        ONCE,
        count,
        exactly=1,
        what=f"compilations of sgd_step over {STEPS} steps",
        hint=_hint_for(kind, calls),
        cause="; ".join(causes[:3]) + (f"; and {len(causes) - 3} more" if len(causes) > 3 else ""),
    )


def _require_every_batch(
    calls: list[Call],
    start: Any,
    batches: list,
    compiles: int,
    inside_traces: int,
) -> None:
    """One call per batch, in order, each from the state the previous call returned."""
    if len(calls) != len(batches):
        hint = (
            "call sgd_step (by that name) once for every batch: the update has to "
            "happen inside the jitted step"
        )
        if not calls and inside_traces:
            hint += "; sgd_step was only called while another function was being traced"
        elif not calls and compiles:
            hint += "; sgd_step compiled, but not through a name train holds"
        raise fail(
            EVERY_BATCH,
            expected=f"{len(batches)} calls of sgd_step, one per batch",
            seen=f"{len(calls)} call(s) of sgd_step",
            hint=hint,
        )
    previous = start
    for i, call in enumerate(calls):
        state, batch, _ = _arguments(call)
        if not same_content(batch, batches[i]):
            raise fail(
                EVERY_BATCH,
                expected=f"call {i + 1} with batch number {i}",
                seen=f"call {i + 1} got another batch",
                hint="go through the batches in order: for step, batch in enumerate(batches)",
            )
        if not same_content(state, previous):
            origin = "init(params)" if i == 0 else f"call {i}"
            raise fail(
                EVERY_BATCH,
                expected=f"call {i + 1} with the state {origin} returned",
                seen=f"call {i + 1} got a different state",
                hint="start from init(params) and pass each call the state the previous "
                "call returned",
            )
        previous = call.out
    passed(EVERY_BATCH)
