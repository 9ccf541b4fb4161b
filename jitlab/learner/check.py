"""Check one exercise file the way CI does, and boil the outcome down to a verdict.

The steps, in order, each of which can end the check with a clear verdict:

1. the file must parse (a syntax error is reported as file:line with a caret);
2. its grader cells, their tags, and everything after the first of them must be exactly
   as in the original (the learner's copy generated from the exercise's source): a
   deleted, edited, skipped or wrapped grader is refused before anything runs;
3. it runs under nbval through the notebook pipeline, stopping at the first failure.
   The runner writes two lines at the top of each grader cell: they drop every
   ``jitlab`` module the learner's code may have imported or replaced, so the grader is
   imported fresh from the installed files, and open a report channel with a token that
   no learner cell has seen (the generated notebook is deleted once pytest has read it);
4. the verdict comes from the grader's reports: a failed check says expected / seen /
   hint; a grader cell that never reported itself complete fails even if no cell raised.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import os
import re
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jupytext
import nbformat

from jitlab.course.exercise_source import generated_text
from jitlab.course.manifest import Course, Exercise, load_course
from jitlab.grading.verdict import GraderRun, Verdict, new_token, read_channel
from jitlab.learner import DEFAULT_CELL_TIMEOUT_S
from jitlab.notebooks.pipeline import CellRun, execute, relative
from jitlab.notebooks.spare_kernel import NOTEBOOKS, SCRATCH_PREFIX, SpareKernel

GRADER_TAG = "grader"
_FRAME = re.compile(r"Cell In\[\d+\], line (\d+)[^\n]*\n((?:[^\n]+\n)+)")
_ARROW_ROW = re.compile(r"^\s*-+>\s*\d+ (.*)$", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class CodeCell:
    """A code cell of a percent-format file: its source, tags and first line."""

    index: int
    source: str
    tags: tuple[str, ...]
    line: int  # 1-based line of the cell's "# %%" marker (or of its first line)

    @property
    def is_grader(self) -> bool:
        return GRADER_TAG in self.tags


def code_cells(text: str) -> list[CodeCell]:
    """The code cells of a percent-format text, with the line where each begins."""
    notebook = jupytext.reads(text, fmt="py:percent")
    starts = [
        number
        for number, line in enumerate(text.splitlines(), start=1)
        if line.startswith("# %%") and "[markdown]" not in line and "[md]" not in line
    ]
    cells = [c for c in notebook.cells if c.cell_type == "code"]
    # A file may open with code before its first "# %%" marker.
    while len(starts) < len(cells):
        starts.insert(0, 1)
    return [
        CodeCell(i, c.source, tuple(c.metadata.get("tags", [])), starts[i])
        for i, c in enumerate(cells)
    ]


def syntax_error(path: Path, shown: str) -> str | None:
    """The learner-facing message for a syntax error in ``path``, or None."""
    try:
        ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as err:
        line = (err.text or "").rstrip("\n")
        pointer = " " * max((err.offset or 1) - 1, 0) + "^"
        return f"{shown}:{err.lineno}: SyntaxError: {err.msg}\n    {line}\n    {pointer}"
    return None


def _original_text(exercise: Exercise, path: Path) -> str:
    if path.resolve() == exercise.source.resolve():
        return exercise.source.read_text(encoding="utf-8")
    return generated_text(exercise)


def tampering(path: Path, exercise: Exercise) -> str | None:
    """Why the grader part of ``path`` differs from the original, or None if it does not.

    Learners write in their own cells. The grader cells, their tags, and every code cell
    from the first grader on must be exactly as generated.
    """
    mine = code_cells(path.read_text(encoding="utf-8"))
    original = code_cells(_original_text(exercise, path))
    original_graders = [c for c in original if c.is_grader]
    if not original_graders:
        return None
    my_graders = [c for c in mine if c.is_grader]
    reset = (
        f"`jitlab reset {exercise.number} --grader-cells` puts the grader cells back and keeps "
        "your code"
    )
    if len(my_graders) < len(original_graders):
        return (
            f"a grader cell is missing or lost its `grader` tag ({len(my_graders)} of "
            f"{len(original_graders)} left). Put it back as it was: {reset}, or copy it "
            "from the exercise's page."
        )
    first_mine = next(i for i, c in enumerate(mine) if c.is_grader)
    first_original = next(i for i, c in enumerate(original) if c.is_grader)
    tail_mine, tail_original = mine[first_mine:], original[first_original:]
    for mine_cell, original_cell in zip(tail_mine, tail_original, strict=False):
        if mine_cell.source.strip() != original_cell.source.strip():
            return (
                f"the cell at line {mine_cell.line} was changed; grader cells, and the cells "
                "after the first grader, must stay as they were. Write your code in the "
                f"cells above the graders ({reset})."
            )
        if set(mine_cell.tags) != set(original_cell.tags):
            return (
                f"the tags of the cell at line {mine_cell.line} were changed (now "
                f"{sorted(mine_cell.tags)}, originally {sorted(original_cell.tags)}); a "
                "grader cell keeps exactly its `grader` tag."
            )
    if len(tail_mine) != len(tail_original):
        return (
            "cells were added or removed after the first grader cell; put your code above "
            f"the graders ({reset})."
        )
    return None


def _chunks(text: str) -> list[str]:
    """A percent-format text cut before every "# %%" marker (the first piece is the
    header before the first cell); joined again, they are the text."""
    pieces, current = [], []
    for line in text.splitlines(keepends=True):
        if line.startswith("# %%") and current:
            pieces.append("".join(current))
            current = []
        current.append(line)
    pieces.append("".join(current))
    return pieces


def _is_code(chunk: str) -> bool:
    marker = chunk.split("\n", 1)[0]
    return marker.startswith("# %%") and "[markdown]" not in marker and "[md]" not in marker


def _body(chunk: str) -> str:
    return chunk.split("\n", 1)[1].strip() if "\n" in chunk else ""


def restore_grader_cells(mine: str, original: str) -> str:
    """The learner's file with its grader cells, and everything from the first of them
    on, as in ``original``, keeping every cell the learner wrote: the cells above the
    graders stay, and code cells the learner added among or below the graders move up
    to stand just above them. A grader cell is found by its tag, by its text, or by its
    first line (``from jitlab.graders import ...``) when the rest was edited."""
    originals = _chunks(original)
    first = next(
        (i for i, c in enumerate(originals) if _is_code(c) and GRADER_TAG in c.split("\n", 1)[0]),
        None,
    )
    if first is None:
        return mine
    tail = originals[first:]
    known = {_body(c) for c in tail}
    first_lines = {_body(c).split("\n", 1)[0] for c in tail if GRADER_TAG in c.split("\n", 1)[0]}

    def grader_like(chunk: str) -> bool:
        body = _body(chunk)
        return (
            GRADER_TAG in chunk.split("\n", 1)[0]
            or body in known
            or (bool(body) and body.split("\n", 1)[0] in first_lines)
        )

    pieces = _chunks(mine)
    cut = next((i for i, c in enumerate(pieces) if i > 0 and grader_like(c)), len(pieces))
    added = [c for c in pieces[cut:] if _is_code(c) and _body(c) and not grader_like(c)]
    kept = [*pieces[:cut], *added]
    if kept and not kept[-1].endswith("\n\n"):
        kept[-1] = kept[-1].rstrip("\n") + "\n\n\n"
    return "".join([*kept, *tail])


def _preamble(channel: Path, token: str, cell: int, *, strict: bool = False) -> str:
    # Drops every jitlab module the learner's cells may have imported, replaced or
    # planted, so that the grader below is imported afresh from the installed files.
    # Strict mode keeps the modules it loaded before the learner's cells and watches them.
    drop = (
        "import sys as _jitlab_sys\n"
        "for _jitlab_name in [_n for _n in list(_jitlab_sys.modules)"
        " if _n == 'jitlab' or _n.startswith('jitlab.')]:\n"
        "    del _jitlab_sys.modules[_jitlab_name]\n"
        "del _jitlab_sys\n"
    )
    return ("" if strict else drop) + (
        "import jitlab.grading.verdict as _jitlab_verdict\n"
        f"_jitlab_verdict.open_channel({str(channel)!r}, {token!r}, {cell})\n"
        "del _jitlab_verdict\n"
    )


def _learner_line(failure: CellRun, cells: list[CodeCell]) -> CodeCell | None:
    """The learner's cell and line where a failure really happened (the deepest frame of
    the traceback in a learner's cell), rather than the grader cell that called the
    learner's function. Frames are matched by the source line they show, because nbval
    runs every cell as ``In[1]``."""
    found = None
    for match in _FRAME.finditer(failure.traceback or ""):
        line, context = int(match.group(1)), match.group(2)
        # IPython pads its arrow to the line number's width: "----> 9", "---> 22".
        arrow = _ARROW_ROW.search(context)
        shown = arrow.group(1).strip() if arrow else ""
        for cell in cells:
            rows = cell.source.splitlines()
            if not cell.is_grader and 0 < line <= len(rows) and rows[line - 1].strip() == shown:
                found = dataclasses.replace(cell, line=_file_line(cell, line))
                break
    return found


QUOTE = "│ "


def quoted(text: str) -> str:
    """Text that came from the learner's process (an error message, pytest's output),
    each line behind a bar: whatever it prints, it cannot pass for a tick, a cross or a
    PASS line of the verdict, which only the grader's own reports produce."""
    return "\n".join(QUOTE + line for line in text.splitlines()) or QUOTE


