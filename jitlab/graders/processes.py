"""Grader for the many processes exercise: one program on every process.

The learner's cell is copied into a module that two JAX processes, one CPU device each,
import (:func:`stream`) to run their own ragged streams, counting ``train_step``'s
compilations. Before each step the processes compare what they are about to run with a
fixed-size collective and stop together when it differs: a verdict, not the hang or
abort of a real job. The workers check jit and their counter themselves, where the
notebook's canary cannot see.
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

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jitlab.doctor import classify
from jitlab.grading import JIT_ON, GradingFailure, call_learner, fail, fresh_rng, grader, why
from jitlab.grading.causes import Called
from jitlab.grading.checks import (
    is_jitted,
    passed,
    require,
    require_jit_on,
    require_jitted,
    shorten,
)
from jitlab.instruments import multiprocess

STEPS, ZERO_ROW_STEP = 8, 3
FEATURES, MAX_ROWS = (3, 6), (4, 9)  # drawn from [low, high)
RTOL, ATOL = 1e-4, 1e-5
DRAWN = {  # what the drawing covers: the wrong rule each part breaks, on every run
    "step 0: max_rows rows on process 0, one on the others": "the global shape inferred "
    "per process; a bucket per local length",
    "step 1 small and step 2 full on every process": "agreed buckets; a static length; "
    "the mean over the padding",
    f"step {ZERO_ROW_STEP}: a real row of zeros (x and y) on process 0": "padding told "
    "apart by its zeros instead of a mask",
    "the last step: one process short": "a mean over the padding",
    "new data, max_rows, F and lr": "hard-coded numbers",
    "one CPU device per process, as the exercise states": "(not drawn)",
}

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
JIT_OFF_HINT = (
    "remove jax.disable_jit() and jax.config.update('jax_disable_jit', True) from your "
    "cell: the workers run the whole cell, and the exercise is about what jit compiles"
)
PAD_HINT = "pad x and y to max_rows rows on every process, with a mask for the padding"


# --- the learner's code, in a file the workers import -------------------------------------


def learner_source(*functions: Callable[..., Any]) -> str:
    """The text of every cell that defines one of ``functions``, in order: the notebook
    cell ``linecache`` holds, or the ``# %%`` cell around the function when its file is
    the exercise itself (so the grader cell never runs in the workers)."""
    texts, seen = [], set()
    for fn in functions:
        code = getattr(inspect.unwrap(fn), "__code__", None)
        if code is None:
            raise fail(
                SOURCE,
                expected="make_global_batch and train_step defined with def in a notebook cell",
                seen=f"{getattr(fn, '__name__', fn)!r} has no source code",
                hint="define both functions with def (train_step with @jax.jit) in the cell",
            )
        lines = linecache.getlines(code.co_filename)
        if not lines:
            raise fail(
                SOURCE,
                expected=f"the source of the cell that defines {code.co_name}",
                seen=f"no source for {code.co_filename}",
                hint="run the exercise cell again, then the grader cell",
            )
        starts = [i for i, line in enumerate(lines) if line.startswith("# %%")]
        start = max([i for i in starts if i < code.co_firstlineno], default=-1)
        end = min([i for i in starts if i >= code.co_firstlineno], default=len(lines))
        if (code.co_filename, start) not in seen:
            seen.add((code.co_filename, start))
            texts.append("".join(lines[start + 1 : end]))
    return "\n\n".join(texts)


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
        """Fresh sizes, ragged in every way that :data:`DRAWN` lists."""
        top = int(rng.integers(*MAX_ROWS))
        lengths = rng.integers(1, top + 1, size=(processes, STEPS))
        lengths[:, 0] = [top] + [1] * (processes - 1)
        lengths[:, 1] = rng.integers(1, max(1, top // 2) + 1, size=processes)
        lengths[:, 2] = top
        lengths[:, -1] = [top] * (processes - 1) + [int(rng.integers(1, top))]
        return cls(
            seed=int(rng.integers(2**31)),
            features=int(rng.integers(*FEATURES)),
            max_rows=top,
            lr=float(np.round(rng.uniform(0.05, 0.2), 3)),
            lengths=tuple(tuple(int(n) for n in row) for row in lengths),
        )

    def local(self, process_id: int, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows process ``process_id`` gets at ``step``."""
        rng = np.random.default_rng([self.seed, process_id, step])
        x = rng.normal(size=(self.lengths[process_id][step], self.features)).astype(np.float32)
        true_w = np.random.default_rng(self.seed).normal(size=self.features)
        y = (x @ true_w + 0.3 * rng.normal(size=len(x))).astype(np.float32)
        if (process_id, step) == (0, ZERO_ROW_STEP):
            x[0], y[0] = 0.0, 0.0  # real, though a zero row looks like padding
        return x, y

    def reference(self) -> tuple[np.ndarray, np.ndarray]:
        """Losses and weights after each step, for one process with every real row."""
        w, losses, weights = np.zeros(self.features), [], []
        for step in range(STEPS):
            parts = [self.local(p, step) for p in range(len(self.lengths))]
            x = np.concatenate([a for a, _ in parts]).astype(np.float64)
            err = x @ w - np.concatenate([b for _, b in parts])
            losses.append(np.mean(err**2))
            w = w - self.lr * 2.0 * x.T @ err / len(err)
            weights.append(w)
        return np.array(losses), np.array(weights)


