"""Grader for the many processes exercise: one program on every process.

Two JAX processes, one CPU device each, run the learner's cell on their own ragged streams
(:func:`stream`), judge what only they see (compilations, jit and the counter there too) and
send their first failure to the notebook as a record. Before each step they compare what they
are about to run with a fixed-size collective, and stop together (not hang) when it differs.

What the drawing covers, every run (the wrong rule each part breaks):

- step 0, max_rows rows on process 0 and one on the other: the global shape inferred per
  process, a bucket per local length;
- step 1 small and step 2 full on every process: agreed buckets, a static length;
- step 3, a real row of zeros (x and y) on process 0: padding told apart by its zeros;
- the last step, one process short: a mean over the padding;
- new data, max_rows, F and lr: hard-coded numbers. Not drawn: one CPU device per process.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import linecache
import runpy
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jitlab.doctor import classify
from jitlab.grading import (
    JIT_ON,
    GradingFailure,
    Hints,
    fail,
    grader,
    is_jitted,
)
from jitlab.grading.causes import Called, why
from jitlab.grading.checks import Grading, grader_title, shorten
from jitlab.instruments import multiprocess
from jitlab.instruments.counting import CounterLost, count_compiles
from jitlab.instruments.timing import print_table

STEPS, ZERO_ROW_STEP, FEATURES, MAX_ROWS = 8, 3, (3, 6), (4, 9)  # sizes from [low, high)
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
PAD = "pad x and y to max_rows rows on every process, with a mask for the padding"
CHECKS = {  # every check once, in order: its name, then its default hint
    (FUNCTIONS := "make_global_batch and train_step are functions"): "define both with def",
    (JITTED := "train_step is compiled with jax.jit"): """decorate train_step with @jax.jit,
        and do all its work inside it""",
    (SOURCE := "the grader finds the cell that defines your functions"): """define both with
        def (train_step with @jax.jit) in the exercise cell, and run it before the grader""",
    (STARTED := "two worker processes start"): "the machine failed, not your code: run it again",
    (CELL_RUNS := "your cell runs in every process"): """the workers run your whole cell with
        only jax, jnp, np, NamedSharding, P and functools imported: keep everything the
        functions need in it, and nothing that uses the notebook's other variables""",
    (BATCH_RUNS := "make_global_batch runs in every process"): f"""{PAD}: every process must
        pass the same local shape""",
    (STEP_RUNS := "train_step runs in every process"): "return (new_w, loss)",
    (SAME_BATCH := "every process builds the same global batch shapes"): f"""{PAD}, and give
        make_array_from_process_local_data the global shape: max_rows times the number of
        processes""",
    (SPLIT := 'the rows of the global batch are split over "data"'): """build each array with
        jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), rows,
        global_shape): a replicated P() says that every process holds the whole batch, so each
        computes on its own rows alone""",
    (SAME_PROGRAM := "every process compiles the same program"): """something static differs
        between processes (read from jax.process_index(), the environment, a file): decide
        it once, the same everywhere""",
    (FINISHED := "both worker processes finish"): """a process that hangs or aborts ran
        another program than the other: processes.show(make_global_batch, train_step), the
        snippet under the cell, shows what each one built and compiled""",
    (ONCE := "train_step compiles exactly once on each process"): """the shapes never
        changed, so a static value did: pass lengths and masks as arrays, not as static
        arguments or pytree metadata""",
    (GLOBAL_W := "new_w is a global jax.Array over the mesh"): """return the updated weights
        from inside the jitted train_step""",
    (NUMBERS := "the numbers match one process training on every real row"): """average over
        the real rows of every process: mask the padding (a real row may hold zeros), and
        divide by the sum of the mask over the whole global batch""",
}
MISTAKES = {  # the hints of mistakes that the checks tell apart
    JIT_ON: "take jax.disable_jit out of train_step: the step must run compiled",
    "never": """train_step never compiled during the grader's steps: do not call it in the
        cell itself, and do all its work inside the jitted function""",
    classify.SHAPE: """each new global shape is a new program on every process: pad to
        max_rows, not to this step's length or a bucket of it""",
    "counter": "leave jax.monitoring, jax.jit and jitlab alone in your cell",
    "python number": """a Python number in the batch (a row count, say) is a static part of
        the program, and it differs between processes: keep the batch all arrays (a mask, or
        the count as a global jax.Array), the same shapes on every process""",
    "late": """the loss is the one the new weights have: return the loss at the w train_step
        was given, computed before the update""",
    "nan loss": """the loss is NaN: a NaN (or inf) in the padding reached it, and a NaN times
        a zero in the mask is still NaN. Pad with zeros, or select the real rows with
        jnp.where before any arithmetic""",
    "mean of means": """the loss is the mean of each process's own mean, which weighs every
        process alike however many real rows it has (a per-process mean, then pmean or a mean
        over processes): divide the sum over every real row of the global batch by their
        number, the sum of the mask""",
    "one row too many": """the numbers are those of a mask that lets one padding row in on
        each process with padding: the real rows are jnp.arange(max_rows) < n, not <= n""",
    "nan": """the loss is right but the new weights are NaN: a NaN (or inf) in the padding
        reaches the gradient, where times a zero weight it is still NaN. Pad with zeros, or
        select with jnp.where before any arithmetic""",
}
HINTS = Hints(CHECKS, MISTAKES)


