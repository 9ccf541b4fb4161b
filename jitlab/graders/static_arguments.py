"""Grader for static_arguments: ``BlockConfig`` (equal and hashable by value, immutable)
and ``make_forward()`` (``block`` jitted with ``cfg`` alone static), by a float64 NumPy
reference and compile counts whose verdicts name the one thing that changed (JAX explains
a static-value miss only as "cache miss explanation unavailable"). Every call of the
learner's code, ``==`` and ``hash`` too, goes through ``call_learner``.

What the drawing covers, every run (each wrong rule fails every run):
- built by keyword and by position, residual != layer_norm: kw_only fields, a wrong
  field order; every string a new object: a hash of id(activation);
- one field changed, and eps raised and lowered in its 6th and 12th digit: ``==`` or
  ``__hash__`` that skips a field, rounds (one of the two stays equal whatever eps is),
  compares with a tolerance or as float32;
- eps one float64 step up and down: a key that rounds eps or compares it with a tolerance;
- two configs with layer_norm off that differ in eps alone: an __eq__ that skips what
  block ignores (every field counts);
- assigning and deleting every field, and every method of the class called with each
  field's new value: frozen in some fields, against assignment only, or an update() that
  writes in place;
- the same params and x in every call: a donated argument;
- six new temperatures, one of 0.01-0.015: a static temperature, a softmax without the
  max shift (NaN).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import operator
import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jitlab.grading import GradingFailure, Hints, grader
from jitlab.grading.calls import host_callbacks
from jitlab.grading.checks import (
    Grading,
    learner_error,
)
from jitlab.instruments.counting import count_compiles

FIELDS = ("activation", "residual", "layer_norm", "eps")
ACTIVATIONS = types.MappingProxyType(  # the reference's own: read-only
    {
        "relu": lambda z: np.maximum(z, 0.0),
        "tanh": np.tanh,
        "softplus": lambda z: np.logaddexp(z, 0.0),
    }
)
PARAMS = {"w1": ((8, 24), 0.5), "b1": ((24,), 0.1), "w2": ((24, 8), 0.5), "b2": ((8,), 0.1)}
DESCRIBE = "BlockConfig({activation!r}, {residual}, {layer_norm}, {eps!r})".format_map
CLOSE = {"rtol": 1e-4, "atol": 1e-6}  # float32 against float64; a stale eps misses by far more

CHECKS = {  # every check once: its name, then its default hint
    (BUILT := "a config can be built from its four fields"): """build it by keyword and as
        BlockConfig('tanh', True, True, 1e-3): the four fields, in this order, positional""",
    (HASHABLE := "a config is hashable"): """a @dataclass hashes its fields with frozen=True,
        and has __hash__ = None without""",
    (EQUAL := "two configs built from the same values are equal and hash alike"): """a class
        compares and hashes by identity unless told otherwise: use the field values""",
    (DIFFER := "configs that differ in any one field are not equal"): """__eq__ and __hash__
        must use all four fields exactly (no rounding, no tolerance, no float32)""",
    (FROZEN := "a config cannot be changed after it is built"): """a config changed in place keeps
        its old program (its hash was the cache key): make the class refuse every assignment and
        deletion, and build a changed copy instead (jitlab hint 06)""",
    (RETURNS := "make_forward() returns a function"): "",
    (JITTED := "make_forward() returns a jitted function"): "return jax.jit(block, ...)",
    (RUNS := "block runs with cfg static"): "",
    (BASE_NUMBERS := "numbers match the reference for the base config"): "wrap block unchanged",
    (CHANGED_NUMBERS := "a changed field gives new numbers, not stale ones"): "",
    (SHARED := "fresh but equal configs share one compilation"): "hash and compare by value",
    (TEMPERATURES := "new temperatures compile nothing more"): """a static temperature
        compiles once per value: mark cfg alone static""",
    (CHANGED_ONCE := "a changed config compiles exactly once"): """a new config value needs
        its own program once, and equal ones must share it""",
    (LATER_NUMBERS := "numbers stay right for every temperature and config"): """every call
        must use the temperature and config it is given""",
    (INSIDE := "the work happens inside the compiled program"): """return jax.jit(block, ...)
        itself: a host callback runs the work outside the compiled program""",
}
MISTAKES = {  # the mistakes that a verdict names when the grader sees them
    "nan": """NaN: a softmax that does not subtract the max overflows at a small temperature:
        wrap block as given""",
    "reused": "the changed config reused the old program: residual must be in __eq__ and __hash__",
    "order": """the config built by position differs from the one built by keyword: declare the
        fields in the order activation, residual, layer_norm, eps""",
    "interned": """the same call twice gives one object, but built another way (by position)
        an equal config is another object, unequal: an interning cache (functools.cache, a
        dict of instances) keys on how the class was called, not on the values. Compare
        and hash the field values (@dataclasses.dataclass(frozen=True))""",
    "ignored": """every field counts, even one that block ignores for this config (eps with
        layer_norm off): compare and hash all four fields as they are""",
}
TRACED = "a config is not an array: mark cfg with static_argnames (or static_argnums)"
RUN_ERRORS = {  # a word of what the learner's forward raised: the likely mistake
    "Non-hashable static": "params and x are arrays, traced: only cfg is static (and hashable)",
    "ConcretizationTypeError": "cfg's fields are traced (a pytree, or not static?): make it static",
    "abstract array": TRACED,
    "valid JAX type": TRACED,
    "has been deleted": """the caller passes the same params and x to every call: donating
        them deletes the caller's arrays; donate nothing""",
}
HINTS = Hints(CHECKS, MISTAKES, RUN_ERRORS)
COUNTED = {  # check: (compilations, the calls counted, what alone changed between them)
    SHARED: (1, "4 calls, each with a new but equal config", "only the config instance changed"),
    TEMPERATURES: (0, "6 calls with one config and 6 new temperatures", "only temperature changed"),
    CHANGED_ONCE: (1, "3 calls with a changed config (equal to each other)", ""),
}


