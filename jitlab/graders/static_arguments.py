"""Grader for the static arguments exercise: a configuration class for a jitted block.

The exercise gives ``block(params, x, cfg, temperature)``. It reads ``cfg.activation``,
``cfg.residual``, ``cfg.layer_norm`` and ``cfg.eps`` in Python, so ``cfg`` must be
static, and it divides by ``temperature``, a number that changes from call to call. The
learner writes

- ``BlockConfig(activation, residual, layer_norm, eps)``, a configuration class that is
  hashable by value and immutable;
- ``make_forward()``, which returns ``block`` wrapped by ``jax.jit`` with the right
  arguments static.

What is checked, on fresh random inputs and fresh random ``eps`` values every run (so
no hard-coded answer and no entry cached by earlier experiments can pass):

- two configs built from the same values compare equal and hash alike (an identity
  hash, or a mutable ``@dataclass`` whose ``__hash__`` is ``None``, is rejected here).
  Returning one shared instance for equal values is fine: equality is the contract;
- configs that differ in any one field compare unequal, including an ``eps`` that
  differs only in its sixth significant digit (an ``__eq__`` that skips a field, or
  rounds or compares within a tolerance, would reuse another config's executable);
- no field of a config can be assigned after it is built (``unsafe_hash=True``, or
  freezing only some fields, is rejected);
- ``make_forward()`` returns the real ``jax.jit`` type (a plain function with a decoy
  jitted call, or a look-alike object, is rejected), and the grader calls it itself, so
  every number comes out of the learner's compiled program; NumPy reached through a host
  callback is rejected too;
- the numbers match a float64 NumPy reference (computed here, not importable by the
  learner's code) for a base config and for configs that differ from it in one field
  each (a traced ``cfg`` fails to run, and is reported with a hint);
- compile counts, from an emptied cache: fresh but equal configs share one compilation,
  new temperatures compile nothing (a static ``temperature`` is rejected), and a changed
  config compiles exactly once. Each verdict names the one thing that changed between
  the counted calls, because JAX's own explanation of a static-value miss reads "cache
  miss explanation unavailable".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jitlab.grading import GradingFailure, call_learner, fail, fresh_rng, grader, passed, require
from jitlab.grading.checks import require_close, require_compiles, require_jitted, shorten
from jitlab.grading.kernel import host_callbacks
from jitlab.instruments.counting import count_compiles

FIELDS = ("activation", "residual", "layer_norm", "eps")
ACTIVATION_NAMES = ("relu", "tanh", "softplus")
BATCH, WIDTH, HIDDEN = 16, 8, 24
RTOL, ATOL = 1e-4, 1e-6  # float32 against float64; a stale eps misses by far more

BUILT = "a config can be built from its four fields"
HASHABLE = "a config is hashable"
EQUAL = "two configs built from the same values are equal and hash alike"
DIFFER = "configs that differ in any one field are not equal"
FROZEN = "a config cannot be changed after it is built"
RETURNS = "make_forward() returns a function"
JITTED = "make_forward() returns a jitted function"
RUNS = "block runs with cfg static"
BASE_NUMBERS = "numbers match the reference for the base config"
CHANGED_NUMBERS = "a changed field gives new numbers, not stale ones"
SHARED = "fresh but equal configs share one compilation"
TEMPERATURES = "new temperatures compile nothing more"
CHANGED_ONCE = "a changed config compiles exactly once"
LATER_NUMBERS = "numbers stay right for every temperature and config"
INSIDE = "the work happens inside the compiled program"
CHECKS = (
    BUILT,
    HASHABLE,
    EQUAL,
    DIFFER,
    FROZEN,
    RETURNS,
    JITTED,
    RUNS,
    BASE_NUMBERS,
    CHANGED_NUMBERS,
    SHARED,
    TEMPERATURES,
    CHANGED_ONCE,
    LATER_NUMBERS,
    INSIDE,
)

_NUMPY_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": lambda z: np.maximum(z, 0.0),
    "tanh": np.tanh,
    "softplus": lambda z: np.logaddexp(z, 0.0),
}


def _reference(
    params: dict[str, np.ndarray], x: np.ndarray, fields: dict[str, Any], temperature: float
) -> np.ndarray:
    """What ``block`` computes, in float64 NumPy, from the config's field values."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x64 = np.asarray(x, np.float64)
    h = _NUMPY_ACTIVATIONS[fields["activation"]](x64 @ p["w1"] + p["b1"])
    h = h @ p["w2"] + p["b2"]
    if fields["residual"]:
        h = h + x64
    if fields["layer_norm"]:
        mean = h.mean(axis=-1, keepdims=True)
        var = h.var(axis=-1, keepdims=True)
        h = (h - mean) / np.sqrt(var + fields["eps"])
    z = h / temperature
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _describe(fields: dict[str, Any]) -> str:
    inner = ", ".join(f"{k}={v!r}" for k, v in fields.items())
    return f"BlockConfig({inner})"