def _file_line(cell: CodeCell, line_in_cell: int) -> int:
    # A cell's first source line is the line after its "# %%" marker.
    return cell.line + line_in_cell


def check_file(
    path: Path,
    *,
    course: Course | None = None,
    cell_timeout_s: int = DEFAULT_CELL_TIMEOUT_S,
    in_process: bool = False,
    kernel: SpareKernel | None = None,
    on_part: Callable[[int], None] | None = None,
    strict: bool = False,
) -> Verdict:
    """Run one exercise (or solution) file and return its verdict (``in_process``: run
    pytest in this process, as the command-line runner does to answer sooner; ``kernel``:
    a kernel started beforehand by :func:`jitlab.notebooks.spare_kernel.start` for this
    file, adopted if the file gets to run; its scratch folder is used, and the caller
    stops it; ``on_part``: called with the part the learner is on, the first grader cell
    (counted from 1) that did not pass, or one past the last when all passed; ``strict``:
    run the learner's cells in a kernel watched by :mod:`jitlab.learner.strict`; a
    ``kernel`` is then adopted only if :func:`jitlab.learner.strict.early_kernel` started
    it for this file's graders)."""
    course = course or load_course()
    path = Path(path).resolve()
    shown = relative(path, course)
    exercise = course.find_exercise(path.stem)
    problem = syntax_error(path, shown)
    if problem:
        return Verdict(shown, passed=False, problem=problem, kind="syntax")
    if exercise is not None:
        changed = tampering(path, exercise)
        if changed:
            return Verdict(shown, passed=False, problem=changed, kind="tampered")

    cells = code_cells(path.read_text(encoding="utf-8"))
    grader_indices = [c.index for c in cells if c.is_grader]
    if strict:
        refused = _outside_the_subset(cells, exercise, path)
        if refused:
            return Verdict(shown, passed=False, problem=refused, kind="strict")
    with contextlib.ExitStack() as stack:
        if kernel is not None:
            scratch = kernel.scratch
        else:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX)))
        channel = scratch / "channel.jsonl"
        tokens = {index: new_token() for index in grader_indices}
        watch = {index: new_token() for index in grader_indices}
        env = None
        if strict:
            from jitlab.learner import strict as strict_mode

            graders = strict_mode.grader_imports(c.source for c in cells if c.is_grader)
            folder = strict_mode.early_folder(kernel, graders)
            if folder is None:  # none started early, or for other graders: nbval starts one
                kernel = None
                made = tempfile.TemporaryDirectory(prefix="jitlab-strict-")
                folder = Path(stack.enter_context(made))
                strict_mode.prepare(folder)
            env = strict_mode.strict_env(folder, graders)
            _write_given_cells(folder / strict_mode.EXEMPT, exercise, path)

        def add_preamble(notebook: nbformat.NotebookNode) -> None:
            code = [c for c in notebook.cells if c.cell_type == "code"]
            for index, token in tokens.items():
                source = _preamble(channel, token, index, strict=strict) + code[index].source
                if strict:
                    source = (
                        strict_mode.announce("before", index, watch[index])
                        + source.rstrip("\n")
                        + "\n"
                        + strict_mode.announce("after", index, watch[index])
                    )
                code[index].source = source

        execution = execute(
            [path],
            work=scratch / NOTEBOOKS,
            record=scratch / "record",
            course=course,
            cell_timeout_s=cell_timeout_s,
            stop_at_first_failure=True,
            transform=add_preamble,
            forget_notebooks=True,
            in_process=in_process,
            kernel=kernel if in_process else None,
            env=env,
        )
        # Strict mode reads its hook's copy of the channel, which the learner cannot write.
        source, keys = (folder / strict_mode.VERDICTS, watch) if strict else (channel, tokens)
        reports: dict[int, GraderRun] = {}
        for index, token in keys.items():
            reports.update({k: v for k, v in read_channel(source, token).items() if k == index})
        found = []
        if strict:
            found = strict_mode.findings(
                folder, watch, lambda i: reports.get(i, GraderRun(i)).completed
            )
            found += strict_mode.unreported(
                {c.index: c.source for c in cells if c.is_grader}, reports
            )
    if found:
        checks = tuple(c for i in grader_indices for c in reports.get(i, GraderRun(i)).checks)
        problem = "strict mode: " + found[0] + "".join(f"\n{QUOTE}{more}" for more in found[1:])
        return Verdict(shown, False, checks, problem=problem, kind="strict")
    if on_part is not None:
        on_part(_part_on(grader_indices, reports))
    return _verdict(shown, path, course, cells, grader_indices, reports, execution)


