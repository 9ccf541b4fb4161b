"""What the doctor calls captured: arrays a jitted function reads from its closure or as
globals, never a global that only shares its name with an attribute the code reads."""

from __future__ import annotations

import types

import jax.numpy as jnp

from jitlab.doctor.captured import captured_arrays

W = jnp.ones((8, 8))


def reads_the_global(x):
    return x @ W


def reads_an_attribute_named_w(p, x):
    return x @ p.W  # W is also a global here: not captured


def test_a_global_array_read_by_the_code_is_captured():
    assert [c.name for c in captured_arrays(reads_the_global)] == ["W"]


def test_an_attribute_of_the_same_name_is_not():
    assert captured_arrays(reads_an_attribute_named_w) == []
    assert reads_an_attribute_named_w(types.SimpleNamespace(W=W), W).shape == (8, 8)
