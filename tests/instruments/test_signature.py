"""How the doctor words a static argument that changed (jitlab.instruments.signature)."""

from __future__ import annotations

from jitlab.instruments.signature import _static_difference, describe_static

IDENTITY = "objects without __eq__ are compared by identity"


class Plain:  # object's __eq__: equal only to itself
    def __init__(self, width):
        self.width = width


class Compared(Plain):  # equal when the fields are, with the default repr
    def __eq__(self, other):
        return isinstance(other, Compared) and other.width == self.width

    def __hash__(self):
        return hash(self.width)


def test_an_equal_looking_object_without_eq_is_said_to_be_compared_by_identity():
    kept = [Plain(3), Plain(3)]  # both alive: two addresses
    said = _static_difference("settings", describe_static(kept[0]), describe_static(kept[1]))
    assert IDENTITY in said.now
    inside = describe_static((kept[0],)), describe_static((kept[1],))
    assert IDENTITY in _static_difference("options", *inside).now


def test_an_object_with_its_own_eq_is_not_said_to_be_compared_by_identity():
    # two values that differ, whose default repr differs only in the address
    kept = [Compared(4), Compared(3)]  # both alive: two addresses
    said = _static_difference("settings", describe_static(kept[0]), describe_static(kept[1]))
    assert IDENTITY not in said.now and "differs only in object addresses" not in said.now
