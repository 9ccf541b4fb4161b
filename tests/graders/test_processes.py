"""The many-processes grader passes right answers and names the mistake in wrong ones.

The grader copies the cell that defines the learner's functions into two worker
processes. Here each answer is a "cell" of its own: a file holding
``multiprocess.PRELUDE`` and the answer's source, imported so that the functions come
from that file (as from a notebook cell). Every grading run starts two JAX processes.
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import jax
import jupytext
import pytest

from jitlab.graders import processes
from jitlab.grading import JIT_ON, GradingFailure
from jitlab.instruments import multiprocess

ROOT = Path(__file__).resolve().parents[2]


def cell(tmp_path: Path, *sources: str):
    """``make_global_batch`` and ``train_step`` from a cell holding the ``sources``."""
    source = "\n\n".join(textwrap.dedent(part) for part in sources)
    path = tmp_path / f"cell_{abs(hash(source))}.py"
    path.write_text(multiprocess.PRELUDE + "\n\n" + source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_global_batch, module.train_step


def exercise_cell(tmp_path: Path, path: Path):
    (source,) = [
        c.source
        for c in jupytext.read(path).cells
        if c.cell_type == "code" and "def make_global_batch(" in c.source
    ]
    return cell(tmp_path, source)


PADDED_BATCH = """
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

MASKED_STEP = """
@jax.jit
def train_step(w, batch, lr):
    def loss_of(w):
        err = (batch["x"] @ w - batch["y"]) * batch["mask"]
        return jnp.sum(err**2) / jnp.sum(batch["mask"])

    loss, grad = jax.value_and_grad(loss_of)(w)
    return w - lr * grad, loss
"""

UNMASKED_STEP = """
@jax.jit
def train_step(w, batch, lr):
    x, y = batch[0], batch[1]
    err = x @ w - y
    return w - lr * 2.0 * (x.T @ err) / y.shape[0], jnp.mean(err**2)
"""


# --- answers that should pass ------------------------------------------------------------


def test_solution_passes(tmp_path, capsys):
    processes.grade(*exercise_cell(tmp_path, ROOT / "solutions" / "14_processes.py"))
    out = capsys.readouterr().out
    assert "All checks passed" in out
    assert all(f"✓ {check}" in out for check in processes.grade.checks)


def test_weights_in_a_tuple_and_jit_applied_by_assignment_pass(tmp_path):
    # Solved differently: float weights instead of a mask, a tuple instead of a dict,
    # jnp.where, a gradient written by hand, global arrays put together from the
    # single-device shard, and train_step = jax.jit(...) at the bottom of the cell.
    make_global_batch, train_step = cell(
        tmp_path,
        """
        def _pad(a, rows):
            out = np.zeros((rows, *a.shape[1:]), np.float32)
            out[: len(a)] = a
            return out

        def make_global_batch(x, y, mesh, max_rows):
            weight = _pad(np.ones(len(y), np.float32), max_rows)
            parts = (_pad(x, max_rows), _pad(y, max_rows), weight)
            (device,) = jax.local_devices()
            out = []
            for part in parts:
                shape = (max_rows * jax.process_count(), *part.shape[1:])
                out.append(
                    jax.make_array_from_single_device_arrays(
                        shape,
                        NamedSharding(mesh, P("data")),
                        [jax.device_put(part, device)],
                    )
                )
            return tuple(out)

        def _step(w, batch, lr):
            x, y, weight = batch
            err = jnp.where(weight > 0, x @ w - y, 0.0)
            real = weight.sum()
            grad = 2.0 * (x.T @ err) / real
            return w - lr * grad, jnp.sum(err * err) / real

        train_step = jax.jit(_step)
        """,
    )
    processes.grade(make_global_batch, train_step)


# --- wrong answers -----------------------------------------------------------------------


def test_rejects_unsolved_stub(tmp_path):
    with pytest.raises(GradingFailure, match="make_global_batch runs in every process") as info:
        processes.grade(*exercise_cell(tmp_path, ROOT / "exercises" / "14_processes.py"))
    assert "not solved yet" in info.value.seen
    assert "`jitlab hint processes`" in info.value.hint


def test_rejects_the_global_shape_inferred_per_process(tmp_path):
    # No padding: make_array_from_process_local_data infers the global shape from this
    # process's rows, so the processes build different batches at the first step.
    make_global_batch, train_step = cell(
        tmp_path,
        """
        def make_global_batch(x, y, mesh, max_rows):
            rows = NamedSharding(mesh, P("data"))
            return (
                jax.make_array_from_process_local_data(rows, x),
                jax.make_array_from_process_local_data(rows, y),
            )
        """,
        UNMASKED_STEP,
    )
    with pytest.raises(GradingFailure, match="same global batch shapes") as info:
        processes.grade(make_global_batch, train_step)
    assert "step 0" in info.value.expected
    assert "process 0" in info.value.seen and "process 1" in info.value.seen
    assert "max_rows" in info.value.hint


