"""What one call looked like to jit's caches, and what differs between two calls.

A signature records the parts of a call that decide whether jit can reuse a compiled
program: the function object, which arguments came by keyword, the pytree structure, each
array leaf's shape, dtype and weak type, where it lives (committed or not, on which
device, with which sharding), the static arguments by value and type, and the
configuration context, read through public ``jax.config`` values.

It is taken only for a call during which JAX traced or compiled, so its cost (a walk over
the arguments) is paid once per compilation, never on a cache hit.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import os
import re
import sys
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

# The names in JAX 0.12's tracing context (``jax._src.config.trace_context_names()``) that
# ``jax.config`` exposes (tests/doctor/test_private_hooks.py checks the list is whole on
# every release the matrix runs). Any of them changing makes jit trace again. Read with ``getattr``
# so a name a later JAX drops costs nothing. ``jax_explain_cache_misses`` and
# ``jax_log_compiles`` are deliberately absent: they are not part of the key.
CONTEXT_NAMES = (
    "jax_default_matmul_precision",
    "jax_enable_x64",
    "jax_default_device",
    "jax_numpy_rank_promotion",
    "jax_numpy_dtype_promotion",
    "jax_disable_jit",
    "jax_debug_key_reuse",
    "jax_threefry_partitionable",
    "jax_random_seed_offset",
    "jax_softmax_custom_jvp",
    "jax_enable_pgle",
    "jax_pgle_profiling_runs",
    "jax_explicit_x64_dtypes",
    "jax_error_checking_behavior_nan",
    "jax_error_checking_behavior_divide",
    "jax_error_checking_behavior_oob",
    "jax_allow_f16_reductions",
    "jax_use_shardy_partitioner",
    "jax_use_direct_linearize",
    "jax_use_simplified_jaxpr_constants",
    "jax_embedded_constants_max_bytes",
    "jax_check_static_indices",
    "jax_use_hlo_logistic_lowering",
    "jax_high_dynamic_range_gumbel",
    "jax_accurate_erf_inv",
    "jax_xla_profile_version",
    "jax_hlo_source_file_canonicalization_regex",
    "jax_remove_size_one_mesh_axis_from_type",
    "jax_mutable_array_checks",
    "jax_no_execution",
    "jax_auto_pcast",
    "eager_constant_folding",
    "check_vma",
    "jax_raise_on_ppermute_sort_diff",
    "jax_scan3",
    "jax_remat3",
    "jax_custom_vjp3",
    "jax_custom_jvp3",
    "jax_remat_barrier_no_cotangents",
    "jax_threefry_gpu_kernel_lowering",
    "jax_use_emit_pipeline_primitive",
    "jax_pallas_enable_debug_checks",
)

# Parts of a signature, as named in a Difference.
FUNCTION = "function"
KEYWORD = "keyword"
STRUCTURE = "structure"
SHAPE = "shape"
DTYPE = "dtype"
WEAK_TYPE = "weak_type"
PYTHON_SCALAR = "python_scalar"
STATIC = "static"
PLACEMENT = "placement"
CONTEXT = "context"


# ---------------------------------------------------------------------------------------
# Function identity


@dataclasses.dataclass(frozen=True)
class FunctionInfo:
    """Which function a jit wraps. ``key`` groups every object made from the same source
    (a lambda re-created per step is one function for the report, many for the cache);
    ``serial`` tells the objects apart, as jit's cache does."""

    name: str
    qualname: str
    file: str
    line: int
    serial: int
    closure: bool
    adapter: str = ""  # "equinox": jitted by eqx.filter_jit, arguments repacked by it
    transforms: str = ""  # "grad", "vmap(grad": JAX's wrappers around the user's function

    @property
    def key(self) -> tuple[str, int, str, str]:
        # the name too: wrappers such as equinox.filter_jit share one source location; and
        # what JAX wraps it in: jit(f) and jit(grad(f)) are two programs, not one
        return (self.file, self.line, self.qualname, self.transforms + self.name)

    @property
    def label(self) -> str:
        """The name in a report: ``grad(loss)`` for ``jax.jit(jax.grad(loss))``."""
        if not self.transforms:
            return self.name
        layers = self.transforms.split("(")
        return "(".join(layers) + "(" + self.name + ")" * len(layers)

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


class _Serials:
    """A number that is the same for the same object and new for a new one (``id`` alone
    is reused once an object dies, and a lambda made per step dies every step). Objects
    are held weakly, so numbering them keeps nothing alive."""

    def __init__(self) -> None:
        self._table: dict[int, tuple[Any, int]] = {}
        self._next = 0

    def __call__(self, obj: Any) -> int:
        entry = self._table.get(id(obj))
        if entry is not None:
            ref, serial = entry
            if ref() is obj:
                return serial
        self._next += 1
        serial = self._next
        key, table = id(obj), self._table
        try:
            ref = weakref.ref(obj, lambda _, key=key: table.pop(key, None))
        except TypeError:  # jit needs weak references, so this is rare; never the same again
            return serial
        table[key] = (ref, serial)
        return serial


_serial_of = _Serials()  # function objects
_class_serial = _Serials()  # pytree node classes: two classes may share one name


