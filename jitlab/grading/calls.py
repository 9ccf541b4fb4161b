"""See every call a learner's wrapper makes to a jitted function, without changing it.

A compile count cannot tell whether a wrapper's answers came from the jitted function (a
NumPy path beside one decoy call compiles once too), so a grader watches the calls: inside
:func:`recording`, every reference to the target the wrapper can reach is a
:class:`Recorder`, which forwards each call unchanged (caches and counts are as without
it) and keeps a :class:`Call`. Not seen: a target reached through a list, a dict, an
attribute or a library (:data:`LIBRARIES`); the wrapper then "never called" it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import jax
import numpy as np

from jitlab.grading.checks import is_jitted


class Leaf(NamedTuple):
    """One argument leaf: its path (``batch['x']``), a copy taken before the call (None
    for a tracer) and its type as :func:`type_text` writes it."""

    path: str
    value: Any
    type: str


def type_text(value: Any) -> str:
    """``value``'s type as ``jax.typeof`` prints it (``~float32[]``), else its class name."""
    try:
        return "None" if value is None else str(jax.typeof(value))
    except TypeError:
        return type(value).__name__


def copy_leaf(leaf: Any) -> Any:
    """A copy of one leaf that a later in-place change by the caller cannot alter."""
    if isinstance(leaf, jax.core.Tracer):
        return None
    if isinstance(leaf, jax.Array) and leaf.is_deleted():  # donated: nothing left to copy
        return leaf
    if isinstance(leaf, np.ndarray | jax.Array | np.generic | float | int | bool):
        try:
            return np.array(leaf)
        except (TypeError, ValueError):  # a PRNG key array, say: immutable anyway
            return leaf
    return leaf


def _flat(tree: Any) -> tuple[list[tuple[Any, Any]], Any]:
    return jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda v: v is None)


def _leaves(name: str, tree: Any, *, copies: bool = False) -> list[Leaf]:
    return [
        Leaf(name + jax.tree_util.keystr(path), copy_leaf(v) if copies else None, type_text(v))
        for path, v in _flat(tree)[0]
    ]


def type_changes(
    before: Any, now: Any, *, name: str, labels: tuple[str, str] = ("before", "now"), limit: int = 3
) -> list[str]:
    """How the leaf types of pytree ``now`` (``name`` is its root's) differ from
    ``before``'s, one phrase each ("state['avg_loss']: ~float32[] before, float32[] now"),
    at most ``limit``; the containers when no leaf differs."""
    then, at = labels
    old = {x.path: x.type for x in _leaves(name, before)}
    new = {x.path: x.type for x in _leaves(name, now)}
    found = [f"{p}: {old[p]} {then}, {t} {at}" for p, t in new.items() if old.get(p, t) != t]
    if added := [p for p in new if p not in old]:
        found.append(f"{', '.join(added)}: absent {then}, present {at}")
    if gone := [p for p in old if p not in new]:
        found.append(f"{', '.join(gone)}: present {then}, absent {at}")
    old_tree, new_tree = _flat(before)[1], _flat(now)[1]
    if not found and old_tree != new_tree:
        found.append(f"containers differ: {new_tree} {at}, {old_tree} {then}")
    return [*found[:limit], f"and {len(found) - limit} more"] if len(found) > limit else found


@dataclasses.dataclass
class Call:
    """One call through a :class:`Recorder`: the arguments as passed and by parameter
    name, their leaves copied before the call, the doctor's signature ``key`` (for
    :func:`jitlab.grading.why`), the output and copies of its leaves."""

    args: tuple
    kwargs: dict
    arguments: dict[str, Any]
    inputs: tuple[Leaf, ...]
    jit_on: bool
    traced: bool = False
    compiled: bool = False
    out: Any = None
    outputs: tuple[Any, ...] = ()
    raised: bool = False
    key: Any = None
    within: str = ""  # for a traced call, what traced it: "a lax.scan", "a jax.jit"
    callbacks: tuple[str, ...] = ()  # host callbacks in the program a new compilation made

    def copied(self) -> dict[str, Any]:
        """The arguments by name, rebuilt from the copies taken before the call: what the
        call was given, even where the call donated (deleted) or changed it since."""
        leaves, rebuilt = iter(self.inputs), {}
        for name, value in self.arguments.items():
            flat, tree = _flat(value)
            copies = [next(leaves).value for _ in flat]
            kept = [c if c is not None else v for c, (_, v) in zip(copies, flat, strict=True)]
            rebuilt[name] = jax.tree_util.tree_unflatten(tree, kept)
        return rebuilt

    def returned(self) -> Any:
        """The output rebuilt from the copies taken as it came back (a later call may
        donate it), or the output itself when there are none (a traced call)."""
        if self.traced or self.raised:
            return self.out
        return jax.tree.unflatten(jax.tree.structure(self.out), self.outputs)


