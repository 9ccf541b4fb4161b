"""Grader for static_arguments: ``BlockConfig``, a configuration class that works as a
static argument (equal and hashable by value, immutable), and ``make_forward()``, which
jits the given ``block`` with ``cfg`` alone static. Numbers are compared with a float64
NumPy reference kept here; compile counts start from an emptied cache, and each verdict
names the one thing that changed between the counted calls (JAX's own explanation of a
static-value miss reads "cache miss explanation unavailable").

What the drawing covers, every run (each wrong rule fails every run):

- a config built by keyword and one by position: kw_only fields, a wrong field order;
- configs differing in one field each, and eps raised and lowered in its 6th and its 12th
  digit: ``==`` or ``__hash__`` that skips a field, rounds (one of the two stays equal,
  whatever eps is drawn), compares with a tolerance or as float32;
- assignment and deletion of every field: a config frozen in some fields, or only
  against assignment;
- the same params and x passed to every call: a donated argument;
- six new temperatures, one of 0.01-0.015: a static temperature, a softmax without
  the max shift (NaN).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jitlab.grading import GradingFailure, Hints, call_learner, fresh_rng, grader, passed
from jitlab.grading.checks import learner_error, require_close, require_compiles, require_jitted
from jitlab.grading.kernel import host_callbacks
from jitlab.instruments.counting import count_compiles

FIELDS = ("activation", "residual", "layer_norm", "eps")
ACTIVATION_NAMES = ("relu", "tanh", "softplus")
BATCH, WIDTH, HIDDEN = 16, 8, 24
RTOL, ATOL = 1e-4, 1e-6  # float32 against float64; a stale eps misses by far more

CHECKS = {  # every check once: its name, then its default hint
    (BUILT := "a config can be built from its four fields"): """the exercise builds configs both
        ways, BlockConfig('tanh', True, True, 1e-3) and BlockConfig(activation='tanh', ...):
        keep the four fields, in this order, positional""",
    (HASHABLE := "a config is hashable"): """a @dataclass that is not frozen gets __hash__ = None;
        @dataclasses.dataclass(frozen=True) gives a hash over the fields""",
    (EQUAL := "two configs built from the same values are equal and hash alike"): """an ordinary
        class compares and hashes by identity, so every new instance compiles again; compare and
        hash by the field values""",
    (DIFFER := "configs that differ in any one field are not equal"): """block bakes every field it
        reads into the compiled program: __eq__ and __hash__ must compare all four fields
        exactly (no rounding, no tolerance, no float32)""",
    (FROZEN := "a config cannot be changed after it is built"): """a config changed after use keeps
        hitting the executable compiled for its old values, or corrupts the cache's key; freeze
        it (@dataclasses.dataclass(frozen=True)) and build changed copies with
        dataclasses.replace""",
    (RETURNS := "make_forward() returns a function"): "",
    (JITTED := "make_forward() returns a jitted function"): """return jax.jit(block, ...) so the
        work stays inside the compiler""",
    (RUNS := "block runs with cfg static"): "",
    (BASE_NUMBERS := "numbers match the reference for the base config"): """block is given: check
        that make_forward wraps block itself, unchanged""",
    (CHANGED_NUMBERS := "a changed field gives new numbers, not stale ones"): "",
    (SHARED := "fresh but equal configs share one compilation"): """only the config instance changed
        between these calls, and each new instance compiled again: hash and compare configs by
        their values""",
    (TEMPERATURES := "new temperatures compile nothing more"): """only temperature changed between
        these calls: making it static compiles once per value; mark only cfg static""",
    (CHANGED_ONCE := "a changed config compiles exactly once"): """a new config value needs its own
        program once, and equal ones must share it""",
    (LATER_NUMBERS := "numbers stay right for every temperature and config"): """every call must use
        the temperature and config it is given""",
    (INSIDE := "the work happens inside the compiled program"): """return jax.jit(block, ...)
        itself: a host callback runs the work outside the compiled program""",
}
HINTS = {  # the mistakes that a verdict names when the grader sees them
    "nan": """NaN: a softmax that does not subtract the max overflows for a small temperature; wrap
        block as given (jax.nn.softmax subtracts it)""",
    "reused": """the changed config reused the old program: residual must take part in __eq__ and
        __hash__""",
    "order": """the config built by position differs from the one built by keyword: declare the
        fields in the order activation, residual, layer_norm, eps""",
    "donated": """the caller passes the same params and x to every call: donating them
        (donate_argnums / donate_argnames) deletes the caller's arrays after the first; donate
        nothing""",
    **CHECKS,
}
HINTS = Hints(HINTS)
_check = HINTS.require
_NUMPY_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": lambda z: np.maximum(z, 0.0),
    "tanh": np.tanh,
    "softplus": lambda z: np.logaddexp(z, 0.0),
}


def _reference(params: dict, x: np.ndarray, fields: dict[str, Any], temperature: float):
    """What ``block`` computes, in float64 NumPy, from the config's field values."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x64 = np.asarray(x, np.float64)
    h = _NUMPY_ACTIVATIONS[fields["activation"]](x64 @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    h = h + x64 if fields["residual"] else h
    if fields["layer_norm"]:
        h = (h - h.mean(axis=-1, keepdims=True)) / np.sqrt(
            h.var(axis=-1, keepdims=True) + fields["eps"]
        )
    z = h / temperature
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _describe(fields: dict[str, Any]) -> str:
    return "BlockConfig(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"


def _build(config_class: Callable[..., Any], fields: dict[str, Any], by_position: bool = False):
    """A fresh config, by keyword or by position (the exercise shows both)."""
    if not by_position:
        return call_learner(BUILT, config_class, **fields)

    def positional() -> Any:
        try:
            return config_class(*(fields[f] for f in FIELDS))
        except TypeError as err:
            raise learner_error(BUILT, err, hint=HINTS[BUILT]) from err

    positional.__name__ = getattr(config_class, "__name__", "BlockConfig")
    return call_learner(BUILT, positional)


def _forward(forward: Callable[..., Any], *args: Any) -> Any:
    """Call the learner's jitted block; a crash becomes a failed check with a pointed hint."""
    try:
        return jax.block_until_ready(forward(*args))
    except GradingFailure:
        raise
    except NotImplementedError:
        return call_learner(RUNS, forward, *args)
    except Exception as err:
        text = str(err)
        if isinstance(err, ValueError) and "Non-hashable static arguments" in text:
            hint = "params and x are arrays: they stay traced. Only cfg should be static, and "
            hint += "it must be hashable"
        elif isinstance(err, jax.errors.ConcretizationTypeError):  # a TypeError: test first
            hint = "cfg's fields are being traced (is cfg a registered pytree, or not static?): "
            hint += "make cfg a static argument of jax.jit"
        elif isinstance(err, TypeError) and ("abstract array" in text or "valid JAX type" in text):
            hint = "jax.jit traces every argument that is not marked static, and a config is "
            hint += "not an array: mark cfg with static_argnames (or static_argnums)"
        else:
            hint = HINTS["donated"] if "has been deleted" in text else ""
        raise learner_error(RUNS, err, hint=hint) from err


def _check_value_semantics(config_class: Any, base: dict, variants: dict[str, dict]) -> None:
    first, second = _build(config_class, base), _build(config_class, base, by_position=True)
    passed(BUILT)
    try:
        hashes = (hash(first), hash(second))
    except TypeError as err:
        _check(HASHABLE, False, "hash(cfg) to return a number", f"TypeError: {err}")
    passed(HASHABLE)

    equal, same_hash = bool(first == second), hashes[0] == hashes[1]
    problems = ([] if equal else ["== gives False"]) + ([] if same_hash else ["hashes differ"])
    expected = f"{_describe(base)} built by keyword and by position: == True, equal hashes"
    order = not equal and bool(first == _build(config_class, base))  # only by position differs
    hint = HINTS["order"] if order else HINTS[EQUAL]
    _check(EQUAL, equal and same_hash, expected, ", ".join(problems), hint)
    for field, fields in variants.items():
        expected = f"{_describe(base)} != {_describe(fields)} (they differ in {field})"
        seen = "they compare equal, so the second would reuse the first's executable"
        ok = bool(first != _build(config_class, fields))
        _check(DIFFER, ok, expected, seen)

    changed = []
    for field in FIELDS:
        other = "relu" if base["activation"] != "relu" else "tanh"
        new_value = {"activation": other, "eps": 2 * base["eps"]}.get(field, not base[field])
        for how, change in (("assigning", setattr), ("deleting", delattr)):
            target = _build(config_class, base)
            try:
                change(target, field, *([new_value] if change is setattr else []))
            except Exception:
                continue
            if getattr(target, field, None) != base[field]:
                changed.append(f"{how} {field}")
    expected = "cfg.<field> = ... and del cfg.<field> to raise for every field"
    seen = f"{', '.join(changed)} went through"
    _check(FROZEN, not changed, expected, seen)


def _draw_fields(rng: np.random.Generator) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    eps = float(np.round(rng.uniform(0.01, 0.05), 6))
    base = dict(activation=str(rng.choice(ACTIVATION_NAMES)), residual=True, layer_norm=True)
    base["eps"] = eps
    other = str(rng.choice([a for a in ACTIVATION_NAMES if a != base["activation"]]))
    return base, {
        "activation": dict(base, activation=other),
        "residual": dict(base, residual=False),
        "layer_norm": dict(base, layer_norm=False),
        "eps": dict(base, eps=float(np.round(eps + rng.uniform(1.0, 2.0), 6))),
    }


def _count(check: str, forward: Any, calls: list[tuple], exactly: int, what: str, seen: str):
    """Run ``calls`` under a compile count that must be ``exactly``; their outputs."""
    with count_compiles(forward, explain=False) as count:
        outputs = [_forward(forward, *args) for args in calls]
    hint = HINTS["reused" if count.compiles < exactly else check]
    extra = seen if count.compiles > exactly else ""
    require_compiles(check, count, exactly=exactly, what=what, hint=hint, seen_extra=extra)
    return outputs


@grader("static_arguments", checks=tuple(CHECKS))
def grade(config_class: Callable[..., Any], make_forward: Callable[[], Any]) -> None:
    """Check ``BlockConfig`` and ``make_forward`` by numbers and compile counts."""
    rng = fresh_rng()
    base, variants = _draw_fields(rng)
    # eps in its 6th and 12th digit: told apart by == only (a float32 eps is the same).
    # Raised and lowered: a key that rounds eps keeps one of the two equal, whatever eps.
    slightly = {
        f"eps, its {d}th digit {way}": dict(base, eps=base["eps"] * (1 + sign * 10.0 ** (1 - d)))
        for d in (6, 12)
        for way, sign in (("raised", 1), ("lowered", -1))
    }
    _check_value_semantics(config_class, base, {**variants, **slightly})

    forward = call_learner(RETURNS, make_forward)
    passed(RETURNS)
    require_jitted(JITTED, forward, hint=HINTS[JITTED])
    shapes = {"w1": (WIDTH, HIDDEN), "b1": (HIDDEN,), "w2": (HIDDEN, WIDTH), "b2": (WIDTH,)}
    params_np = {
        k: rng.normal(0.0, 0.5 if k[0] == "w" else 0.1, s).astype(np.float32)
        for k, s in shapes.items()
    }
    x_np = rng.normal(size=(BATCH, WIDTH)).astype(np.float32)
    params, x = {k: jnp.asarray(v) for k, v in params_np.items()}, jnp.asarray(x_np)

    forward.clear_cache()
    temperature = float(rng.uniform(0.5, 2.0))
    want_base = _reference(params_np, x_np, base, temperature)
    got = _forward(forward, params, x, _build(config_class, base), temperature)
    passed(RUNS)
    require_close(BASE_NUMBERS, got, want_base, rtol=RTOL, atol=ATOL, hint=HINTS[BASE_NUMBERS])
    for field, fields in variants.items():
        want = _reference(params_np, x_np, fields, temperature)
        assert not np.allclose(want, want_base, rtol=RTOL, atol=ATOL), field  # grader sanity
        got = _forward(forward, params, x, _build(config_class, fields), temperature)
        hint = f"these are the numbers for another config ({field} changed): {field} must take "
        hint += "part in __eq__ and __hash__"
        require_close(CHANGED_NUMBERS, got, want, rtol=RTOL, atol=ATOL, hint=hint)

    forward.clear_cache()
    fresh = dict(base, eps=float(np.round(rng.uniform(0.05, 0.5), 6)))
    calls = [(params, x, _build(config_class, fresh), 1.0) for _ in range(4)]
    what = "compilation(s) for 4 calls, each with a new but equal config"
    _count(SHARED, forward, calls, 1, what, "only the config instance changed")
    cfg = _build(config_class, fresh)
    temperatures = [float(t) for t in (rng.uniform(0.01, 0.015), *rng.uniform(0.5, 2.0, 5))]
    what = "compilation(s) for 6 calls with one config and 6 new temperatures"
    calls = [(params, x, cfg, t) for t in temperatures]
    outs = _count(TEMPERATURES, forward, calls, 0, what, "only temperature changed")
    changed = dict(fresh, residual=not fresh["residual"])
    calls = [(params, x, _build(config_class, changed), 1.0) for _ in range(3)]
    what = "compilation(s) for 3 calls with a changed config (equal to each other)"
    outs += _count(CHANGED_ONCE, forward, calls, 1, what, "")[-1:]
    want = [_reference(params_np, x_np, fresh, t) for t in temperatures]
    want.append(_reference(params_np, x_np, changed, 1.0))
    labels = [f"temperature {t:.4g}" for t in temperatures] + ["the changed config"]
    for out, ref, label in zip(outs, want, labels, strict=True):
        hint = f"at {label}: " + HINTS["nan" if np.isnan(out).any() else LATER_NUMBERS]
        require_close(LATER_NUMBERS, out, ref, rtol=RTOL, atol=ATOL, hint=hint)
    found = ", ".join(host_callbacks(forward, params, x, cfg, 1.0))
    _check(INSIDE, not found, "block's work done by the compiled program", f"callbacks: {found}")


__all__ = ["CHECKS", "FIELDS", "grade"]