UNNAMED = "<unnamed function>"  # JAX's name for a callable without a __name__


def jax_name(fun: Any) -> str:
    """The name JAX puts in its events for ``fun`` (``__name__``, looking into partials)."""
    name = getattr(fun, "__name__", None)
    if isinstance(name, str):
        return name
    if isinstance(fun, functools.partial):
        return jax_name(fun.func)
    return UNNAMED


def _innermost(fun: Any) -> Any:
    """The user's own function behind partials, ``functools.wraps`` wrappers (such as
    ``jax.value_and_grad``'s) and bound methods."""
    return _unwrapped(fun)[0]


_JAX_SOURCE = os.sep + "jax" + os.sep


def _transform(wrapper: Any) -> str:
    """The JAX transformation ``wrapper`` is (``grad`` for ``jax.grad(f)``), else "": its
    code is JAX's ``grad_f``, or JAX's traceback filter around it (in its closure)."""
    for fn in (wrapper, *(_cell(c) for c in getattr(wrapper, "__closure__", None) or ())):
        code = getattr(fn, "__code__", None)
        if code is not None and _JAX_SOURCE in code.co_filename and code.co_name.endswith("_f"):
            return code.co_name.removesuffix("_f")  # grad_f, value_and_grad_f, vmap_f
    return ""


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _unwrapped(fun: Any) -> tuple[Any, str]:
    """:func:`_innermost`, and the JAX transformations passed on the way, outermost first
    (``"value_and_grad"``, ``"vmap(grad"``): a wrapper whose code is JAX's own."""
    seen, found = 0, []
    while seen < 50:
        seen += 1
        if isinstance(fun, functools.partial):
            fun = fun.func
        elif getattr(fun, "__wrapped__", None) is not None:
            name = _transform(fun)
            if name:
                found.append(name)
            fun = fun.__wrapped__
        elif inspect.ismethod(fun):
            fun = fun.__func__
        else:
            break
    return fun, "(".join(found)


_EQUINOX_JIT = os.sep + os.path.join("equinox", "_jit.py")


def _callers_function(name: str, qualname: str, most: int = 12) -> Any:
    """The user's function that a framework is jitting under its own wrapper: a local of a
    calling frame (``filter_jit``'s ``fun``) with the wrapper's name and qualified name."""
    frame = sys._getframe(2)
    for _ in range(most):
        if frame is None:
            return None
        for value in frame.f_locals.values():
            if (
                callable(value)
                and getattr(value, "__name__", None) == name
                and getattr(value, "__qualname__", None) == qualname
                and getattr(_innermost(value), "__code__", None) is not None
                and _EQUINOX_JIT not in _innermost(value).__code__.co_filename
            ):
                return value
        frame = frame.f_back
    return None


# Libraries whose own jitted helpers are not the user's functions. Named, not "anything in
# site-packages": a team's own package installed there is their code, to be watched.
LIBRARIES = (
    "jax",
    "jaxlib",
    "optax",
    "flax",
    "equinox",
    "chex",
    "haiku",
    "orbax",
    "distrax",
    "numpyro",
    "diffrax",
    "lineax",
    "optimistix",
    "jaxopt",
    "tensorflow_probability",
)
_LIBRARY_PARTS = tuple(os.sep + name + os.sep for name in LIBRARIES)


def is_library_function(fun: Any) -> bool:
    """A function defined inside one of :data:`LIBRARIES` (optax's
    ``tree_bias_correction``), other than the one ``eqx.filter_jit`` jits for the user."""
    code = getattr(_innermost(fun), "__code__", None)
    if code is None:
        return False
    filename = code.co_filename
    if filename.endswith(_EQUINOX_JIT):
        return False
    return is_library_file(filename)


def is_library_file(filename: str) -> bool:
    """A file of one of :data:`LIBRARIES`, installed (a team's own package is theirs)."""
    return any(part in filename for part in _LIBRARY_PARTS) and (
        "site-packages" in filename or "dist-packages" in filename
    )


def identify(fun: Callable[..., Any]) -> FunctionInfo:
    inner, transforms = _unwrapped(fun)
    code = getattr(inner, "__code__", None)
    adapter = ""
    if code is not None and code.co_filename.endswith(_EQUINOX_JIT):
        # eqx.filter_jit jits its own ``fun_wrapped`` renamed after the user's function:
        # name the user's function and where it is defined (found in filter_jit's frame)
        adapter = "equinox"
        user = _callers_function(getattr(inner, "__name__", ""), getattr(inner, "__qualname__", ""))
        if user is not None:
            inner = _innermost(user)
            code = getattr(inner, "__code__", code)
    if code is None:
        # a callable object: the code of its class's __call__
        call = next(
            (vars(k)["__call__"] for k in type(inner).__mro__ if "__call__" in vars(k)), None
        )
        code = getattr(call, "__code__", None)
    qualname = getattr(inner, "__qualname__", None) or f"{type(inner).__qualname__}.__call__"
    return FunctionInfo(
        name=jax_name(fun),
        qualname=str(qualname),
        file=code.co_filename if code else "?",
        line=code.co_firstlineno if code else 0,
        serial=_serial_of(fun),
        closure=bool(getattr(inner, "__closure__", None)),
        adapter=adapter,
        transforms=transforms,
    )


