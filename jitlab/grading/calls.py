"""See every call a learner's wrapper makes to a jitted function, without changing it.

Why this exists. Several exercises ask for a plain Python function (``rms``, ``score``,
``train``, ``loss``, ``fit``, ``train_fast``) that calls a jitted function
(``padded_rms``, ``score_core``, ``sgd_step``, ``batch_loss``, ``train_step``).
Counting compilations alone cannot tell whether the wrapper's *answers* came from the
jitted function: a NumPy path plus one "decoy" call compiles exactly once too, and so
does a loop that returns the grader's own reference. A grader has to see the calls.

How. While a grader runs the learner's wrapper inside :func:`recording`, every reference
to the jitted function that the wrapper can reach is rebound to a :class:`Recorder`: the
module globals, closure cells, default and keyword-default values of the wrapper and of
the plain functions it reaches (helpers it calls by a global name, holds in a closure or
a default; through ``functools.partial``, bound methods, decorators' ``__wrapped__``,
callable objects and other jitted functions), followed a few levels deep. The recorder
forwards each call, unchanged, to the very same jitted object, so JAX's caches and
compile counts are exactly what they would be without it. For each call it keeps a
:class:`Call`:

- the arguments as passed and bound to the target's parameter names, and a copy of every
  argument leaf taken before the call (later in-place changes by the caller cannot alter
  the record);
- the call's abstract :class:`Signature` (calling style, ``jax.typeof`` of every leaf by
  argument path, tree structure), from which :func:`differences` names what changed
  between two calls in the grader's own words, so that a verdict does not depend on
  JAX's closest-key guess;
- whether jit was switched on at that moment (``jax.disable_jit()`` inside the wrapper
  is seen here, though it is gone again by the time a grader's own canary runs);
- whether the call compiled (from a counter the grader passes in);
- the output, and copies of its leaves.

A call made while another function is being traced (the wrapper jits a lambda around the
target, or is itself jitted) is not a dispatch of the target: its outputs are tracers. It
is kept apart, in :attr:`Recorder.traced`, so that graders can say so.

Everything rebound is put back when the block ends, whatever happens (an exception, a
failed check); a name the learner's code rebound to something else meanwhile is left as
the learner left it.

Limits. Only references the wrapper can reach by the routes above are seen. A wrapper
that reaches the jitted function some other way (an item of a list or dict, an
attribute of an object or a module such as ``mymodule.step``, an argument of a
``functools.partial`` built before the block, a function defined in a library) calls
it unseen: those calls are missing from the record, and a grader will report that the
wrapper never called it. Functions of ``jax``, ``numpy``, ``jitlab`` and the other
libraries in :data:`LIBRARIES` are not followed. The copies are NumPy arrays, made on the
host at every call: fine for a grader's small inputs, not for a training run.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import jax
import numpy as np

from jitlab.grading.checks import is_jitted

# ------------------------------------------------------------------ signatures


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
        """The abstract value at ``path`` ("lr", "batch['x']"), or None when absent."""
        return dict(self.leaves).get(path)

    def __str__(self) -> str:
        """As a learner would read it: ``(padded: float32[512], n: ~int32[])``."""
        return "(" + ", ".join(f"{path}: {kind}" for path, kind in self.leaves) + ")"


class Leaf(NamedTuple):
    """One leaf of a call's arguments: where it was, a copy of it, and its type."""

    path: str
    """The argument's parameter name and the path inside it: ``batch['x']``."""
    value: Any
    """A copy taken before the call (NumPy for arrays and scalars; None for a tracer)."""
    type: str
    """``jax.typeof`` as text (``~float32[]`` marks a weak type), "None", or the
    Python type's name for a leaf JAX cannot type."""


def _abstract(value: Any) -> str:
    if value is None:
        return "None"
    try:
        return str(jax.typeof(value))
    except TypeError:
        return type(value).__name__