def _build(config_class: Callable[..., Any], fields: dict[str, Any]) -> Any:
    """A fresh config instance, built the way the exercise describes (keywords)."""
    return call_learner(BUILT, config_class, **fields)


# ---------------------------------------------------------------- calling forward


def _forward(forward: Callable[..., Any], *args: Any) -> Any:
    """Call the learner's jitted block; a crash becomes a failed check with a pointed hint."""
    try:
        return jax.block_until_ready(forward(*args))
    except GradingFailure:
        raise
    except Exception as err:
        raise _diagnose(err) from err


def _diagnose(err: Exception) -> GradingFailure:
    first_line = shorten(str(err).splitlines()[0], 200) if str(err) else ""
    if isinstance(err, NotImplementedError):
        return fail(
            RUNS,
            expected="make_forward's function to return a result",
            seen="NotImplementedError: the exercise is not solved yet",
            hint="replace the `raise NotImplementedError` in the exercise cell; "
            "`jitlab hint static_arguments` if you are stuck",
        )
    if isinstance(err, ValueError) and "Non-hashable static arguments" in str(err):
        cause = [ln for ln in str(err).splitlines() if ln.startswith("TypeError")]
        return fail(
            RUNS,
            expected="the call to run with cfg, and only cfg, as a static argument",
            seen="ValueError: Non-hashable static arguments are not supported"
            + (f" ({cause[0]})" if cause else ""),
            hint="params and x are arrays: they stay traced. Only cfg should be static, "
            "and it must be hashable",
        )
    # ConcretizationTypeError (TracerBoolConversionError, ...) is a TypeError: test first.
    if isinstance(err, jax.errors.ConcretizationTypeError):
        return fail(
            RUNS,
            expected="block's Python `if cfg...` tests to see plain Python values",
            seen=f"{type(err).__name__}: {first_line}",
            hint="cfg's fields are being traced (is cfg a registered pytree, or not "
            "static?): make cfg a static argument of jax.jit",
        )
    if isinstance(err, TypeError) and (
        "abstract array" in str(err) or "not a valid JAX type" in str(err)
    ):
        return fail(
            RUNS,
            expected="cfg passed to block as a static argument",
            seen=f"TypeError: {first_line}",
            hint="jax.jit traces every argument that is not marked static, and a config "
            "is not an array: mark cfg with static_argnames (or static_argnums)",
        )
    return fail(
        RUNS,
        expected="the call to finish without an error",
        seen=shorten(f"{type(err).__name__}: {first_line}", 300),
        hint="run the exercise cell on its own to see the full traceback",
    )


# ---------------------------------------------------------------- value semantics


