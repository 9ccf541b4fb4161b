"""The timing harness blocks, repeats and reports; no absolute time is asserted."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from jitlab import format_table, stopwatch, time_calls
from jitlab.instruments.environment import environment, environment_report, machine_id


def test_time_calls_separates_first_call_from_steady_state():
    f = jax.jit(lambda x: x * 3)
    result = time_calls(f, jnp.ones(5), repeats=7, warmup=1, label="triple")
    assert len(result.steady_seconds) == 7
    assert result.first_seconds > result.median_seconds  # first call compiles
    row = result.row()
    assert row["label"] == "triple" and row["repeats"] == 7
    assert "first_ms" in str(result)


def test_stopwatch_measures_the_block_and_only_the_block():
    before = time.perf_counter()
    with stopwatch() as sw:
        sum(range(10_000))
    outside = time.perf_counter() - before
    assert 0 < sw.seconds <= outside


def test_format_table_aligns_columns_and_unions_keys():
    text = format_table([{"a": 1, "b": 2.5}, {"a": 10, "c": "x"}])
    header, rule, *rows = text.splitlines()
    assert header.split() == ["a", "b", "c"]
    assert len(rows) == 2 and set(rule) <= {"-", " "}


def test_environment_report_names_the_machine():
    env = environment()
    for key in ("platform", "device_kind", "cpu_model", "cpu_cores", "python", "jax", "jaxlib"):
        assert key in env
    assert env["jax"] == jax.__version__
    assert "jaxlib" in environment_report()
    assert machine_id() and "/" not in machine_id()