def copy_leaf(leaf: Any) -> Any:
    """A copy of one leaf that a later in-place change by the caller cannot alter."""
    if isinstance(leaf, jax.core.Tracer):
        return None
    if isinstance(leaf, np.ndarray | jax.Array | np.generic | float | int | bool):
        try:
            return np.array(leaf)
        except (TypeError, ValueError):  # a PRNG key array, say: immutable anyway
            return leaf
    return leaf


def _parameters(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def bound_arguments(fn: Callable[..., Any], args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by parameter name, in the parameters' order (``arg0``,
    ``arg1``... and the keywords as given when they do not bind to ``fn``)."""
    parameters = _parameters(fn)
    if parameters is not None:
        try:
            return dict(parameters.bind(*args, **kwargs).arguments)
        except TypeError:
            pass
    return {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}


def _described(
    fn: Callable[..., Any], args: tuple, kwargs: dict, *, copies: bool
) -> tuple[dict[str, Any], Signature, tuple[Leaf, ...]]:
    """Bound arguments, signature and leaves of ``fn(*args, **kwargs)``."""
    named = bound_arguments(fn, args, kwargs)
    positional = list(named)[: len(args)]
    style = ", ".join(positional + [f"{key}=" for key in kwargs])
    leaves: list[Leaf] = []
    structures = []
    for name, value in named.items():  # in the order of the parameters
        flat, treedef = jax.tree_util.tree_flatten_with_path(value, is_leaf=lambda v: v is None)
        for path, v in flat:
            kept = copy_leaf(v) if copies else None
            leaves.append(Leaf(name + jax.tree_util.keystr(path), kept, _abstract(v)))
        structures.append(f"{name}={treedef}")
    sig = Signature(
        style=style,
        leaves=tuple((leaf.path, leaf.type) for leaf in leaves),
        structure=", ".join(structures),
    )
    return named, sig, tuple(leaves)


def signature(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Signature:
    """The abstract signature of ``fn(*args, **kwargs)`` (``fn`` is not called)."""
    return _described(fn, args, kwargs, copies=False)[1]


def differences(
    before: Signature,
    now: Signature,
    *,
    limit: int = 3,
    then_label: str = "before",
    now_label: str = "now",
) -> list[str]:
    """What differs from ``before`` to ``now``, one short phrase per difference
    ("state['avg_loss']: ~float32[] before, float32[] now"), at most ``limit`` of them
    and then "and N more"."""
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


# ------------------------------------------------------------------ the recorder


@dataclasses.dataclass
class Call:
    """One call that went through a :class:`Recorder`."""

    args: tuple
    """The positional arguments as passed (the caller's own objects)."""
    kwargs: dict
    """The keyword arguments as passed."""
    arguments: dict[str, Any]
    """The arguments bound to the target's parameter names, in their order."""
    signature: Signature
    """Calling style, abstract value of every leaf, tree structure."""
    inputs: tuple[Leaf, ...]
    """Every argument leaf with a copy taken before the call (same order as
    ``signature.leaves``)."""
    jit_on: bool
    """False when ``jax.disable_jit()`` or ``jax_disable_jit`` was in force."""
    traced: bool = False
    """Made while another function was being traced (its output is a tracer)."""
    compiled: bool = False
    """The counter passed to :func:`recording` went up during the call."""
    out: Any = None
    """What the target returned (the object itself)."""
    outputs: tuple[Any, ...] = ()
    """Copies of the output's leaves (``jax.tree.leaves``; None for a tracer)."""
    raised: bool = False
    """The target raised instead of returning."""
    key: Any = None
    """The doctor's signature of the call (:func:`jitlab.doctor.signature.take`), taken
    before it: what :func:`jitlab.grading.causes.why` compares."""


def _has_tracer(tree: Any) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(tree))


class Recorder:
    """Forwards calls to ``target`` (a jitted function) and remembers each one.

    ``calls`` lists the calls that dispatched the target, in order; ``traced`` lists
    the calls made while another function was being traced (not dispatches: the target
    was inlined into that function's program). ``compiles``, when given, returns how
    many compilations of the target have been counted so far (the grader's
    ``count_compiles`` block), so that each call knows whether it compiled. Attribute
    lookups (``clear_cache``, ``lower``, ``__name__``...) go to the target.
    """

    def __init__(
        self,
        target: Callable[..., Any],
        compiles: Callable[[], int] | None = None,
        **options: Any,
    ) -> None:
        from jitlab.grading.causes import key_of

        self.target = target
        self._compiles = compiles or (lambda: 0)
        self._key = key_of(target, **options)
        self.calls: list[Call] = []
        self.traced: list[Call] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        traced = _has_tracer((args, kwargs))
        named, sig, inputs = _described(self.target, args, kwargs, copies=not traced)
        call = Call(
            args=args,
            kwargs=kwargs,
            arguments=named,
            signature=sig,
            inputs=inputs,
            jit_on=not jax.config.jax_disable_jit,
            traced=traced,
            key=self._key(args, kwargs),
        )
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
            if not call.traced and not call.raised:
                call.outputs = tuple(copy_leaf(leaf) for leaf in jax.tree.leaves(call.out))
            (self.traced if call.traced else self.calls).append(call)
        return call.out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)

    def __repr__(self) -> str:
        return f"Recorder({self.target!r})"


