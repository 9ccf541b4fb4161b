"""The static-arguments grader passes the solution and rejects plausible wrong answers."""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.graders import static_arguments
from jitlab.grading import GradingFailure

ACTIVATIONS = {"relu": jax.nn.relu, "tanh": jnp.tanh, "softplus": jax.nn.softplus}


def block(params, x, cfg, temperature):
    """The exercise's block, as given."""
    h = ACTIVATIONS[cfg.activation](x @ params["w1"] + params["b1"])
    h = h @ params["w2"] + params["b2"]
    if cfg.residual:
        h = h + x
    if cfg.layer_norm:
        mean = h.mean(axis=-1, keepdims=True)
        var = h.var(axis=-1, keepdims=True)
        h = (h - mean) / jnp.sqrt(var + cfg.eps)
    return jax.nn.softmax(h / temperature, axis=-1)


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    activation: str
    residual: bool
    layer_norm: bool
    eps: float


def make_forward():
    return jax.jit(block, static_argnames="cfg")


JIT_ON = "jit is on and the compile counter hears JAX"


def failure(config_class, make_forward_fn) -> GradingFailure:
    with pytest.raises(GradingFailure) as caught:
        static_arguments.grade(config_class, make_forward_fn)
    return caught.value


# --- answers that should pass ----------------------------------------------------------


def test_reference_solution_passes(capsys):
    static_arguments.grade(BlockConfig, make_forward)
    assert "All checks passed" in capsys.readouterr().out


def test_passes_twice_in_one_process():
    # The grader empties the function's cache and draws fresh eps values, so a warm
    # cache from an earlier run is no help and no hindrance.
    forward = jax.jit(block, static_argnames="cfg")
    static_arguments.grade(BlockConfig, lambda: forward)
    static_arguments.grade(BlockConfig, lambda: forward)


def test_named_tuple_and_static_argnums_pass():
    class TupleConfig(typing.NamedTuple):
        activation: str
        residual: bool
        layer_norm: bool
        eps: float

    static_arguments.grade(TupleConfig, lambda: jax.jit(block, static_argnums=2))


def test_one_shared_instance_per_value_passes():
    """Equal values give the very same (immutable) object: equality is the contract,
    `a is not b` is not."""

    class InternedConfig:
        _made: typing.ClassVar[dict] = {}

        def __new__(cls, activation, residual, layer_norm, eps):
            key = (activation, residual, layer_norm, eps)
            if key not in cls._made:
                made = super().__new__(cls)
                object.__setattr__(made, "_key", key)
                cls._made[key] = made
            return cls._made[key]

        def __getattr__(self, name):
            if name in static_arguments.FIELDS:
                return self._key[static_arguments.FIELDS.index(name)]
            raise AttributeError(name)

        def __setattr__(self, name, value):
            raise AttributeError("immutable")

        def __eq__(self, other):
            return isinstance(other, InternedConfig) and self._key == other._key

        def __hash__(self):
            return hash(self._key)

    static_arguments.grade(InternedConfig, make_forward)


# --- wrong answers ---------------------------------------------------------------------


class IdentityConfig:
    """Plausible: an ordinary class. Hash and == by identity."""

    def __init__(self, activation, residual, layer_norm, eps):
        self.activation = activation
        self.residual = residual
        self.layer_norm = layer_norm
        self.eps = eps


class KeyedConfig(IdentityConfig):
    """Frozen after __init__; equality and hash from ``_key()`` (subclasses vary it)."""

    def __setattr__(self, name, value):
        if hasattr(self, "eps"):
            raise AttributeError("frozen")
        super().__setattr__(name, value)

    def _key(self):
        return (self.activation, self.residual, self.layer_norm, self.eps)

    def __eq__(self, other):
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


class SkipsEpsConfig(KeyedConfig):
    """Plausible: "eps is just a number, it doesn't change the program"."""

    def _key(self):
        return (self.activation, self.residual, self.layer_norm)


class RoundsEpsConfig(KeyedConfig):
    """Plausible: "compare floats with a tolerance", here by rounding eps."""

    def _key(self):
        return (self.activation, self.residual, self.layer_norm, round(self.eps, 4))


class PartlyFrozenConfig(IdentityConfig):
    """Freezes residual only (what the old grader tried), the other fields stay open."""

    def __setattr__(self, name, value):
        if name == "residual" and hasattr(self, "residual"):
            raise AttributeError("frozen")
        super().__setattr__(name, value)

    def __eq__(self, other):
        return type(other) is type(self) and vars(self) == vars(other)

    def __hash__(self):
        return hash(tuple(sorted(vars(self).items())))


@dataclasses.dataclass
class MutableConfig:
    """Plausible: a dataclass without frozen=True (no hash at all)."""

    activation: str
    residual: bool
    layer_norm: bool
    eps: float


@dataclasses.dataclass(unsafe_hash=True)
class UnsafeHashConfig:
    """Plausible: hashable by value, but it can still be changed after use."""

    activation: str
    residual: bool
    layer_norm: bool
    eps: float