# The public JAX functions that trace a function they are given, by their frame's name.
_TRACING = {"cache_miss": "a jax.jit", "vmap_f": "a jax.vmap", "grad_f": "a jax.grad"}
_TRACING |= {"value_and_grad_f": "a jax.value_and_grad"}
_TRACING |= {n: f"a lax.{n}" for n in ("scan", "fori_loop", "while_loop", "cond", "switch", "map")}


def _in_jax(frame: Any) -> bool:
    return frame is not None and f"{os.sep}jax{os.sep}" in frame.f_code.co_filename


def _tracing(frame: Any) -> str:
    """What traces the call made from ``frame``: the outermost public function of the run
    of JAX's frames just above it (a ``lax.scan`` inside ``jax.jit`` is the scan)."""
    while frame is not None and not _in_jax(frame):
        frame = frame.f_back
    found = "a JAX transformation"
    while _in_jax(frame):
        found, frame = _TRACING.get(frame.f_code.co_name, found), frame.f_back
    return found


def _primitives(jaxpr: Any) -> Iterator[str]:
    """The names of the primitives in ``jaxpr`` and in the jaxprs its equations hold."""
    for eqn in jaxpr.eqns:
        yield eqn.primitive.name
        for param in eqn.params.values():
            for inner in param if isinstance(param, tuple | list) else [param]:
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    yield from _primitives(inner)


# The callbacks that return values into the program (jax.debug.print's returns nothing).
_CALLBACK_PRIMITIVES = ("pure_callback", "io_callback")


def python_work(calls: Sequence[Call]) -> tuple[list[str], str]:
    """The host callbacks in the programs these calls compiled, and how a verdict says
    it: [] and "" when there are none."""
    found = [name for call in calls for name in call.callbacks]
    return found, f"a {found[0]} in the program: the work runs in Python" if found else ""


def host_callbacks(fn: Any, *args: Any, **kwargs: Any) -> list[str]:
    """The host callbacks (``pure_callback``, ``io_callback``) in the program
    ``fn.trace(*args, **kwargs)`` builds ([] when it does not trace: the grader's own calls
    already reported why). Right after a call, the trace is the one the call ran (jit's
    cache)."""
    try:
        traced = fn.trace(*args, **kwargs)
    except Exception:
        return []
    return sorted({p for p in _primitives(traced.jaxpr.jaxpr) if p in _CALLBACK_PRIMITIVES})


def _has_tracer(tree: Any) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(tree))


class Recorder:
    """Forwards calls to ``target`` and keeps each: ``calls`` the dispatches, ``traced``
    those made while another function was traced (inlined there). ``compiles()`` counts
    the target's compilations so far. Other attributes are the target's."""

    def __init__(self, target: Callable[..., Any], compiles: Callable[[], int] | None = None):
        from jitlab.grading.causes import key_of

        self.target = target
        self._compiles = compiles or (lambda: 0)
        self._key = key_of(target)
        self.on_call: Callable[[Call], None] | None = None  # sees each call before it runs
        self.calls: list[Call] = []
        self.traced: list[Call] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        traced = _has_tracer((args, kwargs))
        try:
            named = dict(inspect.signature(self.target).bind(*args, **kwargs).arguments)
        except (TypeError, ValueError):
            named = {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}
        inputs = tuple(leaf for n, v in named.items() for leaf in _leaves(n, v, copies=not traced))
        jit_on = not jax.config.jax_disable_jit
        call = Call(args, kwargs, named, inputs, jit_on, traced, key=self._key(args, kwargs))
        if self.on_call is not None:
            self.on_call(call)
        before = self._compiles()
        try:
            call.out = self.target(*args, **kwargs)
        except BaseException:
            call.raised = True
            raise
        finally:
            call.compiled = self._compiles() > before
            # Concrete arguments inside another trace still give tracers back.
            call.traced = call.traced or _has_tracer(call.out)
            call.within = _tracing(sys._getframe(1)) if call.traced else ""
            if not call.traced and not call.raised:
                call.outputs = tuple(copy_leaf(leaf) for leaf in jax.tree.leaves(call.out))
            if call.compiled and not call.traced and not call.raised and is_jitted(self.target):
                # The program just compiled, read before any code of the learner's runs
                # again: a function that builds another program on a later trace is seen.
                call.callbacks = tuple(host_callbacks(self.target, *args, **kwargs))
            (self.traced if call.traced else self.calls).append(call)
        return call.out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)

    def __repr__(self) -> str:
        return f"Recorder({self.target!r})"