def _reference(params: dict, x: np.ndarray, fields: dict[str, Any], temperature: float):
    """What ``block`` computes, in float64 NumPy, from the config's field values."""
    p, x = {k: np.asarray(v, np.float64) for k, v in params.items()}, np.asarray(x, np.float64)
    h = ACTIVATIONS[fields["activation"]](x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    h = h + x if fields["residual"] else h
    if fields["layer_norm"]:
        h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + fields["eps"])
    e = np.exp((h - h.max(-1, keepdims=True)) / temperature)
    return e / e.sum(-1, keepdims=True)


def _call(
    grading: Grading, check: str, fn: Any, *args: Any, hint: Any = "", expected: str = "", **kw: Any
) -> Any:
    """``call_learner``, with this exercise's ``hint`` for what the learner's code raised (a
    dict: the hint of its first key that the exception's type and text hold)."""

    def learner() -> Any:
        try:
            out = fn(*args, **kw)  # an array is computed here, inside the bracket
            return jax.block_until_ready(out) if isinstance(out, jax.Array) else out
        except (NotImplementedError, GradingFailure):  # call_learner's own verdicts
            raise
        except Exception as err:
            said = f"{type(err).__name__}: {err}"
            found = [HINTS[w] for w in hint if w in said] if isinstance(hint, dict) else [hint]
            raise learner_error(check, err, expected=expected, hint=(found + [""])[0]) from err

    learner.__name__ = getattr(fn, "__name__", "BlockConfig")
    return grading.call_learner(check, learner)


def _build(grading: Grading, config_class: Any, fields: dict[str, Any], by_position: bool = False):
    """A fresh config, by keyword or by position (the exercise shows both), its strings
    new objects every time: equal configs need not share a string (``id()`` in a hash)."""
    fields = {k: "".join(list(v)) if isinstance(v, str) else v for k, v in fields.items()}
    args, kwargs = ([fields[f] for f in FIELDS], {}) if by_position else ([], fields)
    return _call(grading, BUILT, config_class, *args, hint=HINTS[BUILT], **kwargs)


def _methods(config_class: Any) -> list[str]:
    """The names of the plain methods the class (and its bases but object) defines, not
    dunders: an ``update`` or ``set_eps`` of the learner's that may write in place."""
    names: list[str] = []
    for cls in inspect.getmro(config_class) if isinstance(config_class, type) else ():
        for name, attribute in vars(cls).items():
            plain = inspect.isfunction(attribute) and not name.startswith("__")
            if cls is not object and plain and name not in FIELDS and name not in names:
                names.append(name)
    return names


