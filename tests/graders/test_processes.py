"""The many-processes grader passes right answers and names the mistake in wrong ones;
each answer is a cell file (``multiprocess.PRELUDE`` and its source), as a notebook's."""

from __future__ import annotations

import contextlib
import operator
import runpy
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from exercise_cells import namespace
from tables import fails, passes

from jitlab.graders import processes
from jitlab.graders.processes import (
    BATCH_RUNS,
    JITTED,
    NUMBERS,
    ONCE,
    SAME_BATCH,
    SAME_PROGRAM,
    SPLIT,
)
from jitlab.grading import JIT_ON
from jitlab.instruments import multiprocess

pair = operator.itemgetter("make_global_batch", "train_step")


def cell(tmp_path: Path, *sources: str) -> tuple:
    """The two functions from a cell file of ``sources``, or from the exercise's stubs."""
    path = tmp_path / "cell.py"
    path.write_text("\n\n".join([multiprocess.PRELUDE, *map(textwrap.dedent, sources)]))
    return pair(runpy.run_path(str(path)) if sources else namespace("processes", learner_copy=True))


PADDED = """
def make_global_batch(x, y, mesh, max_rows):
    n = len(y)
    mask = (np.arange(max_rows) < n).astype(np.float32)
    x = np.pad(x, ((0, max_rows - n), (0, 0)))
    y = np.pad(y, (0, max_rows - n))
    rows = NamedSharding(mesh, P("data"))
    total = max_rows * jax.process_count()
    return {
        "x": jax.make_array_from_process_local_data(rows, x, (total, x.shape[1])),
        "y": jax.make_array_from_process_local_data(rows, y, (total,)),
        "mask": jax.make_array_from_process_local_data(rows, mask, (total,)),
    }
"""
MASKED = """
@jax.jit
def train_step(w, batch, lr):
    def loss_of(w):
        err = (batch["x"] @ w - batch["y"]) * batch["mask"]
        return jnp.sum(err**2) / jnp.sum(batch["mask"])

    loss, grad = jax.value_and_grad(loss_of)(w)
    return w - lr * grad, loss
"""
UNMASKED = """
@jax.jit
def train_step(w, batch, lr):
    x, y = batch[0], batch[1]
    err = x @ w - y
    return w - lr * 2.0 * (x.T @ err) / y.shape[0], jnp.mean(err**2)
"""


def with_lines(source: str, lines: str) -> str:
    """``source`` with ``lines`` added to make_global_batch after ``n = len(y)``."""
    return source.replace("n = len(y)\n", "n = len(y)\n" + textwrap.indent(lines.lstrip(), "    "))


def padded_step(real: str, loss: str = "jnp.sum(err**2) / real") -> str:
    return f"""
@jax.jit
def train_step(w, batch, lr):
    err = (batch["x"] @ w - batch["y"]) * batch["mask"]
    real = {real}
    return w - lr * 2.0 * (batch["x"].T @ err) / real, {loss}
"""


# Float weights instead of a mask, a tuple, jnp.where, a gradient written by hand, global
# arrays from the single-device shard, and train_step = jax.jit(...).
TUPLE_OF_WEIGHTS = """
def _pad(a, rows):
    out = np.zeros((rows, *a.shape[1:]), np.float32)
    out[: len(a)] = a
    return out

def make_global_batch(x, y, mesh, max_rows):
    (device,) = jax.local_devices()
    parts = [_pad(x, max_rows), _pad(y, max_rows), _pad(np.ones(len(y), np.float32), max_rows)]
    total = max_rows * jax.process_count()
    return tuple(
        jax.make_array_from_single_device_arrays(
            (total, *a.shape[1:]), NamedSharding(mesh, P("data")), [jax.device_put(a, device)]
        )
        for a in parts
    )

def _step(w, batch, lr):
    x, y, weight = batch
    err = jnp.where(weight > 0, x @ w - y, 0.0)
    real = weight.sum()
    return w - lr * 2.0 * (x.T @ err) / real, jnp.sum(err * err) / real

train_step = jax.jit(_step)
"""