# Packages whose functions are never followed (nor their namespaces changed); how deep.
LIBRARIES = ("jax", "jaxlib", "numpy", "jitlab", "optax", "flax", "equinox", "chex")
DEPTH = 4

_MOST_FUNCTIONS = 200  # a bound on the walk, whatever the learner's code looks like


def _attribute(obj: Any, name: str) -> Any:
    """``obj.name``, or None however the lookup fails (a learner's ``__getattr__``)."""
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _python_functions(obj: Any, target: Any) -> list[Any]:
    """The plain Python functions behind ``obj`` (through a jit, a partial and its
    arguments, a method, ``__wrapped__``, a callable object's ``__call__``), not target."""
    found: list[Any] = []
    todo = [obj]
    for _ in range(32):  # partials of partials of ...: a short chain in practice
        if not todo:
            break
        fn = todo.pop()
        if fn is None or fn is target or isinstance(fn, type) or not callable(fn):
            continue
        if inspect.isfunction(fn):
            found.append(fn)
        elif isinstance(fn, functools.partial):
            todo += [fn.func, *fn.args, *fn.keywords.values()]
        elif inspect.ismethod(fn):
            todo.append(fn.__func__)
        elif is_jitted(fn) or _attribute(fn, "__wrapped__") is not None:
            todo.append(_attribute(fn, "__wrapped__"))
        elif inspect.isfunction(call := inspect.getattr_static(type(fn), "__call__", None)):
            todo.append(call)
    return found


def _global_names(code: Any) -> list[str]:
    """The global names a code object and the code objects nested in it use."""
    nested = [_global_names(c) for c in code.co_consts if inspect.iscode(c)]
    return [*code.co_names, *(name for names in nested for name in names)]


def _cell_contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def reachable_functions(
    wrapper: Callable[..., Any], target: Any = None, *, depth: int = DEPTH
) -> list[Any]:
    """``wrapper``'s function and those it reaches ``depth`` levels deep through closure
    cells, defaults, ``__wrapped__`` and the globals its code names (not libraries)."""
    found: list[Any] = []
    frontier: list[Any] = [wrapper]
    for _ in range(depth + 1):
        reached: list[Any] = []
        for fn in (fn for obj in frontier for fn in _python_functions(obj, target)):
            library = str(getattr(fn, "__module__", "") or "").split(".")[0] in LIBRARIES
            if any(fn is f for f in found) or library:
                continue
            if len(found) >= _MOST_FUNCTIONS:
                return found
            found.append(fn)
            reached += [_cell_contents(cell) for cell in fn.__closure__ or ()]
            reached += [*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()]
            reached.append(getattr(fn, "__wrapped__", None))
            reached += [fn.__globals__.get(name) for name in _global_names(fn.__code__)]
        frontier = reached
    return found


def _swap(undo: list, get: Callable[[], Any], put: Callable[[Any], Any], new: Any) -> None:
    """Put ``new`` in a slot; ``undo`` puts the old value back unless the slot changed."""
    old = get()
    put(new)
    undo.append(lambda: get() is new and put(old))


