"""measure and compare: one instrument for a problem and its fix."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np

import jitlab
from jitlab.instruments.measurements import MEASUREMENTS_ENV, NOTEBOOK_ENV


def test_measure_counts_the_function_under_study_and_keeps_the_result():
    def cube_of_sum(x):
        return jnp.sum(x) ** 3

    cube = jax.jit(cube_of_sum)
    run = jitlab.measure("two lengths", lambda: [cube(jnp.ones(n)) for n in (3, 4, 4)], count=cube)
    assert (run.traces, run.compiles) == (2, 2)
    np.testing.assert_allclose(run.result, [27.0, 64.0, 64.0])
    assert run.seconds > 0


def test_compare_prints_one_table_records_three_rows_and_returns_the_ratio(
    tmp_path, monkeypatch, capsys
):
    def square_sum(x):
        return jnp.sum(x * x)

    square = jax.jit(square_sum)
    results = tmp_path / "rows.jsonl"
    monkeypatch.setenv(MEASUREMENTS_ENV, str(results))
    monkeypatch.setenv(NOTEBOOK_ENV, "01_shapes.ipynb")
    problem = jitlab.measure(
        "per length", lambda: [square(jnp.ones(n)) for n in (5, 6)], count=square
    )
    fix = jitlab.measure("one length", lambda: [square(jnp.ones(7)) for _ in (5, 6)], count=square)
    result = jitlab.compare(problem, fix, bench="per length vs one")
    out = capsys.readouterr().out
    assert "per length" in out and "one length" in out and "on this machine" in out
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [row["experiment"] for row in rows] == ["per length", "one length", "per length vs one"]
    assert {row["notebook"] for row in rows} == {"01_shapes.ipynb"}
    assert rows[0]["compiles"] == 2 and rows[1]["compiles"] == 1
    assert rows[2]["speedup"] == result.speedup == problem.seconds / fix.seconds


def test_record_returns_nothing_so_no_raw_dict_reaches_a_page():
    assert jitlab.record("nothing shown", compiles=1) is None


def test_attempt_keeps_the_exception_for_the_answer_cell_to_assert_by_type():
    @jax.jit
    def branchy(x):
        return x if x > 0 else -x

    tried = jitlab.attempt(branchy, jnp.float32(2.0))
    assert type(tried.error) is jax.errors.TracerBoolConversionError
    assert tried.raised and str(tried).startswith("raised TracerBoolConversionError")
    assert jitlab.attempt(lambda: 3).value == 3 and not jitlab.attempt(lambda: 3).raised
