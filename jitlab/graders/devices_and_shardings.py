"""Grader for the devices and shardings exercise: one sharding for every batch.

``place(batch, mesh)`` gets batches in every placement a loader produces and must return
each on ``NamedSharding(mesh, P("data"))`` of the mesh it is handed, holding exactly
what arrived. The grader's own fresh jitted step runs on them and must compile once per
mesh (its numbers and output sharding then follow, so they are not checked again).
With one device, split and unsplit hold the same data and the two meshes are one: only
the sharding's type tells answers apart (the tests run again on eight devices).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jitlab.grading import call_learner, fail, fresh_rng, grader, passed, require_jit_on, why
from jitlab.grading.causes import Called
from jitlab.grading.checks import fail_unless, shorten
from jitlab.instruments.counting import count_compiles

DRAWN = {  # what the drawing covers: the wrong rule each part breaks, on every run
    "two meshes, each with its devices in an order of the grader's own": "a mesh from "
    "jax.devices() or a global; a sharding kept from the first call",
    "every loader's placement (KINDS), on each mesh": "moving only some batches",
    'sharded over "data" on the other mesh (same axis names)': "leaving a batch alone "
    'because its spec is already P("data")',
    "new shapes and data": "hard-coded data, a cast, rows out of order",
}
OTHER_MESH = 'sharded over "data" on another mesh with the same axis names'
KINDS = (
    "host NumPy",
    "uncommitted jnp array",
    "committed to device 0",
    "committed to another device",
    'already sharded over "data"',
    OTHER_MESH,
    "replicated over the mesh",
    "sharded over a 2-D mesh",
)
PLACE_RUNS = "place runs on batches from every loader"
DICT_KEYS = "place returns a dict with the keys 'x' and 'y'"
CALLER_KEPT = "place leaves the caller's arrays as they were"
VALUES = "place keeps every value and dtype"
STEP_RUNS = "the step runs on every placed batch"
COMPILES_ONCE = "the step compiles once per mesh for all its batches"
SPLIT = 'every placed array is split along its first axis over the mesh\'s "data" axis'
CHECKS = (
    PLACE_RUNS,
    DICT_KEYS,
    CALLER_KEPT,
    VALUES,
    STEP_RUNS,
    COMPILES_ONCE,
    SPLIT,
)


def _meshes(rng: np.random.Generator) -> tuple[Mesh, Mesh]:
    """Two meshes over every device on one Auto axis ``"data"``, in two orders that
    differ from each other and from ``jax.devices()`` when there are three or more."""
    devices, orders = list(jax.devices()), []
    while len(orders) < 2:
        order = [int(i) for i in rng.permutation(len(devices))]
        if len(devices) < 2 or (
            order != sorted(order) and (len(devices) < 3 or order not in orders)
        ):
            orders.append(order)
    axis = ("data",)
    one, two = (
        Mesh(np.array([devices[i] for i in o]), axis, axis_types=(AxisType.Auto,)) for o in orders
    )
    return one, two


def _make_step() -> Callable[..., Any]:
    """A fresh copy of the exercise's step, so every count starts from zero."""

    @jax.jit
    def graded_step(w, batch):
        err = batch["x"] @ w - batch["y"]
        return err**2, 2.0 * (batch["x"].T @ err) / err.shape[0]

    return graded_step