@contextmanager
def recording(
    wrapper: Callable[..., Any],
    target: Callable[..., Any],
    compiles: Callable[[], int] | None = None,
    *,
    depth: int = DEPTH,
) -> Iterator[Recorder]:
    """While the block runs, ``wrapper`` reaches ``target`` only through a Recorder: every
    reference in the globals, closure cells and defaults of the functions it reaches is
    rebound, and put back afterwards. ``compiles``: ``lambda: count.compiles``."""
    recorder = Recorder(target, compiles)
    undo: list[Callable[[], Any]] = []
    namespaces: list[dict[str, Any]] = []
    try:
        for fn in reachable_functions(wrapper, target, depth=depth):
            ns = fn.__globals__
            if not any(ns is seen for seen in namespaces):
                namespaces.append(ns)
                for name in [name for name, value in ns.items() if value is target]:
                    put = functools.partial(ns.__setitem__, name)
                    _swap(undo, functools.partial(ns.get, name), put, recorder)
            for cell in fn.__closure__ or ():
                if _cell_contents(cell) is target:
                    put = functools.partial(setattr, cell, "cell_contents")
                    _swap(undo, functools.partial(_cell_contents, cell), put, recorder)
            for attribute in ("__defaults__", "__kwdefaults__"):
                old = getattr(fn, attribute)
                if isinstance(old, dict) and any(v is target for v in old.values()):
                    mine: Any = {k: recorder if v is target else v for k, v in old.items()}
                elif isinstance(old, tuple) and any(v is target for v in old):
                    mine = tuple(recorder if v is target else v for v in old)
                else:
                    continue
                put = functools.partial(setattr, fn, attribute)
                _swap(undo, functools.partial(getattr, fn, attribute), put, mine)
        yield recorder
    finally:
        for restore in reversed(undo):
            restore()


def deleted_leaves(tree: Any, name: str) -> list[str]:
    """The paths (``params['w']``) of the jax Arrays in ``tree`` that were deleted: donated
    to a jitted function, whose result took their buffers."""
    return [
        name + jax.tree_util.keystr(path)
        for path, leaf in _flat(tree)[0]
        if isinstance(leaf, jax.Array) and leaf.is_deleted()
    ]


class Changed(NamedTuple):
    """What the learner's code changed of the caller's arguments, for a verdict: ``seen``
    ("" when nothing), and whether an array was donated (deleted: its buffer went to a
    result), which calls for another hint than a change in place."""

    seen: str
    donated: bool


def changed_arguments(given: Mapping[str, Any], before: Mapping[str, Any]) -> Changed:
    """What changed of the caller's arguments ``given`` (by name) since ``before``, copies
    of them taken before the call (:func:`copy_leaf`): a donated array first, then a list
    or dict that changed length or keys (popped, cleared, added to), then the first array
    or value changed in place. Every grader that hands over arguments says it this way."""
    gone = [path for name, tree in given.items() for path in deleted_leaves(tree, name)]
    if gone:
        return Changed(f"{', '.join(gone[:3])} deleted: donated to a jitted function", True)
    for name, now in given.items():
        if found := _first_change(now, before[name], name):
            return Changed(found, False)
    return Changed("", False)


def _first_change(now: Any, then: Any, name: str) -> str:
    """How ``now`` differs from the copy ``then`` at its first difference ("" if none)."""
    if isinstance(then, list | tuple | dict):
        if type(now) is not type(then):
            return f"{name} is now a {type(now).__name__}, not a {type(then).__name__}"
        if isinstance(then, dict) and set(now) != set(then):
            keys = (sorted(map(str, keys)) for keys in (now, then))
            return "{} now has the keys {}, not {}".format(name, *keys)
        if len(now) != len(then):
            held = f"{len(now)} items, not {len(then)}"
            return f"{name} now holds {held} (popped, cleared or added to)"
        for key in then if isinstance(then, dict) else range(len(then)):
            if found := _first_change(now[key], then[key], f"{name}[{key!r}]"):
                return found
        return ""
    if same_content(now, then):
        return ""
    shapes = [np.shape(v) if isinstance(v, np.ndarray | jax.Array) else None for v in (then, now)]
    resized = shapes[0] != shapes[1] and None not in shapes
    sizes = f" (shape {shapes[0]} before, {shapes[1]} after)"
    return f"{name} was changed in place" + resized * sizes


def same_content(a: Any, b: Any) -> bool:
    """Two pytrees have one structure and equal leaves (values, not ids; NaN equals NaN)."""
    (leaves_a, tree_a), (leaves_b, tree_b) = _flat(a), _flat(b)
    pairs = zip(leaves_a, leaves_b, strict=True)
    return tree_a == tree_b and all(_same_leaf(x, y) for (_, x), (_, y) in pairs)


def _same_leaf(x: Any, y: Any) -> bool:
    if x is None or y is None:
        return x is None and y is None
    try:
        xa, ya = np.asarray(x), np.asarray(y)
    except Exception:
        return False
    try:
        return xa.shape == ya.shape and np.array_equal(xa, ya, equal_nan=True)  # NaN is its own
    except TypeError:  # dtypes without NaN (objects, strings)
        return np.array_equal(xa, ya)
