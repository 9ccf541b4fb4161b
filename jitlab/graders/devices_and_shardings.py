"""Grader for devices_and_shardings: ``place(batch, mesh)`` gets batches as every loader
hands them over (``LOADERS``) and returns each on ``NamedSharding(mesh, P("data"))`` of the
mesh passed in, holding exactly what arrived; the grader's fresh jitted step then compiles
once per mesh. On one device only the sharding's type tells answers apart (the tests run
again on eight devices). What every run draws, and the wrong rule each part breaks:
  two meshes, their devices in orders   a mesh from jax.devices() or a global one; a
  of the grader's own                   sharding kept from the first call
  and a 2-D mesh ("model", "data")      the mesh's first axis taken for "data"
  every loader, on each mesh            moving only some batches
  sharded over "data" on the other      leaving a batch alone because its spec is already
  mesh (same axis names)                P("data")
  new shapes and data                   hard-coded data, a cast, rows out of order
  a host batch refilled in place and   placed arrays kept by id()
  handed again
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jitlab.grading import GradingFailure, Hints, fail, fail_unless, grader
from jitlab.grading.causes import Called, why
from jitlab.grading.checks import Grading, shorten
from jitlab.instruments.counting import count_compiles

CHECKS = {  # every check once: its name, then its default hint
    (PLACE_RUNS := "place runs on batches from every loader"): "",
    (DICT_KEYS := "place returns a new dict with the keys 'x' and 'y'"): """return a new dict with
        the keys you were given; jax.device_put(batch, sharding) builds one""",
    (
        CALLER_KEPT := "place leaves the caller's dict and arrays as they were"
    ): """build and return a new
        dict of new arrays (jax.device_put makes them); do not write into, or take from, the dict
        and arrays you were given""",
    (VALUES := "place keeps every value and dtype"): """jax.device_put moves data without changing
        it: do not cast, reshape, rebuild, reorder or recompute the arrays""",
    (STEP_RUNS := "the step runs on every placed batch"): "",
    (COMPILES_ONCE := "the step compiles once per mesh for all its batches"): """each device and
        each sharding is its own executable: put every batch on one and the same
        NamedSharding of the mesh passed in, its batch axis split over "data", even one that is
        already on a mesh (jitlab hint 12)""",
    (
        SPLIT := """every placed array is split along its first axis over the mesh's "data" axis"""
    ): "",
}
MISTAKES = {  # and the hints of the mistakes a verdict names
    "jit": """jax.jit does not move an argument committed to other devices than its
        shardings (it raises instead): move the batch with jax.device_put(batch,
        NamedSharding(mesh, P("data"))), which takes it from any placement""",
    "refilled": """a loader refilled its host arrays and handed the same dict again:
        anything kept by id() (a placed array, a dict) is stale. Place every batch anew, on
        every call""",
    "donated": """jax.device_put returns the very array it was given when it is already in
        place, and the caller still holds it: do not donate (donate_argnums) or delete the arrays
        you were given""",
    "mesh": """use the mesh passed to place on every call (not a mesh of your own, a global one
        or one kept from an earlier call), whatever spec a batch arrived with:""",
    "same dict": """return a new dict even when every array is already in place: the caller's
        dict stays the caller's (jax.device_put(batch, sharding) builds a new one)""",
    "stayed": """it is still on the mesh its loader put it on: place returned it without moving
        it (or moved it inside jax.disable_jit(), which on this release can leave it there)""",
}
HINTS = Hints(CHECKS, MISTAKES)
LOADERS: dict[str, Callable[..., dict]] = {  # (batch, mesh, other mesh, a device, a 2-D grid)
    "host NumPy": lambda b, *_: dict(b),
    "uncommitted jnp array": lambda b, *_: {k: jax.numpy.asarray(v) for k, v in b.items()},
    "committed to device 0": lambda b, *_: jax.device_put(b, jax.devices()[0]),
    "committed to another device": lambda b, m, o, d, g: jax.device_put(b, d),
    'already sharded over "data"': lambda b, m, *_: jax.device_put(b, _split(m)),
    'sharded over "data" on another mesh with the same axis names': lambda b, m, o, *_: (
        jax.device_put(b, _split(o))
    ),
    "replicated over the mesh": lambda b, m, *_: jax.device_put(b, NamedSharding(m, P())),
    "sharded over a 2-D mesh": lambda b, m, o, d, g: jax.device_put(b, NamedSharding(g, P("b"))),
}