def _check_value_semantics(
    config_class: Callable[..., Any], base: dict[str, Any], variants: dict[str, dict[str, Any]]
) -> None:
    first = _build(config_class, base)
    second = _build(config_class, base)
    passed(BUILT)

    try:
        hashes = (hash(first), hash(second))
    except TypeError as err:
        raise fail(
            HASHABLE,
            expected="hash(cfg) to return a number (jax.jit hashes static arguments)",
            seen=f"TypeError: {err}",
            hint="a @dataclass that is not frozen gets __hash__ = None; "
            "@dataclasses.dataclass(frozen=True) gives a hash over the fields",
        ) from err
    passed(HASHABLE)

    equal, same_hash = bool(first == second), hashes[0] == hashes[1]
    problems = ([] if equal else ["== gives False"]) + ([] if same_hash else ["hashes differ"])
    require(
        EQUAL,
        equal and same_hash,
        expected=f"{_describe(base)} built twice: == gives True and the hashes are equal",
        seen=", ".join(problems) or "equal",
        hint="an ordinary class compares and hashes by identity, so every new instance "
        "compiles again; compare and hash by the field values",
    )

    for field, fields in variants.items():
        other = _build(config_class, fields)
        require(
            DIFFER,
            bool(first != other),
            expected=f"{_describe(base)} != {_describe(fields)} (they differ in {field})",
            seen="they compare equal, so the second would reuse the first's executable "
            "and return its (stale) numbers",
            hint="block bakes every field it reads into the compiled program: __eq__ and "
            "__hash__ must compare all four fields exactly (no rounding, no tolerance)",
        )

    changed = []
    for field in FIELDS:
        target = _build(config_class, base)
        new_value = {"activation": "relu" if base["activation"] != "relu" else "tanh"}.get(
            field, not base[field] if isinstance(base[field], bool) else base[field] * 2
        )
        try:
            setattr(target, field, new_value)
        except Exception:
            continue
        if getattr(target, field, None) == new_value:
            changed.append(field)
    require(
        FROZEN,
        not changed,
        expected="cfg.<field> = ... to raise for every field (FrozenInstanceError or "
        "AttributeError)",
        seen=f"assigning {', '.join(changed)} went through",
        hint="a config changed after use keeps hitting the executable compiled for its "
        "old values, or corrupts the cache's key; freeze it "
        "(@dataclasses.dataclass(frozen=True)) and build changed copies with "
        "dataclasses.replace",
    )


def _require_no_callback(forward: Any, args: tuple[Any, ...]) -> None:
    found = host_callbacks(forward, *args)
    require(
        INSIDE,
        not found,
        expected="block's work done by the compiled program",
        seen=f"the program calls back into Python ({', '.join(found)})",
        hint="return jax.jit(block, ...) itself: a host callback runs the work outside "
        "the compiled program",
    )


def _last(count: Any) -> str:
    if not count.explanations:
        return ""
    return f'; JAX\'s own guess: "{shorten(count.last_reason, 160)}"'


# ------------------------------------------------------------------------ grade


def _draw_fields(rng: np.random.Generator) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    base = {
        "activation": str(rng.choice(ACTIVATION_NAMES)),
        "residual": True,
        "layer_norm": True,
        "eps": float(np.round(rng.uniform(0.01, 0.05), 6)),
    }
    other_activation = str(rng.choice([a for a in ACTIVATION_NAMES if a != base["activation"]]))
    variants = {
        "activation": dict(base, activation=other_activation),
        "residual": dict(base, residual=False),
        "layer_norm": dict(base, layer_norm=False),
        "eps": dict(base, eps=float(np.round(base["eps"] + rng.uniform(1.0, 2.0), 6))),
    }
    return base, variants