# ------------------------------------------------------------------ rebinding

LIBRARIES = ("jax", "jaxlib", "numpy", "jitlab", "optax", "flax", "equinox", "chex")
"""Top-level packages whose functions are never followed (nor their namespaces changed)."""

DEPTH = 4
"""How many calls deep :func:`recording` follows helpers by default."""

_MOST_FUNCTIONS = 200  # a bound on the walk, whatever the learner's code looks like


def _python_functions(obj: Any, target: Any) -> list[Any]:
    """The plain Python functions behind ``obj``: itself, or what a jitted function, a
    ``functools.partial`` (and its arguments), a bound method, a decorator's
    ``__wrapped__`` or a callable object's ``__call__`` holds. Never the target."""
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
        else:
            call = inspect.getattr_static(type(fn), "__call__", None)
            if inspect.isfunction(call):
                todo.append(call)
    return found


def _attribute(obj: Any, name: str) -> Any:
    """``obj.name``, or None however the lookup fails (a learner's ``__getattr__``)."""
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _is_library(fn: Any) -> bool:
    return str(getattr(fn, "__module__", "") or "").split(".")[0] in LIBRARIES


def _global_names(code: Any) -> list[str]:
    """The global names a code object and the code objects nested in it use."""
    names = list(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names += _global_names(const)
    return names


def _cell_contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def reachable_functions(
    wrapper: Callable[..., Any], target: Any = None, *, depth: int = DEPTH
) -> list[Any]:
    """``wrapper``'s plain Python function and those it can reach, ``depth`` levels deep:
    through its closure cells, defaults, keyword defaults, ``__wrapped__`` and the
    globals its code names (see :func:`_python_functions` for what is looked through).
    Library functions (:data:`LIBRARIES`) and ``target`` itself are not followed."""
    found: list[Any] = []
    frontier: list[Any] = [wrapper]
    for _ in range(depth + 1):
        reached: list[Any] = []
        for obj in frontier:
            for fn in _python_functions(obj, target):
                if any(fn is f for f in found) or _is_library(fn):
                    continue
                if len(found) >= _MOST_FUNCTIONS:
                    return found
                found.append(fn)
                reached += [_cell_contents(cell) for cell in fn.__closure__ or ()]
                reached += list(fn.__defaults__ or ())
                reached += list((fn.__kwdefaults__ or {}).values())
                reached.append(getattr(fn, "__wrapped__", None))
                reached += [fn.__globals__.get(name) for name in _global_names(fn.__code__)]
        frontier = reached
    return found


@contextmanager
def recording(
    wrapper: Callable[..., Any],
    target: Callable[..., Any],
    compiles: Callable[[], int] | None = None,
    *,
    depth: int = DEPTH,
    **options: Any,
) -> Iterator[Recorder]:
    """While the block runs, ``wrapper`` reaches ``target`` only through a Recorder.

    Rebinds every reference to ``target`` in the globals, closure cells, defaults and
    keyword defaults of ``wrapper`` and of the functions it reaches
    (:func:`reachable_functions`), and puts them all back afterwards, whatever happens.
    ``compiles`` (e.g. ``lambda: count.compiles``) lets each :class:`Call` say whether it
    compiled. Calls made through other routes (a list, an attribute) are not seen: see
    the module's docstring. ``options`` (``static_argnums``, ``static_argnames``) say
    which arguments are static where :func:`jitlab.grading.causes.jit_options` cannot
    read them from ``target``.
    """
    recorder = Recorder(target, compiles, **options)
    undo: list[Callable[[], None]] = []
    namespaces: list[dict[str, Any]] = []

    def put_back_global(namespace: dict[str, Any], name: str) -> None:
        if namespace.get(name) is recorder:  # unless the learner's code rebound it
            namespace[name] = target

    def put_back_cell(cell: Any) -> None:
        if _cell_contents(cell) is recorder:
            cell.cell_contents = target

    def put_back(fn: Any, attribute: str, mine: Any, old: Any) -> None:
        if getattr(fn, attribute) is mine:
            setattr(fn, attribute, old)

    try:
        for fn in reachable_functions(wrapper, target, depth=depth):
            namespace = fn.__globals__
            if not any(namespace is seen for seen in namespaces):
                namespaces.append(namespace)
                for name, value in list(namespace.items()):
                    if value is target:
                        namespace[name] = recorder
                        undo.append(functools.partial(put_back_global, namespace, name))
            for cell in fn.__closure__ or ():
                if _cell_contents(cell) is target:
                    cell.cell_contents = recorder
                    undo.append(functools.partial(put_back_cell, cell))
            defaults = fn.__defaults__
            if defaults and any(value is target for value in defaults):
                fn.__defaults__ = tuple(recorder if v is target else v for v in defaults)
                undo.append(
                    functools.partial(put_back, fn, "__defaults__", fn.__defaults__, defaults)
                )
            kwdefaults = fn.__kwdefaults__
            if kwdefaults and any(value is target for value in kwdefaults.values()):
                fn.__kwdefaults__ = {
                    k: recorder if v is target else v for k, v in kwdefaults.items()
                }
                undo.append(
                    functools.partial(put_back, fn, "__kwdefaults__", fn.__kwdefaults__, kwdefaults)
                )
        yield recorder
    finally:
        for restore in reversed(undo):
            restore()


# ------------------------------------------------------------------ comparing outputs


def same_content(a: Any, b: Any) -> bool:
    """True when two pytrees have one structure and equal leaves (values, not ids; a NaN
    equals a NaN)."""
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


def missed_calls(
    recorder: Recorder,
    *,
    wrapper: str,
    target: str,
    missed: int,
    total: int,
    first: str = "",
    direct_call: str,
) -> tuple[str, str]:
    """What a grader says (``seen``, ``hint``) when ``missed`` of ``total`` calls of the
    learner's ``wrapper`` did not dispatch the jitted ``target``: either it was only
    called while something else was being traced (a ``jax.jit`` of the learner's own,
    which inlines it), or never. ``first`` names the first such call (", the first for
    length 3"); ``direct_call`` is how the wrapper should call it (``"score_core(x, w)"``).
    """
    if recorder.traced:
        seen = (
            f"{missed} of {total} calls of {wrapper} did not run {target} itself: "
            f"{target} was called {len(recorder.traced)} time(s), each while another "
            f"function was being traced (a jax.jit inside {wrapper}), which inlines it "
            "into that function's program"
        )
        hint = (
            f"call {direct_call} directly in {wrapper}, not inside a jax.jit of your own, "
            "and return its result"
        )
        return seen, hint
    seen = f"{missed} of {total} calls of {wrapper} never called {target}{first}"
    hint = (
        f"{wrapper} must call {target} by that name and return its result; an answer "
        f"computed in NumPy, or by a function other than {target}, does not count"
    )
    return seen, hint
