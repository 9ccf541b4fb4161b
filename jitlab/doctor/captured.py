"""Arrays a jitted function captures instead of taking them as arguments.

An array read from a closure, a global or a ``functools.partial``'s arguments is not an
input of the compiled program: jit bakes it into the program as a constant, so every
executable in jit's cache keeps its own copy (a closure over 16 MB of weights compiled
for five batch sizes holds five copies, measured on CPU with jax 0.12.0.1). The doctor
reads them once per function object, when it first compiles, and the report charges
their bytes to every compiled program of it.
"""

from __future__ import annotations

import dataclasses
import dis
import functools
import inspect
from typing import Any

import jax
import numpy as np

MIN_BYTES = 1 << 20
"""Captured arrays smaller than this in all are not worth a line of the report."""


@dataclasses.dataclass(frozen=True)
class Captured:
    """One captured array: where it came from (``W``, ``partial arg 0``), its type, bytes."""

    name: str
    type: str
    nbytes: int


def _array(value: Any) -> bool:
    return isinstance(value, jax.Array | np.ndarray) and not isinstance(value, jax.core.Tracer)


def _type(value: Any) -> str:
    from jitlab.instruments.signature import short_dtype

    return f"{short_dtype(value.dtype)}[{','.join(str(d) for d in value.shape)}]"


def captured_arrays(fun: Any) -> list[Captured]:
    """The arrays ``fun`` reads without taking them as arguments: its closure's cells, the
    globals its code names, and a ``partial``'s bound arguments (one level deep: enough
    for the weights a training step closes over)."""
    found: dict[str, Any] = {}
    seen = 0
    while seen < 20:  # partials and bound methods, down to the function
        seen += 1
        if isinstance(fun, functools.partial):
            for i, arg in enumerate(fun.args):
                found[f"partial argument {i}"] = arg
            for key, arg in fun.keywords.items():
                found[f"partial argument {key}"] = arg
            fun = fun.func
        elif inspect.ismethod(fun):
            fun = fun.__func__
        elif getattr(fun, "__wrapped__", None) is not None:
            fun = fun.__wrapped__
        else:
            break
    code = getattr(fun, "__code__", None)
    if code is not None:
        for name, cell in zip(
            code.co_freevars, getattr(fun, "__closure__", None) or (), strict=False
        ):
            try:
                found[name] = cell.cell_contents
            except ValueError:  # an empty cell
                continue
        namespace = getattr(fun, "__globals__", {})
        # Globals the code loads; co_names holds attribute names too (``p.w`` names w).
        loaded = {i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"}
        for name in sorted(loaded):
            if name in namespace:
                found.setdefault(name, namespace[name])
    out = []
    for name, value in found.items():
        leaves = jax.tree_util.tree_leaves(value) if not _array(value) else [value]
        arrays = [leaf for leaf in leaves[:1000] if _array(leaf)]
        if not arrays:
            continue
        nbytes = sum(int(a.nbytes) for a in arrays)
        kind = _type(arrays[0]) if len(arrays) == 1 else f"{len(arrays)} arrays"
        out.append(Captured(name, kind, nbytes))
    return sorted(out, key=lambda c: -c.nbytes)


def megabytes(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB"