def _read(cfg: Any) -> list[Any]:
    return [getattr(cfg, field, None) for field in FIELDS]


def _changes(
    grading: Grading, config_class: Any, base: dict[str, Any], variants: dict[str, dict]
) -> list[str]:
    """What went through of assigning (its variant's value) and deleting each field, and
    of calling each method of the class with a field's new value (by keyword, by
    position, as a (name, value) pair): "update(eps=...) changed eps"."""
    changed = []
    for field, how in itertools.product(FIELDS, ("assigning", "deleting")):
        cfg, value = _build(grading, config_class, base), variants[field][field]
        try:
            setattr(cfg, field, value) if how == "assigning" else delattr(cfg, field)
        except Exception:
            continue
        changed += [f"{how} {field}"] * (getattr(cfg, field, None) != base[field])
    want = [base[field] for field in FIELDS]
    for name, field in itertools.product(_methods(config_class), FIELDS):
        value = variants[field][field]
        for args, kwargs, shown in (((), {field: value}, f"{field}=..."), ((value,), {}, "...")):
            cfg = _build(grading, config_class, base)
            try:
                getattr(cfg, name)(*args, **kwargs)
            except Exception:
                continue
            now = _read(cfg)
            moved = [f for f, a, b in zip(FIELDS, now, want, strict=True) if a != b]
            if moved:
                changed.append(f"cfg.{name}({shown}) changing {', '.join(moved)} in place")
                break
    return changed


def _check_value_semantics(
    grading: Grading, config_class: Any, base: dict, variants: dict[str, dict]
) -> None:
    """Built both ways, hashable, equal by value, unequal in any one field, frozen."""
    first, second = (
        _build(grading, config_class, base),
        _build(grading, config_class, base, by_position=True),
    )
    grading.passed(BUILT)
    said = {"hint": HINTS[HASHABLE], "expected": "hash(cfg) to return a number"}
    hashes = [_call(grading, HASHABLE, hash, cfg, **said) for cfg in (first, second)]
    grading.passed(HASHABLE)
    equal = bool(_call(grading, EQUAL, operator.eq, first, second))
    problems = ["== gives False"] * (not equal) + ["hashes differ"] * (hashes[0] != hashes[1])
    expected = f"{DESCRIBE(base)} built by keyword and by position: == True, equal hashes"
    positional = _call(grading, EQUAL, _read, second)  # what the fields hold, built by position
    order = not equal and positional != [base[field] for field in FIELDS]
    interned = not equal and not order and _build(grading, config_class, base) is first
    hint = HINTS["order"] if order else HINTS["interned"] if interned else ""
    grading.require(EQUAL, not problems, expected, ", ".join(problems), hint)
    seen = "they compare equal, so the second would reuse the first's executable"
    for field, fields in variants.items():
        expected = f"{DESCRIBE(base)} != {DESCRIBE(fields)} (they differ in {field})"
        ok = bool(_call(grading, DIFFER, operator.ne, first, _build(grading, config_class, fields)))
        grading.require(DIFFER, ok, expected, seen)
    off = dict(base, layer_norm=False)  # block ignores eps then; the contract does not
    other = dict(off, eps=variants["eps"]["eps"])
    expected = f"{DESCRIBE(off)} != {DESCRIBE(other)} (they differ in eps, layer_norm off)"
    ok = bool(
        _call(
            grading,
            DIFFER,
            operator.ne,
            _build(grading, config_class, off),
            _build(grading, config_class, other),
        )
    )
    grading.require(DIFFER, ok, expected, seen, HINTS["ignored"])
    changed = _call(grading, FROZEN, _changes, grading, config_class, base, variants)
    expected = "cfg.<field> = ..., del cfg.<field> and your methods to leave every field as it was"
    grading.require(FROZEN, not changed, expected, f"{', '.join(changed)} went through")


def _draw_fields(rng: np.random.Generator) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The base config's fields, and for each field a config that differs in it alone."""
    activation, other = (str(a) for a in rng.choice(list(ACTIVATIONS), 2, replace=False))
    eps = float(np.round(rng.uniform(0.01, 0.05), 6))  # layer_norm on: eps matters
    base = dict(zip(FIELDS, (activation, False, True, eps), strict=True))
    changed = (other, True, False, float(np.round(eps + rng.uniform(1.0, 2.0), 6)))
    return base, {f: dict(base, **{f: v}) for f, v in zip(FIELDS, changed, strict=True)}