def test_rejects_the_global_shape_declared_but_not_padded(tmp_path):
    # The global shape is stated, but the ragged process's rows do not fill its share:
    # make_array_from_process_local_data raises on that process only.
    make_global_batch, train_step = cell(
        tmp_path,
        """
        def make_global_batch(x, y, mesh, max_rows):
            rows = NamedSharding(mesh, P("data"))
            total = max_rows * jax.process_count()
            return (
                jax.make_array_from_process_local_data(rows, x, (total, x.shape[1])),
                jax.make_array_from_process_local_data(rows, y, (total,)),
            )
        """,
        UNMASKED_STEP,
    )
    with pytest.raises(GradingFailure, match="make_global_batch runs") as info:
        processes.grade(make_global_batch, train_step)
    assert "Invalid host data" in info.value.seen and "process 1" in info.value.seen
    assert "pad x and y to max_rows" in info.value.hint


def test_rejects_a_bucket_per_local_length(tmp_path):
    # Powers of two, chosen by each process from its own rows: the processes pick
    # different buckets at the first step.
    make_global_batch, train_step = cell(
        tmp_path,
        """
        def make_global_batch(x, y, mesh, max_rows):
            n = len(y)
            bucket = 1 << (n - 1).bit_length()
            mask = (np.arange(bucket) < n).astype(np.float32)
            x = np.pad(x, ((0, bucket - n), (0, 0)))
            y = np.pad(y, (0, bucket - n))
            rows = NamedSharding(mesh, P("data"))
            return {
                k: jax.make_array_from_process_local_data(rows, v)
                for k, v in {"x": x, "y": y, "mask": mask}.items()
            }
        """,
        MASKED_STEP,
    )
    with pytest.raises(GradingFailure, match="same global batch shapes"):
        processes.grade(make_global_batch, train_step)


def test_rejects_buckets_agreed_across_processes(tmp_path):
    # Both processes agree on the bucket (the largest length of the step, as a power of
    # two), so they stay in step, but each bucket is a compilation.
    make_global_batch, train_step = cell(
        tmp_path,
        """
        def make_global_batch(x, y, mesh, max_rows):
            from jax.experimental import multihost_utils

            lengths = multihost_utils.process_allgather(np.array([len(y)]))
            bucket = 1 << (int(lengths.max()) - 1).bit_length()
            n = len(y)
            mask = (np.arange(bucket) < n).astype(np.float32)
            x = np.pad(x, ((0, bucket - n), (0, 0)))
            y = np.pad(y, (0, bucket - n))
            rows = NamedSharding(mesh, P("data"))
            total = bucket * jax.process_count()
            return {
                k: jax.make_array_from_process_local_data(rows, v, (total, *v.shape[1:]))
                for k, v in {"x": x, "y": y, "mask": mask}.items()
            }
        """,
        MASKED_STEP,
    )
    with pytest.raises(GradingFailure, match="compiles exactly once") as info:
        processes.grade(make_global_batch, train_step)
    assert "different global batches" in info.value.seen
    assert "pad to max_rows" in info.value.hint


def test_rejects_a_static_length(tmp_path):
    # Padded to max_rows, but the number of real rows travels as pytree metadata
    # (static): one compilation per distinct total.
    make_global_batch, train_step = cell(
        tmp_path,
        """
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
            n = len(y)
            mask = (np.arange(max_rows) < n).astype(np.float32)
            x = np.pad(x, ((0, max_rows - n), (0, 0)))
            y = np.pad(y, (0, max_rows - n))
            rows = NamedSharding(mesh, P("data"))
            total = max_rows * jax.process_count()
            return Batch(
                jax.make_array_from_process_local_data(rows, x, (total, x.shape[1])),
                jax.make_array_from_process_local_data(rows, y, (total,)),
                jax.make_array_from_process_local_data(rows, mask, (total,)),
                real,
            )

        @jax.jit
        def train_step(w, batch, lr):
            err = (batch.x @ w - batch.y) * batch.mask
            return w - lr * 2.0 * (batch.x.T @ err) / batch.n, jnp.sum(err**2) / batch.n
        """,
    )
    with pytest.raises(GradingFailure, match="compiles exactly once") as info:
        processes.grade(make_global_batch, train_step)
    assert "a static value did" in info.value.hint


