"""Grader for the devices and shardings exercise: one sharding for every batch.

The learner writes ``place(batch, mesh)``: it takes a batch (a dict with ``"x"`` of
shape (B, F) and ``"y"`` of shape (B,)) in whatever placement a loader produced, and
returns it on one ``NamedSharding`` of ``mesh`` that splits the batch axis over the
mesh's ``"data"`` axis. The grader builds the mesh over every device JAX has, draws new
shapes and data on every run, puts the devices in an order of its own (never the
default one, so a mesh built from ``jax.devices()`` or read from a global is not the
mesh passed in), hands ``place`` batches in seven placements (host NumPy,
an uncommitted ``jnp`` array, committed to device 0, committed to another device,
already sharded over ``"data"``, replicated over the mesh, sharded over a second, 2-D
mesh), and runs its own freshly made jitted step on what ``place`` returns.

It works with any number of devices. The exercise simulates eight on the CPU; with a
single device, "split over the mesh" and "on one device" hold the same data, so only the
type of the sharding tells them apart, and a replicated answer cannot be told apart at
all (see ``tests/graders/test_devices_and_shardings.py``, which runs on eight).

What it rejects, and how:
- an unfinished stub: ``NotImplementedError`` becomes a failed check, with the command
  ``jitlab hint devices_and_shardings``;
- jit switched off by ``place`` (``jax.config.update("jax_disable_jit", True)``): checked
  right after ``place`` ran and by the ``@grader`` canaries, and reported as such (a
  ``jax.disable_jit()`` block inside ``place`` changes nothing ``place`` returns, so it
  is not an error);
- the caller's arrays changed in place: the host batches are compared, by content, with
  copies taken before ``place`` ran;
- anything but a dict with the keys ``"x"`` and ``"y"``;
- changed numbers (a cast to a smaller dtype, reordered rows, hard-coded data): every
  placed array is compared with what went in, and the step's outputs with a float64
  NumPy reference;
- batches passed through unchanged, or only some of them moved (those not yet on a
  ``NamedSharding``, say): more than one compilation of the step, reported with the
  distinct placements ``place`` returned;
- everything put on one device, kept on the host, replicated, or placed on another mesh
  (one of its own, or a global one, which lists the devices in another order) or along
  another axis: the placed arrays must carry a ``NamedSharding`` over the given mesh
  equivalent to ``P("data")``, and so must the step's per-example output.

The reference, the step and the mesh builder are private (leading underscore), made
fresh inside :func:`grade`; the step's outputs are computed by the grader's own jitted
step from what ``place`` returned, so nothing ``place`` returns besides the batch can
reach the numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jitlab.grading import call_learner, fail, fresh_rng, grader, passed, require, require_jit_on
from jitlab.grading.checks import shorten
from jitlab.instruments.counting import count_compiles

KINDS = (
    "host NumPy",
    "uncommitted jnp array",
    "committed to device 0",
    "committed to another device",
    'already sharded over "data"',
    "replicated over the mesh",
    "sharded over a 2-D mesh",
)
BATCHES_PER_KIND = 2
RTOL = 1e-4
ATOL = 1e-4

PLACE_RUNS = "place runs on batches from every loader"
DICT_KEYS = "place returns a dict with the keys 'x' and 'y'"
CALLER_KEPT = "place leaves the caller's arrays as they were"
VALUES = "place keeps every value and dtype"
STEP_RUNS = "the step runs on every placed batch"
NUMBERS = "the step's numbers match the reference on every placed batch"
COMPILES_ONCE = "the step compiles once for all batches"
SPLIT = 'every placed array is split along its first axis over the mesh\'s "data" axis'
OUTPUT_SPLIT = 'the step\'s per-example output stays split over "data"'

CHECKS = (
    PLACE_RUNS,
    DICT_KEYS,
    CALLER_KEPT,
    VALUES,
    STEP_RUNS,
    NUMBERS,
    COMPILES_ONCE,
    SPLIT,
    OUTPUT_SPLIT,
)


def _make_mesh(devices: list[Any]) -> jax.sharding.Mesh:
    """The mesh the grader hands to ``place``: these devices, in this order, on one
    axis called ``"data"``, with Auto axes as in the exercise."""
    return Mesh(np.array(devices, dtype=object), ("data",), axis_types=(AxisType.Auto,))


def _shuffled_devices(rng: np.random.Generator) -> list[Any]:
    """Every device, in an order that differs from ``jax.devices()`` when there are two
    or more (so a mesh built from ``jax.devices()`` is not the one passed in)."""
    devices = list(jax.devices())
    if len(devices) < 2:
        return devices
    order = list(range(len(devices)))
    while order == sorted(order):
        order = [int(i) for i in rng.permutation(len(devices))]
    return [devices[i] for i in order]


def _make_step() -> Callable[..., Any]:
    """A fresh copy of the exercise's step, so every grading run counts from zero."""

    @jax.jit
    def graded_step(w, batch):
        err = batch["x"] @ w - batch["y"]
        return err**2, 2.0 * (batch["x"].T @ err) / err.shape[0]

    return graded_step