# --- inside each worker -------------------------------------------------------------------


def _signature(tree: Any) -> tuple[str, str]:
    """The pytree structure (with any static metadata), and the leaves' shapes, dtypes
    and shardings, as text: the same on every process when the global batches are."""

    def leaf(value: Any) -> str:
        if isinstance(value, jax.Array):
            spec = getattr(value.sharding, "spec", type(value.sharding).__name__)
            return f"{value.dtype}{list(value.shape)} {spec}"
        if isinstance(value, np.ndarray):
            return f"NumPy {value.dtype}{list(value.shape)}"
        return f"{type(value).__name__} {value!r}"[:60]

    leaves, structure = jax.tree.flatten(tree)
    return str(structure), "; ".join(leaf(v) for v in leaves)


def _everyone_agrees(ok: bool, text: str = "") -> bool:
    """True on every process, or False on every process: a fixed-size collective, run
    with jit on (under ``jax_disable_jit`` the gather never meets the other processes)."""
    from jax.experimental import multihost_utils

    digest = np.frombuffer(hashlib.sha256(text.encode()).digest()[:16], np.uint8)
    with jax.disable_jit(False):
        everyone = np.asarray(
            multihost_utils.process_allgather(np.concatenate([[np.uint8(ok)], digest]))
        )
    return bool(everyone[:, 0].all() and (everyone == everyone[0]).all())


def _to_host(value: Any) -> np.ndarray:
    from jax.experimental import multihost_utils

    if isinstance(value, jax.Array) and not value.is_fully_addressable:
        if value.is_fully_replicated:
            return np.asarray(value.addressable_data(0))
        return np.asarray(multihost_utils.process_allgather(value, tiled=True))
    return np.asarray(value)


def _error(err: BaseException) -> dict[str, str]:
    return {"type": type(err).__name__, "message": str(err).strip()[:400]}