# ---------------------------------------------------------------------------------------
# Leaves, statics, context


_DTYPE_SHORT = re.compile(r"^(bfloat|float|uint|int|complex)(\d+)(.*)$")
_PREFIX = {"bfloat": "bf", "float": "f", "uint": "u", "int": "i", "complex": "c"}


def short_dtype(dtype: Any) -> str:
    try:
        name = np.dtype(dtype).name
    except TypeError:  # an extended dtype: a typed PRNG key is key<fry>
        return str(dtype)
    found = _DTYPE_SHORT.match(name)
    return f"{_PREFIX[found.group(1)]}{found.group(2)}{found.group(3)}" if found else name


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One array leaf as jit's cache sees it. ``origin`` is for the reader only."""

    shape: tuple[int, ...] | None
    dtype: str
    weak: bool
    python: bool  # a Python scalar (bool, int, float, complex)
    placement: str  # "uncommitted", "traced", or where a committed array lives
    origin: str

    @property
    def type(self) -> str:
        if self.shape is None:
            return self.dtype
        dims = ",".join(str(d) for d in self.shape)
        return f"{'~' if self.weak else ''}{self.dtype}[{dims}]"

    def __str__(self) -> str:
        return f"{self.type} ({self.origin})" if self.origin else self.type


def describe_sharding(sharding: Any) -> str:
    """Everything of a sharding that jit's caches key on, as text: the mesh's axes, their
    types when not all Auto, the devices in mesh order (two meshes of one shape over the
    same devices in another order compile again, without a retrace), the spec, and a
    memory kind other than the device's."""
    if isinstance(sharding, jax.sharding.SingleDeviceSharding):
        (device,) = sharding.device_set
        return f"{device.platform}:{device.id}"
    if isinstance(sharding, jax.sharding.NamedSharding):
        mesh = sharding.mesh
        axes = ",".join(f"{k}={v}" for k, v in mesh.shape.items())
        types = [str(t).rsplit(".", 1)[-1] for t in getattr(mesh, "axis_types", ())]
        if any(t != "Auto" for t in types):
            axes += " " + "/".join(types)
        try:
            ids = ",".join(str(d.id) for d in mesh.devices.flat)
            axes += f" on {mesh.devices.flat[0].platform}:{ids}"
        except Exception:  # an abstract mesh has no devices
            pass
        memory = getattr(sharding, "memory_kind", None)
        extra = f" memory {memory}" if memory not in (None, "device") else ""
        return f"mesh({axes}) {sharding.spec}{extra}"
    return repr(sharding)[:200]


def _layout_text(x: Any) -> str:
    """A committed array's memory layout, when it is not the default row-major one (a
    custom layout compiles another program, without a retrace)."""
    try:
        order = tuple(x.format.layout.major_to_minor)
    except Exception:  # no layout to read (an older JAX, a deleted array)
        return ""
    return "" if order == tuple(range(len(order))) else f" layout {order}"


def _origin(x: Any) -> str:
    kind = type(x)
    if kind in (bool, int, float, complex):
        return f"Python {kind.__name__}"
    if isinstance(x, np.generic):
        return f"NumPy {np.dtype(x.dtype).name}"
    if isinstance(x, np.ndarray):
        return f"NumPy {x.dtype.name} array"
    return ""


def describe_leaf(x: Any) -> Leaf:
    tracer = isinstance(x, jax.core.Tracer)
    try:
        aval = jax.typeof(x)
        shape = tuple(int(d) if isinstance(d, int | np.integer) else d for d in aval.shape)
        dtype = short_dtype(aval.dtype)
        weak = bool(getattr(aval, "weak_type", False))
    except Exception:  # not an array: jit itself will say so
        return Leaf(None, type(x).__qualname__, False, False, "", "")
    placement = "uncommitted"
    if tracer:
        placement = "traced"
    elif isinstance(x, jax.Array):
        try:
            if x.committed:
                placement = describe_sharding(x.sharding) + _layout_text(x)
        except Exception:  # a deleted (donated) array keeps no placement to read
            placement = "unknown"
    return Leaf(shape, dtype, weak, type(x) in (bool, int, float, complex), placement, _origin(x))


@dataclasses.dataclass(frozen=True)
class Static:
    """A static argument, compared as jit compares it: by hash and equality. The hash and
    ``repr`` are taken at the call, because a later mutation could change them; the value
    is kept too (jit's cache keeps it as well), for the equality test."""

    type: str
    text: str
    hash: int | None
    held: Any = dataclasses.field(default=None, compare=False, repr=False)
    # equal only to itself: object's own __eq__, or a tuple holding such an object
    by_identity: bool = dataclasses.field(default=False, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.text} ({self.type})"

    @property
    def value(self) -> Any:
        """The value, if it is still alive (objects are held weakly, so that recording
        them does not keep them alive; ints, strings and tuples are held as they are)."""
        return self.held() if isinstance(self.held, weakref.ref) else self.held

    def same_as(self, other: Static) -> bool:
        if (self.type, self.hash, self.text) != (other.type, other.hash, other.text):
            return False
        mine, theirs = self.value, other.value
        if mine is None or theirs is None:
            return True  # one is gone: the recorded hash and text decide
        try:
            return bool(mine == theirs)
        except Exception:  # no usable equality: the recorded hash and text decide
            return True


