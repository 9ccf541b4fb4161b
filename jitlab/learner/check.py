"""Check one exercise file the way CI does, and boil the outcome down to a verdict.

The whole path, in five boxes; all but the kernel run in the runner's process:

    ┌──────────┐   ┌──────────────┐   ┌───────────────────┐   ┌──────────┐   ┌─────────┐
    │ 1 read   │──▶│ 2 put back   │──▶│ 3 run under nbval │──▶│ 4 record │──▶│ 5 judge │
    │ the file │   │ grader cells │   │ (pytest, kernel)  │   │ per cell │   │ verdict │
    └──────────┘   └──────────────┘   └───────────────────┘   └──────────┘   └─────────┘

1. read: the learner's file, as it is on disk;
2. put back: its grader cells, and every cell from the first of them on, are taken from
   the exercise's source in ``solutions/``, as nbgrader's autograde does (a grader cell
   changed, deleted or moved runs as it was; the verdict names what was put back). The
   learner's own cells are never touched, on disk or in the run. The result must parse:
   a syntax error is reported as file:line with a caret, and nothing runs;
3. run: :func:`jitlab.notebooks.pipeline.execute` converts it to a notebook and runs it
   under nbval in a fresh kernel, stopping at the first failure. The command-line runner
   runs pytest in its own process, and starts the kernel before it reads the file
   (:mod:`jitlab.notebooks.spare_kernel`, 0.4 to 0.5 s of every check);
4. record: :mod:`jitlab.notebooks.recorder` writes each cell's outcome and the graders'
   reports (a display output of each grader cell, see :mod:`jitlab.grading.verdict`);
5. judge: a failed check says expected / seen / hint; a crash names the learner's line;
   a grader cell that never reported itself complete fails even if no cell raised.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import jupytext
import nbformat

from jitlab.course.exercise_source import generated_text
from jitlab.course.manifest import Course, Exercise, load_course
from jitlab.grading.verdict import GraderRun, Verdict, grader_run
from jitlab.learner import DEFAULT_CELL_TIMEOUT_S
from jitlab.notebooks.pipeline import CellRun, Execution, NotebookRun, execute, relative
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


def syntax_error(text: str, shown: str) -> str | None:
    """The learner-facing message for a syntax error in ``text`` (the file ``shown``),
    or None."""
    try:
        ast.parse(text, filename=shown)
    except SyntaxError as err:
        line = (err.text or "").rstrip("\n")
        pointer = " " * max((err.offset or 1) - 1, 0) + "^"
        return f"{shown}:{err.lineno}: SyntaxError: {err.msg}\n    {line}\n    {pointer}"
    return None


def _original_text(exercise: Exercise, path: Path) -> str:
    if path.resolve() == exercise.source.resolve():
        return exercise.source.read_text(encoding="utf-8")
    return generated_text(exercise)


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
    added = [c for c in pieces[cut:] if _body(c) and not grader_like(c)]  # notes kept too
    kept = [*pieces[:cut], *added]
    if kept and not kept[-1].endswith("\n\n"):
        kept[-1] = kept[-1].rstrip("\n") + "\n\n\n"
    return "".join([*kept, *tail])


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


def put_back(mine: str, original: str) -> tuple[str, list[str]]:
    """The text to run, and what of the grader part of ``mine`` was put back from
    ``original`` (empty when it was all as given): :func:`restore_grader_cells`, named."""
    restored = restore_grader_cells(mine, original)
    if restored == mine:
        return mine, []
    kept = {(c.source.strip(), c.tags) for c in code_cells(mine) if c.is_grader}
    given = (c for c in code_cells(original) if c.is_grader)
    changed = [
        f"the grader cell of part {number} (changed or deleted)"
        for number, c in enumerate(given, start=1)
        if (c.source.strip(), c.tags) not in kept
    ]
    return restored, changed or ["your cells below the grader cells, now run above them"]


def check_file(
    path: Path,
    *,
    course: Course | None = None,
    cell_timeout_s: int = DEFAULT_CELL_TIMEOUT_S,
    in_process: bool = False,
    kernel: SpareKernel | None = None,
    on_part: Callable[[int], None] | None = None,
) -> Verdict:
    """Run one exercise (or solution) file and return its verdict (``in_process``: run
    pytest in this process, as the command-line runner does; ``kernel``: one started
    beforehand for this file by :func:`jitlab.notebooks.spare_kernel.start`, adopted by
    nbval when pytest runs here; its folder is used, and the caller stops it;
    ``on_part``: called with the part the learner is on, the first grader cell (counted
    from 1) that did not pass, or one past the last when all passed)."""
    course = course or load_course()
    path = Path(path).resolve()
    shown = relative(path, course)
    exercise = course.find_exercise(path.stem)
    text, restored = path.read_text(encoding="utf-8"), []  # box 1
    if exercise is not None:  # box 2: a grader cell typed into by mistake parses again
        text, restored = put_back(text, _original_text(exercise, path))
    problem = syntax_error(text, shown)
    if problem:
        return Verdict(shown, passed=False, problem=problem, kind="syntax")

    def run_this(notebook: nbformat.NotebookNode) -> None:
        notebook.cells = jupytext.reads(text, fmt="py:percent").cells

    cells = code_cells(text)
    graders = [c.index for c in cells if c.is_grader]
    with contextlib.ExitStack() as stack:
        made = tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX)
        scratch = kernel.scratch if kernel else Path(stack.enter_context(made))
        execution = execute(  # boxes 3 and 4
            [path],
            work=scratch / NOTEBOOKS,
            record=scratch / "record",
            course=course,
            cell_timeout_s=cell_timeout_s,
            stop_at_first_failure=True,
            transform=run_this if restored else None,
            in_process=in_process,
            kernel=kernel if in_process else None,
        )
    run = execution.runs.get(path)
    ran = {c.index: c for c in run.cells} if run else {}
    reports = {i: grader_run(i, ran[i].reports if i in ran else ()) for i in graders}
    if on_part is not None:
        on_part(_part_on(graders, reports))
    verdict = _verdict(shown, cells, graders, reports, execution, run)  # box 5
    if restored and exercise is not None:
        note = (
            f"put back from solutions/{exercise.source.name}: {', '.join(restored)}; "
            "your file is as you left it"
        )
        verdict = dataclasses.replace(verdict, note=note)
    return dataclasses.replace(verdict, parts=_parts(cells, graders, reports, ran))


def _parts(
    cells: list[CodeCell],
    graders: list[int],
    reports: dict[int, GraderRun],
    ran: dict[int, CellRun],
) -> tuple[tuple[str, str], ...]:
    """Each part's outcome, for an exercise in parts: passed, failed, not started (its
    stub still raises) or not checked (an earlier cell stopped the run)."""
    if len(graders) < 2:
        return ()
    from jitlab.learner.parts import part_of

    outcomes = []
    for number, index in enumerate(graders, start=1):
        report, cell = reports[index], ran.get(index)
        if report.completed and all(c.passed for c in report.checks):
            state = "passed"
        elif _not_started(report):
            state = "not started"
        elif cell is None or cell.status == "not run":
            state = "not checked yet"
        else:
            state = "failed"
        outcomes.append((part_of(number, cells[index].source).label, state))
    return tuple(outcomes)


_UNDEFINED = re.compile(r"name '(\w+)' is not defined")


def _close_name(failure: CellRun, cells: list[CodeCell]) -> str:
    """For a NameError in a cell, the name Python suggests among those the file defines
    ("" when none is close). The kernel's error text has no suggestion (IPython prints
    its own traceback), so the missing name is looked up again, here, in a namespace of
    the file's names: Python's traceback then makes the same suggestion it would have."""
    missing = _UNDEFINED.fullmatch(failure.evalue.strip()) if failure.ename == "NameError" else None
    if missing is None:
        return ""
    from jitlab.grading.checks import suggested_name

    names: dict[str, object] = {}
    for cell in cells:
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # a magic: IPython's syntax
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names[node.id] = None
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names[node.name] = None
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names.update({(a.asname or a.name).split(".")[0]: None for a in node.names})
    try:
        eval(missing.group(1), names)  # noqa: S307 (a bare name, which is not defined)
    except NameError as err:
        return suggested_name(err)
    return ""


def _not_started(run: GraderRun) -> bool:
    failed = next((c for c in run.checks if not c.passed), None)
    return failed is not None and failed.not_started


def _part_on(graders: list[int], reports: dict[int, GraderRun]) -> int:
    for number, index in enumerate(graders, start=1):
        run = reports.get(index, GraderRun(index))
        if not run.completed or any(not c.passed for c in run.checks):
            return number
    return len(graders) + 1


def _verdict(
    shown: str,
    cells: list[CodeCell],
    graders: list[int],
    reports: dict[int, GraderRun],
    execution: Execution,
    run: NotebookRun | None,
) -> Verdict:
    # An unwritten stub's part shows no green ticks for the checks made before its call.
    checks = tuple(
        c
        for index in graders
        for c in reports[index].checks
        if not (_not_started(reports[index]) and c.passed)
    )
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
        close = _close_name(failure, cells)
        if close:
            problem += f"\ndid you mean `{close}`?"
        return Verdict(shown, False, checks, problem=problem, where=where, kind="crash")
    incomplete = [i for i in graders if not reports.get(i, GraderRun(i)).completed]
    if incomplete:
        line = cells[incomplete[0]].line
        problem = (
            f"{shown}:{line}: the grader in this cell did not run to its end, so nothing "
            "was checked. Something stopped it: leave jitlab and jax.monitoring as they were."
        )
        return Verdict(shown, False, checks, problem=problem, kind="incomplete")
    if run is None or execution.returncode != 0:
        tail = quoted(execution.output.strip()[-600:])
        return Verdict(shown, False, checks, problem=f"pytest failed:\n{tail}", kind="crash")
    return Verdict(shown, passed=True, checks=checks)
