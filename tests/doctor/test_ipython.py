"""``%load_ext jitlab`` / ``%load_ext jitlab.doctor`` and the ``%%jitlab_doctor`` cell magic."""

from __future__ import annotations

import jax
import pytest

from jitlab.doctor import BudgetExceeded, wrap

REAL_JIT = jax.jit


@pytest.fixture(params=["jitlab", "jitlab.doctor"])
def shell(request):
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", request.param)
    try:
        yield ip
    finally:
        ip.run_line_magic("unload_ext", request.param)
    assert jax.jit is REAL_JIT and not wrap.installed()


def run(ip, code: str) -> None:
    ip.run_cell(code).raise_error()


def test_cell_magic_reports_on_functions_from_earlier_cells(shell, capsys):
    run(shell, "import jax, jax.numpy as jnp\n@jax.jit\ndef cell_step(x):\n    return x + 1\n")
    value = shell.run_cell_magic(
        "jitlab_doctor", "", "for n in (2, 3, 4):\n    cell_step(jnp.ones(n))\n40 + 2\n"
    )
    assert value == 42
    out = capsys.readouterr().out
    assert "1 watched function, 3 compilations, 2 cache misses" in out
    assert "cell_step" in out and "array types (shape): 2 misses." in out
    assert "See lesson 01 shapes" in out


def test_cell_magic_budget_raises_after_the_report(shell, capsys):
    run(shell, "import jax, jax.numpy as jnp\n@jax.jit\ndef cell_budget(x):\n    return x * 3\n")
    with pytest.raises(BudgetExceeded, match="cell_budget.*compiled 2 times"):
        shell.run_cell_magic(
            "jitlab_doctor",
            "--max-compiles cell_budget=1",
            "cell_budget(jnp.ones(5))\ncell_budget(jnp.ones(5, jnp.int32))\n",
        )
    assert (
        "array types (dtype): 1 miss.\n      Fix: cast inputs to one dtype at the boundary.\n"
        "      See lesson 02 dtypes"
    ) in capsys.readouterr().out


def test_cell_error_comes_after_the_report(shell, capsys):
    run(shell, "import jax, jax.numpy as jnp\n@jax.jit\ndef cell_fail(x):\n    return x - 1\n")
    with pytest.raises(ZeroDivisionError):
        shell.run_cell_magic("jitlab_doctor", "", "cell_fail(jnp.ones(2))\n1 / 0\n")
    assert "cell_fail" in capsys.readouterr().out
