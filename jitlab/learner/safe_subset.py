"""What strict mode runs: the learner's cells in a subset of Python that computes, but
cannot reach the grader.

Every cheat that beat the audit hook alone (:mod:`jitlab.learner.strict`) reached the
grader through the interpreter itself: a frame (``sys._getframe``, a traceback's
``tb_frame``), a module's attribute rewritten (``np.allclose = ...``, ``sys.modules``), a
closure cell or a ``__code__`` swapped, a weak-reference callback that runs between two
of the grader's lines, a library's registry (a pytree node, a lowering rule), text run
as code (a pickle, an annotation). An answer needs none of them. So before a strict
check runs anything, each cell the learner wrote (a cell that is not exactly as the
exercise gave it) is read, not run, and refused if it uses what only an attack needs:

- an import from outside the numerical libraries the course uses (``jax``, ``numpy``,
  ``equinox``, ``flax``, ``optax``, ``matplotlib``, the standard library's pure helpers),
  or of a part of them that reaches the compiler, the process or the disk
  (``jax.extend``, ``jax.monitoring``, ``jax.config``, ``numpy.lib``, file loading,
  unpickling, loading a module by name; the tables are :mod:`jitlab.grading.sandbox`'s);
- a name or attribute that starts with ``_`` (dunders, private internals), but for a
  named tuple's ``_replace``/``_asdict``/``_fields``/``_make``, ``self._x`` and the
  private names the learner's own classes define, ``__name__``/``__qualname__``/
  ``__doc__`` read, ``super().__init__``, and ``object.__setattr__(obj, "name", value)``;
- the builtins that reach objects by name or run text (``getattr``, ``vars``,
  ``globals``, ``eval``, ``exec``, ``compile``, ``open``, ...), attribute access on
  ``type(x)``, ``type`` with three arguments, a ``.format`` that reads attributes, and
  a class pattern (``case C(attr=...)``) that reads attributes by name;
- a module used as a value (``m = np``), the interpreter's parts as an attribute
  (``.f_back``, ``.func_globals``, ``.sys``, ``.ctypes``), ``functools.update_wrapper``
  (``@functools.wraps`` on a function of the learner's is fine), any ``register...``
  (a registry entry runs the learner's code where JAX takes outputs apart), and a class
  with a metaclass or a method of ``CLASS_FORBIDDEN``;
- IPython magics and shell lines, ``async`` code, and text or bytes that name a dunder.

What a reading cannot see is held at run time: the strict kernel rewrites each cell so
that every value entering it and every attribute it writes passes the guards of
:mod:`jitlab.grading.sandbox`. An honest answer to every exercise is plain numerical
Python and passes; the tests run every solution and exercise through both. The audit
hook still watches the run, as a third line.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterable, Iterator

from jitlab.grading.sandbox import (
    ALLOWED_MODULES,
    BUILTINS,
    INTERPRETER_PARTS,
    LIBRARY_PARTS,
    OPEN_PARTS,
    WRITERS,
    is_call_to,
    is_name,
    is_super,
)

# Public API that starts with _: a named tuple's, and jit's cache size (lesson 06 reads it).
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_cache_size"})
READ_ONLY_DUNDERS = frozenset({"__name__", "__qualname__", "__doc__"})  # text, read only
CLASS_DECLARATIONS = frozenset({"__slots__", "__match_args__"})  # in a class body
SELF_DUNDERS = frozenset({"__slots__"})  # read on self
CLASS_FORBIDDEN = {  # methods a learner's class may not define in strict mode, and why
    "__array_interface__": "it hands NumPy a raw address",
    "__array_struct__": "it hands NumPy a raw address",
    "__cuda_array_interface__": "it hands NumPy a raw address",
    "__buffer__": "it hands out raw memory",
    "__dlpack__": "it hands out raw memory",
    "__new__": "it runs when JAX rebuilds an output (use __init__ or a dataclass)",
    "__getattr__": "it answers JAX's and the grader's reads of names",
    "__getattribute__": "it answers JAX's and the grader's reads of names",
}
_DUNDER = re.compile(r"^__\w+__$")  # text or bytes that is a dunder name ("__class__")
# jax.config, read for a flag's value or updated for these, which only say more
CONFIG_UPDATES = frozenset({"jax_log_compiles", "jax_explain_cache_misses", "jax_enable_x64"})


@dataclasses.dataclass(frozen=True)
class Refusal:
    """One construct strict mode does not run: where (the file's line) and why."""

    line: int
    code: str
    why: str

    def __str__(self) -> str:
        return f"line {self.line}: `{self.code}`: {self.why}"


def refusals(source: str, *, first_line: int = 1) -> list[Refusal]:
    """Every construct of ``source`` (one cell) that strict mode refuses, in order;
    ``first_line``: the file's line of the cell's first line."""
    lines = source.splitlines()

    def at(node: ast.AST, why: str) -> Refusal:
        number = getattr(node, "lineno", 1)
        text = lines[number - 1].strip() if 0 < number <= len(lines) else ""
        return Refusal(number + first_line - 1, text[:80], why)

    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        number = err.lineno or 1
        text = lines[number - 1].strip() if 0 < number <= len(lines) else ""
        why = "strict mode runs plain Python: IPython magics (%) and shell lines (!) are not run"
        return [Refusal(number + first_line - 1, text[:80], why)]
    found = [at(node, why) for node, why in _Reader(tree).problems()]
    return sorted(set(found), key=lambda r: r.line)


class _Reader(ast.NodeVisitor):
    """Walks one cell, knowing the names its imports bind and the classes it defines."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.found: list[tuple[ast.AST, str]] = []
        self.modules: set[str] = set()  # names bound by `import x` / `import x as y`
        self.imported: set[str] = set()  # every name an import binds
        self.classes: dict[str, ast.ClassDef] = {
            node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
        }
        self.selves: list[str | None] = []  # the first parameter of the method being read
        self.in_class_body = False
        self.registering: set[int] = set()  # `register...` used on a class of the cell's
        self.called: set[int] = set()  # the function expressions of calls
        self.named = {  # x.__class__ in x.__class__.__name__
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in READ_ONLY_DUNDERS
        }
        self.configs = set(_config_reads(tree))
        self.decorating = {  # @functools.wraps(...) on a function the cell defines
            id(d.func)
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef)
            for d in node.decorator_list
            if isinstance(d, ast.Call)
        }
        # The private names the cell's classes define (a method `_key`, `self._cache`): in
        # a method, `other._key()` reads another instance of the learner's own class.
        self.own_private = {
            name
            for cls in self.classes.values()
            for node in ast.walk(cls)
            for name in _defined_names(node)
            if name.startswith("_") and not name.startswith("__")
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                self.modules |= {(a.asname or a.name.split(".")[0]) for a in node.names}
            if isinstance(node, ast.ImportFrom):
                self.imported |= {a.asname or a.name for a in node.names}
        self.imported |= self.modules

    def problems(self) -> Iterator[tuple[ast.AST, str]]:
        self.visit(self.tree)
        yield from self.found

    def refuse(self, node: ast.AST, why: str) -> None:
        self.found.append((node, why))

    # ---------------------------------------------------------------- imports

    def _module(self, node: ast.AST, dotted: str) -> None:
        parts = dotted.split(".")
        if parts[0] not in ALLOWED_MODULES:
            self.refuse(node, f"{parts[0]} is not one of the modules answers import ({_allowed()})")
        elif parts[0] == "jitlab" and len(parts) > 1:
            self.refuse(node, "from jitlab an answer uses `import jitlab` and its instruments")
        for before, part in zip(parts, parts[1:], strict=False):
            self._name_part(node, part, library=True, root=before)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            self.refuse(node, "strict mode imports only from installed libraries by name")
            return
        self._module(node, node.module)
        for alias in node.names:
            if alias.name == "*":
                self.refuse(node, "name what you import (no `import *`)")
            elif node.module.split(".")[0] == "jitlab":
                self._jitlab_name(node, alias.name)
            elif alias.name.startswith("register"):
                self.refuse(node, f"call {node.module}.{alias.name} on your class by its full name")
            else:
                self._name_part(node, alias.name, library=True)

    def _jitlab_name(self, node: ast.AST, name: str) -> None:
        import jitlab

        if name not in jitlab.__all__:
            self.refuse(node, f"jitlab.{name} is not one of the instruments (jitlab.__all__)")

    # ---------------------------------------------------------------- names

    def _name_part(self, node: ast.AST, name: str, *, library: bool, root: str = "") -> None:
        """An attribute or imported name: ``library`` when read off a module (``root``)."""
        if (root, name) in OPEN_PARTS:
            return
        if name.startswith("_") and name not in NAMEDTUPLE_API:
            self.refuse(node, f"`{name}`: names that start with _ are internals")
        elif name in INTERPRETER_PARTS:
            self.refuse(node, f"`{name}` reaches the interpreter or the process")
        elif library and name in LIBRARY_PARTS:
            self.refuse(node, f"`{name}` reaches the compiler, the process or the disk")

    def visit_Name(self, node: ast.Name) -> None:
        declared = self.in_class_body and node.id in CLASS_DECLARATIONS
        if node.id in WRITERS and id(node) not in self.called:
            self.refuse(node, f"`{node.id}` only called directly (the guard sees its object)")
        elif node.id in BUILTINS:
            self.refuse(node, f"`{node.id}` reaches objects by name or runs text")
        elif node.id.startswith("__") and node.id != "__name__" and not declared:
            self.refuse(node, f"`{node.id}`: the interpreter's own names")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        root = node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        library = isinstance(root, ast.Name) and root.id in self.imported
        if self._on_self(node) and node.attr in INTERPRETER_PARTS:  # self may be any object
            self.refuse(node, f"`{node.attr}` reaches the interpreter or the process")
        elif self._on_self(node) and (not node.attr.startswith("__") or node.attr in SELF_DUNDERS):
            pass  # self._cache: the learner's own object (the guards check it is)
        elif node.attr in self.own_private and self.selves:
            pass  # other._key() in a method: a name the learner's own classes define
        elif node.attr in ("__setattr__", "__delattr__") and is_name(node.value, "object"):
            if id(node) not in self.called:  # called directly: the guard sees its object
                self.refuse(node, f"`object.{node.attr}` only called directly")
        elif is_super(node.value):
            pass  # super().__new__(cls), super().__setattr__(...): the class's own object
        elif is_name(node.value, "jitlab"):
            self._jitlab_name(node, node.attr)
        elif node.attr in READ_ONLY_DUNDERS and isinstance(node.ctx, ast.Load):
            pass  # type(x).__name__: text
        elif node.attr == "wraps" and id(node) in self.decorating:
            pass  # @functools.wraps(f) on a function of the learner's: it writes that one
        elif node.attr == "__class__" and id(node) in self.named:
            pass  # self.__class__.__name__: text
        elif node.attr == "config" and id(node) in self.configs:
            pass  # jax.config.update("jax_log_compiles", True), jax.config.jax_enable_x64
        else:
            parent = node.value
            root = parent.id if isinstance(parent, ast.Name) else getattr(parent, "attr", "")
            self._name_part(node, node.attr, library=library, root=root)
        if node.attr.startswith("register"):
            self.refuse(
                node,
                f"`{node.attr}`: a registry entry of yours runs your code when JAX takes an "
                "output apart or rebuilds it: use dicts, tuples, lists or a NamedTuple",
            )
        if is_call_to(node.value, "type") and node.attr not in READ_ONLY_DUNDERS:
            self.refuse(node, "attribute access on type(x): use the object itself")
        self.generic_visit(node)

    def _on_self(self, node: ast.Attribute) -> bool:
        me = self.selves[-1] if self.selves else None
        return me is not None and isinstance(node.value, ast.Name) and node.value.id == me

    # ---------------------------------------------------------------- calls

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        self.called.add(id(func))
        if is_name(func, "type") and len(node.args) != 1:
            self.refuse(node, "type() with more than one argument makes classes: use class")
        if isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__delattr__"):
            if not (is_name(func.value, "object") or is_super(func.value)):
                self.refuse(node, f"`{func.attr}`: only object.{func.attr}(obj, ...)")
        if isinstance(func, ast.Attribute) and func.attr == "format":
            text = func.value
            if not (isinstance(text, ast.Constant) and isinstance(text.value, str)):
                self.refuse(node, ".format on text that is not written out: use an f-string")
            elif not _plain_fields(text.value):
                self.refuse(node, ".format fields that read attributes or items: use an f-string")
        if isinstance(func, ast.Attribute) and self._own_class(node.args[:1]):
            self.registering.add(id(func))  # jax.tree_util.register_pytree_node(Mine, ...)
        for keyword in node.keywords:
            if keyword.arg == "compiler_options":
                self.refuse(node, "compiler_options change what XLA does and reports")
        self.generic_visit(node)

    def _own_class(self, args: list[ast.expr]) -> bool:
        return bool(args) and isinstance(args[0], ast.Name) and args[0].id in self.classes

    # ---------------------------------------------------------------- definitions

    def _class_refusals(self, node: ast.ClassDef) -> None:
        """What a class of the learner's may not be: a metaclass (its ``__call__`` runs when
        JAX rebuilds an output), a class whose instances hand NumPy a raw address or
        compute their own construction or attribute lookup."""
        for keyword in node.keywords:
            if keyword.arg == "metaclass":
                self.refuse(node, "a metaclass of your own: use a plain class")
        for base in node.bases:
            if is_name(base, "type"):
                self.refuse(node, "a class derived from type (a metaclass): use a plain class")
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name in CLASS_FORBIDDEN:
                self.refuse(
                    item, f"`{item.name}` in a class of yours: {CLASS_FORBIDDEN[item.name]}"
                )

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._class_refusals(node)
        for decorator in node.decorator_list:
            inner = decorator.func if isinstance(decorator, ast.Call) else decorator
            self.registering.add(id(inner))  # @jax.tree_util.register_dataclass
            self.visit(decorator)
        for item in node.bases + [k.value for k in node.keywords]:
            self.visit(item)
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                self._method(item)
            else:
                self.in_class_body = isinstance(item, ast.Assign | ast.AnnAssign)
                try:
                    self.visit(item)
                finally:
                    self.in_class_body = False

    def _method(self, node: ast.FunctionDef) -> None:
        kinds = {_decorator_name(d) for d in node.decorator_list}
        params = node.args.posonlyargs + node.args.args
        me = params[0].arg if params and "staticmethod" not in kinds else None
        self.selves.append(None if "classmethod" in kinds else me)
        try:
            self.generic_visit(node)
        finally:
            self.selves.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.selves.append(None)  # a nested function: its first parameter is not self
        try:
            self.generic_visit(node)
        finally:
            self.selves.pop()

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.selves.append(None)
        try:
            self.generic_visit(node)
        finally:
            self.selves.pop()

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.refuse(node, "async code is not run in strict mode")

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            if name.startswith("__") or name in self.modules:
                self.refuse(node, f"`global {name}`: rebinds a module or the interpreter's name")

    def visit_Expr(self, node: ast.Expr) -> None:
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            self.generic_visit(node)  # a string on its own (a docstring) is never read

    def visit_Constant(self, node: ast.Constant) -> None:
        text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
        if isinstance(text, str) and _DUNDER.match(text) and text != "__main__":
            self.refuse(node, "text that is a dunder name names the interpreter's internals")

    def visit_Match(self, node: ast.Match) -> None:
        # a pattern reads attributes by name (case C(attr=x), C.__match_args__) and takes
        # items apart in C, where the guards do not see them: use if and elif
        self.refuse(node, "match reads attributes and items where nothing checks them: use if")


def _config_reads(tree: ast.AST) -> Iterator[int]:
    """The ``jax.config`` nodes an answer may write: a read of a flag's value
    (``jax.config.jax_enable_x64``) and ``jax.config.update`` of a flag that only says
    more (:data:`CONFIG_UPDATES`), its value written out."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)):
            continue
        config = node.value
        if config.attr != "config" or not is_name(config.value, "jax"):
            continue
        if node.attr.startswith("jax_") and isinstance(node.ctx, ast.Load):
            yield id(config)
        elif node.attr == "update":
            for call in ast.walk(tree):
                if isinstance(call, ast.Call) and call.func is node and call.args:
                    key = call.args[0]
                    if isinstance(key, ast.Constant) and key.value in CONFIG_UPDATES:
                        yield id(config)


def _allowed() -> str:
    return "jax, numpy, equinox, flax, optax, jitlab, math, functools, dataclasses, ..."


def _decorator_name(node: ast.expr) -> str:
    while isinstance(node, ast.Call):
        node = node.func
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _defined_names(node: ast.AST) -> list[str]:
    """The names a class body node defines: a method, ``self.name = ...``, or
    ``object.__setattr__(obj, "name", ...)``."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return [node.name]
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
        return [node.attr]
    if isinstance(node, ast.Call) and len(node.args) == 3:
        name = node.args[1]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            return [name.value]
    return []


def _plain_fields(text: str) -> bool:
    """A format string whose fields are positional or named, without ``.attr`` or ``[i]``."""
    import string

    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(text) if field]
    except ValueError:
        return False
    return all("." not in field and not re.search(r"\[[^\]0-9]", field) for field in fields)


def cell_refusals(cells: Iterable[tuple[str, int]]) -> list[Refusal]:
    """The refusals of several cells: (source, the file's line of its first line)."""
    return [r for source, first in cells for r in refusals(source, first_line=first)]
