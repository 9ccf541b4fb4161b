"""The static-arguments grader passes the solution and rejects plausible wrong answers."""

from __future__ import annotations

import dataclasses
import typing

import jax
import jax.numpy as jnp
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


# --- answers that should pass ----------------------------------------------------------


def test_reference_solution_passes(capsys):
    static_arguments.grade(BlockConfig, make_forward)
    assert "All checks passed" in capsys.readouterr().out


def test_passes_twice_in_one_process():
    # The grader draws fresh eps values, so a warm cache from an earlier run is no help
    # and no hindrance.
    static_arguments.grade(BlockConfig, make_forward)
    static_arguments.grade(BlockConfig, make_forward)


def test_named_tuple_and_static_argnums_pass():
    class TupleConfig(typing.NamedTuple):
        activation: str
        residual: bool
        layer_norm: bool
        eps: float

    static_arguments.grade(TupleConfig, lambda: jax.jit(block, static_argnums=2))


# --- wrong answers ---------------------------------------------------------------------


class IdentityConfig:
    """Plausible: an ordinary class. Hash and == by identity."""

    def __init__(self, activation, residual, layer_norm, eps):
        self.activation = activation
        self.residual = residual
        self.layer_norm = layer_norm
        self.eps = eps


class SkipsEpsConfig(IdentityConfig):
    """Plausible: "eps is just a number, it doesn't change the program"."""

    def __setattr__(self, name, value):
        if hasattr(self, "eps"):
            raise AttributeError("frozen")
        super().__setattr__(name, value)

    def _key(self):
        return (self.activation, self.residual, self.layer_norm)

    def __eq__(self, other):
        return isinstance(other, SkipsEpsConfig) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


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


def test_rejects_unsolved_stubs():
    class Stub:
        def __init__(self, activation, residual, layer_norm, eps):
            raise NotImplementedError

    def stub_forward():
        raise NotImplementedError

    with pytest.raises(GradingFailure, match="not solved yet"):
        static_arguments.grade(Stub, stub_forward)


def test_rejects_identity_hash():
    with pytest.raises(GradingFailure, match="equal and hash alike"):
        static_arguments.grade(IdentityConfig, make_forward)


def test_rejects_identity_hash_even_without_the_equality_check(monkeypatch):
    # The compile count catches it too: one compilation per instance.
    monkeypatch.setattr(static_arguments, "_check_value_semantics", lambda *a: None)
    with pytest.raises(GradingFailure, match="share one compilation") as info:
        static_arguments.grade(IdentityConfig, make_forward)
    assert info.value.seen.startswith("4 compilation")


def test_rejects_eq_and_hash_that_skip_a_field():
    with pytest.raises(GradingFailure, match="differ only in eps"):
        static_arguments.grade(SkipsEpsConfig, make_forward)


def test_skipped_field_returns_stale_numbers(monkeypatch):
    # Without the equality check, the numbers check sees the stale result itself.
    monkeypatch.setattr(static_arguments, "_check_value_semantics", lambda *a: None)
    with pytest.raises(GradingFailure, match="changed eps gives new numbers") as info:
        static_arguments.grade(SkipsEpsConfig, make_forward)
    assert "stale" in info.value.check


def test_rejects_mutable_dataclass():
    with pytest.raises(GradingFailure, match="hashable") as info:
        static_arguments.grade(MutableConfig, make_forward)
    assert "frozen=True" in info.value.hint


def test_rejects_unsafe_hash_mutable_config():
    with pytest.raises(GradingFailure, match="cannot be changed"):
        static_arguments.grade(UnsafeHashConfig, make_forward)


def test_rejects_traced_config():
    # Forgetting static_argnames: cfg is traced, and jit cannot make an array of it.
    with pytest.raises(GradingFailure, match="block runs") as info:
        static_arguments.grade(BlockConfig, lambda: jax.jit(block))
    assert "static" in info.value.hint


def test_rejects_config_registered_as_a_pytree():
    # Making the config a pytree traces its fields: the Python `if`s see tracers.
    @jax.tree_util.register_dataclass
    @dataclasses.dataclass(frozen=True)
    class PytreeConfig:
        residual: bool
        layer_norm: bool
        eps: float
        activation: str = dataclasses.field(metadata={"static": True})

    with pytest.raises(GradingFailure, match="block runs") as info:
        static_arguments.grade(PytreeConfig, lambda: jax.jit(block))
    assert "traced" in info.value.hint


def test_rejects_static_temperature():
    with pytest.raises(GradingFailure, match="new temperatures compile nothing"):
        static_arguments.grade(
            BlockConfig, lambda: jax.jit(block, static_argnames=("cfg", "temperature"))
        )


def test_rejects_work_outside_jit():
    with pytest.raises(GradingFailure, match="jitted"):
        static_arguments.grade(BlockConfig, lambda: block)
