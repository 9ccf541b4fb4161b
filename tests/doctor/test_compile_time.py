"""Compile time with no recompilation: the report names the functions whose compilation
dominates and, for a slow one, the user's lines that put the most operations into it (a
Python loop unrolled into the program)."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp

from jitlab.doctor import ops, watch


def test_a_slow_compilation_names_its_busiest_line(monkeypatch):
    monkeypatch.setattr(ops, "SLOW_SECONDS", 0.0)  # every compilation counts as slow here

    def unrolled_forty(x):
        for _ in range(40):
            x = jnp.sin(x) * 0.5
        return x

    line = inspect.getsourcelines(unrolled_forty)[1] + 2
    with watch() as doctor:
        jax.jit(unrolled_forty)(jnp.ones(5))
    record = doctor.report().function("unrolled_forty")
    ((where, count),) = record.compilations[0].busiest[:1]
    assert where.endswith(f"test_compile_time.py:{line}") and count == 80  # sin and mul
    text = " ".join(doctor.report().text().split())
    assert f"test_compile_time.py:{line} (80 operations)" in text
    assert "lax.scan or lax.fori_loop keeps one copy of its body" in text


def test_a_fast_compilation_keeps_no_jaxpr():
    """Below the threshold nothing is counted, and the jaxpr is not kept (it holds the
    program's constants)."""

    def quick_one(x):
        return x + 1

    with watch() as doctor:
        jax.jit(quick_one)(jnp.ones(2))
    assert doctor.report().function("quick_one").compilations[0].busiest == []
    assert ops.take("quick_one") is None
