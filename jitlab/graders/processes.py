"""Grader for the many processes exercise: one program on every process.

The learner writes two functions in one notebook cell:

- ``make_global_batch(x, y, mesh, max_rows)``: this process's rows (``x``: (n, F)
  float32, ``y``: (n,) float32, 1 <= n <= max_rows) as a global batch on ``mesh``
  (a pytree of ``jax.Array``), with the same shapes on every process at every step;
- ``train_step(w, batch, lr)``: jitted; returns ``(new_w, loss)``, where ``loss`` is the
  mean squared error of ``x @ w - y`` over the real rows of every process, and ``new_w``
  is ``w - lr * gradient`` of that loss.

How the learner's code reaches the workers: the grader copies the whole cell (or file)
in which each function is defined, after :data:`jitlab.instruments.multiprocess.PRELUDE`, into a
module, and starts two JAX processes with :func:`jitlab.instruments.multiprocess.run`. Each runs
:func:`stream` (below): it imports that module after ``jax.distributed.initialize``,
makes the replicated weights, and for each step of its own ragged stream calls
``make_global_batch`` and ``train_step``, counting ``train_step``'s compilations with
``count_compiles``. Before each step the processes compare what they are about to run
(the batch's shapes, dtypes and shardings, and at the first step a fingerprint of the
lowered program) with a fixed-size collective, and stop together when they differ. So a
wrong answer ends in a verdict, not in the hang or the gloo abort it would cause in a
real job.

What it rejects, and how:
- an unsolved stub, or a crash in the learner's cell or functions (in the workers): the
  exception, the process and the step;
- per-process shapes (no padding, a bucket per local length, the global shape inferred
  by ``make_array_from_process_local_data``): the batch signatures differ between the
  processes;
- a static value that differs between processes: the programs' fingerprints differ;
- agreed buckets, a static length, anything that changes shape or a static value from
  step to step: more than one compilation on a process;
- ``train_step`` not jitted (work outside jit, a decoy call to a jitted function): checked
  in the notebook; a Python ``train_step`` whose code calls ``jax.disable_jit`` is told
  that it switches jit off;
- jit switched off: in the notebook, by ``@grader``'s canary; in the workers, where the
  learner's cell runs again and the notebook's canary cannot see, by the workers
  themselves: each runs the same canary after importing the cell and after the last
  step, and reads ``jax_disable_jit`` before every call of ``train_step`` (so a switch
  left on by ``make_global_batch``, even on some steps only, is seen). The processes
  agree before each step, so jit off on one process stops both, and the verdict is
  "jit is on ..." saying where it was off;
- hard-coded numbers, a mean over the padding, the wrong count: fresh data, ``max_rows``
  and learning rate on every run, compared with one process training on all real rows
  in float64 (NumPy);
- weights that are not a global array: ``new_w`` must be a ``jax.Array`` over the mesh.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import inspect
import io
import linecache
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from jitlab.grading import JIT_ON, GradingFailure, call_learner, fail, fresh_rng, grader, is_jitted
from jitlab.grading.checks import passed, require, require_jit_on, require_jitted
from jitlab.instruments import multiprocess

STEPS = 8
FEATURES = (3, 6)  # drawn from [3, 6)
MAX_ROWS = (4, 9)
RTOL = 1e-4
ATOL = 1e-5
LAUNCH_TIMEOUT_S = 50.0
STALL_TIMEOUT_S = 15.0
NOT_SOLVED = "NotImplementedError"

FUNCTIONS = "make_global_batch and train_step are functions"
JITTED = "train_step is compiled with jax.jit"
SOURCE = "the grader finds the cell that defines your functions"
STARTED = "two worker processes start"
CELL_RUNS = "your cell runs in every process"
BATCH_RUNS = "make_global_batch runs in every process"
STEP_RUNS = "train_step runs in every process"
SAME_BATCH = "every process builds the same global batch shapes"
SAME_PROGRAM = "every process compiles the same program"
FINISHED = "both worker processes finish"
ONCE = "train_step compiles exactly once on each process"
GLOBAL_W = "new_w is a global jax.Array over the mesh"
NUMBERS = "the numbers match one process training on every real row"
CHECKS = (
    FUNCTIONS,
    JITTED,
    SOURCE,
    STARTED,
    CELL_RUNS,
    BATCH_RUNS,
    STEP_RUNS,
    SAME_BATCH,
    SAME_PROGRAM,
    FINISHED,
    ONCE,
    GLOBAL_W,
    NUMBERS,
)
RUNS = {"your cell": CELL_RUNS, "make_global_batch": BATCH_RUNS, "train_step": STEP_RUNS}
"""The check for a failure in each place the workers run the learner's code."""