def learner_source(*functions: Callable[..., Any]) -> str:
    """The text of every cell that defines one of ``functions``, in order: the notebook cell
    ``linecache`` holds, or the exercise file's ``# %%`` cell (never the grader's cell)."""
    texts: dict[tuple[str, int], str] = {}
    for fn in functions:
        code = getattr(inspect.unwrap(fn), "__code__", None)
        lines = linecache.getlines(code.co_filename) if code else []
        if not lines:  # passed by grade, once: show prints no verdict
            expected = "make_global_batch and train_step defined with def in a notebook cell"
            seen = f"no source code for {getattr(fn, '__name__', fn)!r}"
            raise fail(SOURCE, expected=expected, seen=seen, hint=HINTS[SOURCE])
        starts = [i for i, line in enumerate(lines) if line.startswith("# %%")]
        start = max([i for i in starts if i < code.co_firstlineno], default=-1)
        end = min([i for i in starts if i >= code.co_firstlineno], default=len(lines))
        texts.setdefault((code.co_filename, start), "".join(lines[start + 1 : end]))
    return "\n\n".join(texts.values())


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
        """Fresh sizes, ragged in every way the module's docstring lists."""
        top = int(rng.integers(*MAX_ROWS))
        lengths = rng.integers(1, top + 1, size=(processes, STEPS))
        lengths[:, 0] = [top] + [1] * (processes - 1)
        lengths[:, 1] = rng.integers(1, max(1, top // 2) + 1, size=processes)
        lengths[:, 2] = top
        lengths[:, -1] = [top] * (processes - 1) + [int(rng.integers(1, top))]
        seed, features = int(rng.integers(2**31)), int(rng.integers(*FEATURES))
        lr = float(np.round(rng.uniform(0.05, 0.2), 3))
        return cls(seed, features, top, lr, tuple(map(tuple, lengths.tolist())))

    def local(self, process_id: int, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows process ``process_id`` gets at ``step``."""
        rng = np.random.default_rng([self.seed, process_id, step])
        x = rng.normal(size=(self.lengths[process_id][step], self.features)).astype(np.float32)
        true_w = np.random.default_rng(self.seed).normal(size=self.features)
        y = (x @ true_w + 0.3 * rng.normal(size=len(x))).astype(np.float32)
        if (process_id, step) == (0, ZERO_ROW_STEP):
            x[0], y[0] = 0.0, 0.0  # real, though a zero row looks like padding
        return x, y

    def reference(self, extra: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Losses and weights after each step, for one process with every real row, and
        the loss each step's new weights would have on its batch (a loss taken too late).
        ``extra``: zero rows of padding counted as real on each process (a mask's bound
        off by one counts one)."""
        w, losses, weights, late = np.zeros(self.features), [], [], []
        for step in range(STEPS):
            parts = [self._rows(p, step, extra) for p in range(len(self.lengths))]
            x = np.concatenate([a for a, _ in parts]).astype(np.float64)
            err = x @ w - np.concatenate([b for _, b in parts])
            losses.append(np.mean(err**2))
            w = w - self.lr * 2.0 * x.T @ err / len(err)
            weights.append(w)
            late.append(np.mean((x @ w - np.concatenate([b for _, b in parts])) ** 2))
        return np.array(losses), np.array(weights), np.array(late)

    def mean_of_means(self) -> np.ndarray:
        """Each step's loss as the mean over processes of each one's own mean, at the
        reference weights: what a per-process mean averaged over processes gives."""
        losses, w = [], np.zeros(self.features)
        for step, after in enumerate(self.reference()[1]):
            parts = [self.local(p, step) for p in range(len(self.lengths))]
            losses.append(np.mean([np.mean((x @ w - y) ** 2) for x, y in parts]))
            w = after
        return np.array(losses)

    def _rows(self, process_id: int, step: int, extra: int) -> tuple[np.ndarray, np.ndarray]:
        """The real rows, and ``extra`` zero rows of the padding where there is padding."""
        x, y = self.local(process_id, step)
        more = min(extra, self.max_rows - len(y))
        return np.pad(x, ((0, more), (0, 0))), np.pad(y, (0, more))


# --- inside each worker: the first failure is raised, and sent to the notebook ------------
class _Stopped(Exception):
    """Another process failed, and reports why: this one stops quietly."""


def _everyone(failure: GradingFailure | None, *texts: str) -> list[bool]:
    """Whether every process holds the same each of ``texts``; raises ``failure``, or
    :class:`_Stopped` when another failed: all stop at once. Jit on, or it never meets the rest."""
    digest = b"".join(hashlib.sha256(text.encode()).digest()[:8] for text in texts)
    with jax.disable_jit(False):
        mine = np.frombuffer(bytes([failure is None]) + digest, np.uint8)
        everyone = multihost_utils.process_allgather(mine)
    if failure is not None:
        raise failure
    if not everyone[:, 0].all():
        raise _Stopped
    same = (everyone == everyone[0]).all(axis=0)[1:]
    return [bool(same[8 * i : 8 * i + 8].all()) for i in range(len(texts))]


def _attempt(
    grading: Grading, check: str, at: str, fn: Callable[..., Any], *args: Any
) -> tuple[Any, Any]:
    """``(fn(*args), None)``, or ``(None, its failure)`` saying where, in this exercise's words."""
    try:
        return grading.call_learner(check, fn, *args, lesson="processes"), None
    except GradingFailure as failure:
        err, hint = failure.__cause__, failure.hint
        if check == CELL_RUNS or isinstance(err, NameError):
            hint = HINTS[CELL_RUNS]
        elif "Invalid host data" in str(err):
            hint = HINTS[BATCH_RUNS]
        seen = f"{failure.seen} ({at})"
        return None, GradingFailure(check, expected=failure.expected, seen=seen, hint=hint)


def _jit_failure(grading: Grading, moment: str, canary: bool = True) -> GradingFailure | None:
    """Jit off (or, with ``canary``, the counter deaf) here, as ``@grader`` would see it."""
    try:
        if canary or jax.config.jax_disable_jit:
            grading.require_jit_on(moment)
    except GradingFailure as failure:
        return failure
    return None


def _leaf(value: Any) -> str:
    """A leaf's dtype, shape and sharding (or its value), as text."""
    if isinstance(value, jax.Array):
        spec = getattr(value.sharding, "spec", type(value.sharding).__name__)
        return f"{value.dtype}{list(value.shape)} {spec}"
    if isinstance(value, np.ndarray):
        return f"NumPy {value.dtype}{list(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:60]


def _rows(value: Any, max_rows: int) -> bool:
    """Whether ``value`` holds rows: max_rows or more along its first axis."""
    return np.ndim(value) > 0 and np.shape(value)[0] >= max_rows


def _whole(value: Any) -> bool:
    """Whether ``value`` is not split over the processes: replicated, or no jax.Array."""
    return not isinstance(value, jax.Array) or value.sharding.is_fully_replicated


def _to_host(value: Any) -> np.ndarray:
    if not isinstance(value, jax.Array) or value.is_fully_addressable:
        return np.asarray(value)
    if value.is_fully_replicated:  # no collective: the processes need not meet
        return np.asarray(value.addressable_data(0))
    return np.asarray(multihost_utils.process_allgather(value, tiled=True))


def stream(worker: multiprocess.Worker) -> None:
    """The worker's side of grading: judge this process's stream, and hand the first
    failure to the notebook as a ``verdict`` record."""
    try:
        grading = Grading(grader_title("processes"), (JIT_ON, *CHECKS), "processes", HINTS)
        return _judge(grading, worker, Plan(**worker.options["plan"]))  # its lengths as JSON lists
    except _Stopped:
        return None
    except CounterLost as lost:
        expected = "the compile counter to hear JAX in the worker while the steps ran"
        failure = GradingFailure(JIT_ON, expected=expected, seen=str(lost), hint=HINTS["counter"])
    except GradingFailure as err:
        failure = err
    worker.emit("verdict", **vars(failure))  # its check, expected, seen and hint


def _judge(grading: Grading, worker: multiprocess.Worker, plan: Plan) -> None:
    """Every step of this process's stream, checked as it runs; then its compiles, numbers."""
    exec(multiprocess.PRELUDE, ns := {})  # the names the cell starts with, as the exercise says
    cell, failure = _attempt(
        grading, CELL_RUNS, "at import", runpy.run_path, worker.options["learner"], ns
    )
    _everyone(failure or _jit_failure(grading, "in the worker, after your cell ran"))
    make_global_batch, train_step = cell["make_global_batch"], cell["train_step"]
    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
    w = jax.device_put(np.zeros(plan.features, np.float32), NamedSharding(mesh, P()))
    calls, results, shapes = [], [], set()
    with count_compiles(train_step) as count:
        for step in range(STEPS):
            at, x_y = f"at step {step}", plan.local(worker.process_id, step)
            batch, failure = _attempt(
                grading, BATCH_RUNS, at, make_global_batch, *x_y, mesh, plan.max_rows
            )
            leaves, tree = jax.tree.flatten(batch)
            leaves = "; ".join(map(_leaf, leaves))
            off = _jit_failure(grading, f"{at}, when train_step was about to run", canary=False)
            same = _everyone(off or failure, str(tree), leaves)  # the tree holds static values
            seen = shorten(leaves + ("" if same[0] else f" ({tree})"), 150)
            static = any(isinstance(v, int | float) for v in jax.tree.leaves(batch))
            hint = HINTS["python number"] if static else ""  # a static leaf: its value differs
            grading.require(
                SAME_BATCH, all(same), f"the same shapes on every process {at}", seen, hint
            )
            # the arrays of rows (a count may be replicated); the same leaves on every process
            arrays = jax.tree.leaves(batch)
            whole = [_leaf(a) for a in arrays if _rows(a, plan.max_rows) and _whole(a)]
            expected = f"every array of rows split over the processes, P('data') {at}"
            grading.require(SPLIT, not whole, expected, shorten("; ".join(whole), 150))
            args, before = (w, batch, plan.lr), count.compiles
            if step == 0 and hasattr(train_step, "lower"):
                lower = functools.update_wrapper(functools.partial(train_step.lower), train_step)
                lowered, failure = _attempt(
                    grading, STEP_RUNS, at, lower, *args
                )  # a stub names train_step
                text = lowered.as_text() if lowered else ""
                program = hashlib.sha256(text.encode()).hexdigest()[:12]
                same = _everyone(failure, program)[0]
                grading.require(
                    SAME_PROGRAM, same, "one program fingerprint on every process", program
                )
            out, failure = _attempt(grading, STEP_RUNS, at, train_step, *args)
            if failure or not (isinstance(out, tuple | list) and len(out) == 2):
                seen, hint = f"{type(out).__name__} ({at})", HINTS[STEP_RUNS]
                raise failure or fail(STEP_RUNS, expected="(new_w, loss)", seen=seen, hint=hint)
            calls.append(Called(args, {}, count.compiles > before))
            w, loss = out
            shapes.add(leaves)
            on_mesh = isinstance(w, jax.Array) and not w.is_fully_addressable
            results.append((float(np.mean(_to_host(loss))), _to_host(w), on_mesh, type(w)))
            worker.emit("step", step=step, batch=leaves, loss=results[-1][0])
    worker.emit("compiles", compiles=count.compiles)
    _everyone(_jit_failure(grading, "in the worker, after the last step"))
    found = why(calls, train_step, label=lambda i: f"step {i}")
    batches = f"; {len(shapes)} different global batches" * (classify.SHAPE in found.causes)
    hint = HINTS["never" if count.compiles == 0 else classify.SHAPE if batches else ONCE]
    cause = f"; {shorten(found.text, 150)}" if found else ""
    seen = f"{count.compiles} compilations{batches}{cause}"
    expected = f"exactly 1 compilation on each process for {STEPS} ragged steps"
    grading.require(ONCE, count.compiles == 1, expected, seen, hint)
    types = ", ".join(sorted({kind.__name__ for *_, kind in results}))
    expected = "train_step to return the new weights as a jax.Array on the mesh"
    grading.require(GLOBAL_W, all(on_mesh for *_, on_mesh, _ in results), expected, types)
    losses, weights, late = plan.reference()
    one_more = plan.reference(extra=1)[0]  # a mask that lets one padding row in
    averaged = plan.mean_of_means()
    w_names = [f"new_w[{i}]" for i in range(plan.features)]
    for step, (loss, w, *_) in enumerate(results):
        rows = ", ".join(str(p[step]) for p in plan.lengths) + f"; max_rows {plan.max_rows}"
        rows += "; a real row of zeros on process 0" * (step == ZERO_ROW_STEP)
        after = np.isclose(loss, late[step], **TOLERANCE) and not np.isclose(loss, losses[step])
        about, hint = f"step {step} (real rows per process: {rows})", HINTS[NUMBERS]
        hint = HINTS["late"] if after else hint
        nan = np.isnan(np.asarray(w, np.float64)).any() and np.isclose(loss, losses[step])
        hint = HINTS["nan"] if nan else hint
        hint = HINTS["nan loss"] if np.isnan(loss) else hint
        longer = np.isclose(loss, one_more[step], **TOLERANCE) and one_more[step] != losses[step]
        hint = HINTS["one row too many"] if longer and not np.isclose(loss, losses[step]) else hint
        means = np.isclose(loss, averaged[step], **TOLERANCE) and averaged[step] != losses[step]
        hint = HINTS["mean of means"] if means and not np.isclose(loss, losses[step]) else hint
        for got, want, names in ((loss, losses[step], ["loss"]), (w, weights[step], w_names)):
            grading.require_close(
                NUMBERS, got, want, **TOLERANCE, about=about, names=names, hint=hint
            )
    worker.emit("judged")  # every check passed here: silence is never a pass


# --- in the notebook ----------------------------------------------------------------------
def launch(make_global_batch: Callable, train_step: Callable, plan: Plan) -> multiprocess.Run:
    """Run :func:`stream` on two processes with the learner's cell; return the run."""
    with tempfile.TemporaryDirectory(prefix="jitlab-grader-processes-") as scratch:
        path = Path(scratch) / "your_cell.py"  # the prelude apart: the cell's own line numbers
        path.write_text(learner_source(make_global_batch, train_step), encoding="utf-8")
        options = {"learner": str(path), "plan": dataclasses.asdict(plan)}
        try:
            return multiprocess.run(
                f"{__name__}:stream", options=options, timeout=50.0, stall_timeout=15.0
            )
        except multiprocess.LaunchError as err:
            expected = "two JAX processes joined by jax.distributed on 127.0.0.1"
            raise fail(STARTED, expected=expected, seen=str(err), hint=HINTS[STARTED]) from err


def _relay(grading: Grading, run: multiprocess.Run, *checks: str) -> None:
    """Pass ``checks``, or fail the first one a worker failed, in each process's words."""
    verdicts = [(str(w.process_id), r) for w in run.workers for r in w.of("verdict")]
    for check in checks:
        said = {r["seen"]: r for _, r in verdicts if r["check"] == check}
        who = {seen: [p for p, r in verdicts if r["seen"] == seen] for seen in said}
        seen = " | ".join(
            f"process{'es' * (len(p) > 1)} {' and '.join(p)}: {s}" for s, p in who.items()
        )
        first = next(iter(said.values()), {"expected": "", "hint": ""})
        grading.require(check, not said, first["expected"], seen, first["hint"])


def _names_disable_jit(code: Any) -> bool:
    """Whether ``code`` (or a function nested in it) names ``disable_jit``."""
    found = "disable_jit" in code.co_names or "jax_disable_jit" in code.co_consts
    return found or any(_names_disable_jit(c) for c in code.co_consts if inspect.iscode(c))


@grader("processes", checks=CHECKS, hints=HINTS)
def grade(
    grading: Grading, make_global_batch: Callable[..., Any], train_step: Callable[..., Any]
) -> None:
    """Grade the exercise on two processes, one CPU device each."""
    both, kind = callable(make_global_batch) and callable(train_step), type(train_step).__name__
    grading.require(FUNCTIONS, both, "two functions", f"{type(make_global_batch).__name__}, {kind}")
    code = getattr(inspect.unwrap(train_step), "__code__", None)
    off = not is_jitted(train_step) and code is not None and _names_disable_jit(code)
    seen = f"{kind} {getattr(train_step, '__name__', '')}, whose code calls jax.disable_jit: "
    seen += "it switches jit off and runs the step op by op"
    grading.require(JIT_ON, not off, "train_step compiled by jax.jit, with jit switched on", seen)
    grading.require(JITTED, is_jitted(train_step), "a function wrapped by jax.jit", kind)
    run = launch(make_global_batch, train_step, Plan.draw(grading.rng))
    grading.passed(SOURCE)
    grading.passed(STARTED)
    _relay(grading, run, JIT_ON, CELL_RUNS, BATCH_RUNS, STEP_RUNS, SAME_BATCH, SPLIT, SAME_PROGRAM)
    states = "; ".join(f"process {w.process_id}: {w.status()}" for w in run.workers)
    stopped = f" ({run.stopped} after {run.quiet_seconds:.0f} s)" if run.stopped else ""
    said = any(w.of("verdict") for w in run.workers)  # a failure stops the others quietly
    silent = [str(w.process_id) for w in run.workers if not said and not w.of("judged")]
    if run.ok and silent:  # exited normally, but never said how its checks went
        expected = "each process to report its checks, passed or failed"
        states = f"process {' and '.join(silent)} ended without reporting its checks"
    else:
        expected = "both processes exit normally"
    grading.require(FINISHED, run.ok and not silent, expected, states + stopped)
    _relay(grading, run, ONCE, GLOBAL_W, NUMBERS)


def show(make_global_batch: Callable[..., Any], train_step: Callable[..., Any]) -> None:
    """Run the learner's functions on two processes as the grader does, and print what
    each process built, compiled and computed, without judging."""
    plan = Plan.draw(np.random.default_rng())
    run = launch(make_global_batch, train_step, plan)
    print(f"max_rows {plan.max_rows}; real rows at each step, per process: {plan.lengths}")
    keys = ("process_id", "step", "batch", "loss")
    print_table({k: r[k] for k in keys} for w in run.workers for r in w.of("step"))
    for worker in run.workers:
        counted = worker.of("compiles")
        said = [f"{counted[0]['compiles']} compilation(s)" if counted else worker.status()]
        said += [f"stopped: {record['seen']}" for record in worker.of("verdict")]
        print(f"process {worker.process_id}: " + "; ".join(said))


__all__ = ["Plan", "grade", "launch", "learner_source", "show", "stream"]