def describe_static(value: Any) -> Static:
    try:
        hashed: int | None = hash(value)
    except Exception:
        hashed = None
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__qualname__}>"
    if len(text) > 200:
        text = text[:197] + "..."
    try:
        held: Any = weakref.ref(value)
    except TypeError:
        held = value
    return Static(type(value).__qualname__, text, hashed, held, _by_identity(value))


def _by_identity(value: Any, depth: int = 2) -> bool:
    """Whether ``value`` is equal only to itself, as far as jit's key can tell: its class
    keeps object's ``__eq__``, or a tuple (a frozen set) holds an object that does."""
    if isinstance(value, tuple | frozenset) and depth:
        return any(_by_identity(v, depth - 1) for v in value)
    return type(value).__eq__ is object.__eq__ and not isinstance(value, type)


def context_snapshot() -> dict[str, str]:
    """The configuration values that belong to jit's key, as ``jax.config`` reads them
    now (context managers such as ``jax.default_matmul_precision`` included)."""
    values = {}
    for name in CONTEXT_NAMES:
        try:
            values[name] = repr(getattr(jax.config, name))
        except Exception:
            continue
    try:
        mesh = jax.sharding.get_abstract_mesh()
        values["mesh"] = "none" if not mesh.shape else repr(mesh)
    except Exception:
        pass
    return values


# ---------------------------------------------------------------------------------------
# Signatures


@dataclasses.dataclass(frozen=True)
class Signature:
    function: FunctionInfo
    passing: dict[str, str]  # argument label -> "positional" | "keyword"
    nodes: dict[str, tuple[str | None, str]]  # path -> (parent path, kind); leaves too
    leaves: dict[str, Leaf]
    statics: dict[str, Static]
    context: dict[str, str]
    # path -> serial of the node's class, for nodes that are not dict, list, tuple or None
    classes: dict[str, int] = dataclasses.field(default_factory=dict)
    # path -> (node metadata, its field names): a custom node's auxiliary data, held (jit's
    # cache holds it too) and compared by equality, as jit compares it
    aux: dict[str, tuple[Any, list[str] | None]] = dataclasses.field(
        default_factory=dict, compare=False, repr=False
    )

    def describe(self) -> str:
        args = ", ".join(f"{path}: {leaf.type}" for path, leaf in self.leaves.items())
        statics = ", ".join(f"{k}={v.text}" for k, v in self.statics.items())
        return "; ".join(part for part in (args, statics) if part)


@dataclasses.dataclass(frozen=True)
class StaticSpec:
    """Which arguments a jit treats as static, resolved against the function's
    parameters the way ``jax.jit`` resolves them."""

    positions: frozenset[int]
    names: frozenset[str]
    parameters: tuple[str, ...]  # positional parameters, in order
    varargs: str | None
    # the options of jax.jit(...) that enter the lowering's key, as text
    options: tuple[tuple[str, str], ...] = ()


def _unset(value: Any) -> bool:
    return value is None or value is False or (isinstance(value, tuple | list) and not value)


# jax.jit options that change the program lowered for the same traced function: two
# jax.jit objects of one function that differ in them compile apart
LOWERING_OPTIONS = (
    "donate_argnums",
    "donate_argnames",
    "in_shardings",
    "out_shardings",
    "keep_unused",
    "device",
    "backend",
    "inline",
    "compiler_options",
)


def static_spec(fun: Callable[..., Any], options: Mapping[str, Any]) -> StaticSpec:
    def as_set(value: Any, kind: type) -> set[Any]:
        if value is None:
            return set()
        if isinstance(value, kind):
            return {value}
        return set(value)

    nums = as_set(options.get("static_argnums"), int)
    names = as_set(options.get("static_argnames"), str)
    parameters: list[inspect.Parameter] = []
    varargs = None
    try:
        for p in inspect.signature(fun).parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                parameters.append(p)
            elif p.kind is p.VAR_POSITIONAL:
                varargs = p.name
    except (TypeError, ValueError):
        pass
    named = [p.name for p in parameters]
    by_keyword = {p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD}
    if nums and not names:
        names = {named[i] for i in nums if -len(named) <= i < len(named)} & by_keyword
    elif names and not nums:
        nums = {i for i, n in enumerate(named) if n in names}
    chosen = tuple(
        (key, _short(options[key], 120))
        for key in LOWERING_OPTIONS
        if key in options and not _unset(options[key])
    )
    return StaticSpec(frozenset(nums), frozenset(names), tuple(named), varargs, chosen)


def _children(value: Any) -> tuple[str, list[tuple[str, Any]], Any] | None:
    """One level of ``value`` as a pytree: its kind, keyed children and node metadata (the
    auxiliary data jit compares by equality); None for a leaf."""
    if value is None:
        return "None", [], None
    flat, treedef = jax.tree_util.tree_flatten_with_path(value, is_leaf=lambda n: n is not value)
    if len(flat) == 1 and flat[0][0] == () and flat[0][1] is value:
        return None
    node_type, aux = treedef.node_data() or (type(value), None)
    kind = getattr(node_type, "__qualname__", str(node_type))
    if node_type in (dict, list, tuple):
        aux = None  # keys and lengths: the children's paths say them
    return kind, [(jax.tree_util.keystr(path), child) for path, child in flat], aux


