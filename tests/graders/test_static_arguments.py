"""The static-arguments grader passes the solution and rejects plausible wrong answers."""

from __future__ import annotations

import dataclasses
import functools
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exercise_cells import namespace
from tables import fails, passes, rows

from jitlab.graders import static_arguments as SA

SOLUTION = namespace("static_arguments")
ACTIVATIONS, block, BlockConfig = (SOLUTION[k] for k in ("ACTIVATIONS", "block", "BlockConfig"))
TYPED = [("activation", str), ("residual", bool), ("layer_norm", bool), ("eps", float)]


def jit_block(fun=block, **options):
    return lambda: jax.jit(fun, **options)


make_forward = jit_block(static_argnames="cfg")


def config(name, fields=TYPED, **dataclass_options):
    return dataclasses.make_dataclass(name, fields, **dataclass_options)


class InternedConfig:
    """Equal values give the very same (immutable) object: equality is the contract."""

    _made: typing.ClassVar[dict] = {}

    def __new__(cls, activation, residual, layer_norm, eps):
        key = (activation, residual, layer_norm, eps)
        if key not in cls._made:
            cls._made[key] = super().__new__(cls)
            object.__setattr__(cls._made[key], "_key", key)
        return cls._made[key]

    def __getattr__(self, name):
        if name in SA.FIELDS:
            return self._key[SA.FIELDS.index(name)]
        raise AttributeError(name)

    def __setattr__(self, name, value):
        raise AttributeError("immutable")

    def __eq__(self, other):
        return isinstance(other, InternedConfig) and self._key == other._key

    def __hash__(self):
        return hash(self._key)


def test_the_solution_and_other_right_answers_pass():
    # Twice with one jitted function: the grader empties its cache and draws fresh eps
    # values, so a warm cache from an earlier run is no help and no hindrance.
    forward = SOLUTION["make_forward"]()
    passes(SA.grade, BlockConfig, lambda: forward)
    passes(SA.grade, BlockConfig, lambda: forward)
    TupleConfig = typing.NamedTuple("TupleConfig", TYPED)
    passes(SA.grade, TupleConfig, lambda: jax.jit(block, static_argnums=2))
    passes(SA.grade, InternedConfig, make_forward)
    passes(SA.grade, ReplacesConfig, make_forward)
    passes(SA.grade, PostInitConfig, make_forward)


class IdentityConfig:
    """Plausible: an ordinary class. Hash and == by identity."""

    def __init__(self, activation, residual, layer_norm, eps):
        for name, value in zip(SA.FIELDS, (activation, residual, layer_norm, eps), strict=True):
            setattr(self, name, value)


class KeyedConfig(IdentityConfig):
    """Frozen after __init__ (against assignment only: ``del cfg.eps`` goes through);
    equality and hash from ``_key()``, which subclasses vary."""

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


def keyed(name, key):
    return type(name, (KeyedConfig,), {"_key": key})


SkipsEpsConfig = keyed("SkipsEps", lambda c: (c.activation, c.residual, c.layer_norm))
RoundsEpsConfig = keyed("RoundsEps", lambda c: (*SkipsEpsConfig._key(c), round(c.eps, 4)))
Float32EpsConfig = keyed("F32Eps", lambda c: (*SkipsEpsConfig._key(c), np.float32(c.eps)))


class PartlyFrozenConfig(KeyedConfig):
    """Freezes residual only (what the old grader tried), the other fields stay open."""

    def __setattr__(self, name, value):
        if name == "residual" and hasattr(self, "residual"):
            raise AttributeError("frozen")
        object.__setattr__(self, name, value)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PytreeConfig:
    """Plausible: a pytree config traces its fields, so the Python `if`s see tracers."""

    activation: str = dataclasses.field(metadata={"static": True})
    residual: bool
    layer_norm: bool
    eps: float


def wrapped(body):
    """A plain make_forward around the jitted block: ``body(jitted, *args)`` does the work."""
    jitted = jax.jit(block, static_argnames="cfg")
    return lambda: lambda *args: body(jitted, *args)


def decoy(jitted, params, x, cfg, temperature):
    jitted(params, x, cfg, 1.0)  # a decoy, so that something compiles
    return block(params, x, cfg, temperature)  # the real work, op by op


