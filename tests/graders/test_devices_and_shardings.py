"""The devices-and-shardings grader passes the solution and rejects plausible wrong answers.

The exercise runs on eight simulated CPU devices, but pytest runs every test in one
process where JAX has usually started already with a single device, and XLA reads
``--xla_force_host_platform_device_count`` only once, at start-up. So the tests run
twice:

- here, in the pytest process, on whatever devices it has (the grader builds its mesh
  over every device, so it works with one);
- and once more in a subprocess started with ``XLA_FLAGS`` asking for eight devices
  (``test_again_on_eight_simulated_devices``), where the tests that need several devices
  to tell two answers apart run instead of skipping.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import jupytext
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jitlab.graders import devices_and_shardings
from jitlab.grading import GradingFailure

ROOT = Path(__file__).resolve().parents[2]
INNER = "JITLAB_TEST_EIGHT_DEVICES"
EIGHT = "--xla_force_host_platform_device_count=8"


def learner_place(path: Path):
    """``place`` from an exercise file: only the cell that defines it is run, so the setup
    cell's change to XLA_FLAGS does not leak into this process's environment."""
    (cell,) = [
        c for c in jupytext.read(path).cells if c.cell_type == "code" and "def place(" in c.source
    ]
    namespace = {"jax": jax, "jnp": jnp, "np": np, "NamedSharding": NamedSharding, "P": P}
    exec(compile(cell.source, str(path), "exec"), namespace)
    return namespace["place"]


def needs_several_devices():
    if len(jax.devices()) < 2:
        pytest.skip("with one device, sharded and unsharded hold the same data")


# --- answers that should pass ----------------------------------------------------------


def test_solution_passes(capsys):
    place = learner_place(ROOT / "solutions" / "12_devices_and_shardings.py")
    devices_and_shardings.grade(place)
    assert "All checks passed" in capsys.readouterr().out


def test_passes_twice_in_one_process():
    # The grader makes a fresh step each run, so a warm cache from the first run neither
    # helps nor hurts the second.
    place = learner_place(ROOT / "solutions" / "12_devices_and_shardings.py")
    devices_and_shardings.grade(place)
    devices_and_shardings.grade(place)


def test_spec_written_out_in_full_passes():
    # P("data", None) for x is the same layout as P("data"); y needs its own spec.
    def place(batch, mesh):
        return {
            "x": jax.device_put(batch["x"], NamedSharding(mesh, P("data", None))),
            "y": jax.device_put(batch["y"], NamedSharding(mesh, P("data"))),
        }

    devices_and_shardings.grade(place)


def test_written_into_the_callers_dict_passes():
    # The contract is about content: replacing the entries of the dict it was given, and
    # returning that dict, meets it (the arrays the caller held are not changed).
    def place(batch, mesh):
        for key in list(batch):
            batch[key] = jax.device_put(batch[key], NamedSharding(mesh, P("data")))
        return batch

    devices_and_shardings.grade(place)


def test_leaf_by_leaf_passes():
    # Solved differently: a spec per leaf, built from its rank, placed one leaf at a time.
    def place(batch, mesh):
        def put(leaf):
            spec = P("data", *([None] * (np.ndim(leaf) - 1)))
            return jax.device_put(leaf, NamedSharding(mesh, spec))

        return jax.tree.map(put, batch)

    devices_and_shardings.grade(place)


# --- wrong answers ---------------------------------------------------------------------


def test_rejects_jit_switched_off_in_the_config():
    def place(batch, mesh):
        jax.config.update("jax_disable_jit", True)
        return jax.device_put(batch, NamedSharding(mesh, P("data")))

    try:
        with pytest.raises(GradingFailure, match="jit is on") as info:
            devices_and_shardings.grade(place)
    finally:
        jax.config.update("jax_disable_jit", False)
    assert "jit is switched off" in info.value.seen


def test_rejects_device_put_inside_disable_jit():
    # On jax 0.12.0.1, inside jax.disable_jit() a device_put from one mesh onto a mesh
    # with the devices in another order comes back on the old mesh. The answer is
    # rejected. Which check sees it first depends on the grader's random batch order
    # (the step fails on it, compiles again for it, or finds it unsplit); each verdict
    # says what really happened: the batch was never moved.
    needs_several_devices()

    def place(batch, mesh):
        with jax.disable_jit():
            return jax.device_put(batch, NamedSharding(mesh, P("data")))

    with pytest.raises(GradingFailure) as info:
        devices_and_shardings.grade(place)
    if info.value.check == devices_and_shardings.COMPILES_ONCE:
        assert "placement(s)" in info.value.seen
    else:
        assert info.value.check in (
            devices_and_shardings.STEP_RUNS,
            devices_and_shardings.SPLIT,
        ), info.value
        assert "still on the mesh its loader put it on" in info.value.hint


def test_rejects_writing_into_the_callers_arrays():
    # Plausible "free the host copy": zero the NumPy arrays once they are on the devices.
    def place(batch, mesh):
        placed = jax.device_put(batch, NamedSharding(mesh, P("data")))
        jax.block_until_ready(placed)
        for value in batch.values():
            if isinstance(value, np.ndarray):
                value[...] = 0.0
        return placed

    with pytest.raises(GradingFailure, match="leaves the caller's arrays") as info:
        devices_and_shardings.grade(place)
    assert "do not write" in info.value.hint


def test_rejects_a_global_mesh_every_time():
    # The notebook's own mesh (Auto axes, devices in the default order) instead of the
    # argument: the grader's mesh lists the devices in another order on every run.
    needs_several_devices()
    from jax.sharding import AxisType

    notebook_mesh = jax.make_mesh((len(jax.devices()),), ("data",), axis_types=(AxisType.Auto,))

    def place(batch, _mesh):
        return jax.device_put(batch, NamedSharding(notebook_mesh, P("data")))

    for _ in range(5):
        with pytest.raises(GradingFailure, match="split along its first axis") as info:
            devices_and_shardings.grade(place)
        assert "another order" in info.value.hint


def test_rejects_unsolved_stub():
    place = learner_place(ROOT / "exercises" / "12_devices_and_shardings.py")
    with pytest.raises(GradingFailure, match="place runs") as info:
        devices_and_shardings.grade(place)
    assert "not solved yet" in info.value.seen
    assert "jitlab hint devices_and_shardings" in info.value.hint


def test_rejects_batches_passed_through_unchanged():
    # The numbers are right, but every placement is its own executable.
    with pytest.raises(GradingFailure, match="compiles once") as info:
        devices_and_shardings.grade(lambda batch, mesh: batch)
    compiles = int(info.value.seen.split()[0])
    assert compiles >= (6 if len(jax.devices()) > 1 else 3)
    assert "NamedSharding" in info.value.hint


def test_rejects_moving_only_batches_not_yet_on_a_mesh():
    # Plausible: "it is already sharded, leave it". Replicated and 2-D-mesh batches keep
    # their own layouts, and each costs a compilation.
    def place(batch, mesh):
        if isinstance(getattr(batch["x"], "sharding", None), NamedSharding):
            return batch
        return jax.device_put(batch, NamedSharding(mesh, P("data")))

    with pytest.raises(GradingFailure, match="compiles once") as info:
        devices_and_shardings.grade(place)
    assert int(info.value.seen.split()[0]) >= 2


def test_rejects_everything_on_one_device():
    # One compilation, but the batch is not split over the mesh.
    with pytest.raises(GradingFailure, match="split along its first axis") as info:
        devices_and_shardings.grade(lambda batch, mesh: jax.device_put(batch, jax.devices()[0]))
    assert "one device" in info.value.seen


def test_rejects_host_arrays():
    # Pulling everything back to the host compiles once too; nothing is placed.
    with pytest.raises(GradingFailure, match="split along its first axis") as info:
        devices_and_shardings.grade(
            lambda batch, mesh: {k: np.asarray(v) for k, v in batch.items()}
        )
    assert "NumPy" in info.value.seen


def test_rejects_replicated_batches():
    needs_several_devices()
    with pytest.raises(GradingFailure, match="split along its first axis") as info:
        devices_and_shardings.grade(
            lambda batch, mesh: jax.device_put(batch, NamedSharding(mesh, P()))
        )
    assert "P()" in info.value.hint


def test_rejects_a_cast_on_the_way():
    # Plausible: "bfloat16 halves the transfer". The values change.
    def place(batch, mesh):
        small = {k: jnp.asarray(v, jnp.bfloat16) for k, v in batch.items()}
        return jax.device_put(small, NamedSharding(mesh, P("data")))

    with pytest.raises(GradingFailure, match="keeps every value and dtype") as info:
        devices_and_shardings.grade(place)
    assert "bfloat16" in info.value.seen


def test_rejects_rows_out_of_order():
    # Plausible when building the sharded array by hand: shards in the wrong order. The
    # gradient does not change, so the values are checked row for row.
    def place(batch, mesh):
        flipped = {k: np.asarray(v)[::-1].copy() for k, v in batch.items()}
        return jax.device_put(flipped, NamedSharding(mesh, P("data")))

    with pytest.raises(GradingFailure, match="keeps every value"):
        devices_and_shardings.grade(place)


def test_rejects_a_mesh_of_its_own():
    # jax.make_mesh defaults to Explicit axes: a different mesh, on which the step's
    # contraction over the sharded batch axis needs an explicit out_sharding.
    def place(batch, mesh):
        own = jax.make_mesh((len(jax.devices()),), ("data",))
        return jax.device_put(batch, NamedSharding(own, P("data")))

    with pytest.raises(GradingFailure) as info:
        devices_and_shardings.grade(place)
    assert "mesh passed to place" in info.value.hint
    assert "Explicit" in info.value.hint


def test_rejects_a_tuple():
    with pytest.raises(GradingFailure, match="dict with the keys"):
        devices_and_shardings.grade(lambda batch, mesh: (batch["x"], batch["y"]))


# --- the same tests on eight simulated devices -----------------------------------------


@pytest.mark.slow  # re-runs this file in a subprocess with eight devices
def test_again_on_eight_simulated_devices():
    if os.environ.get(INNER):
        assert len(jax.devices()) == 8 or jax.default_backend() != "cpu"
        return
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + EIGHT).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env[INNER] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", __file__, "-q", "-x", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, report
    assert " skipped" not in done.stdout.splitlines()[-1], report  # nothing skipped on 8