def test_solution_passes_on_one_device_per_process_and_show_judges_nothing(capsys, monkeypatch):
    # One CPU device per process, as the exercise states, even with eight in the notebook.
    runs = []
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8", prepend=" ")
    launch = processes.launch
    monkeypatch.setattr(processes, "launch", lambda *a: runs.append(launch(*a)) or runs[-1])
    functions = pair(namespace("processes"))
    passes(processes.grade, *functions)  # which reports every declared check
    ready = [w.one("ready") for w in runs[0].workers]
    assert [(r["local_devices"], r["devices"]) for r in ready] == [(1, 2), (1, 2)]
    # From the exercise file itself, only the functions' cell: not the setup or grader cell.
    source = processes.learner_source(*functions)
    assert source.count("def make_global_batch(") == 1 and "def train_step(" in source
    assert "example_x" not in source and "processes.grade(" not in source
    processes.show(*functions)
    out = capsys.readouterr().out
    assert "process 0: 1 compilation(s)" in out and "process 1: 1 compilation(s)" in out
    assert "✓" not in out  # no verdict


def test_weights_in_a_tuple_and_jit_applied_by_assignment_pass(tmp_path):
    passes(processes.grade, *cell(tmp_path, TUPLE_OF_WEIGHTS))


# The count of real rows as a replicated global scalar beside the split rows: not a row array.
COUNTED = """
def make_global_batch(x, y, mesh, max_rows):
    from jax.experimental import multihost_utils

    real = multihost_utils.process_allgather(np.array([len(y)], np.float32)).sum()
    batch = _padded(x, y, mesh, max_rows)
    batch["real"] = jax.device_put(np.float32(real), NamedSharding(mesh, P()))
    return batch

@jax.jit
def train_step(w, batch, lr):
    err = (batch["x"] @ w - batch["y"]) * batch["mask"]
    real = batch["real"]
    return w - lr * 2.0 * (batch["x"].T @ err) / real, jnp.sum(err**2) / real
"""


def test_a_replicated_count_beside_the_rows_passes(tmp_path):
    passes(
        processes.grade, *cell(tmp_path, PADDED.replace("make_global_batch", "_padded"), COUNTED)
    )


@pytest.mark.parametrize("seed", range(3))
def test_every_plan_draws_what_breaks_each_wrong_rule(seed):
    plan = processes.Plan.draw(np.random.default_rng(seed))
    first, small, full, *_, last = zip(*plan.lengths, strict=True)
    assert first == (plan.max_rows, 1) and max(small) <= plan.max_rows // 2
    assert full == (plan.max_rows, plan.max_rows) and min(last) < plan.max_rows
    x, y = plan.local(0, processes.ZERO_ROW_STEP)
    assert not x[0].any() and y[0] == 0 and len(y) >= 1  # a real row of zeros


STATIC_LENGTH = """
import dataclasses

@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["x", "y", "mask"], meta_fields=["n"]
)
@dataclasses.dataclass
class Batch:
    x: jax.Array
    y: jax.Array
    mask: jax.Array
    n: int

def make_global_batch(x, y, mesh, max_rows):
    from jax.experimental import multihost_utils

    real = int(multihost_utils.process_allgather(np.array([len(y)])).sum())
    b = _padded(x, y, mesh, max_rows)
    return Batch(b["x"], b["y"], b["mask"], real)

@jax.jit
def train_step(w, batch, lr):
    err = (batch.x @ w - batch.y) * batch.mask
    return w - lr * 2.0 * (batch.x.T @ err) / batch.n, jnp.sum(err**2) / batch.n
"""
BUCKETS = """
def make_global_batch(x, y, mesh, max_rows):
    from jax.experimental import multihost_utils

    n = len(y)
    longest = int(multihost_utils.process_allgather(np.array([n])).max()) if AGREED else n
    bucket = 1 << (longest - 1).bit_length()
    mask = (np.arange(bucket) < n).astype(np.float32)
    x = np.pad(x, ((0, bucket - n), (0, 0)))
    y = np.pad(y, (0, bucket - n))
    rows = NamedSharding(mesh, P("data"))
    shape = (bucket * jax.process_count(),) if AGREED else None
    return {
        k: jax.make_array_from_process_local_data(rows, v, shape and (*shape, *v.shape[1:]))
        for k, v in {"x": x, "y": y, "mask": mask}.items()
    }
"""
DECOY = """
_called = []

def train_step(w, batch, lr):
    from jax.experimental import multihost_utils

    if not _called:
        _called.append(_jitted_step(w, batch, lr))
    x, y, mask = (np.asarray(multihost_utils.process_allgather(batch[k], tiled=True))
                  for k in ("x", "y", "mask"))
    w = np.asarray(w.addressable_data(0))
    err = (x @ w - y) * mask
    return w - lr * 2.0 * (x.T @ err) / mask.sum(), np.sum(err**2) / mask.sum()
"""
JITTED_COPY = MASKED.replace("def train_step(", "def _jitted_step(")
OFF_AT_ONE_STEP = """
_calls.append(n)
if _open:
    _open.pop().__exit__(None, None, None)
if len(_calls) == 4 and jax.process_index() == 1:
    _open.append(jax.disable_jit())
    _open[-1].__enter__()
"""
STUB_STEP = "@jax.jit\ndef train_step(w, batch, lr):\n    raise NotImplementedError\n"
HARD_CODED = """
@jax.jit
def train_step(w, batch, lr):
    return w * 0.0 + 0.5, jnp.float32(1.25) + 0.0 * jnp.sum(batch['x'])
"""
UNDER_DISABLE_JIT = """
def train_step(w, batch, lr):
    with jax.disable_jit():
        return _jitted_step(w, batch, lr)
"""
EMPTY_LISTENERS = """
if jax.process_count() > 1:
    from jax._src import monitoring
    monitoring._event_duration_secs_listeners.clear()
"""
MEAN_OVER_PADDING = padded_step("err.shape[0]", "jnp.mean(err**2)")
NEW_W = 'w - lr * 2.0 * (batch["x"].T @ err) / real'
LATE_LOSS = padded_step('jnp.sum(batch["mask"])', f'jnp.sum(((batch["x"] @ ({NEW_W}) - batch["y"])'
                        ' * batch["mask"]) ** 2) / real')  # fmt: skip