def _reference(w: np.ndarray, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-example squared errors and the gradient of their mean, in float64."""
    x = np.asarray(batch["x"], np.float64)
    err = x @ np.asarray(w, np.float64) - np.asarray(batch["y"], np.float64)
    return err**2, 2.0 * (x.T @ err) / err.shape[0]


def _second_mesh(devices: list[Any]) -> jax.sharding.Mesh:
    n = len(devices)
    shape = (n // 2, 2) if n % 2 == 0 else (n, 1)
    return jax.make_mesh(shape, ("a", "b"), axis_types=(AxisType.Auto,) * 2, devices=devices)


def _arrive(
    batch: dict[str, np.ndarray], kind: str, first_device, other_device, mesh, second_mesh
) -> dict:
    if kind == "host NumPy":
        return dict(batch)
    if kind == "uncommitted jnp array":
        return {k: jax.numpy.asarray(v) for k, v in batch.items()}
    if kind == "committed to device 0":
        return jax.device_put(batch, first_device)
    if kind == "committed to another device":
        return jax.device_put(batch, other_device)
    if kind == 'already sharded over "data"':
        return jax.device_put(batch, NamedSharding(mesh, P("data")))
    if kind == "replicated over the mesh":
        return jax.device_put(batch, NamedSharding(mesh, P()))
    return jax.device_put(batch, NamedSharding(second_mesh, P("b")))


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
    if len(value.devices()) == 1:
        (device,) = value.devices()
        committed = "committed" if value.committed else "uncommitted"
        return f"one device ({device}, {committed})"
    return type(sharding).__name__


def _placement(batch: dict) -> str:
    seen = {k: describe(batch[k]) for k in sorted(batch)}
    if len(set(seen.values())) == 1:
        return next(iter(seen.values()))
    return "; ".join(f"{k}: {where}" for k, where in seen.items())


def _check_structure(placed: Any) -> None:
    if isinstance(placed, dict) and set(placed) == {"x", "y"}:
        return
    raise fail(
        DICT_KEYS,
        expected="{'x': ..., 'y': ...}",
        seen=f"{type(placed).__name__}"
        + (f" with keys {sorted(placed)}" if isinstance(placed, dict) else ""),
        hint="return the same dict structure you were given; jax.device_put(batch, sharding) "
        "does that for a whole dict",
    )


def _on_another_mesh(batch: dict, mesh) -> bool:
    return any(
        isinstance(getattr(v, "sharding", None), NamedSharding) and v.sharding.mesh != mesh
        for v in batch.values()
    )


def _check_values(originals: list[dict], placed: list[dict]) -> None:
    check = VALUES
    for number, (before, after) in enumerate(zip(originals, placed, strict=True)):
        for key in ("x", "y"):
            got = np.asarray(after[key])
            want = before[key]
            if got.dtype != want.dtype or got.shape != want.shape:
                raise fail(
                    check,
                    expected=f"{key}: {want.dtype}{list(want.shape)} (as it arrived)",
                    seen=f"{key}: {got.dtype}{list(got.shape)} in batch {number}",
                    hint="placing a batch moves it; it must not cast or reshape it",
                )
            if not np.array_equal(got, want):
                worst = int(np.argmax(np.abs(got.astype(np.float64) - want).reshape(-1)))
                raise fail(
                    check,
                    expected=f"{key} exactly as it arrived",
                    seen=f"different values in batch {number} (first at flat index {worst})",
                    hint="jax.device_put moves data without changing it; do not rebuild the arrays",
                )
    passed(check)


def _check_numbers(w: np.ndarray, originals: list[dict], outputs: list[tuple]) -> None:
    check = NUMBERS
    for number, (batch, (losses, grad)) in enumerate(zip(originals, outputs, strict=True)):
        want_losses, want_grad = _reference(w, batch)
        for name, got, want in (("losses", losses, want_losses), ("gradient", grad, want_grad)):
            got = np.asarray(got)
            if got.shape != want.shape or not np.allclose(got, want, rtol=RTOL, atol=ATOL):
                raise fail(
                    check,
                    expected=f"{name} of batch {number} as in the NumPy reference",
                    seen=f"{np.array2string(got.reshape(-1)[:4], precision=4)} against "
                    f"{np.array2string(want.reshape(-1)[:4], precision=4)}",
                    hint="place must hand over the batch it was given, row for row",
                )
    passed(check)


def _check_compiles(count, placed: list[dict]) -> None:
    placements = sorted({_placement(b) for b in placed})
    shown = " | ".join(placements[:4]) + (" | ..." if len(placements) > 4 else "")
    why = [ln.strip() for ln in (count.explanations[-1:] or [""])[0].splitlines()]
    said = next((ln for ln in why if ln.startswith("*")), "")
    require(
        COMPILES_ONCE,
        count.compiles == 1,
        expected=f"1 compilation for all {len(placed)} batches",
        seen=f"{count.compiles} compilations ({count.traces} traced, the rest silent); "
        f"place returned {len(placements)} placement(s): {shown}"
        + (f"; JAX says: {shorten(said, 160)}" if said else ""),
        hint="each device and each sharding is its own executable: put every batch on the "
        'same NamedSharding(mesh, P("data")), even one that is already on a mesh',
    )


def _same_layout(one: Any, other: Any) -> bool:
    """Two meshes with the same axis names over the same devices in the same order."""
    return (
        tuple(one.axis_names) == tuple(other.axis_names)
        and one.devices.shape == other.devices.shape
        and list(one.devices.flat) == list(other.devices.flat)
    )


def _sharding_hint(value: Any, mesh, arrived: Any = None) -> str:
    """What to change, from where ``value`` sits; ``arrived`` is the same array as its
    loader handed it to ``place``, to tell "placed wrongly" from "never moved"."""
    placed_on = getattr(getattr(value, "sharding", None), "mesh", None)
    came_on = getattr(getattr(arrived, "sharding", None), "mesh", None)
    if (
        placed_on is not None
        and came_on is not None
        and not _same_layout(placed_on, mesh)
        and _same_layout(placed_on, came_on)
    ):
        return (
            "this batch is still on the mesh its loader put it on: place returned it "
            "without moving it onto the mesh passed in (on this release, a jax.device_put "
            "inside jax.disable_jit() can leave it there)"
        )
    if not isinstance(value, jax.Array):
        return (
            "a NumPy array is on no device at all, so every call copies it to one device; "
            "jax.device_put it onto the mesh"
        )
    sharding = value.sharding
    if not isinstance(sharding, NamedSharding):
        return (
            "one device holds the whole batch; a NamedSharding over the mesh splits it "
            "across every device"
        )
    if sharding.mesh != mesh:
        other = sharding.mesh
        if tuple(other.axis_names) != tuple(mesh.axis_names):
            why = f"its axes are {other.axis_names}, not {mesh.axis_names}"
        elif tuple(other.axis_types) != tuple(mesh.axis_types):
            why = "its axes are Explicit (jax.make_mesh's default), the given mesh's Auto"
        elif list(other.devices.flat) != list(mesh.devices.flat):
            why = "it lists the devices in another order than the mesh passed in"
        else:
            why = "it is another mesh object than the one passed in"
        return f"use the mesh passed to place, not a mesh of your own or a global one: {why}"
    return 'P() copies the whole batch to every device; P("data") splits the batch axis'


def _check_sharding(placed: list[dict], arrived: list[dict], mesh, want: NamedSharding) -> None:
    check = SPLIT
    for number, (batch, before) in enumerate(zip(placed, arrived, strict=True)):
        for key in ("x", "y"):
            value = batch[key]
            ok = (
                isinstance(value, jax.Array)
                and isinstance(value.sharding, NamedSharding)
                and value.sharding.mesh == mesh
                and value.sharding.is_equivalent_to(want, value.ndim)
            )
            if not ok:
                raise fail(
                    check,
                    expected=f'{key}: NamedSharding(mesh, P("data")) on the mesh passed in',
                    seen=f"{key} of batch {number}: {describe(value)}",
                    hint=_sharding_hint(value, mesh, before.get(key)),
                )
    passed(check)


def _check_output(outputs: list[tuple], want: NamedSharding) -> None:
    losses = outputs[-1][0]
    sharding = getattr(losses, "sharding", None)
    require(
        OUTPUT_SPLIT,
        isinstance(sharding, NamedSharding) and sharding.is_equivalent_to(want, 1),
        expected='per-example losses on NamedSharding(mesh, P("data"))',
        seen=describe(losses),
        hint="the step's outputs follow its inputs: place the batch, not the result",
    )


@grader("devices_and_shardings", checks=CHECKS)
def grade(place: Callable[[dict, Any], dict]) -> None:
    """Check ``place(batch, mesh)`` by numbers, by the step's compile count and by the
    shardings it returns; see the module docstring."""
    rng = fresh_rng()
    devices = list(jax.devices())
    mesh = _make_mesh(_shuffled_devices(rng))
    want = NamedSharding(mesh, P("data"))
    other_device = devices[int(rng.integers(1, len(devices)))] if len(devices) > 1 else devices[0]
    second_mesh = _second_mesh(devices)

    features = int(rng.integers(3, 7))
    size = len(devices) * int(rng.integers(2, 5))
    w = rng.normal(size=features).astype(np.float32)
    kinds = [kind for kind in KINDS for _ in range(BATCHES_PER_KIND)]
    kinds = [kinds[i] for i in rng.permutation(len(kinds))]
    originals = []
    for _ in kinds:
        x = rng.normal(size=(size, features)).astype(np.float32)
        y = (x @ w + rng.normal(scale=0.5, size=size)).astype(np.float32)
        originals.append({"x": x, "y": y})
    arrived = [
        _arrive(
            {k: v.copy() for k, v in batch.items()},
            kind,
            devices[0],
            other_device,
            mesh,
            second_mesh,
        )
        for batch, kind in zip(originals, kinds, strict=True)
    ]

    placed = []
    for batch in arrived:
        out = call_learner(PLACE_RUNS, place, batch, mesh)
        _check_structure(out)
        placed.append(out)
    passed(PLACE_RUNS)
    passed(DICT_KEYS)
    require_jit_on("after your place ran")
    _check_caller_kept(originals, arrived)
    _check_values(originals, placed)

    step = _make_step()
    outputs = []
    with count_compiles(step) as count:
        for number, batch in enumerate(placed):
            try:
                outputs.append(jax.block_until_ready(step(w, batch)))
            except Exception as err:
                raise fail(
                    STEP_RUNS,
                    expected="the jitted step to accept what place returned",
                    seen=f"batch {number} ({_placement(batch)}): "
                    + shorten(f"{type(err).__name__}: {str(err).splitlines()[0]}", 200),
                    hint=_sharding_hint(batch["x"], mesh, arrived[number].get("x"))
                    if _on_another_mesh(batch, mesh)
                    else "return the batch as jax.Arrays on one sharding of the mesh "
                    "you were given",
                ) from err
    passed(STEP_RUNS)
    _check_numbers(w, originals, outputs)
    _check_compiles(count, placed)
    _check_sharding(placed, arrived, mesh, want)
    _check_output(outputs, want)


def _check_caller_kept(originals: list[dict], arrived: list[dict]) -> None:
    """The batches as the loaders handed them over must hold what they held before."""
    for number, (before, batch) in enumerate(zip(originals, arrived, strict=True)):
        for key in ("x", "y"):
            now = batch.get(key) if isinstance(batch, dict) else None
            if now is None:
                continue  # the dict itself was emptied: the values check will say so
            try:
                same = np.array_equal(np.asarray(now), before[key])
            except RuntimeError:  # a donated or deleted jax.Array
                same = False
            if not same:
                raise fail(
                    CALLER_KEPT,
                    expected=f"batch {number}'s {key} unchanged after place",
                    seen=f"{key} of batch {number} changed ({describe(now)})",
                    hint="build and return new arrays (jax.device_put does); do not write "
                    "into the arrays you were given",
                )
    passed(CALLER_KEPT)


__all__ = ["CHECKS", "KINDS", "describe", "grade"]