JIT_OFF_HINT = (
    "remove jax.disable_jit() and jax.config.update('jax_disable_jit', True) from your "
    "cell: the workers run the whole cell, and the exercise is about what jit compiles"
)


# --- the learner's code, in a file the workers import -------------------------------------


def _cell_around(lines: list[str], first_line: int) -> tuple[int, list[str]]:
    """Where the ``# %%`` cell that holds line ``first_line`` (1-based) of a percent-format
    file starts, and its lines; the whole file when it has no cell markers."""
    starts = [i for i, line in enumerate(lines) if line.startswith("# %%")]
    before = [i for i in starts if i < first_line]
    after = [i for i in starts if i >= first_line]
    if not before:
        return 0, lines
    return before[-1], lines[before[-1] + 1 : after[0] if after else len(lines)]


def learner_source(*functions: Callable[..., Any]) -> str:
    """The text of every cell that defines one of ``functions``, in order.

    In a notebook, ``linecache`` holds each cell's source under the file name that the
    function's code object carries. When that name is the exercise file itself (the
    file run as a script, or cell by cell from an editor), the ``# %%`` cell around the
    function is taken, so that the grader cell never runs in the workers.
    """
    texts: list[str] = []
    seen: set[tuple[str, int]] = set()
    for fn in functions:
        inner = inspect.unwrap(fn)
        code = getattr(inner, "__code__", None)
        if code is None:
            raise fail(
                SOURCE,
                expected="make_global_batch and train_step defined with def in a notebook cell",
                seen=f"{getattr(fn, '__name__', fn)!r} has no source code",
                hint="define both functions with def (train_step with @jax.jit) in the "
                "exercise cell",
            )
        lines = linecache.getlines(code.co_filename)
        start, cell = _cell_around(lines, code.co_firstlineno)
        where = (code.co_filename, start)
        if where in seen:
            continue
        seen.add(where)
        if not lines:
            raise fail(
                SOURCE,
                expected="the source of the cell that defines "
                f"{getattr(inner, '__name__', 'your function')}",
                seen=f"no source for {code.co_filename}",
                hint="run the exercise cell again, then the grader cell",
            )
        texts.append("".join(cell))
    return "\n\n".join(texts)