def test_rejects_a_static_value_that_differs_between_processes(tmp_path):
    # The same shapes everywhere, but each process bakes its own index into the program.
    make_global_batch, train_step = cell(
        tmp_path,
        PADDED_BATCH,
        """
        @jax.jit
        def train_step(w, batch, lr):
            err = (batch["x"] @ w - batch["y"]) * batch["mask"]
            real = jnp.sum(batch["mask"]) + jax.process_index()  # baked in at trace time
            return w - lr * 2.0 * (batch["x"].T @ err) / real, jnp.sum(err**2) / real
        """,
    )
    with pytest.raises(GradingFailure, match="compiles the same program") as info:
        processes.grade(make_global_batch, train_step)
    assert "static differs between processes" in info.value.hint


def test_rejects_the_mean_over_the_padding(tmp_path):
    # Padded and masked, but divided by the padded number of rows.
    make_global_batch, train_step = cell(
        tmp_path,
        PADDED_BATCH,
        """
        @jax.jit
        def train_step(w, batch, lr):
            err = (batch["x"] @ w - batch["y"]) * batch["mask"]
            return w - lr * 2.0 * (batch["x"].T @ err) / err.shape[0], jnp.mean(err**2)
        """,
    )
    with pytest.raises(GradingFailure, match="match one process") as info:
        processes.grade(make_global_batch, train_step)
    assert "sum of the mask" in info.value.hint


def test_rejects_hard_coded_numbers(tmp_path):
    # Returns the weights and loss it once saw: right shapes, wrong numbers.
    make_global_batch, train_step = cell(
        tmp_path,
        PADDED_BATCH,
        """
        @jax.jit
        def train_step(w, batch, lr):
            return w * 0.0 + 0.5, jnp.float32(1.25) + 0.0 * jnp.sum(batch["x"])
        """,
    )
    with pytest.raises(GradingFailure, match="match one process"):
        processes.grade(make_global_batch, train_step)


def test_rejects_work_outside_jit(tmp_path):
    # Correct numbers, computed op by op on the global arrays: no jitted step at all.
    make_global_batch, train_step = cell(
        tmp_path,
        PADDED_BATCH,
        """
        def train_step(w, batch, lr):
            err = (batch["x"] @ w - batch["y"]) * batch["mask"]
            real = jnp.sum(batch["mask"])
            return w - lr * 2.0 * (batch["x"].T @ err) / real, jnp.sum(err**2) / real
        """,
    )
    with pytest.raises(GradingFailure, match="compiled with jax.jit"):
        processes.grade(make_global_batch, train_step)


def test_rejects_a_decoy_call_to_a_jitted_function(tmp_path):
    # One call to a jitted function (one compilation), the real work in NumPy.
    make_global_batch, train_step = cell(
        tmp_path,
        PADDED_BATCH,
        MASKED_STEP.replace("def train_step(", "def _decoy("),
        """
        _called = []

        def train_step(w, batch, lr):
            from jax.experimental import multihost_utils

            if not _called:
                _called.append(_decoy(w, batch, lr))
            x, y, mask = (np.asarray(multihost_utils.process_allgather(batch[k], tiled=True))
                          for k in ("x", "y", "mask"))
            w = np.asarray(w.addressable_data(0))
            err = (x @ w - y) * mask
            return w - lr * 2.0 * (x.T @ err) / mask.sum(), np.sum(err**2) / mask.sum()
        """,
    )
    with pytest.raises(GradingFailure, match="compiled with jax.jit"):
        processes.grade(make_global_batch, train_step)


def test_rejects_jit_disabled_in_the_notebook(tmp_path):
    make_global_batch, train_step = cell(tmp_path, PADDED_BATCH, MASKED_STEP)
    with jax.disable_jit(), pytest.raises(GradingFailure, match=JIT_ON) as info:
        processes.grade(make_global_batch, train_step)
    assert "jit is switched off" in info.value.seen


def test_rejects_jit_disabled_by_config_in_the_notebook(tmp_path):
    make_global_batch, train_step = cell(tmp_path, PADDED_BATCH, MASKED_STEP)
    jax.config.update("jax_disable_jit", True)
    try:
        with pytest.raises(GradingFailure, match=JIT_ON) as info:
            processes.grade(make_global_batch, train_step)
    finally:
        jax.config.update("jax_disable_jit", False)
    assert "jit is switched off" in info.value.seen


def test_rejects_a_train_step_that_runs_under_disable_jit(tmp_path):
    # A Python train_step that calls a jitted step inside `with jax.disable_jit():`.
    make_global_batch, train_step = cell(
        tmp_path,
        PADDED_BATCH,
        MASKED_STEP.replace("def train_step(", "def _jitted_step("),
        """
        def train_step(w, batch, lr):
            with jax.disable_jit():
                return _jitted_step(w, batch, lr)
        """,
    )
    with pytest.raises(GradingFailure, match=JIT_ON) as info:
        processes.grade(make_global_batch, train_step)
    assert "switches jit off" in info.value.seen
    assert "disable_jit" in info.value.hint