def _write_given_cells(target: Path, exercise: Exercise | None, path: Path) -> None:
    """For the strict kernel's guards: the fingerprints of the exercise's own code cells,
    which run as they are (the course's code, read by nobody's rules)."""
    from jitlab.grading.sandbox import cell_print

    given = code_cells(_original_text(exercise, path)) if exercise else []
    prints = []
    for cell in given:
        try:
            prints.append(cell_print(ast.parse(cell.source)))
        except SyntaxError:  # a magic in a cell of the course's: it is refused anyway
            continue
    target.write_text("\n".join(prints), encoding="utf-8")


def _outside_the_subset(cells: list[CodeCell], exercise: Exercise | None, path: Path) -> str:
    """Strict mode's reading of the learner's cells before anything runs: what in them
    is outside :mod:`jitlab.learner.safe_subset` ("" when nothing is). A cell exactly as
    the exercise gave it is the course's own code and is not read."""
    from jitlab.learner.safe_subset import cell_refusals
    from jitlab.learner.strict import LAYERS_ENV

    if os.environ.get(LAYERS_ENV) == "hook":  # the course's tests of the audit hook alone
        return ""
    original = code_cells(_original_text(exercise, path)) if exercise else []
    given = {c.source.strip() for c in original}
    first_grader = next((c.index for c in cells if c.is_grader), len(cells))
    mine = [c for c in cells[:first_grader] if c.source.strip() not in given]
    found = cell_refusals((c.source, c.line + 1) for c in mine)
    if not found:
        return ""
    shown = [f"line {r.line}: `{r.code}`: {r.why}" for r in found[:4]]
    shown += [f"and {len(found) - 4} more"] * (len(found) > 4)
    wrapped = [row for line in shown for row in textwrap.wrap(line, 86, subsequent_indent="  ")]
    return "\n".join(
        [
            "strict mode: nothing ran, since these lines use what an answer never needs "
            "(docs/strict.md lists what answers may use):",
            *wrapped,
        ]
    )