@grader("static_arguments", checks=tuple(CHECKS), hints=HINTS)
def grade(grading: Grading, config_class: Any, make_forward: Any) -> None:
    """Check ``BlockConfig`` and ``make_forward`` by numbers and compile counts."""
    rng = grading.rng
    base, variants = _draw_fields(rng)
    # eps in its 6th and 12th digit, and one float64 step: told apart by == only (a float32
    # eps is the same). Raised and lowered: a key that rounds eps keeps one of the two
    # equal, whatever eps; a relative tolerance of any size misses the step.
    slightly = {
        f"eps, its {d}th digit {way}": dict(base, eps=base["eps"] * (1 + sign * 10.0 ** (1 - d)))
        for d in (6, 12)
        for way, sign in (("raised", 1), ("lowered", -1))
    }
    for way, toward in (("up", np.inf), ("down", -np.inf)):
        slightly[f"eps, one float64 step {way}"] = dict(
            base, eps=float(np.nextafter(base["eps"], toward))
        )
    _check_value_semantics(grading, config_class, base, {**variants, **slightly})

    forward = grading.call_learner(RETURNS, make_forward)
    grading.passed(RETURNS)
    grading.require_jitted(JITTED, forward, hint=HINTS[JITTED])
    params_np = {k: rng.normal(0, scale, s).astype(np.float32) for k, (s, scale) in PARAMS.items()}
    x_np = rng.normal(size=(16, 8)).astype(np.float32)
    params, x = {k: jnp.asarray(v) for k, v in params_np.items()}, jnp.asarray(x_np)

    run = functools.partial(_call, grading, RUNS, forward, params, x, hint=RUN_ERRORS)
    forward.clear_cache()
    temperature = float(rng.uniform(0.5, 2.0))
    want_base = _reference(params_np, x_np, base, temperature)
    got = run(_build(grading, config_class, base), temperature)
    grading.passed(RUNS)
    grading.require_close(BASE_NUMBERS, got, want_base, **CLOSE, hint=HINTS[BASE_NUMBERS])
    for field, fields in variants.items():
        want = _reference(params_np, x_np, fields, temperature)
        assert not np.allclose(want, want_base, **CLOSE), field  # grader sanity
        hint = f"another config's numbers ({field} changed): {field} must be in __eq__ and __hash__"
        got = run(_build(grading, config_class, fields), temperature)
        grading.require_close(CHANGED_NUMBERS, got, want, **CLOSE, hint=hint)

    forward.clear_cache()
    fresh = dict(base, eps=float(np.round(rng.uniform(0.05, 0.5), 6)))
    changed = dict(fresh, residual=not fresh["residual"])
    cfg = _build(grading, config_class, fresh)
    temperatures = [float(t) for t in (rng.uniform(0.01, 0.015), *rng.uniform(0.5, 2.0, 5))]
    rounds = [(fresh, 1.0)] * 4, [(fresh, t) for t in temperatures], [(changed, 1.0)] * 3
    later = []  # (fields, temperature, output) of every counted call
    for (check, (exactly, what, alone)), calls in zip(COUNTED.items(), rounds, strict=True):
        configs = [
            cfg if check == TEMPERATURES else _build(grading, config_class, f) for f, _ in calls
        ]
        with count_compiles(forward, explain=False) as count:
            later += [(f, t, run(c, t)) for (f, t), c in zip(calls, configs, strict=True)]
        hint = HINTS["reused" if count.compiles < exactly else check]
        extra = alone if count.compiles > exactly else ""
        what = f"compilation(s) for {what}"
        grading.require_compiles(
            check, count, exactly=exactly, what=what, hint=hint, seen_extra=extra
        )
    for fields, t, out in later:
        label = "the changed config" if fields is changed else f"temperature {t:.4g}"
        hint = f"at {label}: " + HINTS["nan" if np.isnan(out).any() else LATER_NUMBERS]
        want = _reference(params_np, x_np, fields, t)
        grading.require_close(LATER_NUMBERS, out, want, **CLOSE, hint=hint)
    found = ", ".join(grading.call_learner(INSIDE, host_callbacks, forward, params, x, cfg, 1.0))
    expected = "block's work done by the compiled program"
    grading.require(INSIDE, not found, expected, f"callbacks: {found}")