def _load_learner(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("learner_cell", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["learner_cell"] = module
    spec.loader.exec_module(module)
    return module


# --- the data, the same in the parent and in every worker ---------------------------------


@dataclasses.dataclass(frozen=True)
class Plan:
    """One grading run: the data's seed and sizes, every process's row counts, lr."""

    seed: int
    features: int
    max_rows: int
    lr: float
    lengths: tuple[tuple[int, ...], ...]  # [process][step]

    @classmethod
    def draw(cls, rng: np.random.Generator, processes: int = 2) -> Plan:
        """Fresh sizes, ragged in every way that a wrong answer could get away with."""
        max_rows = int(rng.integers(*MAX_ROWS))
        lengths = rng.integers(1, max_rows + 1, size=(processes, STEPS))
        lengths[:, 0] = [max_rows] + [1] * (processes - 1)  # differ at the first step
        small = max(1, max_rows // 2)
        lengths[:, 1] = rng.integers(1, small + 1, size=processes)  # a small step for all
        lengths[:, 2] = max_rows  # a full step for all
        lengths[:, -1] = [max_rows] * (processes - 1) + [int(rng.integers(1, max_rows))]
        return cls(
            seed=int(rng.integers(2**31)),
            features=int(rng.integers(*FEATURES)),
            max_rows=max_rows,
            lr=float(np.round(rng.uniform(0.05, 0.2), 3)),
            lengths=tuple(tuple(int(n) for n in row) for row in lengths),
        )

    def local(self, process_id: int, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows process ``process_id`` gets at ``step``."""
        rng = np.random.default_rng([self.seed, process_id, step])
        n = self.lengths[process_id][step]
        x = rng.normal(size=(n, self.features)).astype(np.float32)
        true_w = np.random.default_rng(self.seed).normal(size=self.features)
        y = (x @ true_w + 0.3 * rng.normal(size=n)).astype(np.float32)
        return x, y

    def reference(self) -> tuple[np.ndarray, np.ndarray]:
        """Losses and weights after each step, for one process with every real row."""
        w = np.zeros(self.features)
        losses, weights = [], []
        for step in range(STEPS):
            parts = [self.local(p, step) for p in range(len(self.lengths))]
            x = np.concatenate([a for a, _ in parts]).astype(np.float64)
            y = np.concatenate([b for _, b in parts]).astype(np.float64)
            err = x @ w - y
            losses.append(np.mean(err**2))
            w = w - self.lr * 2.0 * x.T @ err / len(y)
            weights.append(w)
        return np.array(losses), np.array(weights)


# --- inside each worker -------------------------------------------------------------------


def _signature(tree: Any) -> tuple[str, str]:
    """The pytree structure, and the leaves' shapes, dtypes and shardings, as text: the
    same text on every process exactly when the processes build the same global batch.
    (The structure holds any static metadata of a registered pytree.)"""
    import jax

    def leaf(value: Any) -> str:
        if isinstance(value, jax.Array):
            spec = getattr(value.sharding, "spec", type(value.sharding).__name__)
            return f"{value.dtype}{list(value.shape)} {spec}"
        if isinstance(value, np.ndarray):
            return f"NumPy {value.dtype}{list(value.shape)}"
        return f"{type(value).__name__} {value!r}"[:60]

    leaves, structure = jax.tree.flatten(tree)
    return str(structure), "; ".join(leaf(v) for v in leaves)


def _everyone_agrees(ok: bool, text: str) -> bool:
    """True on every process, or False on every process: a fixed-size collective, so it
    cannot hang or abort when the processes disagree.

    Run with jit on whatever the learner's code did: under ``jax_disable_jit`` the gather
    is an identity that never meets the other processes (it would agree with itself, or
    leave a process with jit on waiting for ever)."""
    import jax
    from jax.experimental import multihost_utils

    digest = np.frombuffer(hashlib.sha256(text.encode()).digest()[:16], np.uint8)
    mine = np.concatenate([[np.uint8(ok)], digest])
    with jax.disable_jit(False):
        everyone = np.asarray(multihost_utils.process_allgather(mine))
    return bool(everyone[:, 0].all() and (everyone == everyone[0]).all())


def _to_host(value: Any) -> np.ndarray:
    import jax
    from jax.experimental import multihost_utils

    if isinstance(value, jax.Array) and not value.is_fully_addressable:
        if value.is_fully_replicated:
            return np.asarray(value.addressable_data(0))
        return np.asarray(multihost_utils.process_allgather(value, tiled=True))
    return np.asarray(value)


def _describe_error(err: BaseException) -> dict[str, str]:
    return {"type": type(err).__name__, "message": str(err).strip()[:400]}


def _jit_problem(moment: str) -> dict[str, str] | None:
    """In a worker: ``None`` when jit is on and the compile counter hears JAX in this
    process, else what the canary of ``@grader`` saw (the notebook's canary checks the
    notebook's process only, and the learner's cell runs again in every worker)."""
    import jax

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # no ✓ in the worker's log
            require_jit_on(moment)
    except GradingFailure as failure:
        hint = JIT_OFF_HINT if jax.config.jax_disable_jit else failure.hint
        return {"moment": moment, "seen": failure.seen, "hint": hint}
    return None


def _jit_off_before_step(worker: multiprocess.Worker, step: int) -> bool:
    """In a worker, just before ``train_step`` runs: is jit switched off (and if so,
    report it)? Read here, since a switch left on by the learner's code, even on some
    steps only, would run the step op by op."""
    import jax

    if not jax.config.jax_disable_jit:
        return False
    worker.emit(
        "jit_off",
        moment=f"at step {step}, when train_step was about to run",
        seen="jit is switched off (jax_disable_jit is True): train_step would run op by "
        "op, uncompiled",
        hint=JIT_OFF_HINT,
    )
    return True


def stream(worker: multiprocess.Worker) -> None:
    """The worker's side of grading: run the learner's code on this process's stream."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jitlab.instruments.counting import CounterLost, count_compiles, miss_reason

    plan = Plan(**{**worker.options["plan"], "lengths": tuple(worker.options["plan"]["lengths"])})
    try:
        learner = _load_learner(worker.options["learner"])
    except Exception as err:
        worker.emit("failed", where="your cell", step=None, **_describe_error(err))
        return
    make_global_batch = getattr(learner, "make_global_batch", None)
    train_step = getattr(learner, "train_step", None)
    if not callable(make_global_batch) or not callable(train_step):
        message = "the cell does not define make_global_batch and train_step"
        worker.emit("failed", where="your cell", step=None, type="NameError", message=message)
        return

    # The cell ran at import: jit must be on, and the counter must hear JAX, on every
    # process before any step (the processes stop together when one of them is off).
    problem = _jit_problem("in the worker, after your cell ran")
    if problem:
        worker.emit("jit_off", **problem)
    if not _everyone_agrees(problem is None, ""):
        return

    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    w = jax.device_put(np.zeros(plan.features, np.float32), NamedSharding(mesh, P()))
    try:
        with count_compiles(train_step) as count:
            _run_steps(worker, plan, make_global_batch, train_step, mesh, w)
    except CounterLost as lost:
        hint = "leave jax.monitoring, jax.jit and jitlab alone in your cell"
        worker.emit("jit_off", moment="while the steps ran", seen=str(lost), hint=hint)
        return
    worker.emit(
        "compiles",
        traces=count.traces,
        compiles=count.compiles,
        reasons=[miss_reason(e) for e in count.explanations],
    )
    problem = _jit_problem("in the worker, after the last step")
    if problem:
        worker.emit("jit_off", **problem)


def _run_steps(
    worker: multiprocess.Worker,
    plan: Plan,
    make_global_batch: Callable[..., Any],
    train_step: Callable[..., Any],
    mesh: Any,
    w: Any,
) -> None:
    """In a worker: every step of this process's stream, until the processes disagree."""
    import jax

    for step in range(STEPS):
        x, y = plan.local(worker.process_id, step)
        try:
            batch = make_global_batch(x, y, mesh, plan.max_rows)
            (structure, shapes), error = _signature(batch), None
        except Exception as err:
            structure, shapes, error = "error", "error", _describe_error(err)
        # A process with jit off would run other programs than the rest: stop together.
        if not _everyone_agrees(not _jit_off_before_step(worker, step), ""):
            break
        worker.emit("batch", step=step, structure=structure, shapes=shapes)
        if not _everyone_agrees(error is None, f"{structure}: {shapes}"):
            if error:
                worker.emit("failed", where="make_global_batch", step=step, **error)
            else:
                worker.emit("mismatch", step=step, what="batch")
            break
        if step == 0 and hasattr(train_step, "lower"):
            try:
                text, error = train_step.lower(w, batch, plan.lr).as_text(), None
            except Exception as err:
                text, error = "error", _describe_error(err)
            program = hashlib.sha256(text.encode()).hexdigest()[:12]
            worker.emit("program", program=program)
            if not _everyone_agrees(error is None, program):
                if error:
                    worker.emit("failed", where="train_step", step=step, **error)
                else:
                    worker.emit("mismatch", step=step, what="program")
                break
        try:
            out = train_step(w, batch, plan.lr)
            w, loss = out
        except Exception as err:
            worker.emit("failed", where="train_step", step=step, **_describe_error(err))
            break
        worker.emit(
            "step",
            step=step,
            loss=float(np.mean(_to_host(loss))),
            w=_to_host(w),
            w_type=type(w).__name__,
            w_global=isinstance(w, jax.Array) and not w.is_fully_addressable,
        )


# --- in the notebook ----------------------------------------------------------------------


def launch(
    make_global_batch: Callable[..., Any], train_step: Callable[..., Any], plan: Plan
) -> multiprocess.Run:
    """Run :func:`stream` on two processes with the learner's cell; return the run."""
    source = learner_source(make_global_batch, train_step)
    with tempfile.TemporaryDirectory(prefix="jitlab-grader-14-") as scratch:
        path = Path(scratch) / "learner_cell.py"
        path.write_text(multiprocess.PRELUDE + "\n\n" + source, encoding="utf-8")
        options = {"learner": str(path), "plan": dataclasses.asdict(plan)}
        try:
            run = multiprocess.run(
                f"{__name__}:stream",
                options=options,
                timeout=LAUNCH_TIMEOUT_S,
                stall_timeout=STALL_TIMEOUT_S,
            )
        except multiprocess.LaunchError as err:
            raise fail(
                STARTED,
                expected="two JAX processes joined by jax.distributed on 127.0.0.1",
                seen=str(err),
                hint="this is the machine, not your code: run the grader cell again",
            ) from err
    return run


def _check_jit_in_workers(run: multiprocess.Run) -> None:
    """Fail ``JIT_ON`` where a worker found jit switched off, or its counter deaf."""
    for worker in run.workers:
        for record in worker.of("jit_off"):
            raise fail(
                JIT_ON,
                expected="jit switched on in every worker process, and the compile counter "
                "hearing JAX there",
                seen=f"{record['seen']} (process {worker.process_id}, {record['moment']})",
                hint=record["hint"],
            )


def _not_solved(name: str) -> Callable[[], Any]:
    """A function named ``name`` that raises as the worker's stub did, so that
    ``call_learner`` words the verdict as every grader words an unsolved stub."""

    def stub() -> Any:
        raise NotImplementedError

    stub.__name__ = name
    return stub


def _check_failures(run: multiprocess.Run) -> None:
    for worker in run.workers:
        for record in worker.of("failed"):
            where, step = record["where"], record["step"]
            check = RUNS.get(where, CELL_RUNS)
            at = f"process {worker.process_id}" + (f", step {step}" if step is not None else "")
            message = (record["message"].splitlines() or [""])[0][:250]
            seen = f"{record['type']}: {message} ({at})"
            if record["type"] == NOT_SOLVED:
                call_learner(check, _not_solved(where))
            hint = "run your functions on one process first (the snippet under the cell)"
            if where == "your cell" or record["type"] == "NameError":
                hint = (
                    "the workers run your whole cell with only jax, jnp, np, NamedSharding, "
                    "P and functools imported: keep everything the functions need in it, "
                    "and nothing that uses the notebook's other variables"
                )
            elif "Invalid host data" in record["message"]:
                hint = "pad x and y to max_rows rows first: every process must pass the "
                hint += "same local shape"
            raise fail(check, expected="no exception", seen=seen, hint=hint)
    for check in (CELL_RUNS, BATCH_RUNS, STEP_RUNS):
        passed(check)


def _batches_at(run: multiprocess.Run, step: int) -> list[dict[str, Any]]:
    return [r for w in run.workers for r in w.of("batch") if r["step"] == step]


def _check_agreement(run: multiprocess.Run) -> None:
    mismatches = [w.of("mismatch") for w in run.workers]
    if not any(mismatches):
        passed(SAME_BATCH)
        passed(SAME_PROGRAM)
        return
    first = min((m[0] for m in mismatches if m), key=lambda r: r["step"])
    step = first["step"]
    if first["what"] == "program":
        programs = [w.one("program")["program"] for w in run.workers]
        raise fail(
            SAME_PROGRAM,
            expected="one program fingerprint on every process",
            seen=", ".join(f"process {i}: {p}" for i, p in enumerate(programs))
            + " (same batch shapes)",
            hint="something static differs between processes (a value read from "
            "jax.process_index(), the environment, or a file): decide it once and use "
            "the same value everywhere",
        )
    signatures = []
    for w in run.workers:
        found = [r for r in w.of("batch") if r["step"] == step]
        shown = "?" if not found else found[0]["shapes"]
        if found and len({r["structure"] for r in _batches_at(run, step)}) > 1:
            shown += f" ({found[0]['structure'][:80]})"
        signatures.append(f"process {w.process_id}: {shown}")
    raise fail(
        SAME_BATCH,
        expected=f"the same shapes on both processes at step {step}",
        seen=" | ".join(s[:160] for s in signatures),
        hint="pad x and y to max_rows rows on every process, with a mask for the "
        "padding, and give make_array_from_process_local_data the global shape: "
        "max_rows times the number of processes",
    )


def _check_run_ended(run: multiprocess.Run) -> None:
    if run.ok:
        passed(FINISHED)
        return
    states = "; ".join(f"process {w.process_id}: {w.status()}" for w in run.workers)
    raise fail(
        FINISHED,
        expected="both processes exit normally",
        seen=states + (f" ({run.stopped} after {run.quiet_seconds:.0f} s)" if run.stopped else ""),
        hint="a process that waits for ever or aborts ran a different program from the "
        "other one: run processes.show(make_global_batch, train_step), the snippet under "
        "the cell, to see what each process built and compiled",
    )


def _check_compiles(run: multiprocess.Run) -> None:
    counts = [w.one("compiles") for w in run.workers]
    compiles = [c["compiles"] for c in counts]
    if all(n == 1 for n in compiles):
        passed(ONCE)
        return
    shapes = sorted({r["shapes"] for w in run.workers for r in w.of("batch")})
    structures = sorted({r["structure"] for w in run.workers for r in w.of("batch")})
    reasons = [r for c in counts for r in c["reasons"][1:]]
    seen = ", ".join(f"process {i}: {n}" for i, n in enumerate(compiles))
    if max(compiles) == 0:  # jit was on (checked before): nothing new to compile
        hint = (
            "train_step never compiled during the grader's steps: do not call it in the "
            "cell itself, and do all its work inside the jitted function"
        )
    elif len(shapes) > 1:
        seen += f"; {len(shapes)} different global batches, e.g. {shapes[0][:120]}"
        hint = (
            "each new global shape is a new program on every process: pad to max_rows, "
            "not to this step's length or a bucket of it"
        )
    elif len(structures) > 1:
        seen += f"; {len(structures)} different batch structures, e.g. {structures[0][:120]}"
        hint = (
            "the shapes never changed, but the batch's pytree structure did, so a static "
            "value did: pass lengths and masks as arrays, not as pytree metadata"
        )
    else:
        hint = (
            "the shapes never changed, so a static value did: pass lengths and masks as "
            "arrays, not as static arguments or pytree metadata"
        )
    if reasons:
        seen += f"; JAX says: {reasons[0][:160]}"
    raise fail(
        ONCE,
        expected=f"exactly 1 compilation on each process for {STEPS} ragged steps",
        seen=seen,
        hint=hint,
    )


def _first_wrong_step(got: np.ndarray, want: np.ndarray) -> int:
    if got.shape[:1] != want.shape[:1]:
        return min(len(got), len(want)) - 1 if len(got) and len(want) else 0
    wrong = ~np.isclose(got, want, rtol=RTOL, atol=ATOL)
    return int(np.argmax(wrong.reshape(len(wrong), -1).any(axis=1)))


def _check_numbers(run: multiprocess.Run, plan: Plan) -> None:
    want_losses, want_weights = plan.reference()
    steps = [w.of("step") for w in run.workers]
    require(
        GLOBAL_W,
        all(r["w_global"] for s in steps for r in s),
        expected="train_step to return the new weights as a jax.Array on the mesh",
        seen=", ".join(sorted({r["w_type"] for s in steps for r in s})),
        hint="return the updated weights from inside the jitted train_step",
    )
    for process, records in enumerate(steps):
        got_w = np.array([r["w"] for r in records], dtype=np.float64)
        got_loss = np.array([r["loss"] for r in records])
        for name, got, want in (("loss", got_loss, want_losses), ("weights", got_w, want_weights)):
            if got.shape != want.shape or not np.allclose(got, want, rtol=RTOL, atol=ATOL):
                bad = _first_wrong_step(got, want)
                raise fail(
                    NUMBERS,
                    expected=f"{name} at step {bad}: "
                    f"{np.array2string(np.asarray(want[bad]), precision=4)}",
                    seen=f"{np.array2string(np.asarray(got[bad]), precision=4)} "
                    f"on process {process}",
                    hint="average over the real rows of every process: mask the padding, "
                    "and divide by the sum of the mask over the whole global batch",
                )
    passed(NUMBERS)


def _switches_jit_off(fn: Any) -> bool:
    """True when the code of ``fn`` (or of a function nested in it) names
    ``disable_jit``: a Python wrapper that runs the work with jit switched off."""
    codes = [getattr(inspect.unwrap(fn), "__code__", None)]
    while codes:
        code = codes.pop()
        if code is None:
            continue
        if "disable_jit" in code.co_names or "jax_disable_jit" in code.co_consts:
            return True
        codes += [c for c in code.co_consts if inspect.iscode(c)]
    return False


@grader("processes", checks=CHECKS)
def grade(make_global_batch: Callable[..., Any], train_step: Callable[..., Any]) -> None:
    """Grade the exercise on two processes; see the module docstring."""
    require(
        FUNCTIONS,
        callable(make_global_batch) and callable(train_step),
        expected="two functions",
        seen=f"{type(make_global_batch).__name__}, {type(train_step).__name__}",
    )
    if not is_jitted(train_step) and _switches_jit_off(train_step):
        raise fail(
            JIT_ON,
            expected="train_step compiled by jax.jit, with jit switched on",
            seen=f"{type(train_step).__name__} {getattr(train_step, '__name__', '')}, whose "
            "code calls jax.disable_jit: it switches jit off and runs the step op by op",
            hint=JIT_OFF_HINT,
        )
    require_jitted(
        JITTED,
        train_step,
        hint="decorate train_step with @jax.jit, and do all its work inside it",
    )
    plan = Plan.draw(fresh_rng())
    run = launch(make_global_batch, train_step, plan)
    passed(SOURCE)
    passed(STARTED)
    _check_jit_in_workers(run)
    _check_failures(run)
    _check_agreement(run)
    _check_run_ended(run)
    _check_compiles(run)
    _check_numbers(run, plan)


def _compact(shapes: str) -> str:
    """``float32[16, 4] P('data',)`` as ``f32[16,4]``: the batch column of :func:`show`."""
    shapes = re.sub(r"float(\d+)", r"f\1", shapes).replace(", ", ",").replace(";", "")
    return shapes.replace(" P('data',)", "")


def show(make_global_batch: Callable[..., Any], train_step: Callable[..., Any]) -> None:
    """Run the learner's functions on two processes as the grader does, and print what
    each process built, compiled and computed, without judging."""
    from jitlab.instruments.timing import print_table

    plan = Plan.draw(fresh_rng())
    run = launch(make_global_batch, train_step, plan)
    print(f"max_rows={plan.max_rows}; real rows per step, process by process:")
    for process, lengths in enumerate(plan.lengths):
        print(f"  process {process}: {list(lengths)}")
    rows = []
    for worker in run.workers:
        losses = {r["step"]: r["loss"] for r in worker.of("step")}
        for record in worker.of("batch"):
            rows.append(
                {
                    "process": worker.process_id,
                    "step": record["step"],
                    "global batch (leaves)": _compact(record["shapes"]),
                    "loss": losses.get(record["step"], "-"),
                }
            )
    print_table(rows)
    for worker in run.workers:
        counted = worker.of("compiles")
        said = f"{counted[0]['compiles']} compilation(s)" if counted else worker.status()
        for failed in worker.of("failed"):
            said += f"; {failed['where']} raised {failed['type']} at step {failed['step']}"
        for mismatch in worker.of("mismatch"):
            said += f"; stopped at step {mismatch['step']}: the processes' {mismatch['what']}"
            said += "es differ" if mismatch["what"] == "batch" else "s differ"
        print(f"process {worker.process_id}: {said}")


__all__ = ["Plan", "grade", "launch", "learner_source", "show", "stream"]
