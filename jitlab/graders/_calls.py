"""See every call a learner's wrapper makes to a jitted function, without changing it.

Exercises 03 and 04 ask for a plain Python function (``train``, ``loss``) that calls a
jitted function (``sgd_step``, ``batch_loss``). Counting compilations alone cannot tell
whether the wrapper's *answers* came from the jitted function: a NumPy path plus one
"decoy" call compiles exactly once too. So, while the grader calls the wrapper, every
name in the wrapper's globals, closure cells and defaults that refers to the jitted
object is rebound to a :class:`Recorder`, a thin proxy that forwards each call to the
real jitted object (JAX's caches and counts are unchanged) and keeps:

- the call's abstract signature (:class:`Signature`: calling style, and the abstract
  value of every leaf by argument name), taken before the call runs;
- whether jit was switched on at that moment (``jax.disable_jit()`` inside the wrapper
  is seen here, though it is gone again by the time the grader's own canary runs);
- whether the call compiled (from a counter the grader passes in);
- the arguments and the output, so the grader can require the wrapper's answers to be
  the outputs of these calls.

From the signatures, :func:`differences` names what changed between two calls in the
grader's own words ("state['avg_loss']: ~float32[] then float32[]"), so a verdict does
not depend on JAX's closest-key guess.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import jax


@dataclasses.dataclass(frozen=True)
class Signature:
    """What jit keys a call on, described for a learner.

    ``style``: which parameters came positionally and which by keyword.
    ``leaves``: (path, abstract value) for every leaf of the bound arguments; a ``None``
    is listed as a leaf reading "None" so that it shows up where an array was.
    ``structure``: the tree structure of the bound arguments (catches a list for a
    tuple, which leaves the paths unchanged).
    """

    style: str
    leaves: tuple[tuple[str, str], ...]
    structure: str

    def leaf(self, path: str) -> str | None:
        return dict(self.leaves).get(path)


def _abstract(value: Any) -> str:
    if value is None:
        return "None"
    try:
        return str(jax.typeof(value))
    except TypeError:
        return type(value).__name__


def _parameters(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def bound_arguments(fn: Callable[..., Any], args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by parameter name (``arg0``, ``arg1``... when unknown)."""
    parameters = _parameters(fn)
    if parameters is not None:
        try:
            return dict(parameters.bind(*args, **kwargs).arguments)
        except TypeError:
            pass
    return {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}


def signature(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Signature:
    """The abstract signature of ``fn(*args, **kwargs)``."""
    named = bound_arguments(fn, args, kwargs)
    positional = list(named)[: len(args)]
    style = ", ".join(positional + [f"{key}=" for key in kwargs])
    leaves, structures = [], []
    for name, value in named.items():  # in the order of the parameters
        flat, treedef = jax.tree_util.tree_flatten_with_path(value, is_leaf=lambda v: v is None)
        leaves += [(name + jax.tree_util.keystr(path), _abstract(v)) for path, v in flat]
        structures.append(f"{name}={treedef}")
    return Signature(style=style, leaves=tuple(leaves), structure=", ".join(structures))


def differences(
    before: Signature,
    now: Signature,
    *,
    limit: int = 3,
    then_label: str = "before",
    now_label: str = "now",
) -> list[str]:
    """What differs from ``before`` to ``now``, one short phrase per difference."""
    found = []
    if before.style != now.style:
        found.append(f"called as ({now.style}) {now_label}, ({before.style}) {then_label}")
    old, new = dict(before.leaves), dict(now.leaves)
    for path in [p for p in new if p in old and new[p] != old[p]]:
        found.append(f"{path}: {old[path]} {then_label}, {new[path]} {now_label}")
    gone = [p for p in old if p not in new]
    added = [p for p in new if p not in old]
    if added:
        found.append(f"{', '.join(added)}: absent {then_label}, present {now_label}")
    if gone:
        found.append(f"{', '.join(gone)}: present {then_label}, absent {now_label}")
    if not found and before.structure != now.structure:
        found.append(
            f"containers differ: {now.structure} {now_label}, {before.structure} {then_label}"
        )
    if len(found) > limit:
        found = [*found[:limit], f"and {len(found) - limit} more"]
    return found


@dataclasses.dataclass
class Call:
    """One call that went through a :class:`Recorder`."""

    args: tuple
    kwargs: dict
    signature: Signature
    jit_on: bool
    compiled: bool = False
    out: Any = None
    raised: bool = False


class Recorder:
    """Forwards calls to ``target`` (a jitted function) and remembers each one.

    ``compiles`` returns how many compilations of ``target`` have been counted so far
    (the grader's ``count_compiles`` block), so each call knows whether it compiled.
    Attribute lookups (``clear_cache``, ``lower``...) go to the target.
    """

    def __init__(self, target: Callable[..., Any], compiles: Callable[[], int]) -> None:
        self._target = target
        self._compiles = compiles
        self.calls: list[Call] = []
        self.inside_traces = 0  # calls made while some function was being traced

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((args, kwargs))):
            # Called from inside another jitted function while it is traced: not a
            # dispatch of the target, and its "output" is a tracer. Not a call to record.
            self.inside_traces += 1
            return self._target(*args, **kwargs)
        call = Call(
            args=args,
            kwargs=kwargs,
            signature=signature(self._target, args, kwargs),
            jit_on=not jax.config.jax_disable_jit,
        )
        self.calls.append(call)
        before = self._compiles()
        try:
            call.out = self._target(*args, **kwargs)
        except BaseException:
            call.raised = True
            raise
        finally:
            call.compiled = self._compiles() > before
        return call.out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


