"""The devices-and-shardings grader passes right answers and rejects wrong ones.

XLA reads the device count once, at start-up, and pytest's process has one device: the
right answers, and the wrong ones that only several devices tell apart, run again in a
subprocess with the exercise's eight (``test_again_on_eight_simulated_devices``).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import jupytext
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from tables import fails, passes, rows

from jitlab.course.exercise_source import generated_text
from jitlab.course.manifest import load_course
from jitlab.graders import devices_and_shardings as grader
from jitlab.grading import JIT_ON

ROOT = Path(__file__).resolve().parents[2]
# The learner's copy as generated: a learner may be solving the one in exercises/.
STUB_TEXT = generated_text(load_course(ROOT).lesson("devices_and_shardings").exercise)
INNER = "JITLAB_TEST_EIGHT_DEVICES"


def learner_place(path: Path, text: str | None = None):
    """``place`` from the cell that defines it alone (the setup cell sets XLA_FLAGS): from
    ``path``, or from ``text`` read as that file."""
    text = path.read_text(encoding="utf-8") if text is None else text
    (cell,) = [c for c in jupytext.reads(text, fmt="py:percent").cells if "def place(" in c.source]
    namespace = {"jax": jax, "jnp": jnp, "np": np, "NamedSharding": NamedSharding, "P": P}
    exec(compile(cell.source, str(path), "exec"), namespace)
    return namespace["place"]


def split(mesh):
    return NamedSharding(mesh, P("data"))


def put(batch, mesh):
    return jax.device_put(batch, split(mesh))


def into_the_callers_dict(batch, mesh):  # the same numbers, but "never write into" it
    for key in list(batch):
        batch[key] = jax.device_put(batch[key], split(mesh))
    return batch


def leaf_by_leaf(batch, mesh):
    spec = lambda a: P("data", *[None] * (np.ndim(a) - 1))  # noqa: E731
    return jax.tree.map(lambda a: jax.device_put(a, NamedSharding(mesh, spec(a))), batch)


RIGHT = {
    "the solution": learner_place(ROOT / "solutions" / "12_devices_and_shardings.py"),
    "a spec written out in full": lambda b, mesh: {
        "x": jax.device_put(b["x"], NamedSharding(mesh, P("data", None))),
        "y": jax.device_put(b["y"], split(mesh)),
    },
    "leaf by leaf": leaf_by_leaf,
}


@pytest.mark.parametrize("name", RIGHT)
def test_right_answer_passes(name):
    passes(grader.grade, RIGHT[name])
    if name == "the solution":
        passes(grader.grade, RIGHT[name])  # twice in one process: a fresh step each run


def config_off(batch, mesh):
    jax.config.update("jax_disable_jit", True)
    return put(batch, mesh)


def zero_the_host_copy(batch, mesh):
    placed = jax.block_until_ready(put(batch, mesh))
    for value in batch.values():
        if isinstance(value, np.ndarray):
            value[...] = 0.0
    return placed


def donated(batch, mesh):
    # device_put hands back the caller's own array when it is already in place.
    return jax.jit(lambda b: jax.tree.map(lambda a: a * 1, b), donate_argnums=0)(put(batch, mesh))


def same_dict_when_in_place(batch, mesh):  # "return a new dict": not the caller's own
    if all(getattr(v, "sharding", None) == split(mesh) for v in batch.values()):
        return batch
    return put(batch, mesh)


def marks_the_callers_dict(batch, mesh):  # a key written into the dict it was given
    placed = put(dict(batch), mesh)
    batch["placed"] = True
    return placed


@functools.cache
def _identity_to(mesh):  # a jit, which refuses arguments committed to other devices
    return jax.jit(lambda b: b, out_shardings=split(mesh))


def jit_with_out_shardings(batch, mesh):
    return _identity_to(mesh)(dict(batch))


KEPT: list = []  # emptied before each grading
MEMO: dict = {}  # and this


def memo_by_id(batch, mesh):  # stale once the loader refills its arrays
    return {key: MEMO.setdefault(id(value), put(value, mesh)) for key, value in batch.items()}


def first_mesh_kept(batch, mesh):
    KEPT.append(KEPT[0] if KEPT else split(mesh))
    return jax.device_put(batch, KEPT[0])


def under_disable_jit(batch, mesh):
    with jax.disable_jit():
        return put(batch, mesh)


ANY = (grader.STEP_RUNS, grader.COMPILES_ONCE, grader.SPLIT)
AUTO = (AxisType.Auto,)
# fmt: off
WRONG = {  # (answer, the check(s) it fails, words its verdict holds): on any number of devices
    "jit off in the config": (config_off, JIT_ON, ("jit is switched off",)),
    "the stub": (learner_place(ROOT / "exercises" / "12_devices_and_shardings.py", STUB_TEXT),
                 grader.PLACE_RUNS, ("not solved yet", "jitlab hint devices_and_shardings")),
    "a tuple": (lambda b, mesh: (b["x"], b["y"]), grader.DICT_KEYS, ("tuple",)),
    "zeroes the host copy": (zero_the_host_copy, grader.CALLER_KEPT, ("do not write",)),
    "donates the caller's arrays": (donated, grader.CALLER_KEPT, ("was deleted", "donate")),
    "into the caller's dict": (into_the_callers_dict, grader.CALLER_KEPT, ("another array under",)),
    "splits the features": (
        lambda b, m: {"x": jax.device_put(b["x"], NamedSharding(m, P(None, "data"))), "y": b["y"]},
        ANY + (grader.PLACE_RUNS,), ()),
    "deletes what it returns": (
        lambda b, m: jax.tree.map(lambda a: (a := a.copy()).delete() or a, put(b, m)),
        grader.VALUES, ("was deleted", "before it was returned")),
    "the caller's dict when in place": (same_dict_when_in_place, grader.DICT_KEYS,
                                        ("the very dict it was given",)),
    "a key written into the caller's dict": (marks_the_callers_dict, grader.CALLER_KEPT,
                                             ("['placed'] were added",)),
    "placed arrays kept by id()": (memo_by_id, grader.VALUES, ("before the refill", "id()")),
    "pops the caller's arrays": (lambda b, mesh: put({k: b.pop(k) for k in ("x", "y")}, mesh),
                                 grader.CALLER_KEPT, ("gone from the caller's dict",)),
    "a cast to bfloat16": (
        lambda b, mesh: put({k: jnp.asarray(v, jnp.bfloat16) for k, v in b.items()}, mesh),
        grader.VALUES, ("bfloat16",)),
    "rows out of order": (
        lambda b, mesh: put({k: np.asarray(v)[::-1].copy() for k, v in b.items()}, mesh),
        grader.VALUES, ("row 0 of x differs",)),
    "passed through unchanged": (lambda b, mesh: dict(b), grader.COMPILES_ONCE,
                                 ("compilations; batch", "NamedSharding")),
    "moves only what is not on a mesh": (
        lambda b, m: dict(b) if isinstance(getattr(b["x"], "sharding", None), NamedSharding)
        else put(b, m),
        grader.COMPILES_ONCE, ("compilations",)),
    "one device": (lambda b, m: jax.device_put(b, jax.devices()[0]), grader.SPLIT, ("one device",)),
    "host arrays": (lambda b, m: {k: np.asarray(v) for k, v in b.items()}, grader.SPLIT,
                    ("NumPy",)),
    "a mesh of its own": (  # jax.make_mesh defaults to Explicit axes
        lambda b, m: put(b, jax.make_mesh((jax.device_count(),), ("data",))),
        ANY, ("mesh passed to place", "Explicit")),
}
SEVERAL = {  # (answer, the check(s) it fails, words its verdict holds): several devices needed
    "a jit with out_shardings": (jit_with_out_shardings, grader.PLACE_RUNS,
                                 ("incompatible devices", "jax.device_put(batch")),
    "a global mesh": (
        lambda b, _: put(b, jax.make_mesh((jax.device_count(),), ("data",), axis_types=AUTO)),
        grader.SPLIT, ("the mesh passed to place",)),  # its device order, or its axes
    "the first call's sharding kept": (first_mesh_kept, grader.SPLIT, ("earlier call",)),
    "the mesh's first axis for data": (  # blind set 9: "data" is not first on a 2-D mesh
        lambda b, m: jax.device_put(b, NamedSharding(m, P(m.axis_names[0]))), grader.SPLIT,
        ('P("data"), not P(\'model\')',)),
    'leaves what is split over "data"': (
        lambda b, m: dict(b) if getattr(getattr(b["x"], "sharding", None), "spec", 0) == P("data")
        else put(b, m),
        grader.COMPILES_ONCE, ("on another mesh", "whatever spec")),
    "replicated": (lambda b, m: jax.device_put(b, NamedSharding(m, P())), grader.SPLIT, ("P()",)),
    # On jax 0.12.0.1 such a device_put can leave a batch on its loader's mesh; which
    # check sees it first depends on the batch order, and each says so.
    "device_put inside disable_jit": (under_disable_jit, ANY, ("still on the mesh",)),
    "only x placed": (lambda b, m: {**b, "x": put(b["x"], m)}, ANY, ("y: ",)),  # held-out
}
# fmt: on
DRAWN_FOR = ("a global mesh", "the first call's sharding kept", 'leaves what is split over "data"')
DRAWN_FOR += ("only x placed",)
CASES = rows(WRONG) + [
    (n, s) for n in SEVERAL for s in ("0", "1", "2")[: 3 if n in DRAWN_FOR else 1]
]


@pytest.mark.parametrize(
    ("name", "seed"), CASES, ids=[f"{'several ' * (n in SEVERAL)}{n}-{s}" for n, s in CASES]
)
def test_wrong_answer_fails(name, seed):
    if name in SEVERAL and jax.device_count() < 2:
        pytest.skip("with one device, sharded and unsharded hold the same data")
    place, check, words = {**WRONG, **SEVERAL}[name]
    KEPT.clear()
    MEMO.clear()
    try:
        fails(grader.grade, place, check=check, words=words, seed=seed)
    finally:
        jax.config.update("jax_disable_jit", False)


@pytest.mark.slow  # runs the tests that several devices change in a subprocess with eight
def test_again_on_eight_simulated_devices():
    if os.environ.get(INNER):
        assert len(jax.devices()) == 8 or jax.default_backend() != "cpu"
        return
    env = {**os.environ, INNER: "1", "JAX_PLATFORMS": "cpu"}
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    command = [sys.executable, "-m", "pytest", __file__, "-q", "-x", "-p", "no:cacheprovider"]
    command += ["-k", "right_answer or several or eight"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    report = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, report
    assert " skipped" not in done.stdout.splitlines()[-1], report  # nothing skipped on 8