def _part_on(graders: list[int], reports: dict[int, GraderRun]) -> int:
    for number, index in enumerate(graders, start=1):
        run = reports.get(index, GraderRun(index))
        if not run.completed or any(not c.passed for c in run.checks):
            return number
    return len(graders) + 1


def _verdict(
    shown: str,
    path: Path,
    course: Course,
    cells: list[CodeCell],
    graders: list[int],
    reports: dict[int, GraderRun],
    execution: Any,
) -> Verdict:
    run = execution.runs.get(path)
    checks = tuple(c for index in graders for c in reports.get(index, GraderRun(index)).checks)
    failure = run.first_failure if run else None
    failed_check = next((c for c in checks if not c.passed), None)
    if failed_check is not None:
        return Verdict(shown, passed=False, checks=checks, kind="check")
    if failure is not None:
        cell = cells[failure.index] if failure.index < len(cells) else None
        learner = _learner_line(failure, cells)
        where_cell = learner or cell
        where = f"{shown}:{where_cell.line}" if where_cell else shown
        if failure.status == "died":
            running = (
                f"the grader cell at line {cell.line}, which calls your code"
                if cell is not None and cell.is_grader
                else f"the cell at line {cell.line}"
                if cell is not None
                else "a cell"
            )
            problem = (
                f"{where}: {failure.error} while running {running}. Something in it ended "
                "the process (os._exit, sys.exit in a thread, a crash in native code), so "
                "nothing after it was checked."
            )
            return Verdict(shown, False, checks, problem=problem, where=where, kind="died")
        if failure.status == "timeout":
            seconds = failure.error.split("Timeout of ")[-1].split(" s")[0]
            problem = (
                f"{where}: still running after {seconds} s, so it was stopped. Look for a loop "
                "that never ends (a `while` whose condition never changes)."
            )
            return Verdict(shown, False, checks, problem=problem, where=where, kind="timeout")
        detail = quoted(failure.one_line)
        if cell is not None and cell.is_grader and learner is None:
            problem = f"{where}: the grader cell raised\n{detail}"
        else:
            problem = f"{where}: your code raised\n{detail}"
        return Verdict(shown, False, checks, problem=problem, where=where, kind="crash")
    incomplete = [i for i in graders if not reports.get(i, GraderRun(i)).completed]
    if incomplete:
        line = cells[incomplete[0]].line
        problem = (
            f"{shown}:{line}: the grader in this cell did not run to its end, so nothing "
            "was checked. Something stopped or replaced it: leave the grader cells, "
            "jitlab and jax.monitoring as they were."
        )
        return Verdict(shown, False, checks, problem=problem, kind="incomplete")
    if run is None or execution.returncode != 0:
        tail = quoted(execution.output.strip()[-600:])
        return Verdict(shown, False, checks, problem=f"pytest failed:\n{tail}", kind="crash")
    return Verdict(shown, passed=True, checks=checks)
