"""Running the user's program unchanged, in this process, as ``python`` would run it.

``python train.py a b`` and ``python -m pkg.train a b`` become ``runpy`` calls with the
same ``sys.argv``, ``sys.path[0]`` and ``__main__``. The program's exit is caught whatever
form it takes (normal end, ``sys.exit``, an exception, Ctrl-C) so the report can be
printed first.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import runpy
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any

import jax

from jitlab.doctor import classify


class CommandError(ValueError):
    """The command line names no runnable program (exit code 2)."""


@dataclasses.dataclass(frozen=True)
class Target:
    kind: str  # "script" | "module"
    name: str
    args: tuple[str, ...]

    @property
    def argv0(self) -> str:
        return self.name

    def words(self) -> list[str]:
        head = ["python", "-m", self.name] if self.kind == "module" else ["python", self.name]
        return head + list(self.args)


_PYTHON = re.compile(r"^(.*[/\\])?python[0-9.]*(\.exe)?$")
_IGNORED_OPTIONS = {"-u", "-B", "-E", "-s", "-q"}


def parse_command(words: Sequence[str]) -> Target:
    """``[python] script.py args`` or ``[python] -m module args`` -> Target."""
    words = list(words)
    if words and _PYTHON.match(words[0]):
        words = words[1:]
    while words and words[0] in _IGNORED_OPTIONS:  # harmless interpreter options
        words = words[1:]
    if not words:
        raise CommandError("no program to run: jitlab doctor -- python train.py [args]")
    if words[0] == "-m":
        if len(words) < 2:
            raise CommandError("-m needs a module name: jitlab doctor -- python -m pkg.train")
        module = words[1]
        sys.path.insert(0, os.getcwd())  # as python -m does, for the look-up
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        finally:
            sys.path.pop(0)
        if found is None:
            raise CommandError(f"no module named {module!r} (from -m {module})")
        return Target("module", module, tuple(words[2:]))
    if words[0].startswith("-"):
        raise CommandError(
            f"unsupported python option {words[0]!r}: the doctor runs the program in its own"
            " interpreter; give a script or -m module"
        )
    script = words[0]
    if not os.path.exists(script):
        raise CommandError(f"cannot run {script!r}: no such file")
    return Target("script", script, tuple(words[1:]))


@dataclasses.dataclass
class Outcome:
    exit_code: int
    error: BaseException | None = None
    interrupted: bool = False


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


class _CtrlC:
    """Remembers that Ctrl-C arrived. A KeyboardInterrupt raised while XLA is inside a
    callback (computing a cache key, say) comes out of JAX as a RuntimeError ("Exception
    raised in callback"); the run still counts as interrupted, not as a failure."""

    def __init__(self) -> None:
        self.pressed = False
        self._previous: Any = None

    def __enter__(self) -> _CtrlC:
        in_main = threading.current_thread() is threading.main_thread()
        if in_main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.pressed = True
        raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def run(target: Target) -> Outcome:
    """Run the program; never raises (except for a second Ctrl-C while cleaning up)."""
    with _CtrlC() as ctrl_c:
        return _run(target, ctrl_c)


def _run(target: Target, ctrl_c: _CtrlC) -> Outcome:
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    if target.kind == "script":
        sys.argv = [target.name, *target.args]
        here = os.path.dirname(os.path.abspath(target.name))
    else:
        sys.argv = [target.name, *target.args]  # runpy puts the module's path here
        here = os.getcwd()
    if sys.path:
        sys.path[0] = here
    else:
        sys.path.insert(0, here)
    try:
        if target.kind == "script":
            runpy.run_path(target.name, run_name="__main__")
        else:
            runpy.run_module(target.name, run_name="__main__", alter_sys=True)
        return Outcome(0)
    except SystemExit as done:
        return Outcome(_exit_code(done.code))
    except KeyboardInterrupt as stop:
        return Outcome(130, stop, interrupted=True)
    except BaseException as err:  # the program's own failure: reported after the report
        if ctrl_c.pressed:  # a Ctrl-C that JAX or the program turned into another error
            return Outcome(130, err, interrupted=True)
        return Outcome(1, err)
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0


_OURS = (os.path.dirname(os.path.abspath(__file__)) + os.sep, os.path.abspath(runpy.__file__))


def _is_ours(filename: str) -> bool:
    return filename.startswith("<frozen runpy") or os.path.abspath(filename).startswith(_OURS)


def _without_ours(tb: Any) -> Any:
    """The traceback without the doctor's frames (the runner's at its head, the jit
    wrapper's between the user's call and JAX's): the entries are relinked, which
    Python allows (``tb_next`` is writable)."""
    kept = []
    while tb is not None:
        if not _is_ours(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    for before, after in zip(kept, kept[1:], strict=False):
        before.tb_next = after
    if kept:
        kept[-1].tb_next = None
    return kept[0] if kept else None


def print_traceback(err: BaseException, file=None) -> None:
    """The program's traceback as Python would print it: without the doctor's frames."""
    file = file or sys.stderr
    traceback.print_exception(type(err), err, _without_ours(err.__traceback__), file=file)
    hint = lesson_hint(err)
    if hint:
        print(hint, file=file)


def lesson_hint(err: BaseException) -> str | None:
    """The errors two lessons teach: Python control flow on a traced value, and a static
    argument that cannot be hashed, never compile."""
    static = classify.CAUSES[classify.STATIC_VALUE]
    if isinstance(err, ValueError) and "Non-hashable static arguments" in str(err):
        return (
            "jitlab doctor: a static argument must be hashable, because jit looks it up in "
            f"its cache: pass a tuple, not a list or dict (lesson {static.lesson_name})."
        )
    if isinstance(
        err, jax.errors.ConcretizationTypeError | jax.errors.TracerIntegerConversionError
    ):
        flow = classify.CONTROL_FLOW
        return (
            "jitlab doctor: Python control flow (if, while, int(), range) met a traced value. "
            f"Lesson {flow.lesson_name}: use lax.cond, jnp.where or lax.fori_loop, or make the "
            f"value static (lesson {static.lesson_name})."
        )
    return None