def _jit_problem(worker: multiprocess.Worker, moment: str) -> bool:
    """In a worker: report (and say) whether jit is off or the compile counter deaf, as
    the canary of ``@grader`` would see it here."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # no ✓ in the worker's log
            require_jit_on(moment)
    except GradingFailure as failure:
        hint = JIT_OFF_HINT if jax.config.jax_disable_jit else failure.hint
        worker.emit("jit_off", moment=moment, seen=failure.seen, hint=hint)
        return True
    return False


def stream(worker: multiprocess.Worker) -> None:
    """The worker's side of grading: run the learner's code on this process's stream."""
    from jitlab.instruments.counting import CounterLost, count_compiles

    plan = Plan(**{**worker.options["plan"], "lengths": tuple(worker.options["plan"]["lengths"])})
    try:
        spec = importlib.util.spec_from_file_location("learner_cell", worker.options["learner"])
        learner = sys.modules["learner_cell"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(learner)
        make_global_batch, train_step = learner.make_global_batch, learner.train_step
    except Exception as err:
        worker.emit("failed", where="your cell", step=None, **_error(err))
        return
    if not _everyone_agrees(not _jit_problem(worker, "in the worker, after your cell ran")):
        return
    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
    w = jax.device_put(np.zeros(plan.features, np.float32), NamedSharding(mesh, P()))
    try:
        with count_compiles(train_step) as count:
            calls = _run_steps(worker, plan, (make_global_batch, train_step), mesh, w, count)
    except CounterLost as lost:
        hint = "leave jax.monitoring, jax.jit and jitlab alone in your cell"
        worker.emit("jit_off", moment="while the steps ran", seen=str(lost), hint=hint)
        return
    found = why(calls, train_step, label=lambda i: f"step {i}")
    worker.emit("compiles", compiles=count.compiles, cause=found.text, causes=found.causes)
    _jit_problem(worker, "in the worker, after the last step")


def _stop(worker, step: int, where: str, error: dict | None, calls: list) -> list:
    """Report why the processes stop at ``step`` (an exception here, or a mismatch)."""
    what = "batch" if where == "make_global_batch" else "program"
    if error:
        worker.emit("failed", where=where, step=step, **error)
    else:
        worker.emit("mismatch", step=step, what=what)
    return calls


def _run_steps(worker, plan: Plan, functions, mesh, w, count) -> list[Called]:
    """In a worker: every step of this process's stream, until the processes disagree;
    the calls of ``train_step`` that ran."""
    (make_global_batch, train_step), calls = functions, []
    for step in range(STEPS):
        x, y = plan.local(worker.process_id, step)
        try:
            batch = make_global_batch(x, y, mesh, plan.max_rows)
            (structure, shapes), error = _signature(batch), None
        except Exception as err:
            structure, shapes, error = "error", "error", _error(err)
        # A process with jit off would run other programs than the rest: stop together.
        off = jax.config.jax_disable_jit
        if off:
            worker.emit(
                "jit_off",
                moment=f"at step {step}, when train_step was about to run",
                seen="jit is switched off (jax_disable_jit is True): train_step would run "
                "op by op, uncompiled",
                hint=JIT_OFF_HINT,
            )
        if not _everyone_agrees(not off):
            return calls
        worker.emit("batch", step=step, structure=structure, shapes=shapes)
        if not _everyone_agrees(error is None, f"{structure}: {shapes}"):
            return _stop(worker, step, "make_global_batch", error, calls)
        if step == 0 and hasattr(train_step, "lower"):
            try:
                text, error = train_step.lower(w, batch, plan.lr).as_text(), None
            except Exception as err:
                text, error = "error", _error(err)
            program = hashlib.sha256(text.encode()).hexdigest()[:12]
            worker.emit("program", program=program)
            if not _everyone_agrees(error is None, program):
                return _stop(worker, step, "train_step", error, calls)
        try:
            before, args = count.compiles, (w, batch, plan.lr)
            w, loss = train_step(*args)
        except Exception as err:
            return _stop(worker, step, "train_step", _error(err), calls)
        calls.append(Called(args, {}, count.compiles > before))
        worker.emit(
            "step",
            step=step,
            loss=float(np.mean(_to_host(loss))),
            w=_to_host(w),
            w_type=type(w).__name__,
            w_global=isinstance(w, jax.Array) and not w.is_fully_addressable,
        )
    return calls


# --- in the notebook ----------------------------------------------------------------------


def launch(make_global_batch: Callable, train_step: Callable, plan: Plan) -> multiprocess.Run:
    """Run :func:`stream` on two processes with the learner's cell; return the run."""
    source = learner_source(make_global_batch, train_step)
    with tempfile.TemporaryDirectory(prefix="jitlab-grader-processes-") as scratch:
        path = Path(scratch) / "learner_cell.py"
        path.write_text(multiprocess.PRELUDE + "\n\n" + source, encoding="utf-8")
        options = {"learner": str(path), "plan": dataclasses.asdict(plan)}
        try:
            return multiprocess.run(
                f"{__name__}:stream", options=options, timeout=50.0, stall_timeout=15.0
            )
        except multiprocess.LaunchError as err:
            raise fail(
                STARTED,
                expected="two JAX processes joined by jax.distributed on 127.0.0.1",
                seen=str(err),
                hint="this is the machine, not your code: run the grader cell again",
            ) from err


def _not_solved(name: str) -> Callable[[], Any]:
    """A function called ``name`` that raises as a stub does, for ``call_learner``'s
    words on an unsolved stub."""

    def stub() -> Any:
        raise NotImplementedError

    stub.__name__ = name
    return stub


def _stub_here(make_global_batch: Callable, train_step: Callable, plan: Plan) -> None:
    """Fail on an unsolved stub in this process, on one device, before any worker
    starts; anything else the functions raise here is the workers' to report."""
    mesh = jax.make_mesh((1,), ("data",), axis_types=(AxisType.Auto,), devices=jax.devices()[:1])
    jit_off = jax.config.jax_disable_jit
    try:
        check, name = BATCH_RUNS, "make_global_batch"
        batch = make_global_batch(*plan.local(0, 0), mesh, plan.max_rows)
        check, name = STEP_RUNS, "train_step"
        jax.eval_shape(train_step, np.zeros(plan.features, np.float32), batch, plan.lr)
    except NotImplementedError:
        call_learner(check, _not_solved(name))
    except Exception:  # noqa: S110 (reported by the workers, where the cell really runs)
        pass
    finally:
        if jax.config.jax_disable_jit != jit_off:
            jax.config.update("jax_disable_jit", jit_off)


def _check_workers(run: multiprocess.Run) -> None:
    """Jit off or a deaf counter in a worker, then the learner's exceptions there."""
    for worker in run.workers:
        for record in worker.of("jit_off"):
            raise fail(
                JIT_ON,
                expected="jit switched on in every worker process, and the compile counter "
                "hearing JAX there",
                seen=f"{record['seen']} (process {worker.process_id}, {record['moment']})",
                hint=record["hint"],
            )
    for worker in run.workers:
        for record in worker.of("failed"):
            where, step = record["where"], record["step"]
            at = f"process {worker.process_id}" + (f", step {step}" if step is not None else "")
            if record["type"] == "NotImplementedError":
                call_learner(RUNS[where], _not_solved(where))
            hint = "run your functions on one process first (the snippet under the cell)"
            if where == "your cell" or record["type"] == "NameError":
                hint = (
                    "the workers run your whole cell with only jax, jnp, np, NamedSharding, "
                    "P and functools imported: keep everything the functions need in it, "
                    "and nothing that uses the notebook's other variables"
                )
            elif "Invalid host data" in record["message"]:
                hint = PAD_HINT + ": every process must pass the same local shape"
            message = (record["message"].splitlines() or [""])[0][:250]
            raise fail(
                RUNS[where],
                expected="no exception",
                seen=f"{record['type']}: {message} ({at})",
                hint=hint,
            )
    for check in (CELL_RUNS, BATCH_RUNS, STEP_RUNS):
        passed(check)


def _check_agreement(run: multiprocess.Run) -> None:
    mismatches = [r for w in run.workers for r in w.of("mismatch")]
    if mismatches:
        step, what = min((r["step"], r["what"]) for r in mismatches)
        if what == "program":
            raise fail(
                SAME_PROGRAM,
                expected="one program fingerprint on every process",
                seen=", ".join(
                    f"process {w.process_id}: {w.one('program')['program']}" for w in run.workers
                )
                + " (same batch shapes)",
                hint="something static differs between processes (a value read from "
                "jax.process_index(), the environment, or a file): decide it once and use "
                "the same value everywhere",
            )
        batches = [[r for r in w.of("batch") if r["step"] == step][:1] for w in run.workers]
        several = len({b["structure"] for (b,) in filter(None, batches)}) > 1
        shown = [
            (b[0]["shapes"] + (f" ({b[0]['structure'][:80]})" if several else ""))[:150]
            if b
            else "?"
            for b in batches
        ]
        raise fail(
            SAME_BATCH,
            expected=f"the same shapes on both processes at step {step}",
            seen=" | ".join(f"process {i}: {text}" for i, text in enumerate(shown)),
            hint=PAD_HINT + ", and give make_array_from_process_local_data the global shape: "
            "max_rows times the number of processes",
        )
    passed(SAME_BATCH)
    passed(SAME_PROGRAM)


def _check_compiles(run: multiprocess.Run) -> None:
    counts = [w.one("compiles") for w in run.workers]
    compiles = [c["compiles"] for c in counts]
    seen = ", ".join(f"process {i}: {n}" for i, n in enumerate(compiles))
    shapes = {r["shapes"] for w in run.workers for r in w.of("batch")}
    causes = {c for counted in counts for c in counted["causes"]}
    if max(compiles) == 0:  # jit was on (checked before): nothing new to compile
        hint = (
            "train_step never compiled during the grader's steps: do not call it in the "
            "cell itself, and do all its work inside the jitted function"
        )
    elif classify.SHAPE in causes:
        seen += f"; {len(shapes)} different global batches"
        hint = (
            "each new global shape is a new program on every process: pad to max_rows, "
            "not to this step's length or a bucket of it"
        )
    else:
        hint = (
            "the shapes never changed, so a static value did: pass lengths and masks as "
            "arrays, not as static arguments or pytree metadata"
        )
    cause = next((c["cause"] for c in counts if c["cause"]), "")
    require(
        ONCE,
        all(n == 1 for n in compiles),
        expected=f"exactly 1 compilation on each process for {STEPS} ragged steps",
        seen=seen + (f"; {shorten(cause, 200)}" if cause else ""),
        hint=hint,
    )


def _check_numbers(run: multiprocess.Run, plan: Plan) -> None:
    steps = [w.of("step") for w in run.workers]
    require(
        GLOBAL_W,
        all(r["w_global"] for s in steps for r in s),
        expected="train_step to return the new weights as a jax.Array on the mesh",
        seen=", ".join(sorted({r["w_type"] for s in steps for r in s})),
        hint="return the updated weights from inside the jitted train_step",
    )
    want_losses, want_weights = plan.reference()
    for process, records in enumerate(steps):
        for name, key, want in (("loss", "loss", want_losses), ("weights", "w", want_weights)):
            got = np.array([r[key] for r in records], dtype=np.float64)
            if got.shape == want.shape and np.allclose(got, want, rtol=RTOL, atol=ATOL):
                continue
            bad = max(0, min(len(got), len(want)) - 1)
            if got.shape == want.shape:
                close = np.isclose(got, want, rtol=RTOL, atol=ATOL).reshape(len(got), -1)
                bad = int(np.argmax(~close.all(axis=1)))
            rows = ", ".join(str(n) for n in (p[bad] for p in plan.lengths))
            raise fail(
                NUMBERS,
                expected=f"{name} at step {bad}: {np.array2string(want[bad], precision=4)}",
                seen=f"{np.array2string(got[bad], precision=4)} on process {process} (real "
                f"rows per process at step {bad}: {rows}; max_rows {plan.max_rows}"
                + ("; a real row of zeros on process 0" if bad == ZERO_ROW_STEP else "")
                + ")",
                hint="average over the real rows of every process: mask the padding (a real "
                "row may hold zeros), and divide by the sum of the mask over the whole "
                "global batch",
            )
    passed(NUMBERS)


def _switches_jit_off(fn: Any) -> bool:
    """True when the code of ``fn`` (or of a function nested in it) names ``disable_jit``."""
    codes = [getattr(inspect.unwrap(fn), "__code__", None)]
    while codes:
        code = codes.pop()
        if code is not None:
            if "disable_jit" in code.co_names or "jax_disable_jit" in code.co_consts:
                return True
            codes += [c for c in code.co_consts if inspect.iscode(c)]
    return False


@grader("processes", checks=CHECKS)
def grade(make_global_batch: Callable[..., Any], train_step: Callable[..., Any]) -> None:
    """Grade the exercise on two processes, one CPU device each."""
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
        JITTED, train_step, hint="decorate train_step with @jax.jit, and do all its work inside it"
    )
    plan = Plan.draw(fresh_rng())
    _stub_here(make_global_batch, train_step, plan)
    run = launch(make_global_batch, train_step, plan)
    passed(SOURCE)
    passed(STARTED)
    _check_workers(run)
    _check_agreement(run)
    states = "; ".join(f"process {w.process_id}: {w.status()}" for w in run.workers)
    require(
        FINISHED,
        run.ok,
        expected="both processes exit normally",
        seen=states + (f" ({run.stopped} after {run.quiet_seconds:.0f} s)" if run.stopped else ""),
        hint="a process that waits for ever or aborts ran a different program from the "
        "other one: run processes.show(make_global_batch, train_step), the snippet under "
        "the cell, to see what each process built and compiled",
    )
    _check_compiles(run)
    _check_numbers(run, plan)


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
            shapes = re.sub(r"float(\d+)", r"f\1", record["shapes"]).replace(", ", ",")
            rows.append(
                {
                    "process": worker.process_id,
                    "step": record["step"],
                    "global batch (leaves)": shapes.replace(";", "").replace(" P('data',)", ""),
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


__all__ = ["DRAWN", "Plan", "grade", "launch", "learner_source", "show", "stream"]