NAN_PADDED = PADDED.replace("n))\n", "n), constant_values=np.nan)\n")  # the loss skips it
NAN_STEP = padded_step('jnp.sum(batch["mask"])', "jnp.nansum(err**2) / real")
# One process's rows as the whole batch, "replicated": the shapes agree, each process sees its own
REPLICATED = PADDED.replace('P("data")', "P()").replace(
    "max_rows * jax.process_count()", "max_rows"
)
MEAN_OF_MEANS = """
@jax.jit
def train_step(w, batch, lr):
    def loss_of(w):  # each process's own mean, then their mean
        err = ((batch["x"] @ w - batch["y"]) * batch["mask"]).reshape(jax.process_count(), -1)
        real = batch["mask"].reshape(jax.process_count(), -1).sum(axis=1)
        return jnp.mean(jnp.sum(err**2, axis=1) / real)

    loss, grad = jax.value_and_grad(loss_of)(w)
    return w - lr * grad, loss
"""
LONG_MASK = PADDED.replace("np.arange(max_rows) < n", "np.arange(max_rows) <= n")
PER_PROCESS = padded_step('jnp.sum(batch["mask"]) + jax.process_index()')
ZEROS_AS_PADDING = padded_step('jnp.sum(jnp.any(batch["x"] != 0, axis=1))')
UNJITTED = padded_step('jnp.sum(batch["mask"])').replace("@jax.jit\n", "")
UNPADDED = """
def make_global_batch(x, y, mesh, max_rows):
    rows = NamedSharding(mesh, P("data"))
    total = max_rows * jax.process_count() if DECLARED else None
    return (
        jax.make_array_from_process_local_data(rows, x, total and (total, x.shape[1])),
        jax.make_array_from_process_local_data(rows, y, total and (total,)),
    )
"""


def wrong(check: str, words: str | tuple[str, ...], *sources: str) -> tuple:
    """A row of WRONG: the check the answer fails, words its verdict holds, its cell."""
    return check, words, sources