def callback_forward():
    def forward(params, x, cfg, temperature):
        fields = {f: getattr(cfg, f) for f in SA.FIELDS}

        def numpy_block(p, xx, t):
            return SA._reference(p, xx, fields, float(t)).astype(np.float32)

        shape = jax.ShapeDtypeStruct(x.shape, jnp.float32)
        return jax.pure_callback(numpy_block, shape, params, x, temperature)

    return lambda: jax.jit(forward, static_argnames="cfg")


def jit_off(jitted, *args):
    with jax.disable_jit():
        return jitted(*args)


def naive_softmax_block(params, x, cfg, temperature):
    """The block rewritten with a softmax that does not subtract the max."""
    h = ACTIVATIONS[cfg.activation](x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
    h = h + x if cfg.residual else h
    if cfg.layer_norm:
        h = (h - h.mean(-1, keepdims=True)) / jnp.sqrt(h.var(-1, keepdims=True) + cfg.eps)
    e = jnp.exp(h / temperature)
    return e / e.sum(-1, keepdims=True)


@dataclasses.dataclass(frozen=True)
class UpdatesInPlace:
    """Frozen against assignment, but its own update() writes the fields in place."""

    activation: str
    residual: bool
    layer_norm: bool
    eps: float

    def update(self, **changes):
        for name, value in changes.items():
            object.__setattr__(self, name, value)
        return self


@dataclasses.dataclass(frozen=True)
class ReplacesConfig:
    """A right answer with methods of its own: each returns a new config."""

    activation: str
    residual: bool
    layer_norm: bool
    eps: float

    def update(self, **changes):
        return dataclasses.replace(self, **changes)

    def with_eps(self, eps):
        return dataclasses.replace(self, eps=eps)

    def describe(self):
        return f"{self.activation} eps={self.eps}"


@dataclasses.dataclass(frozen=True)
class PostInitConfig:
    """A right answer: __post_init__ normalises through object.__setattr__, the idiom."""

    activation: str
    residual: bool
    layer_norm: bool
    eps: float

    def __post_init__(self):
        object.__setattr__(self, "eps", float(self.eps))


def within(rel_tol):
    """A key that compares eps with a relative tolerance (math.isclose)."""

    class CloseEps(KeyedConfig):
        def __eq__(self, other):
            mine, theirs = self._key(), other._key()
            return mine[:3] == theirs[:3] and abs(mine[3] - theirs[3]) <= rel_tol * abs(mine[3])

        def __hash__(self):
            return hash(self._key()[:3])

    return CloseEps


class SkipsEpsWithoutNorm(KeyedConfig):
    """Equal when block would compute the same: eps ignored with layer_norm off."""

    def _key(self):
        return (self.activation, self.residual, self.layer_norm, self.eps if self.layer_norm else 0)


class _Plain(IdentityConfig):
    def __setattr__(self, name, value):
        if hasattr(self, "eps"):
            raise AttributeError("frozen")
        super().__setattr__(name, value)

    def __delattr__(self, name):
        raise AttributeError("frozen")


CachedConfig = functools.cache(_Plain)  # interned by how it is called: identity == and hash
EqualButIdentityHash = type("EqualButIdHash", (KeyedConfig,), {"__hash__": object.__hash__})
IdOfString = type("IdOfString", (KeyedConfig,), {"__hash__": lambda self: id(self.activation)})
SWAPPED = [TYPED[i] for i in (0, 2, 1, 3)]  # residual and layer_norm: one True, one False
# fmt: off
WRONG = {  # name: (config class, make_forward, the check it fails, words its verdict holds)
    "identity hash": (IdentityConfig, make_forward, SA.EQUAL, ["== gives False, hashes differ"]),
    "equal, identity hash": (EqualButIdentityHash, make_forward, SA.EQUAL,
                             ["seen:     hashes differ"]),
    "skips eps": (SkipsEpsConfig, make_forward, SA.DIFFER, ["differ in eps)"]),
    "rounds eps": (RoundsEpsConfig, make_forward, SA.DIFFER, ["eps, its 6th digit"]),
    "float32 eps": (Float32EpsConfig, make_forward, SA.DIFFER, ["eps, its 12th digit"]),
    "mutable dataclass": (config("Mutable"), make_forward, SA.HASHABLE, ["frozen=True"]),
    "unsafe_hash": (config("UnsafeHash", unsafe_hash=True), make_forward, SA.FROZEN,
                    [f"assigning {f}" for f in SA.FIELDS]),
    "frozen in residual only": (PartlyFrozenConfig, make_forward, SA.FROZEN,  # not assigning it
                                ["seen:     assigning activation, deleting activation, deleting "
                                 "residual, assigning layer_norm", "assigning eps"]),
    "delete goes through": (KeyedConfig, make_forward, SA.FROZEN,
                            ["seen:     deleting activation, deleting residual", "deleting eps"]),
    "keyword-only": (config("KeywordOnly", frozen=True, kw_only=True), make_forward, SA.BUILT,
                     ["TypeError", "in this order, positional"]),
    "fields reordered": (dataclasses.make_dataclass("Reordered", TYPED[::-1], frozen=True),
                         make_forward, SA.EQUAL, ["by position", "order"]),
    "booleans swapped": (config("Swap", SWAPPED, frozen=True), make_forward, SA.EQUAL, ["order"]),
    "hash of id(activation)": (IdOfString, make_forward, SA.EQUAL, ["seen:     hashes differ"]),
    "update in place": (UpdatesInPlace, make_forward, SA.FROZEN,
                        ["cfg.update(activation=...) changing activation in place"]),
    "eps within 1e-12": (within(1e-12), make_forward, SA.DIFFER, ["one float64 step"]),
    "eps within 1e-11": (within(1.5e-11), make_forward, SA.DIFFER, ["eps"]),
    "eps ignored without layer norm": (SkipsEpsWithoutNorm, make_forward, SA.DIFFER,
                                       ["layer_norm off", "every field counts"]),
    "interned by functools.cache": (CachedConfig, make_forward, SA.EQUAL,
                                    ["== gives False", "interning", "functools.cache"]),
    "traced config": (BlockConfig, jit_block(), SA.RUNS, ["static"]),
    "pytree config": (PytreeConfig, jit_block(), SA.RUNS, ["traced"]),
    "static temperature": (BlockConfig, jit_block(static_argnames=("cfg", "temperature")),
                           SA.TEMPERATURES, ["only temperature changed", "temperature"]),
    "not jitted": (BlockConfig, lambda: block, SA.JITTED, []),
    "decoy jitted call": (BlockConfig, wrapped(decoy), SA.JITTED, []),
    "host callback": (BlockConfig, callback_forward(), SA.INSIDE, []),
    "jit off around": (BlockConfig, wrapped(jit_off), SA.JITTED, []),
    "donated x": (BlockConfig, jit_block(static_argnames="cfg", donate_argnums=1), SA.RUNS,
                  ["has been deleted", "donate", "the same params and x"]),
    "naive softmax": (BlockConfig, jit_block(naive_softmax_block, static_argnames="cfg"),
                      SA.LATER_NUMBERS, ["nan", "at temperature 0.01", "subtract the max"]),
}
# fmt: on
ON_EVERY_DRAW = ("float32 eps", "naive softmax")  # rules only some inputs expose


@pytest.mark.parametrize(("name", "seed"), rows(WRONG, ON_EVERY_DRAW))
def test_wrong_answers_fail_their_check(name, seed):
    config_class, make, check, words = WRONG[name]
    fails(SA.grade, config_class, make, check=check, words=words, seed=seed)


@pytest.mark.parametrize("eps", [0.012349999, 0.01235])  # just under and at a 4-digit edge
def test_rounding_eps_is_caught_whatever_eps_is_drawn(eps, monkeypatch):
    # Raised alone, 0.012349999 rounds apart from itself (0.0123 against 0.0124).
    draw = SA._draw_fields

    def at_the_edge(rng):
        base, variants = draw(rng)
        return dict(base, eps=eps), variants

    monkeypatch.setattr(SA, "_draw_fields", at_the_edge)
    fails(SA.grade, RoundsEpsConfig, make_forward, check=SA.DIFFER, words="eps, its 6th digit")


@pytest.mark.parametrize("config_class", [IdentityConfig, SkipsEpsConfig])
def test_the_counts_and_numbers_catch_it_without_the_equality_check(config_class, monkeypatch):
    # One compilation per instance, or another config's stale numbers: the verdict says
    # what changed between the counted calls.
    monkeypatch.setattr(SA, "_check_value_semantics", lambda *a: None)
    if config_class is IdentityConfig:
        words = ["seen:     4 compilation", "only the config instance changed"]
        fails(SA.grade, config_class, make_forward, check=SA.SHARED, words=words)
    else:
        fails(SA.grade, config_class, make_forward, check=SA.CHANGED_NUMBERS, hint="eps changed")
