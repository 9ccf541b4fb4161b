"""Grader for exercise 06 (static arguments): a configuration class for a jitted block.

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
  hash, or a mutable ``@dataclass`` whose ``__hash__`` is ``None``, is rejected here);
- configs that differ in any one field compare unequal (an ``__eq__`` that skips a field
  would reuse another config's executable and return stale numbers);
- a config cannot be changed after it is built (a mutable object used as a cache key can
  return stale numbers; ``unsafe_hash=True`` is rejected here);
- ``make_forward()`` returns a ``jax.jit``-wrapped function (work done outside the
  compiler is rejected);
- the numbers match a float64 NumPy reference for a base config and for configs that
  differ from it in one field each (a traced ``cfg`` fails to run, and is reported
  with a hint);
- compile counts: fresh but equal configs share one compilation, a new temperature
  compiles nothing (a static ``temperature`` is rejected), and a changed config
  compiles exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jitlab.grading import (
    GradingFailure,
    all_passed,
    call_learner,
    fail,
    fresh_rng,
    passed,
    require,
    require_close,
    require_jitted,
)
from jitlab.instruments.counting import count_compiles

FIELDS = ("activation", "residual", "layer_norm", "eps")
ACTIVATION_NAMES = ("relu", "tanh", "softplus")
BATCH, WIDTH, HIDDEN = 16, 8, 24
RTOL, ATOL = 1e-4, 1e-6  # float32 against float64; a stale eps misses by far more

_NUMPY_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": lambda z: np.maximum(z, 0.0),
    "tanh": np.tanh,
    "softplus": lambda z: np.logaddexp(z, 0.0),
}


def reference(
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
    return call_learner(f"{_describe(fields)} can be built", config_class, **fields)


def _build_quietly(config_class: Callable[..., Any], fields: dict[str, Any]) -> Any:
    # Later builds repeat a check that already passed; don't print it again.
    try:
        return config_class(**fields)
    except Exception:
        return _build(config_class, fields)  # reports the failure as a check


def _forward(check: str, forward: Callable[..., Any], *args: Any) -> Any:
    """Call the learner's jitted block; a crash becomes a failed check with a pointed hint."""
    try:
        return jax.block_until_ready(forward(*args))
    except GradingFailure:
        raise
    except Exception as err:
        raise _diagnose(check, err) from err


def _diagnose(check: str, err: Exception) -> GradingFailure:
    first_line = str(err).splitlines()[0][:200] if str(err) else ""
    if isinstance(err, NotImplementedError):
        return fail(
            check,
            expected="make_forward's function to return a result",
            seen="NotImplementedError: the exercise is not solved yet",
            hint="replace the `raise NotImplementedError` in the exercise cell, then "
            "run `jitlab hint` if you are stuck",
        )
    if isinstance(err, ValueError) and "Non-hashable static arguments" in str(err):
        cause = [ln for ln in str(err).splitlines() if ln.startswith("TypeError")]
        return fail(
            check,
            expected="the call to run with cfg, and only cfg, as a static argument",
            seen="ValueError: Non-hashable static arguments are not supported"
            + (f" ({cause[0]})" if cause else ""),
            hint="params and x are arrays: they stay traced. Only cfg should be static, "
            "and it must be hashable",
        )
    # ConcretizationTypeError (TracerBoolConversionError, ...) is a TypeError: test first.
    if isinstance(err, jax.errors.ConcretizationTypeError):
        return fail(
            check,
            expected="block's Python `if cfg...` tests to see plain Python values",
            seen=f"{type(err).__name__}: {first_line}",
            hint="cfg's fields are being traced (is cfg a registered pytree, or not "
            "static?): make cfg a static argument of jax.jit",
        )
    if isinstance(err, TypeError) and (
        "abstract array" in str(err) or "not a valid JAX type" in str(err)
    ):
        return fail(
            check,
            expected="cfg passed to block as a static argument",
            seen=f"TypeError: {first_line}",
            hint="jax.jit traces every argument that is not marked static, and a config "
            "is not an array: mark cfg with static_argnames (or static_argnums)",
        )
    return fail(
        check,
        expected="the call to finish without an error",
        seen=f"{type(err).__name__}: {first_line}"[:300],
        hint="run the exercise cell on its own to see the full traceback",
    )