INFERRED, DECLARED = [(f"DECLARED = {d}", UNPADDED, UNMASKED) for d in (False, True)]
JIT_OFF_IN_WORKERS = with_lines(PADDED, 'jax.config.update("jax_disable_jit", True)\n'), MASKED
JIT_OFF_AT_ONE_STEP = "_calls, _open = [], []", with_lines(PADDED, OFF_AT_ONE_STEP), MASKED
OTHER_CELLS = PADDED.replace("n = len(y)", "n = min(len(y), MAX_ROWS)"), MASKED
WRONG = {  # the stub's cell is the exercise's
    "the stub": wrong(BATCH_RUNS, ("not solved yet", "`jitlab hint processes`")),
    "a stub train_step": wrong(processes.STEP_RUNS, "train_step to return", PADDED, STUB_STEP),
    # No padding: the global shape is inferred from each process's rows.
    "the global shape inferred per process": wrong(
        SAME_BATCH, ("at step 0", "process 0:", "process 1:", "max_rows"), *INFERRED
    ),
    # Declared but not padded: make_array_from_process_local_data raises on process 1.
    "the global shape declared but not padded": wrong(
        BATCH_RUNS, ("process 1: ValueError: Invalid host", "pad x and y to max_rows"), *DECLARED
    ),
    "a bucket per local length": wrong(SAME_BATCH, (), "AGREED = False", BUCKETS, MASKED),
    "buckets agreed across processes": wrong(
        ONCE, ("different global batches", "pad to max_rows"), "AGREED = True", BUCKETS, MASKED
    ),
    "a static length": wrong(
        ONCE, "a static value did", PADDED.replace("make_global_batch", "_padded"), STATIC_LENGTH
    ),
    "a static value that differs between processes": wrong(
        SAME_PROGRAM, "static differs between processes", PADDED, PER_PROCESS
    ),
    "a batch replicated with P()": wrong(
        SPLIT, ("P()", "at step 0", "replicated"), REPLICATED, MASKED
    ),
    "a mean of each process's mean": wrong(
        NUMBERS, ("for step 0", "mean of each process's own mean"), PADDED, MEAN_OF_MEANS
    ),
    "the mean over the padding": wrong(NUMBERS, "sum of the mask", PADDED, MEAN_OVER_PADDING),
    "the loss after the update": wrong(NUMBERS, "the loss is the one the new", PADDED, LATE_LOSS),
    "NaN in the padding": wrong(NUMBERS, "new weights are NaN", NAN_PADDED, NAN_STEP),
    "NaN padding times the mask": wrong(NUMBERS, ("loss is NaN", "jnp.where"), NAN_PADDED, MASKED),
    "a mask one row too long": wrong(NUMBERS, ("one padding row", "not <= n"), LONG_MASK, MASKED),
    # No mask used: a row of zeros taken for padding. The real one at step 3 counts.
    "padding told apart by its zeros": wrong(
        NUMBERS, ("for step 3", "a real row of zeros"), PADDED, ZEROS_AS_PADDING
    ),
    "hard-coded numbers": wrong(NUMBERS, (), PADDED, HARD_CODED),
    "work outside jit": wrong(JITTED, (), PADDED, UNJITTED),
    "a decoy call to a jitted function": wrong(JITTED, (), PADDED, JITTED_COPY, DECOY),
    "a train_step that runs under disable_jit": wrong(
        JIT_ON, ("switches jit off", "disable_jit"), PADDED, JITTED_COPY, UNDER_DISABLE_JIT
    ),
    # In the workers at every step; in the notebook only later.
    "jit disabled in the workers": wrong(
        JIT_ON, ("jit is switched off", "at step 0", "jax_disable_jit"), *JIT_OFF_IN_WORKERS
    ),
    # Process 1 runs step 3 op by op: one compilation each, the right numbers; the
    # processes stop together, and the verdict names the process and the step.
    "jit disabled on one process at one step": wrong(
        JIT_ON, ("at step 3,", "process 1: jit is switched off"), *JIT_OFF_AT_ONE_STEP
    ),
    # Only in the workers, where the notebook's canary cannot see.
    "monitoring listeners emptied in the workers": wrong(
        JIT_ON, "monitoring listeners were removed", with_lines(PADDED, EMPTY_LISTENERS), MASKED
    ),
    # MAX_ROWS was defined in another cell of the notebook: the workers never see it.
    "a cell that uses the notebook's variables": wrong(
        BATCH_RUNS, ("NameError", "MAX_ROWS", "keep everything the functions need"), *OTHER_CELLS
    ),
}


@pytest.mark.parametrize("name", WRONG)
def test_wrong_answer_fails(name, tmp_path):
    check, words, sources = WRONG[name]
    fails(processes.grade, *cell(tmp_path, *sources), check=check, words=words)


@pytest.mark.parametrize("switch", ["context", "config"])
def test_jit_disabled_in_the_notebook_fails(switch, tmp_path):
    functions = cell(tmp_path, PADDED, MASKED)
    jax.config.update("jax_disable_jit", switch == "config")
    try:
        with jax.disable_jit() if switch == "context" else contextlib.nullcontext():
            fails(processes.grade, *functions, check=JIT_ON, words="jit is switched off")
    finally:
        jax.config.update("jax_disable_jit", False)