def test_rejects_jit_disabled_in_the_workers(tmp_path):
    # The cell switches jit off when it runs: in the notebook only later, in the workers
    # for every step (the config update is inside make_global_batch).
    make_global_batch, train_step = cell(
        tmp_path,
        PADDED_BATCH.replace(
            "    n = len(y)\n", '    n = len(y)\n    jax.config.update("jax_disable_jit", True)\n'
        ),
        MASKED_STEP,
    )
    with pytest.raises(GradingFailure, match=JIT_ON) as info:
        processes.grade(make_global_batch, train_step)
    assert "jit is switched off" in info.value.seen and "at step 0" in info.value.seen
    assert "jax_disable_jit" in info.value.hint


def test_rejects_jit_disabled_on_one_process_at_one_step(tmp_path):
    # Process 1 leaves a jax.disable_jit() context open at step 3 only and closes it at
    # the next call: one compilation per process, and the numbers still match, but step
    # 3 ran op by op there. The processes stop together: no hang, and the verdict names
    # the process and the step.
    make_global_batch, train_step = cell(
        tmp_path,
        """
        _calls = []
        _open = []
        """,
        PADDED_BATCH.replace(
            "    n = len(y)\n",
            "    n = len(y)\n"
            "    _calls.append(n)\n"
            "    if _open:\n"
            "        _open.pop().__exit__(None, None, None)\n"
            "    if len(_calls) == 4 and jax.process_index() == 1:\n"
            "        _open.append(jax.disable_jit())\n"
            "        _open[-1].__enter__()\n",
        ),
        MASKED_STEP,
    )
    with pytest.raises(GradingFailure, match=JIT_ON) as info:
        processes.grade(make_global_batch, train_step)
    assert "(process 1, at step 3," in info.value.seen
    assert "jit is switched off" in info.value.seen


def test_rejects_monitoring_listeners_emptied_in_the_workers(tmp_path):
    # Only in the workers (more than one process), while the steps run: the notebook's
    # canary cannot see it; the workers' counter and canary do.
    make_global_batch, train_step = cell(
        tmp_path,
        PADDED_BATCH.replace(
            "    n = len(y)\n",
            "    n = len(y)\n"
            "    if jax.process_count() > 1:\n"
            "        from jax._src import monitoring\n"
            "\n"
            "        monitoring._event_duration_secs_listeners.clear()\n",
        ),
        MASKED_STEP,
    )
    with pytest.raises(GradingFailure, match=JIT_ON) as info:
        processes.grade(make_global_batch, train_step)
    assert "monitoring listeners were removed" in info.value.seen


def test_rejects_a_cell_that_uses_the_notebooks_variables(tmp_path):
    # MAX_ROWS was defined in another cell of the notebook: the workers never see it.
    source = PADDED_BATCH.replace("    n = len(y)\n", "    n = min(len(y), MAX_ROWS)\n")
    make_global_batch, train_step = cell(tmp_path, source, MASKED_STEP)
    with pytest.raises(GradingFailure, match="make_global_batch runs") as info:
        processes.grade(make_global_batch, train_step)
    assert "NameError" in info.value.seen and "MAX_ROWS" in info.value.seen
    assert "keep everything the functions need" in info.value.hint


def test_show_prints_each_process_without_judging(tmp_path, capsys):
    processes.show(*exercise_cell(tmp_path, ROOT / "solutions" / "14_processes.py"))
    out = capsys.readouterr().out
    assert "process 0: 1 compilation(s)" in out and "process 1: 1 compilation(s)" in out
    assert "✓" not in out  # no verdict


def test_from_a_percent_format_file_only_the_functions_cell_is_copied(tmp_path):
    # Run as a script, or cell by cell from an editor, the functions come from the
    # exercise file itself: the grader cell must not run in the workers.
    path = tmp_path / "exercise.py"
    path.write_text(
        "# %%\nimport jax\n\nSETUP = 1\n\n# %%\n"
        + textwrap.dedent(PADDED_BATCH)
        + textwrap.dedent(MASKED_STEP).replace("\n\n", "\n")
        + '\n# %% tags=["grader"]\nprint("the grader cell")\n'
    )
    spec = importlib.util.spec_from_file_location("exercise_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = processes.learner_source(module.make_global_batch, module.train_step)
    assert "def make_global_batch(" in source and "def train_step(" in source
    assert "SETUP" not in source and "the grader cell" not in source
    assert source.count("def make_global_batch(") == 1
