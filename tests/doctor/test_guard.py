"""``jitlab.doctor.no_recompiles``: fails the call that recompiled, with the doctor's cause.
Every test jits its own fresh functions."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jitlab.doctor import Recompiled, install, no_recompiles, uninstall, watch, wrap
from jitlab.doctor.recorder import ACTIVE

REAL_JIT = jax.jit


@pytest.fixture(autouse=True)
def left_as_found():
    explain = jax.config.jax_explain_cache_misses
    yield
    assert jax.jit is REAL_JIT and not wrap.installed()
    assert jax.config.jax_explain_cache_misses == explain
    assert not ACTIVE


@pytest.fixture
def watched():
    install()
    yield
    uninstall()


DATA = np.ones((100, 3), np.float32)


def _epoch(step, w):
    """A real mistake: 100 rows in batches of 32 leave a last batch of 4."""
    calls = 0
    for start in range(0, 100, 32):
        calls += 1
        w = step(w, {"x": DATA[start : start + 32]})
    return w, calls


def _make_step():
    @jax.jit
    def train_step(w, batch):
        return w - 0.1 * jnp.mean(batch["x"], axis=0)

    return train_step


def test_the_ragged_last_batch_fails_its_own_call_with_the_argument_path(watched):
    train_step = _make_step()
    calls = []
    try:
        with no_recompiles(train_step):
            w = jnp.zeros(3)
            for start in range(0, 100, 32):
                calls.append(start)
                w = train_step(w, {"x": DATA[start : start + 32]})
    except Recompiled as err:
        caught = err
    else:
        raise AssertionError("expected Recompiled")
    assert calls == [0, 32, 64, 96]  # the fourth call, the 4-row batch, raised
    assert [(d.part, d.where, d.now, d.before) for d in caught.differences] == [
        ("shape", "batch['x']", "f32[4,3]", "f32[32,3]")
    ]
    message = str(caught)
    print(message)
    assert message.startswith("train_step (")
    assert "compiled again inside no_recompiles (compilation 2):" in message
    assert "batch['x']: f32[4,3] now, f32[32,3] before" in message
    assert "See lesson 01 shapes" in message
    assert 'w = train_step(w, {"x": DATA[start : start + 32]})' in message  # the line


def test_a_steady_loop_passes_and_the_decorator_form_guards_a_function(watched):
    train_step = _make_step()

    @no_recompiles(train_step)
    def steady(w):
        for start in range(0, 96, 32):
            w = train_step(w, {"x": DATA[start : start + 32]})
        return w

    steady(jnp.zeros(3))  # one compilation: the first is allowed
    with pytest.raises(Recompiled) as caught:
        no_recompiles(train_step)(_epoch)(train_step, jnp.zeros(3))
    assert caught.value.function == "train_step"
    assert caught.value.differences[0].now == "f32[4,3]"


def test_a_function_compiled_before_the_block_fails_at_its_first_compilation_inside(watched):
    train_step = _make_step()
    with watch():  # what `jitlab doctor` and `pytest --jitlab` do around the program
        train_step(jnp.zeros(3), {"x": DATA[:32]})
        with pytest.raises(Recompiled) as caught:
            with no_recompiles(train_step):
                train_step(jnp.zeros(3), {"x": DATA[:32]})  # a cache hit
                train_step(jnp.zeros(3), {"x": DATA[96:]})
    assert [(d.where, d.now, d.before) for d in caught.value.differences] == [
        ("batch['x']", "f32[4,3]", "f32[32,3]")
    ]

    # Without a watch around the warm-up the doctor saw no earlier signature: JAX's text.
    other = _make_step()
    other(jnp.zeros(3), {"x": DATA[:32]})
    with pytest.raises(Recompiled) as caught:
        with no_recompiles(other):
            other(jnp.zeros(3), {"x": DATA[96:]})
    assert caught.value.differences == []
    assert "JAX says: different input types: * at batch['x'], now f32[4,3]" in str(caught.value)


def test_an_unwatched_function_still_fails_at_the_call_with_jax_s_text():
    train_step = _make_step()  # jax.jit is not watched: the doctor sees no arguments
    assert not hasattr(train_step, "_function")
    calls = []
    with pytest.raises(Recompiled) as caught:
        with no_recompiles(train_step):
            w = jnp.zeros(3)
            for start in range(0, 100, 32):
                calls.append(start)
                w = train_step(w, {"x": DATA[start : start + 32]})
    assert calls == [0, 32, 64, 96]
    text = str(caught.value)
    assert "now f32[4,3] and before f32[32,3]" in text
    assert "jitlab.doctor.install()" in text


def test_the_guard_is_not_swallowed_by_except_exception(watched):
    train_step = _make_step()
    with pytest.raises(Recompiled):
        with no_recompiles(train_step):
            try:
                _epoch(train_step, jnp.zeros(3))
            except Exception:  # a program's retry loop
                pass


def test_another_function_recompiling_is_not_guarded(watched):
    train_step, other = _make_step(), _make_step()
    with no_recompiles(train_step):
        train_step(jnp.zeros(3), {"x": DATA[:32]})
        _epoch(other, jnp.zeros(3))  # recompiles: not the guarded function
    with pytest.raises(Recompiled):
        with no_recompiles():  # every watched function
            _epoch(other, jnp.zeros(3))  # warm for both batch sizes: compiles nothing
            _epoch(_make_step(), jnp.zeros(3))  # a fresh one: its 4-row batch raises


def test_the_example_on_the_doctor_page(tmp_path):
    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "doctor.md").read_text()
    start = page.index("## A guard")
    program = re.compile(r"```python\n(.*?)```", re.S).search(page, start).group(1)
    shown = re.compile(r"```text\n(.*?)```", re.S).search(page, start).group(1)
    (tmp_path / "guarded.py").write_text(program)
    done = subprocess.run(  # as `jitlab doctor` (the course registers its lessons)
        [sys.executable, "-m", "jitlab.cli", "doctor", "--", "python", "guarded.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 1

    def unlinked(text: str) -> str:  # a lesson's link is a path on this machine
        return re.sub(r"(See lesson [^:\n]*): \S+", r"\1", text)

    assert unlinked(shown) in unlinked(done.stderr), done.stderr[-3000:]


def test_a_callable_object_is_named_by_its_class_s_call(watched):
    """A jitted callable object has no ``__name__`` (JAX: ``<unnamed function>``); the
    guard names what the user wrote, as the report's table does."""

    class Scale:
        def __call__(self, x):
            return 2 * x

    scale = jax.jit(Scale())
    with pytest.raises(Recompiled) as caught, no_recompiles():
        scale(jnp.ones(2))
        scale(jnp.ones(3))
    first = str(caught.value).splitlines()[0]
    assert first.startswith(
        "test_a_callable_object_is_named_by_its_class_s_call.<locals>.Scale.__call__ ("
    )