def _arrive(batch: dict, kind: str, mesh: Mesh, other: Mesh, device: Any) -> dict:
    """The batch as the loader of ``kind`` hands it to ``place`` with ``mesh``."""
    if kind == "host NumPy":
        return dict(batch)
    if kind == "uncommitted jnp array":
        return {k: jax.numpy.asarray(v) for k, v in batch.items()}
    devices = jax.devices()
    n = len(devices)
    shape, auto = (n // 2, 2) if n % 2 == 0 else (n, 1), (AxisType.Auto,) * 2
    grid = jax.make_mesh(shape, ("a", "b"), axis_types=auto, devices=devices)
    return jax.device_put(
        batch,
        {
            "committed to device 0": devices[0],
            "committed to another device": device,
            'already sharded over "data"': NamedSharding(mesh, P("data")),
            OTHER_MESH: NamedSharding(other, P("data")),
            "replicated over the mesh": NamedSharding(mesh, P()),
            "sharded over a 2-D mesh": NamedSharding(grid, P("b")),
        }[kind],
    )


def describe(value: Any) -> str:
    """Where an array lives, in a few words."""
    if isinstance(value, np.ndarray):
        return "a NumPy array (on the host)"
    if not isinstance(value, jax.Array):
        return type(value).__name__
    sharding = value.sharding
    if isinstance(sharding, NamedSharding):
        axes = ", ".join(f"{name}={size}" for name, size in sharding.mesh.shape.items())
        return f"NamedSharding(mesh({axes}), {sharding.spec})"
    if len(sharding.device_set) == 1:  # (read from the sharding: a deleted array has one)
        committed = "committed" if value.committed else "uncommitted"
        return f"one device ({next(iter(sharding.device_set))}, {committed})"
    return type(sharding).__name__


def _mesh_of(value: Any) -> Mesh | None:
    return getattr(getattr(value, "sharding", None), "mesh", None)


def _like(one: Mesh, other: Mesh | None) -> bool:
    """The same axis names and shape (the devices may be in another order)."""
    return other is not None and (one.axis_names, one.devices.shape) == (
        other.axis_names,
        other.devices.shape,
    )


def _stayed(on: Mesh | None, came: Mesh | None, mesh: Mesh) -> bool:
    """Left on the mesh it arrived on (a device_put under disable_jit may reorder it)."""
    return (
        on is not None and on != mesh and (on == came or (_like(on, came) and not _like(on, mesh)))
    )


def _sharding_hint(value: Any, mesh: Mesh, came: Mesh | None, meshes: tuple = ()) -> str:
    """What to change, from where ``value`` sits and the mesh it ``came`` on."""
    if not isinstance(value, jax.Array):
        return "a NumPy array is on no device at all: jax.device_put it onto the mesh"
    on = _mesh_of(value)
    if not isinstance(value.sharding, NamedSharding):
        return "one device holds the whole batch; a NamedSharding over the mesh splits it"
    if on == mesh:
        return 'P() copies the whole batch to every device; P("data") splits the batch axis'
    if _stayed(on, came, mesh):
        why = (
            "it is still on the mesh its loader put it on: place returned it without "
            "moving it (or moved it inside jax.disable_jit(), which on this release can "
            "leave it there)"
        )
    elif on in meshes:
        why = "it is on the mesh passed with another batch: a sharding kept from before"
    elif tuple(on.axis_names) != tuple(mesh.axis_names):
        why = f"its mesh's axes are {on.axis_names}, not {mesh.axis_names}"
    elif tuple(on.axis_types) != tuple(mesh.axis_types):
        why = "its mesh's axes are Explicit (jax.make_mesh's default), the given mesh's Auto"
    else:
        why = "its mesh lists the devices in another order than the mesh passed in"
    return (
        "use the mesh passed to place on every call (not a mesh of your own, a global one "
        f"or one kept from an earlier call), whatever spec a batch arrived with: {why}"
    )


def _check_arrays(originals: list[dict], arrived: list[dict], placed: list[dict], kinds) -> None:
    """The caller's arrays hold what they held, and the placed ones exactly that."""
    for number, want in enumerate(originals):
        batch = f"batch {number} ({kinds[number]})"
        for key in ("x", "y"):
            now = arrived[number].get(key)  # None: taken out of the caller's dict
            if isinstance(now, jax.Array) and now.is_deleted():
                raise fail(
                    CALLER_KEPT,
                    expected=f"{key} of {batch} still usable after place",
                    seen=f"it was deleted ({describe(now)}): donated to a jitted function, "
                    "or .delete() was called on it",
                    hint="jax.device_put returns the very array it was given when it is "
                    "already in place, and the caller still holds it: do not donate "
                    "(donate_argnums) or delete the arrays you were given",
                )
            fail_unless(
                CALLER_KEPT,
                now is not None and np.array_equal(np.asarray(now), want[key]),
                expected=f"{key} of {batch} unchanged after place",
                seen=f"it changed ({describe(now)})"
                if now is not None
                else "it is gone from the caller's dict (popped or deleted)",
                hint="build and return a new dict of new arrays (jax.device_put makes them); "
                "do not write into, or take from, the dict and arrays you were given",
            )
    passed(CALLER_KEPT)
    for number, want in enumerate(originals):
        batch = f"batch {number} ({kinds[number]})"
        for key in ("x", "y"):
            got, wanted = np.asarray(placed[number][key]), want[key]
            fail_unless(
                VALUES,
                (got.dtype, got.shape) == (wanted.dtype, wanted.shape),
                expected=f"{key}: {wanted.dtype}{list(wanted.shape)} (as it arrived)",
                seen=f"{key} of {batch}: {got.dtype}{list(got.shape)}",
                hint="placing a batch moves it; it must not cast or reshape it",
            )
            row = int(np.argmax((got != wanted).reshape(len(got), -1).any(axis=1)))
            fail_unless(
                VALUES,
                np.array_equal(got, wanted),
                expected=f"{key} of {batch} exactly as it arrived",
                seen=f"row {row} of {key} differs: {got[row]} instead of {wanted[row]}",
                hint="jax.device_put moves data without changing it; do not rebuild, "
                "reorder or recompute the arrays",
            )
    passed(VALUES)


def _run_step(w: np.ndarray, batches: list[tuple[int, dict]], came: list, mesh: Mesh, kinds):
    """The grader's fresh step on one mesh's batches: its compile count, and the
    doctor's causes of every compilation after the first."""
    step, calls = _make_step(), []
    with count_compiles(step) as count:
        for number, batch in batches:
            before = count.compiles
            try:
                jax.block_until_ready(step(w, batch))
            except Exception as err:
                elsewhere = " on another mesh" if _mesh_of(batch["x"]) not in (None, mesh) else ""
                raise fail(
                    STEP_RUNS,
                    expected="the jitted step to accept what place returned",
                    seen=f"batch {number} (x: {describe(batch['x'])}{elsewhere}): "
                    + shorten(f"{type(err).__name__}: {str(err).splitlines()[0]}", 200),
                    hint=_sharding_hint(batch["x"], mesh, came[number]),
                ) from err
            calls.append(Called((w, batch), {}, count.compiles > before))
    label = lambda i: f"batch {batches[i][0]} ({kinds[batches[i][0]]})"  # noqa: E731
    return count, why(calls, step, label=label)


def _check_compiles(count, found, batches: list[tuple[int, dict]], which: int, mesh, came) -> None:
    hint = "each device and each sharding is its own executable: put every batch on the "
    hint += 'same NamedSharding(mesh, P("data")), even one that is already on a mesh'
    stayed = [n for n, b in batches if _stayed(_mesh_of(b["x"]), came[n], mesh)]
    if stayed:
        hint += f"; batch {stayed[0]} is still on the mesh it arrived on: move every batch "
        hint += "onto the mesh passed in, whatever spec it arrived with"
    fail_unless(
        COMPILES_ONCE,
        count.compiles == 1,
        expected=f"1 compilation for the {len(batches)} batches placed with mesh {which}",
        seen=f"{count.compiles} compilations; " + shorten(found.text, 400),
        hint=hint,
    )


def _check_sharding(jobs: list, placed: list[dict], came: list, meshes: tuple) -> None:
    for number, (_, which) in enumerate(jobs):
        mesh = meshes[which]
        for key in ("x", "y"):
            value = placed[number][key]
            sharding = getattr(value, "sharding", None)
            fail_unless(
                SPLIT,
                isinstance(value, jax.Array)
                and isinstance(sharding, NamedSharding)
                and sharding.mesh == mesh
                and sharding.is_equivalent_to(NamedSharding(mesh, P("data")), value.ndim),
                expected=f'{key}: NamedSharding(mesh, P("data")) on the mesh passed in',
                seen=f"{key} of batch {number} (arrived {jobs[number][0]}, with mesh "
                f"{which}): {describe(value)}",
                hint=_sharding_hint(value, mesh, came[number], meshes),
            )
    passed(SPLIT)


@grader("devices_and_shardings", checks=CHECKS)
def grade(place: Callable[[dict, Any], dict]) -> None:
    """Check ``place(batch, mesh)`` by values, shardings, and the step's compile count."""
    rng = fresh_rng()
    meshes = _meshes(rng)
    devices = jax.devices()
    device = devices[int(rng.integers(1, len(devices)))] if len(devices) > 1 else devices[0]
    features, size = int(rng.integers(3, 7)), len(devices) * int(rng.integers(2, 5))
    w = rng.normal(size=features).astype(np.float32)
    jobs = [(kind, which) for kind in KINDS for which in (0, 1)]
    jobs = [jobs[i] for i in rng.permutation(len(jobs))]
    originals = []
    for _ in jobs:
        x = rng.normal(size=(size, features)).astype(np.float32)
        originals.append({"x": x, "y": (x @ w + rng.normal(size=size)).astype(np.float32)})
    arrived = [
        _arrive({k: v.copy() for k, v in b.items()}, kind, meshes[m], meshes[1 - m], device)
        for b, (kind, m) in zip(originals, jobs, strict=True)
    ]
    came = [_mesh_of(batch["x"]) for batch in arrived]

    placed = []
    for batch, (_, which) in zip(arrived, jobs, strict=True):
        placed.append(out := call_learner(PLACE_RUNS, place, batch, meshes[which]))
        fail_unless(
            DICT_KEYS,
            isinstance(out, dict) and set(out) == {"x", "y"},
            expected="{'x': ..., 'y': ...}",
            seen=type(out).__name__
            + (f" with keys {sorted(out)}" if isinstance(out, dict) else ""),
            hint="return the dict structure you were given; jax.device_put(batch, sharding) "
            "does that for a whole dict",
        )
    passed(PLACE_RUNS)
    passed(DICT_KEYS)
    require_jit_on("after your place ran")
    kinds = [kind for kind, _ in jobs]
    _check_arrays(originals, arrived, placed, kinds)

    runs = []
    for which, mesh in enumerate(meshes):
        mine = [(n, placed[n]) for n, (_, m) in enumerate(jobs) if m == which]
        runs.append((mine, *_run_step(w, mine, came, mesh, kinds)))
    passed(STEP_RUNS)
    for which, (mine, count, found) in enumerate(runs):
        _check_compiles(count, found, mine, which, meshes[which], came)
    passed(COMPILES_ONCE)
    _check_sharding(jobs, placed, came, meshes)


__all__ = ["CHECKS", "DRAWN", "KINDS", "describe", "grade"]