def _check_value_semantics(
    config_class: Callable[..., Any], base: dict[str, Any], variants: dict[str, dict[str, Any]]
) -> Any:
    first = _build(config_class, base)
    second = _build_quietly(config_class, base)

    try:
        hashes = (hash(first), hash(second))
    except TypeError as err:
        raise fail(
            "a config is hashable",
            expected="hash(cfg) to return a number (jax.jit hashes static arguments)",
            seen=f"TypeError: {err}",
            hint="a @dataclass that is not frozen gets __hash__ = None; "
            "@dataclasses.dataclass(frozen=True) gives a hash over the fields",
        ) from err
    passed("a config is hashable")

    require(
        "two configs built from the same values are equal and hash alike",
        first is not second and first == second and hashes[0] == hashes[1],
        expected=f"{_describe(base)} == {_describe(base)}, with equal hashes",
        seen=f"== gives {first == second}, hashes "
        + ("equal" if hashes[0] == hashes[1] else "differ"),
        hint="an ordinary class compares and hashes by identity, so every new instance "
        "compiles again; compare and hash by the field values",
    )

    for field, fields in variants.items():
        other = _build_quietly(config_class, fields)
        require(
            f"configs that differ only in {field} are not equal",
            first != other,
            expected=f"{_describe(base)} != {_describe(fields)}",
            seen="they compare equal, so the second would reuse the first's executable "
            "and return its (stale) numbers",
            hint="block bakes every field it reads into the compiled program: __eq__ and "
            "__hash__ must take all four fields into account",
        )

    target = _build_quietly(config_class, base)
    new_value = not base["residual"]
    try:
        target.residual = new_value
    except Exception:
        changed = False
    else:
        changed = getattr(target, "residual", None) == new_value
    require(
        "a config cannot be changed after it is built",
        not changed,
        expected="cfg.residual = ... to raise (FrozenInstanceError or AttributeError)",
        seen="the assignment went through",
        hint="a config changed after use keeps hitting the executable compiled for its "
        "old values, or corrupts the cache's key; freeze it "
        "(@dataclasses.dataclass(frozen=True)) and build changed copies with "
        "dataclasses.replace",
    )
    return first


def grade(config_class: Callable[..., Any], make_forward: Callable[[], Any]) -> None:
    """Check ``BlockConfig`` (value semantics, immutability) and ``make_forward`` (which
    arguments are static) by numbers and by compile counts; see the module docstring."""
    rng = fresh_rng()
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

    _check_value_semantics(config_class, base, variants)

    forward = call_learner("make_forward() returns a function", make_forward)
    require_jitted(
        "make_forward() returns a jitted function",
        forward,
        hint="return jax.jit(block, ...) so the work stays inside the compiler",
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
    temperature = float(rng.uniform(0.5, 2.0))
    want_base = reference(params_np, x_np, base, temperature)
    got = _forward(
        "block runs with the base config",
        forward,
        params,
        x,
        _build_quietly(config_class, base),
        temperature,
    )
    require_close(
        f"numbers match the reference for {_describe(base)}",
        got,
        want_base,
        rtol=RTOL,
        atol=ATOL,
        hint="block is given: check that make_forward wraps block itself, unchanged",
    )
    for field, fields in variants.items():
        want = reference(params_np, x_np, fields, temperature)
        assert not np.allclose(want, want_base, rtol=RTOL, atol=ATOL), field  # grader sanity
        got = _forward(
            f"block runs with a changed {field}",
            forward,
            params,
            x,
            _build_quietly(config_class, fields),
            temperature,
        )
        require_close(
            f"a changed {field} gives new numbers, not stale ones",
            got,
            want,
            rtol=RTOL,
            atol=ATOL,
            hint=f"these are the numbers for another config: {field} must take part "
            "in __eq__ and __hash__",
        )

    # Compile counts. eps is fresh and random, so these values were never compiled before.
    fresh = dict(base, eps=float(np.round(rng.uniform(0.05, 0.5), 6)))
    with count_compiles(forward) as n_equal:
        for _ in range(4):
            _forward("block runs", forward, params, x, _build_quietly(config_class, fresh), 1.0)
    require(
        "4 fresh but equal configs share one compilation",
        n_equal.compiles == 1,
        expected="1 compilation",
        seen=f"{n_equal.compiles} compilation(s)" + _last(n_equal.explanations),
        hint="each new instance compiled again: hash and compare configs by their values",
    )

    cfg = _build_quietly(config_class, fresh)
    temperatures = rng.uniform(0.5, 2.0, size=6)
    with count_compiles(forward) as n_temp:
        for t in temperatures:
            got = _forward("block runs", forward, params, x, cfg, float(t))
    require(
        "6 new temperatures compile nothing more",
        n_temp.compiles == 0,
        expected="0 compilations (temperature is traced)",
        seen=f"{n_temp.compiles} compilation(s)" + _last(n_temp.explanations),
        hint="temperature changes on every call, so making it static compiles once per "
        "value; mark only cfg static",
    )
    require_close(
        "numbers match the reference at the last temperature",
        got,
        reference(params_np, x_np, fresh, float(temperatures[-1])),
        rtol=RTOL,
        atol=ATOL,
    )

    changed = dict(fresh, residual=not fresh["residual"])
    with count_compiles(forward) as n_changed:
        for _ in range(3):
            got = _forward(
                "block runs", forward, params, x, _build_quietly(config_class, changed), 1.0
            )
    require(
        "a changed config compiles exactly once",
        n_changed.compiles == 1,
        expected="1 compilation for 3 calls with equal, changed configs",
        seen=f"{n_changed.compiles} compilation(s)" + _last(n_changed.explanations),
        hint="a new config value needs its own program once; equal ones must share it",
    )
    require_close(
        "numbers match the reference for the changed config",
        got,
        reference(params_np, x_np, changed, 1.0),
        rtol=RTOL,
        atol=ATOL,
    )
    all_passed("06 static arguments")


def _last(explanations: list[str]) -> str:
    if not explanations:
        return ""
    lines = [ln.strip() for ln in explanations[-1].splitlines() if ln.strip().startswith("*")]
    return f"; JAX says: {lines[0][:220]}" if lines else ""


__all__ = ["FIELDS", "grade", "reference"]