def _short(value: Any, most: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__qualname__}>"
    return text if len(text) <= most else text[: most - 3] + "..."


def _field_names(node: Any, aux: Any) -> list[str] | None:
    """The names of a dataclass node's fields, when its metadata is one entry per field
    (as an Equinox Module's is: static values, a placeholder for each array field)."""
    if dataclasses.is_dataclass(node) and isinstance(aux, tuple):
        fields = dataclasses.fields(node)
        names = [f.name for f in fields]
        if len(names) == len(aux):
            return names
        # jax.tree_util.register_dataclass: the metadata is the meta fields' values only,
        # the fields marked static (or, registered by name, the fields holding them)
        marked = [f.name for f in fields if f.metadata.get("static")]
        if len(marked) == len(aux):
            return marked
        held = [
            next((f.name for f in fields if getattr(node, f.name, None) is a), None) for a in aux
        ]
        if None not in held and len(set(held)) == len(held):
            return [str(n) for n in held]
    return None


def metadata_difference(new: Any, old: Any, path: str = "", depth: int = 0) -> str | None:
    """Where inside two node metadata values they first differ ("" when the values
    themselves differ; None when they are equal)."""
    found = metadata_differences(new, old, path, depth)
    return found[0] if found else None


def metadata_differences(
    new: Any, old: Any, path: str = "", depth: int = 0, most: int = 8
) -> list[str]:
    """Every place inside two node metadata values where they differ (at most ``most``):
    after ``model.eval()`` both a BatchNorm's and a Dropout's flag, not only the first."""
    try:
        if new is old or bool(new == old):
            return []
    except Exception:
        pass
    if depth > 8 or type(new) is not type(old):
        return [path]
    pairs: list[tuple[Any, Any, str]] = []
    if isinstance(new, tuple | list) and len(new) == len(old):
        fields = getattr(type(new), "_fields", None)
        named = _entry_names(new)
        for i, (a, b) in enumerate(zip(new, old, strict=True)):
            if named is not None and named[i] is not None and a[0] == b[0]:
                # a list of (name, value) entries (an NNX GraphDef's attributes): the
                # entry by its name, not its position, ["tx"] rather than [14][1]
                pairs.append((a[1], b[1], f"{path}[{named[i]!r}]"))
            else:
                pairs.append((a, b, path + (f".{fields[i]}" if fields else f"[{i}]")))
    elif isinstance(new, dict) and new.keys() == old.keys():
        pairs = [(new[k], old[k], f"{path}[{k!r}]") for k in new]
    elif dataclasses.is_dataclass(new) and not isinstance(new, type):
        pairs = [
            (getattr(new, f.name, None), getattr(old, f.name, None), f"{path}.{f.name}")
            for f in dataclasses.fields(new)
        ]
    elif isinstance(new, functools.partial):
        pairs = [
            (new.func, old.func, f"{path}.func"),
            (new.args, old.args, f"{path}.args"),
            (new.keywords, old.keywords, f"{path}.keywords"),
        ]
    else:
        return [path]
    found: list[str] = []
    for a, b, where in pairs:
        found += metadata_differences(a, b, where, depth + 1, most - len(found))
        if len(found) >= most:
            break
    return found[:most] or [path]


def _entry_names(entries: Any) -> list[str | None] | None:
    """Per entry, its name where ``entries`` is a list of ``(name, value)`` pairs and the
    name (a string) is unique among them; None where it is no such list."""
    if not entries or not all(
        isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], str | int) for e in entries
    ):
        return None
    counts: dict[Any, int] = {}
    for name, _ in entries:
        counts[name] = counts.get(name, 0) + 1
    return [n if isinstance(n, str) and counts[n] == 1 else None for n, _ in entries]


_BUILTIN_NODES = (dict, list, tuple, type(None))


def _walk(
    path: str,
    parent: str | None,
    value: Any,
    sig_nodes: dict,
    sig_leaves: dict,
    sig_classes: dict,
    sig_aux: dict,
) -> None:
    found = _children(value)
    if found is None:
        sig_nodes[path] = (parent, "leaf")
        sig_leaves[path] = describe_leaf(value)
        return
    kind, children, aux = found
    sig_nodes[path] = (parent, kind)
    if aux is not None:
        names = _field_names(value, aux)
        sig_aux[path] = (aux, names)
    if type(value) not in _BUILTIN_NODES:
        # jit compares node types by identity: a namedtuple class made per call has the
        # same name every time, and is another type every time
        sig_classes[path] = _class_serial(type(value))
    for key, child in children:
        _walk(path + key, path, child, sig_nodes, sig_leaves, sig_classes, sig_aux)