@grader("static_arguments", checks=CHECKS)
def grade(config_class: Callable[..., Any], make_forward: Callable[[], Any]) -> None:
    """Check ``BlockConfig`` (value semantics, immutability) and ``make_forward`` (which
    arguments are static) by numbers and by compile counts; see the module docstring."""
    rng = fresh_rng()
    base, variants = _draw_fields(rng)
    # Differs only in the sixth significant digit: caught by == only, never by numbers.
    nearly = dict(base, eps=float(base["eps"] * (1 + 1e-6)))
    _check_value_semantics(config_class, base, {**variants, "eps (slightly)": nearly})

    forward = call_learner(RETURNS, make_forward)
    passed(RETURNS)
    require_jitted(
        JITTED, forward, hint="return jax.jit(block, ...) so the work stays inside the compiler"
    )

    params_np = {
        "w1": rng.normal(0.0, 0.5, size=(WIDTH, HIDDEN)).astype(np.float32),
        "b1": rng.normal(0.0, 0.1, size=(HIDDEN,)).astype(np.float32),
        "w2": rng.normal(0.0, 0.5, size=(HIDDEN, WIDTH)).astype(np.float32),
        "b2": rng.normal(0.0, 0.1, size=(WIDTH,)).astype(np.float32),
    }
    params = {k: jnp.asarray(v) for k, v in params_np.items()}
    x_np = rng.normal(size=(BATCH, WIDTH)).astype(np.float32)
    x = jnp.asarray(x_np)

    # Numbers: the base config, then one-field changes (each built afresh).
    forward.clear_cache()
    temperature = float(rng.uniform(0.5, 2.0))
    want_base = _reference(params_np, x_np, base, temperature)
    got = _forward(forward, params, x, _build(config_class, base), temperature)
    passed(RUNS)
    require_close(
        BASE_NUMBERS,
        got,
        want_base,
        rtol=RTOL,
        atol=ATOL,
        hint="block is given: check that make_forward wraps block itself, unchanged",
    )
    for field, fields in variants.items():
        want = _reference(params_np, x_np, fields, temperature)
        assert not np.allclose(want, want_base, rtol=RTOL, atol=ATOL), field  # grader sanity
        got = _forward(forward, params, x, _build(config_class, fields), temperature)
        require_close(
            CHANGED_NUMBERS,
            got,
            want,
            rtol=RTOL,
            atol=ATOL,
            hint=f"these are the numbers for another config ({field} changed): {field} "
            "must take part in __eq__ and __hash__",
        )

    # Compile counts, from an emptied cache. eps is fresh and random as well.
    forward.clear_cache()
    fresh = dict(base, eps=float(np.round(rng.uniform(0.05, 0.5), 6)))
    with count_compiles(forward) as n_equal:
        for _ in range(4):
            got = _forward(forward, params, x, _build(config_class, fresh), 1.0)
    require_compiles(
        SHARED,
        n_equal,
        exactly=1,
        what="compilation(s) for 4 calls, each with a new but equal config",
        hint="only the config instance changed between these calls, and each new "
        "instance compiled again: hash and compare configs by their values",
        seen_extra="only the config instance changed" + _last(n_equal)
        if n_equal.compiles > 1
        else "",
    )

    cfg = _build(config_class, fresh)
    temperatures = [float(t) for t in rng.uniform(0.5, 2.0, size=6)]
    with count_compiles(forward) as n_temp:
        for t in temperatures:
            got = _forward(forward, params, x, cfg, t)
    require_compiles(
        TEMPERATURES,
        n_temp,
        exactly=0,
        what="compilation(s) for 6 calls with one config and 6 new temperatures",
        hint="only temperature changed between these calls: making it static compiles "
        "once per value; mark only cfg static",
        seen_extra="only temperature changed" + _last(n_temp) if n_temp.compiles else "",
    )
    last_temperature = got

    changed = dict(fresh, residual=not fresh["residual"])
    with count_compiles(forward) as n_changed:
        for _ in range(3):
            got = _forward(forward, params, x, _build(config_class, changed), 1.0)
    require_compiles(
        CHANGED_ONCE,
        n_changed,
        exactly=1,
        what="compilation(s) for 3 calls with a changed config (equal to each other)",
        hint="a new config value needs its own program once, and equal ones must share it"
        if n_changed.compiles > 1
        else "the changed config reused the old program: residual must take part in "
        "__eq__ and __hash__",
        seen_extra=_last(n_changed).lstrip("; "),
    )
    require_close(
        LATER_NUMBERS,
        np.stack([last_temperature, got]),
        np.stack(
            [
                _reference(params_np, x_np, fresh, temperatures[-1]),
                _reference(params_np, x_np, changed, 1.0),
            ]
        ),
        rtol=RTOL,
        atol=ATOL,
        hint="every call must use the temperature and config it is given",
    )
    _require_no_callback(forward, (params, x, cfg, 1.0))


__all__ = ["CHECKS", "FIELDS", "grade"]