def test_rejects_identity_hash():
    found = failure(IdentityConfig, make_forward)
    assert found.check == static_arguments.EQUAL
    assert found.seen == "== gives False, hashes differ"  # no self-contradiction


def test_rejects_equal_configs_with_identity_hashes():
    class EqualButIdentityHash(KeyedConfig):
        __hash__ = object.__hash__

    found = failure(EqualButIdentityHash, make_forward)
    assert found.check == static_arguments.EQUAL
    assert found.seen == "hashes differ"


def test_rejects_identity_hash_even_without_the_equality_check(monkeypatch):
    # The compile count catches it too: one compilation per instance, and the verdict
    # says what changed between the counted calls.
    monkeypatch.setattr(static_arguments, "_check_value_semantics", lambda *a: None)
    found = failure(IdentityConfig, make_forward)
    assert found.check == static_arguments.SHARED
    assert found.seen.startswith("4 compilation")
    assert "only the config instance changed" in found.seen


def test_rejects_eq_and_hash_that_skip_a_field():
    found = failure(SkipsEpsConfig, make_forward)
    assert found.check == static_arguments.DIFFER
    assert "differ in eps" in found.expected


def test_rejects_eq_that_rounds_a_float():
    found = failure(RoundsEpsConfig, make_forward)
    assert found.check == static_arguments.DIFFER
    assert "eps (slightly)" in found.expected


def test_skipped_field_returns_stale_numbers(monkeypatch):
    # Without the equality check, the numbers check sees the stale result itself.
    monkeypatch.setattr(static_arguments, "_check_value_semantics", lambda *a: None)
    found = failure(SkipsEpsConfig, make_forward)
    assert found.check == static_arguments.CHANGED_NUMBERS
    assert "eps changed" in found.hint


def test_rejects_mutable_dataclass():
    found = failure(MutableConfig, make_forward)
    assert found.check == static_arguments.HASHABLE
    assert "frozen=True" in found.hint


def test_rejects_unsafe_hash_mutable_config():
    found = failure(UnsafeHashConfig, make_forward)
    assert found.check == static_arguments.FROZEN
    assert "activation, residual, layer_norm, eps" in found.seen


def test_rejects_a_config_frozen_in_one_field_only():
    found = failure(PartlyFrozenConfig, make_forward)
    assert found.check == static_arguments.FROZEN
    assert "residual" not in found.seen and "eps" in found.seen


def test_rejects_traced_config():
    # Forgetting static_argnames: cfg is traced, and jit cannot make an array of it.
    found = failure(BlockConfig, lambda: jax.jit(block))
    assert found.check == static_arguments.RUNS
    assert "static" in found.hint


def test_rejects_config_registered_as_a_pytree():
    # Making the config a pytree traces its fields: the Python `if`s see tracers.
    @jax.tree_util.register_dataclass
    @dataclasses.dataclass(frozen=True)
    class PytreeConfig:
        residual: bool
        layer_norm: bool
        eps: float
        activation: str = dataclasses.field(metadata={"static": True})

    found = failure(PytreeConfig, lambda: jax.jit(block))
    assert found.check == static_arguments.RUNS
    assert "traced" in found.hint


def test_rejects_static_temperature():
    found = failure(BlockConfig, lambda: jax.jit(block, static_argnames=("cfg", "temperature")))
    assert found.check == static_arguments.TEMPERATURES
    assert "only temperature changed" in found.seen
    assert "keep lr" not in found.hint and "temperature" in found.hint


def test_rejects_work_outside_jit():
    assert failure(BlockConfig, lambda: block).check == static_arguments.JITTED


def test_rejects_a_plain_function_with_a_decoy_jitted_call():
    jitted = jax.jit(block, static_argnames="cfg")

    def forward(params, x, cfg, temperature):
        jitted(params, x, cfg, 1.0)  # a decoy, so that something compiles
        return block(params, x, cfg, temperature)  # the real work, op by op

    assert failure(BlockConfig, lambda: forward).check == static_arguments.JITTED


def test_rejects_numpy_through_a_host_callback():
    def numpy_block(params, x, cfg, temperature):
        fields = {f: getattr(cfg, f) for f in static_arguments.FIELDS}
        out = static_arguments._reference(params, x, fields, float(temperature))
        return out.astype(np.float32)

    def forward(params, x, cfg, temperature):
        shape = jax.ShapeDtypeStruct(x.shape, jnp.float32)
        return jax.pure_callback(
            lambda p, xx, t: numpy_block(p, xx, cfg, t), shape, params, x, temperature
        )

    found = failure(BlockConfig, lambda: jax.jit(forward, static_argnames="cfg"))
    assert found.check == static_arguments.INSIDE


def test_rejects_jit_switched_off_around_the_learners_call():
    jitted = jax.jit(block, static_argnames="cfg")

    def forward(params, x, cfg, temperature):
        with jax.disable_jit():
            return jitted(params, x, cfg, temperature)

    assert failure(BlockConfig, lambda: forward).check == static_arguments.JITTED