_LIBRARIES = ("jax", "jaxlib", "numpy", "jitlab", "optax", "flax", "equinox", "chex")


def _learner_functions(wrapper: Callable[..., Any], depth: int = 4) -> list[Any]:
    """``wrapper`` and the plain functions it can reach: those in its closure cells and
    defaults, and the globals its code names, followed ``depth`` levels deep. Library
    functions are left alone, and so is anything that is not a Python function."""
    found: list[Any] = []
    frontier = [wrapper]
    for _ in range(depth + 1):
        reached = []
        for fn in frontier:
            if not inspect.isfunction(fn) or any(fn is f for f in found):
                continue
            if str(getattr(fn, "__module__", "") or "").split(".")[0] in _LIBRARIES:
                continue
            found.append(fn)
            for cell in fn.__closure__ or ():
                try:
                    reached.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    pass
            reached += list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
            reached += [fn.__globals__.get(name) for name in _names(fn.__code__)]
        frontier = reached
    return found


def _names(code: Any) -> list[str]:
    """The global names a code object and the code objects nested in it use."""
    names = list(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names += _names(const)
    return names


@contextmanager
def recording(
    wrapper: Callable[..., Any], target: Callable[..., Any], compiles: Callable[[], int]
) -> Iterator[Recorder]:
    """While the block runs, ``wrapper`` reaches ``target`` only through a Recorder.

    Rebinds every reference to ``target`` in the globals, closure cells and default
    values of ``wrapper`` and of the plain functions it reaches (helpers it calls, by a
    global name or from a closure), and restores them all afterwards, whatever happens.
    A learner's function that reaches the jitted function some other way (from a list,
    an object's attribute) is not seen: its calls are missing from the record.
    """
    recorder = Recorder(target, compiles)
    undo: list[Callable[[], None]] = []
    namespaces: list[dict] = []
    try:
        for fn in _learner_functions(wrapper):
            namespace = fn.__globals__
            if not any(namespace is seen for seen in namespaces):
                namespaces.append(namespace)
                for name, value in list(namespace.items()):
                    if value is target:
                        namespace[name] = recorder
                        undo.append(lambda ns=namespace, name=name: ns.__setitem__(name, target))
            for cell in fn.__closure__ or ():
                try:
                    held = cell.cell_contents
                except ValueError:
                    continue
                if held is target:
                    cell.cell_contents = recorder
                    undo.append(lambda cell=cell: setattr(cell, "cell_contents", target))
            defaults = fn.__defaults__
            if defaults and any(value is target for value in defaults):
                fn.__defaults__ = tuple(recorder if v is target else v for v in defaults)
                undo.append(lambda fn=fn, d=defaults: setattr(fn, "__defaults__", d))
            kwdefaults = fn.__kwdefaults__
            if kwdefaults and any(value is target for value in kwdefaults.values()):
                fn.__kwdefaults__ = {
                    k: recorder if v is target else v for k, v in kwdefaults.items()
                }
                undo.append(lambda fn=fn, d=kwdefaults: setattr(fn, "__kwdefaults__", d))
        yield recorder
    finally:
        for restore in reversed(undo):
            restore()


def same_content(a: Any, b: Any) -> bool:
    """True when two pytrees have one structure and equal leaves (values, not ids)."""
    import numpy as np

    leaves_a, tree_a = jax.tree_util.tree_flatten(a, is_leaf=lambda v: v is None)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b, is_leaf=lambda v: v is None)
    if tree_a != tree_b:
        return False
    for x, y in zip(leaves_a, leaves_b, strict=True):
        if (x is None) != (y is None):
            return False
        if x is None:
            continue
        try:
            xa, ya = np.asarray(x), np.asarray(y)
        except Exception:
            return False
        if xa.shape != ya.shape:
            return False
        try:
            equal = np.array_equal(xa, ya, equal_nan=True)  # a NaN result is still its own
        except TypeError:  # dtypes without NaN (objects, strings)
            equal = np.array_equal(xa, ya)
        if not equal:
            return False
    return True