def _split(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P("data"))


def _meshes(rng: np.random.Generator) -> tuple[Mesh, ...]:
    """Four meshes over every device, their devices in orders that differ from each other
    and from ``jax.devices()`` when there are three or more: two on one Auto axis
    ``"data"``, and two 2-D ones with an axis ``"model"`` before ``"data"`` (a mesh the
    contract allows: ``P(mesh.axis_names[0])`` is not ``P("data")`` on it)."""
    devices, orders = np.array(jax.devices()), []
    while len(orders) < 4:
        order = [int(i) for i in rng.permutation(len(devices))]
        if len(devices) < 2 or order != sorted(order) and (len(devices) < 3 or order not in orders):
            orders.append(order)
    count, auto = len(devices), AxisType.Auto
    grid = (2, count // 2) if count % 2 == 0 else (1, count)
    return (
        *(Mesh(devices[o], ("data",), axis_types=(auto,)) for o in orders[:2]),
        *(Mesh(devices[o].reshape(grid), ("model", "data"), (auto, auto)) for o in orders[2:]),
    )


TARGETS = {0: 1, 1: 0, 2: 3}  # the meshes passed with batches, and the other one like each


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


def _layout(mesh: Mesh | None) -> tuple | None:
    return None if mesh is None else (mesh.axis_names, mesh.devices.shape)


def _stayed(on: Mesh | None, came: Mesh | None, mesh: Mesh) -> bool:
    """Left on the mesh it arrived on: that mesh, or (a device_put under disable_jit may
    reorder it) one like it, the same axis names and shape, that is unlike ``mesh``."""
    like = _layout(on) == _layout(came) and _layout(on) != _layout(mesh)
    return on is not None and on != mesh and (on == came or like)


def _sharding_hint(value: Any, mesh: Mesh, came: Mesh | None, meshes: tuple = ()) -> str:
    """What to change, from where ``value`` sits and the mesh it ``came`` on ("" when it
    is split over the "data" axis of ``mesh``: nothing)."""
    on = _mesh_of(value)
    if not isinstance(value, jax.Array):
        return "a NumPy array is on no device at all: jax.device_put it onto the mesh"
    if not isinstance(value.sharding, NamedSharding):
        return "one device holds the whole batch; a NamedSharding over the mesh splits it"
    if on == mesh and value.sharding.is_equivalent_to(_split(mesh), value.ndim):
        return ""
    named = [a for a in value.sharding.spec if a is not None]
    if on == mesh and named and named != ["data"]:
        return f'split the batch axis over the axis named "data": P("data"), not P({named[0]!r})'
    if on == mesh:
        return 'P() copies the whole batch to every device; P("data") splits the batch axis'
    if _stayed(on, came, mesh):
        return f"{HINTS['mesh']} {HINTS['stayed']}"
    if on in meshes:
        why = "it is on the mesh passed with another batch: a sharding kept from before"
    elif tuple(on.axis_names) != tuple(mesh.axis_names):
        why = f"its mesh's axes are {on.axis_names}, not {mesh.axis_names}"
    elif tuple(on.axis_types) != tuple(mesh.axis_types):
        why = "its mesh's axes are Explicit (jax.make_mesh's default), the given mesh's Auto"
    else:
        why = "its mesh lists the devices in another order than the mesh passed in"
    return f"{HINTS['mesh']} {why}"


def _check_arrays(
    grading: Grading, originals: list[dict], arrived: list[dict], held: list[dict], placed, kinds
):
    """The caller's dicts hold the arrays they ``held`` before, with what they held, and
    the placed ones exactly that."""
    arrays = [
        (f"{key} of batch {n} ({kinds[n]})", key, want[key], arrived[n].get(key), placed[n][key])
        for n, want in enumerate(originals)
        for key in ("x", "y")
    ]
    before = [batch[key] for batch in held for key in ("x", "y")]
    for n, (batch, kept) in enumerate(zip(arrived, held, strict=True)):
        added = sorted(set(batch) - set(kept))
        seen = f"batch {n} ({kinds[n]}) has the keys {sorted(batch)} now: {added} were added"
        expected = f"the caller's dict with its keys {sorted(kept)}, and nothing more"
        fail_unless(CALLER_KEPT, not added, expected=expected, seen=seen, hint=HINTS[CALLER_KEPT])
    for (what, key, want, now, _), was in zip(arrays, before, strict=True):
        deleted = isinstance(now, jax.Array) and now.is_deleted()
        if deleted:
            seen = f"it was deleted ({describe(now)}): donated to a jitted function, or "
            seen += ".delete() was called on it"
        elif now is None:  # taken out of the caller's dict
            seen = "it is gone from the caller's dict (popped or deleted)"
        elif now is not was:  # the same numbers, but placed: written into the dict
            seen = f"the caller's dict holds another array under {key!r} now ({describe(now)})"
        elif not np.array_equal(np.asarray(now), want):
            seen = f"it changed ({describe(now)})"
        else:
            continue
        hint = HINTS["donated" if deleted else CALLER_KEPT]
        expected = f"{what} unchanged and usable after place"
        raise fail(CALLER_KEPT, expected=expected, seen=seen, hint=hint)
    grading.passed(CALLER_KEPT)
    for what, key, want, _, value in arrays:
        gone = isinstance(value, jax.Array) and value.is_deleted()
        got = None if gone else np.asarray(value)
        if got is None:
            seen = f"it was deleted ({describe(value)}) before it was returned"
        elif (got.dtype, got.shape) != (want.dtype, want.shape):
            seen = f"{got.dtype}{list(got.shape)}"
        elif not np.array_equal(got, want):
            row = int(np.argmax((got != want).reshape(len(got), -1).any(axis=1)))
            seen = f"row {row} of {key} differs: {got[row]} instead of {want[row]}"
        else:
            continue
        expected = f"{what} exactly as it arrived: {want.dtype}{list(want.shape)}"
        raise fail(VALUES, expected=expected, seen=seen, hint=HINTS[VALUES])


def _refilled(grading: Grading, place: Callable, batch: dict, mesh: Mesh, rng, before: dict):
    """A host batch's arrays refilled in place and handed again in the same dict, as a
    loader that reuses its buffers does: place must move the new values (``before``: the
    values its first call moved)."""
    for value in batch.values():
        value[...] = rng.normal(size=value.shape).astype(value.dtype)
    want, out = {k: v.copy() for k, v in batch.items()}, _place(grading, place, batch, mesh)
    for key in ("x", "y"):
        got = np.asarray(out[key]) if isinstance(out, dict) and key in out else None
        if got is not None and np.array_equal(got, want[key]):
            continue
        stale = got is not None and np.array_equal(got, before[key])
        now = out.get(key) if isinstance(out, dict) else out
        seen = "the values it held before the refill" if stale else describe(now)
        expected = f"{key} of a host batch refilled in place and handed again, with its new values"
        raise fail(
            VALUES, expected=expected, seen=seen, hint=HINTS["refilled" if stale else VALUES]
        )


def _compiles_once(w: np.ndarray, jobs: list, placed: list, came: list, meshes: tuple, which: int):
    """A fresh copy of the exercise's step runs on the batches placed with mesh ``which``
    and compiles once; else the doctor's causes of every compilation after the first."""
    mine, mesh = [n for n, (_, m) in enumerate(jobs) if m == which], meshes[which]

    @jax.jit
    def graded_step(w, batch):
        err = batch["x"] @ w - batch["y"]
        return err**2, 2.0 * (batch["x"].T @ err) / err.shape[0]

    calls = []
    with count_compiles(graded_step) as count:
        for n in mine:
            before = count.compiles
            try:
                jax.block_until_ready(graded_step(w, placed[n]))
            except Exception as err:
                hints = {k: _sharding_hint(placed[n][k], mesh, came[n]) for k in ("x", "y")}
                key = next((k for k, hint in hints.items() if hint), "x")  # the one not placed
                value = placed[n][key]
                elsewhere = " on another mesh" if _mesh_of(value) not in (None, mesh) else ""
                error = shorten(f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}", 200)
                seen = f"batch {n} ({key}: {describe(value)}{elsewhere}): {error}"
                expected = "the jitted step to accept what place returned"
                hint = f"{key}: {hints[key]}" if hints[key] else ""
                raise fail(STEP_RUNS, expected=expected, seen=seen, hint=hint) from err
            calls.append(Called((w, placed[n]), {}, count.compiles > before))
    found = why(calls, graded_step, label=lambda i: f"batch {mine[i]} ({jobs[mine[i]][0]})")
    stayed = [n for n in mine if _stayed(_mesh_of(placed[n]["x"]), came[n], mesh)]
    hint = HINTS[COMPILES_ONCE]
    if stayed:
        hint += f"; batch {stayed[0]}: {HINTS['mesh']} {HINTS['stayed']}"
    expected = f"1 compilation for the {len(mine)} batches placed with mesh {which}"
    seen = f"{count.compiles} compilations; " + shorten(found.text, 400)
    fail_unless(COMPILES_ONCE, count.compiles == 1, expected=expected, seen=seen, hint=hint)


def _place(grading: Grading, place: Callable[[dict, Any], dict], batch: dict, mesh: Mesh) -> Any:
    """``place(batch, mesh)``; a jit that refused a committed batch is named as such."""
    try:
        return grading.call_learner(PLACE_RUNS, place, batch, mesh)
    except GradingFailure as failure:
        if "incompatible devices" not in str(failure.__cause__):
            raise
        verdict = {"expected": failure.expected, "seen": failure.seen, "hint": HINTS["jit"]}
        raise fail(PLACE_RUNS, **verdict) from failure.__cause__


@grader("devices_and_shardings", checks=tuple(CHECKS), hints=HINTS)
def grade(grading: Grading, place: Callable[[dict, Any], dict]) -> None:
    """Check ``place(batch, mesh)`` by values, shardings, and the step's compile count."""
    rng = grading.rng
    meshes, devices, count = _meshes(rng), jax.devices(), jax.device_count()
    device = devices[int(rng.integers(1, count))] if count > 1 else devices[0]
    shape = (count // 2, 2) if count % 2 == 0 else (count, 1)
    grid = jax.make_mesh(shape, ("a", "b"), (AxisType.Auto,) * 2, devices=devices)
    features, size = int(rng.integers(3, 7)), count * int(rng.integers(2, 5))
    w = rng.normal(size=features).astype(np.float32)
    jobs = [(kind, which) for kind in LOADERS for which in TARGETS]
    jobs = [jobs[i] for i in rng.permutation(len(jobs))]
    originals, arrived, placed = [], [], []
    for kind, which in jobs:
        x = rng.normal(size=(size, features)).astype(np.float32)
        originals.append({"x": x, "y": (x @ w + rng.normal(size=size)).astype(np.float32)})
        copies = {k: v.copy() for k, v in originals[-1].items()}
        other = meshes[TARGETS[which]]
        arrived.append(LOADERS[kind](copies, meshes[which], other, device, grid))
    came = [_mesh_of(batch["x"]) for batch in arrived]
    held = [dict(batch) for batch in arrived]
    for batch, (_, which) in zip(arrived, jobs, strict=True):
        placed.append(out := _place(grading, place, batch, meshes[which]))
        seen = type(out).__name__ + (f" with keys {sorted(out)}" if isinstance(out, dict) else "")
        ok, expected = isinstance(out, dict) and set(out) == {"x", "y"}, "{'x': ..., 'y': ...}"
        fail_unless(DICT_KEYS, ok, expected=expected, seen=seen, hint=HINTS[DICT_KEYS])
    grading.passed(PLACE_RUNS)
    grading.require_jit_on("after your place ran")
    _check_arrays(grading, originals, arrived, held, placed, [kind for kind, _ in jobs])
    n = next(n for n, (kind, _) in enumerate(jobs) if kind == "host NumPy")
    _refilled(grading, place, arrived[n], meshes[jobs[n][1]], rng, originals[n])
    grading.passed(VALUES)
    same = [n for n, batch in enumerate(arrived) if placed[n] is batch]  # its own dict, unchanged
    seen = f"batch {same[0]} ({jobs[same[0]][0]}): the very dict it was given" if same else ""
    expected = "a new dict, whatever placement the batch arrived in"
    fail_unless(DICT_KEYS, not same, expected=expected, seen=seen, hint=HINTS["same dict"])
    grading.passed(DICT_KEYS)
    for which in TARGETS:
        _compiles_once(w, jobs, placed, came, meshes, which)
    grading.passed(STEP_RUNS)
    grading.passed(COMPILES_ONCE)
    for n, (kind, which) in enumerate(jobs):
        for key in ("x", "y"):
            hint = _sharding_hint(value := placed[n][key], meshes[which], came[n], meshes)
            expected = f'{key}: NamedSharding(mesh, P("data")) on the mesh passed in'
            seen = f"{key} of batch {n} (arrived {kind}, with mesh {which}): {describe(value)}"
            fail_unless(SPLIT, not hint, expected=expected, seen=seen, hint=hint)
    grading.passed(SPLIT)