def take(
    function: FunctionInfo, spec: StaticSpec, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Signature:
    """The signature of one call ``f(*args, **kwargs)``."""
    if function.adapter == "equinox":
        view = _equinox_view(function, args, kwargs)
        if view is not None:
            return view
    passing: dict[str, str] = {}
    nodes: dict[str, tuple[str | None, str]] = {}
    leaves: dict[str, Leaf] = {}
    classes: dict[str, int] = {}
    aux: dict[str, tuple[Any, list[str] | None]] = {}
    statics: dict[str, Static] = {}
    n_named = len(spec.parameters)
    for i, value in enumerate(args):
        if i < n_named:
            label = spec.parameters[i]
        elif spec.varargs:
            label = f"{spec.varargs}[{i - n_named}]"
        else:
            label = f"args[{i}]"
        passing[label] = "positional"
        if i in spec.positions or (i - len(args)) in spec.positions:
            statics[label] = describe_static(value)
        else:
            _walk(label, None, value, nodes, leaves, classes, aux)
    for name, value in kwargs.items():
        passing[name] = "keyword"
        position = spec.parameters.index(name) if name in spec.parameters else None
        if name in spec.names or (position is not None and position in spec.positions):
            statics[name] = describe_static(value)
        else:
            _walk(name, None, value, nodes, leaves, classes, aux)
    context = context_snapshot()
    for key, text in spec.options:
        context[f"jax.jit({key})"] = text
    return Signature(function, passing, nodes, leaves, statics, context, classes, aux)


def _equinox_view(
    function: FunctionInfo, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Signature | None:
    """The call as the user made it, from ``eqx.filter_jit``'s repacked one: equinox calls
    ``fun_wrapped(dynamic_donate, dynamic_nodonate, static)``, where each of ``fun``,
    ``first`` (the first argument) and ``rest`` (the others, and the keywords) is split
    into array leaves and static leaves over one tree structure. The arrays are walked
    under the user's argument names (``model.layers[2].w``), each static leaf is a static
    value at its path (``model.layers[2].rate``), and the user's function object is the
    function whose identity counts. None if the call does not look like that."""
    try:
        donate, nodonate, static = args
        static_fun, static_first, static_rest = static
    except (TypeError, ValueError):
        return None
    try:
        (fun_leaves, fun_tree) = static_fun

        def part(name: str, pair: tuple[tuple[Any, ...], Any]) -> tuple[Any, Any]:
            leaves, treedef = pair
            dynamic = tuple(donate.get(name, (None,) * len(leaves)))
            more = tuple(nodonate.get(name, (None,) * len(leaves)))
            arrays = [a if a is not None else b for a, b in zip(dynamic, more, strict=True)]
            return (
                jax.tree_util.tree_unflatten(treedef, arrays),
                jax.tree_util.tree_unflatten(treedef, list(leaves)),
            )

        user_fun = jax.tree_util.tree_unflatten(fun_tree, list(fun_leaves))
        first, first_static = part("first", static_first)
        (rest, kwargs_tree), (rest_static, kwargs_static) = part("rest", static_rest)
        names = [
            p.name
            for p in inspect.signature(user_fun).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
    except Exception:
        return None
    passing: dict[str, str] = {}
    nodes: dict[str, tuple[str | None, str]] = {}
    leaves_out: dict[str, Leaf] = {}
    classes: dict[str, int] = {}
    aux: dict[str, tuple[Any, list[str] | None]] = {}
    statics: dict[str, Static] = {}
    positional = [(first, first_static)] + list(zip(rest[:-1], rest_static[:-1], strict=True))
    for i, (value, static_value) in enumerate(positional):
        label = names[i] if i < len(names) else f"args[{i}]"
        passing[label] = "positional"
        _walk(label, None, value, nodes, leaves_out, classes, aux)
        for path, leaf in jax.tree_util.tree_flatten_with_path(static_value)[0]:
            statics[label + jax.tree_util.keystr(path)] = describe_static(leaf)
    for name, value in kwargs_tree.items():
        passing[name] = "keyword"
        _walk(name, None, value, nodes, leaves_out, classes, aux)
        for path, leaf in jax.tree_util.tree_flatten_with_path(kwargs_static[name])[0]:
            statics[name + jax.tree_util.keystr(path)] = describe_static(leaf)
    user = dataclasses.replace(function, serial=_serial_of(user_fun))
    return Signature(user, passing, nodes, leaves_out, statics, context_snapshot(), classes, aux)


# ---------------------------------------------------------------------------------------
# Differences


@dataclasses.dataclass(frozen=True)
class Difference:
    """One part of the key that differs: ``where`` names it, ``now``/``before`` show it."""

    part: str
    where: str
    now: str
    before: str
    what: str = ""  # in the user's words, where the part alone does not say it

    def __str__(self) -> str:
        said = f"{self.where}: {self.now} now, {self.before} before"
        return f"{said} ({self.what})" if self.what else said


# A typed PRNG key (``key<fry>[]``) against a raw uint32 one (``u32[2]``): one change of
# dtype, and of shape as well where the key's data dimension shows up in the raw one.
KEY_AGAINST_RAW = "a typed PRNG key against a raw uint32 key"
KEY_SHAPE_TOO = ": dtype and shape"

_FUNCTION_TYPES = ("function", "partial", "method", "builtin_function_or_method")


def _static_difference(label: str, now: Static, before: Static) -> Difference:
    """A static value that differs. A function made again (a lambda or ``partial`` per
    call, passed where jit treats it as static, as ``eqx.filter_jit`` does every callable)
    is a new function object, not a value to trace instead: the fix is to define it once."""
    now_text, before_text = _ADDRESS.sub("", now.text), _ADDRESS.sub("", before.text)
    if now.type == before.type and now.type in _FUNCTION_TYPES and now_text == before_text:
        # the jitted function was not rebuilt: the static argument is a new object
        return Difference(
            STATIC, label, now_text, before_text, "a new function object, same code, each call"
        )
    # a class without __eq__ (or a tuple holding one) is equal only to itself: an
    # equal-looking one built per call is a new key every call
    why = "objects without __eq__ are compared by identity, so build it once"
    identity = now.type == before.type and now.by_identity and before.by_identity
    alike = now.text != before.text and now_text == before_text and not now.text.endswith("...")
    if identity and alike:
        now_text = f"{now_text} (a new {now.type} that differs only in object addresses: {why})"
        return Difference(STATIC, label, now_text, before_text)
    unequal = f" (same text, but not equal{': ' + why if identity else ''})"
    unequal = unequal if now.text == before.text else ""
    return Difference(STATIC, label, str(now) + unequal, str(before))


def _leaf_differences(path: str, new: Leaf, old: Leaf) -> list[Difference]:
    found = []
    if new.shape is None or old.shape is None:
        if new.type != old.type:
            found.append(Difference(DTYPE, path, str(new), str(old)))
        return found
    if "key<" in new.dtype + old.dtype and new.dtype != old.dtype:
        # a typed PRNG key against a raw uint32 one: one change, of dtype and shape at once
        what = KEY_AGAINST_RAW + (KEY_SHAPE_TOO if new.shape != old.shape else "")
        found.append(Difference(DTYPE, path, str(new), str(old), what))
    elif new.shape != old.shape:
        found.append(Difference(SHAPE, path, new.type, old.type))
    if "key<" in new.dtype + old.dtype:
        pass
    elif new.dtype != old.dtype:
        part = PYTHON_SCALAR if (new.python or old.python) else DTYPE
        found.append(Difference(part, path, str(new), str(old)))
    elif new.weak != old.weak:
        found.append(Difference(WEAK_TYPE, path, str(new), str(old)))
    if "traced" not in (new.placement, old.placement) and new.placement != old.placement:
        found.append(Difference(PLACEMENT, path, new.placement, old.placement))
    return found


def _aux_differences(path: str, new: tuple[Any, Any], old: tuple[Any, Any]) -> list[Difference]:
    """Every value of a custom node's metadata that differs (an Equinox static field, a
    ``register_dataclass`` meta field, an NNX GraphDef's flags): part of the pytree
    structure in jit's key, whatever the user calls it."""
    (new_aux, names), (old_aux, _) = new, old
    found = []
    for inside in metadata_differences(new_aux, old_aux):
        if names and inside.startswith("["):  # "[1]..." of an Equinox Module: its field
            index, _, rest = inside[1:].partition("]")
            if index.isdigit() and int(index) < len(names):
                inside = f".{names[int(index)]}{rest}"
        now, before = _pick(new_aux, inside, names), _pick(old_aux, inside, names)
        now_text, before_text = _short(now), _short(before)
        graph = _graph_path(new_aux, inside)  # nnx.jit passes the graph as `._graphdef`
        where = path.removesuffix("._graphdef") + graph if graph else path + inside
        what = "node metadata"
        if _ADDRESS.sub("", now_text) == _ADDRESS.sub("", before_text):
            # the same text but for the object's address (a function made again, an optax
            # transformation built again): they compare by identity, and are two objects
            now_text = _ADDRESS.sub("", now_text) + " (equal text, not equal)"
            before_text = _ADDRESS.sub("", before_text)
        elif isinstance(now, _SCALARS) and isinstance(before, _SCALARS):
            # a plain value held as node metadata: a field the user (or the library)
            # marked static, an NNX flag such as use_running_average
            what = f"a static field of {path.split('.')[0].split('[')[0]}"
        found.append(Difference(STRUCTURE, where, now_text, before_text, what))
    return found


_ATTRIBUTE = re.compile(r"^\.attributes\[(?:'([^']+)'|(\d+))\](?:\[1\])?(?:\.value)?(.*)$")


def _graph_path(graphdef: Any, inside: str) -> str | None:
    """A Flax NNX ``GraphDef`` attribute as the user's attribute path (``.bn.
    use_running_average``, not ``._graphdef.attributes['use_running_average'].value``):
    the attributes are the graph's nodes depth first, each node's ``num_attributes`` in
    turn, and an attribute that is a node (``NodeAttr``) opens the next one. None where
    ``graphdef`` is no such graph or the walk does not add up."""
    found = _ATTRIBUTE.match(inside)
    nodes, attributes = getattr(graphdef, "nodes", None), getattr(graphdef, "attributes", None)
    if not found or not isinstance(nodes, list | tuple) or not isinstance(attributes, list):
        return None
    try:
        names = [key for key, _ in attributes]
        index = int(found.group(2)) if found.group(2) else names.index(found.group(1))
        paths: list[str] = []
        pending = iter(nodes)

        def visit(prefix: str) -> None:
            # a variable (VariableDef) is a node without attributes of its own
            for _ in range(getattr(next(pending), "num_attributes", 0)):
                key, value = attributes[len(paths)]
                paths.append(f"{prefix}.{key}")
                if type(value).__name__ == "NodeAttr":
                    visit(f"{prefix}.{key}")

        visit("")
        if len(paths) != len(attributes):
            return None
        shown = ".".join(p for p in paths[index].split(".") if not p.startswith("_pytree__"))
        return shown + found.group(3)
    except Exception:  # another layout of the graph: the raw path stays
        return None


_SCALARS = (bool, int, float, complex, str)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _pick(aux: Any, inside: str, names: list[str] | None) -> Any:
    """The part of ``aux`` at ``inside`` (as :func:`metadata_difference` wrote it)."""
    value = aux
    for step in re.findall(r"\.(\w+)|\[([^\]]+)\]", inside):
        attr, key = step
        try:
            if attr and names and value is aux and attr in names:
                value = aux[names.index(attr)]
            elif attr:
                value = getattr(value, attr)  # a namedtuple's field, too
            elif isinstance(value, list | tuple) and _entry_names(value) is not None:
                # an entry of a list of (name, value) pairs: by name, or by position
                wanted = ast.literal_eval(key)
                named = dict(zip(_entry_names(value), value, strict=True))
                value = named[wanted][1] if isinstance(wanted, str) else value[wanted]
            else:
                value = value[ast.literal_eval(key)]  # an index, or a repr'd dict key
        except Exception:
            return value
    return value


def _kind_text(sig: Signature, path: str) -> str:
    kind = sig.nodes[path][1]
    if kind == "leaf":
        return f"an array {sig.leaves[path].type}"
    return "None" if kind == "None" else f"a {kind}"


def differences(new: Signature, old: Signature) -> list[Difference]:
    """Every part of ``new`` that differs from ``old``, each named once (a missing
    subtree is one difference, not one per leaf)."""
    found: list[Difference] = []
    if new.function.serial != old.function.serial:
        closure = " (a closure)" if new.function.closure else ""
        found.append(
            Difference(
                FUNCTION,
                new.function.name,
                f"function object #{new.function.serial}{closure}",
                f"#{old.function.serial}",
            )
        )
    for label in new.passing.keys() & old.passing.keys():
        if new.passing[label] != old.passing[label]:
            found.append(Difference(KEYWORD, label, new.passing[label], old.passing[label]))
    for label in sorted(new.statics.keys() | old.statics.keys()):
        now, before = new.statics.get(label), old.statics.get(label)
        if now is None or before is None:
            found.append(Difference(STATIC, label, str(now or "absent"), str(before or "absent")))
        elif not now.same_as(before):
            found.append(_static_difference(label, now, before))
    for path in new.nodes.keys() | old.nodes.keys():
        in_new, in_old = path in new.nodes, path in old.nodes
        if in_new and in_old:
            new_kind, old_kind = new.nodes[path][1], old.nodes[path][1]
            if new_kind == old_kind == "leaf":
                found.extend(_leaf_differences(path, new.leaves[path], old.leaves[path]))
            elif new_kind != old_kind:
                found.append(
                    Difference(STRUCTURE, path, _kind_text(new, path), _kind_text(old, path))
                )
            elif new.classes.get(path) != old.classes.get(path):
                kind = _kind_text(new, path)
                found.append(
                    Difference(
                        STRUCTURE,
                        path,
                        f"{kind} (class #{new.classes.get(path)}: another class, same name)",
                        f"{kind} (class #{old.classes.get(path)})",
                    )
                )
            elif path in new.aux and path in old.aux:
                found.extend(_aux_differences(path, new.aux[path], old.aux[path]))
            continue
        sig, other = (new, old) if in_new else (old, new)
        parent = sig.nodes[path][0]
        # a child is named when its parent is the same kind of node in both (a key
        # missing from a dict); under a parent that changed kind, the parent says it all
        if parent is None or (
            parent in other.nodes and other.nodes[parent][1] == sig.nodes[parent][1]
        ):
            if parent is None and path in new.statics.keys() | old.statics.keys():
                continue  # an argument that went from static to traced: named above
            if in_new:
                found.append(Difference(STRUCTURE, path, _kind_text(new, path), "absent"))
            else:
                found.append(Difference(STRUCTURE, path, "absent", _kind_text(old, path)))
    for name in sorted(new.context.keys() | old.context.keys()):
        if name.startswith("jax.jit("):  # an option of the jax.jit object: not a context
            now, before = new.context.get(name, "not set"), old.context.get(name, "not set")
            if now != before:
                found.append(Difference(FUNCTION, name, now, before))
            continue
        now, before = new.context.get(name, "?"), old.context.get(name, "?")
        if now != before:
            found.append(Difference(CONTEXT, name, now, before))
    order = {path: i for i, path in enumerate(new.nodes)}
    found.sort(key=lambda d: (d.part != FUNCTION, order.get(d.where, len(order))))
    return found
