"""The doctor in a notebook: ``%load_ext jitlab.doctor`` (or the course's
``%load_ext jitlab``), then a cell magic that prints the report for one cell::

    %%jitlab_doctor --max-compiles train_step=1
    for batch in batches:
        state = train_step(state, batch)

Loading the extension watches ``jax.jit`` for the rest of the session, so functions
jitted in earlier cells are watched when a later ``%%jitlab_doctor`` cell calls them
(watching costs a length check per call; recording happens only inside the magic).
A broken budget raises ``BudgetExceeded`` after the report, so a notebook run under
nbval fails at that cell. The cell's last expression is displayed, as in any cell.
"""

from __future__ import annotations

import argparse
import ast
import shlex
from typing import Any

from jitlab.doctor import budgets as budgets_mod
from jitlab.doctor import wrap
from jitlab.doctor.session import budget_failure_text, watch

_loaded: set[int] = set()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="%%jitlab_doctor", add_help=False)
    parser.add_argument("--max-compiles", action="append", default=[], metavar="NAME=N")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--timelines", type=int, default=3)
    return parser


def _run_cell(shell: Any, cell: str) -> Any:
    """Run the cell's code in the user's namespace; return its last expression's value."""
    source = shell.transform_cell(cell)
    tree = ast.parse(source)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    filename = "<jitlab_doctor cell>"
    try:  # IPython keeps the cell's source for tracebacks and for the doctor's call sites
        filename = shell.compile.cache(source)
    except Exception:
        pass
    exec(compile(tree, filename, "exec"), shell.user_ns)
    if last is not None:
        return eval(compile(last, filename, "eval"), shell.user_ns)
    return None


def jitlab_doctor(line: str, cell: str, shell: Any = None) -> Any:
    """``%%jitlab_doctor [--max-compiles NAME=N ...] [--json FILE] [--timelines N]``"""
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    try:
        args = _parser().parse_args(shlex.split(line))
    except SystemExit:
        raise ValueError(
            "usage: %%jitlab_doctor [--max-compiles NAME=N ...] [--json FILE] [--timelines N]"
        ) from None
    budgets = [budgets_mod.parse(text) for text in args.max_compiles]
    value, error = None, None
    with watch(budgets) as doctor:
        try:
            value = _run_cell(shell, cell)
        except BaseException as err:  # the report first, then the cell's own error
            error = err
    report = doctor.report()
    print(report.text(timelines=args.timelines).split("\n", 1)[-1])
    if args.json:
        report.write_json(args.json)
    if error is not None:
        raise error
    if not report.budgets_passed:
        raise budgets_mod.BudgetExceeded(budget_failure_text(report))
    return value


def load_ipython_extension(ipython: Any) -> None:
    if id(ipython) in _loaded:
        return
    _loaded.add(id(ipython))
    wrap.install()

    def magic(line: str, cell: str) -> Any:
        return jitlab_doctor(line, cell, ipython)

    magic.__doc__ = jitlab_doctor.__doc__
    ipython.register_magic_function(magic, magic_kind="cell", magic_name="jitlab_doctor")


def unload_ipython_extension(ipython: Any) -> None:
    if id(ipython) not in _loaded:
        return
    _loaded.discard(id(ipython))
    wrap.uninstall()
