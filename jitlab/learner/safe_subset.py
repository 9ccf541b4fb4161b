"""What strict mode runs: the learner's cells in a subset of Python that computes, but
cannot reach the grader.

Every cheat that beat the audit hook (:mod:`jitlab.learner.strict`) reached the grader
through the interpreter itself: a frame (``sys._getframe``, a traceback's ``tb_frame``),
a module's or class's attribute rewritten (``np.allclose = ...``, ``sys.modules``), a
closure cell or a ``__code__`` swapped, a weak-reference callback that runs between two
of the grader's lines, a library's registry (a pytree node, a lowering rule). An answer
needs none of them. So before a strict check runs anything, each cell the learner wrote
(a cell that is not exactly as the exercise gave it) is read, not run, and refused if it
uses what only an attack needs:

- an import from outside the numerical libraries the course uses (``jax``, ``numpy``,
  ``equinox``, ``flax``, ``optax``, the standard library's pure helpers); a module the
  grader relies on cannot be imported into reach (``sys``, ``gc``, ``ctypes``, ...);
- a name or attribute that starts with ``_`` (dunders, private internals), but for a
  namedtuple's public ``_replace``/``_asdict``/``_fields``/``_make``, ``self._x`` in a
  class's own methods, and ``object.__setattr__(self, "name", value)`` in a frozen
  dataclass's ``__post_init__``;
- the builtins that reach objects by name or run text (``getattr``, ``setattr``,
  ``vars``, ``globals``, ``eval``, ``exec``, ``compile``, ``open``, ...), attribute access
  on ``type(x)``, ``type`` with three arguments, and a ``.format`` whose text is not a
  literal with plain fields;
- attribute assignment anywhere but on ``self`` in a class's own methods, and a method
  of the learner's class called through the class (where ``self`` could be a module);
- a module used as a value (``m = np``), the names of the interpreter's own parts as an
  attribute (``.f_back``, ``.sys``, ``.ctypes``), the parts of JAX and NumPy that reach
  the compiler or memory (``jax.extend``, ``jax.monitoring``, ``jax.config``,
  ``np.lib``, ``np.ctypeslib``, file loading), ``functools.wraps``/``update_wrapper``
  (they write into their first argument), and a ``register...`` call (a pytree node, a
  lowering) for anything but a class of the learner's own;
- IPython magics and shell lines, ``async`` code, and text with ``__`` in it.

An honest answer to every exercise is plain numerical Python and passes; the tests run
every solution and every right answer the grader tests hold through this module. The
audit hook still watches the run, as a second line.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any

ALLOWED_MODULES = frozenset(
    {
        "jax",
        "numpy",
        "equinox",
        "flax",
        "optax",
        "jitlab",
        "matplotlib",  # a plot of the learner's
        "math",
        "cmath",
        "functools",
        "itertools",
        "collections",
        "dataclasses",
        "typing",
        "time",
        "random",
        "statistics",
        "enum",
        "abc",
        "numbers",
        "copy",
        "decimal",
        "fractions",
        "heapq",
        "bisect",
    }
)
# Parts of the allowed libraries that reach the compiler, the process or the disk, refused
# wherever they appear in a module's dotted path or attribute chain.
LIBRARY_PARTS = frozenset(
    {
        "extend",  # jax.extend: primitives and lowering rules
        "interpreters",  # jax.interpreters.mlir: lowering rules
        "ffi",  # foreign functions
        "monitoring",  # the listeners the compile counters hear
        "config",  # jax.config: jit, caches, dtypes for the whole process
        "core",  # jax.core / numpy.core: internals
        "lib",  # numpy.lib.stride_tricks, jax.lib.xla_client
        "compilation_cache",
        "jax2tf",
        "ctypeslib",
        "f2py",
        "distutils",
        "stride_tricks",
        "as_strided",
        "internal",  # equinox.internal
        "load",
        "save",
        "savez",
        "savez_compressed",
        "savetxt",
        "loadtxt",
        "genfromtxt",
        "fromfile",
        "memmap",
        "distributed",  # jax.distributed: the processes' own runtime
    }
)
# Attribute names refused on any object: the interpreter's frames and code, a module of
# the standard library that reaches the process, and functions that write into objects.
INTERPRETER_PARTS = frozenset(
    {
        "f_back",
        "f_locals",
        "f_globals",
        "f_builtins",
        "f_code",
        "f_trace",
        "tb_frame",
        "tb_next",
        "gi_frame",
        "gi_code",
        "cr_frame",
        "cr_code",
        "ag_frame",
        "ag_code",
        "cell_contents",
        "ctypes",
        "sys",
        "os",
        "gc",
        "inspect",
        "builtins",
        "types",
        "importlib",
        "weakref",
        "threading",
        "subprocess",
        "signal",
        "pickle",
        "marshal",
        "atexit",
        "traceback",
        "logging",
        "warnings",
        "runpy",
        "tofile",
        "dump",
        "dumps",
        "loads",
        "update_wrapper",
        "wraps",
        "format_map",
        "get_type_hints",  # evaluates annotations written as text
        "ForwardRef",
        "breakpoint",
    }
)
BUILTINS = frozenset(
    {
        "getattr",
        "vars",
        "globals",
        "locals",
        "eval",
        "exec",
        "compile",
        "open",
        "breakpoint",
        "input",
        "memoryview",
        "help",
        "exit",
        "quit",
        "get_ipython",
    }
)
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make"})
CLASS_DECLARATIONS = frozenset({"__slots__", "__match_args__"})  # in a class body
SELF_DUNDERS = frozenset({"__dict__", "__slots__"})  # read or written on self
_FORMAT_FIELD_OK = frozenset("{}:!<>=^+- #0123456789.,_%eEfFgGdnsrxXobca")


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
        self.chains: set[int] = set()  # names read as the start of an attribute chain
        self.registering: set[int] = set()  # `register...` used on a class of the cell's
        self.called: set[int] = set()  # the function expressions of calls
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
        for part in parts[1:]:
            self._name_part(node, part, library=True)

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

    def _name_part(self, node: ast.AST, name: str, *, library: bool) -> None:
        """An attribute or imported name: ``library`` when read off a module."""
        if name.startswith("_") and name not in NAMEDTUPLE_API:
            self.refuse(node, f"`{name}`: names that start with _ are internals")
        elif name in INTERPRETER_PARTS:
            self.refuse(node, f"`{name}` reaches the interpreter or the process")
        elif library and name in LIBRARY_PARTS:
            self.refuse(node, f"`{name}` reaches the compiler, the process or the disk")

    def visit_Name(self, node: ast.Name) -> None:
        declared = self.in_class_body and node.id in CLASS_DECLARATIONS
        if node.id in _WRITERS and id(node) not in self.called:
            self.refuse(node, f"`{node.id}` only called directly (the guard sees its object)")
        elif node.id in BUILTINS:
            self.refuse(node, f"`{node.id}` reaches objects by name or runs text")
        elif node.id.startswith("__") and node.id != "__name__" and not declared:
            self.refuse(node, f"`{node.id}`: the interpreter's own names")
        elif node.id in self.modules and isinstance(node.ctx, ast.Load):
            if id(node) not in self.chains:
                self.refuse(node, f"a module ({node.id}) used as a value: call its functions")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        root = node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(node.value, ast.Name):
            self.chains.add(id(node.value))
        library = isinstance(root, ast.Name) and root.id in self.imported
        if self._on_self(node) and (not node.attr.startswith("__") or node.attr in SELF_DUNDERS):
            pass  # self._cache, self.__dict__: the learner's own object
        elif node.attr in self.own_private:
            pass  # other._key(), box._cache: a name the learner's own classes define
        elif node.attr in ("__setattr__", "__delattr__") and _is_name(node.value, "object"):
            if id(node) not in self.called:  # called directly: the guard sees its object
                self.refuse(node, f"`object.{node.attr}` only called directly")
        elif _is_super(node.value):
            pass  # super().__new__(cls), super().__setattr__(...): the class's own object
        elif _is_name(node.value, "jitlab"):
            self._jitlab_name(node, node.attr)
        else:
            self._name_part(node, node.attr, library=library)
        if node.attr.startswith("register") and id(node) not in self.registering:
            self.refuse(node, f"`{node.attr}` changes a library's registry: only for your class")
        if _is_call_to(node.value, "type"):
            self.refuse(node, "attribute access on type(x): use the object itself")
        self.generic_visit(node)

    def _on_self(self, node: ast.Attribute) -> bool:
        me = self.selves[-1] if self.selves else None
        return me is not None and isinstance(node.value, ast.Name) and node.value.id == me

    # ---------------------------------------------------------------- calls

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        self.called.add(id(func))
        if _is_name(func, "type") and len(node.args) != 1:
            self.refuse(node, "type() with more than one argument makes classes: use class")
        if isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__delattr__"):
            if not (_is_name(func.value, "object") or _is_super(func.value)):
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

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
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
        if isinstance(node.value, str) and "__" in node.value:
            self.refuse(node, "text with __ in it names the interpreter's internals")


def _allowed() -> str:
    return "jax, numpy, equinox, flax, optax, jitlab, math, functools, dataclasses, ..."


def _is_name(node: ast.AST | None, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_super(node: ast.AST) -> bool:
    """``super()`` with no arguments: it binds the method's own class and instance (the
    two-argument form could bind any object)."""
    return _is_call_to(node, "super") and not node.args and not node.keywords


def _is_call_to(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and _is_name(node.func, name)


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
    return all("." not in field and "[" not in field for field in fields)


def cell_refusals(cells: Iterable[tuple[str, int]]) -> list[Refusal]:
    """The refusals of several cells: (source, the file's line of its first line)."""
    return [r for source, first in cells for r in refusals(source, first_line=first)]


# --------------------------------------------------------------------------- at run time

OWN = "__jitlab_own__"  # the guards' names in builtins (the subset cannot say them)
READ = "__jitlab_read__"
_WRITERS = {"setattr", "delattr"}
# Modules whose functions an allowed module may not hand out (``lib.getframe = sys._getframe``).
_UNSAFE_HOMES = frozenset(
    {"sys", "os", "posix", "nt", "gc", "ctypes", "_ctypes", "importlib", "inspect", "builtins",
     "marshal", "pickle", "_pickle", "io", "_io", "signal", "_signal", "_thread", "threading",
     "weakref", "_weakref", "subprocess", "_posixsubprocess", "faulthandler", "tracemalloc",
     "atexit", "types", "code", "runpy", "shutil", "tempfile", "pathlib", "socket", "string",
     "operator", "_operator", "_string", "copyreg", "codecs", "_codecs", "mmap", "resource"}
)  # fmt: skip


def module_allowed(name: str) -> bool:
    """Whether an answer may hold the module called ``name`` (``jax.numpy``: yes;
    ``numpy.lib``, ``jax._src.core``, ``os``: no)."""
    parts = name.split(".")
    return parts[0] in ALLOWED_MODULES and not any(
        p.startswith("_") or p in LIBRARY_PARTS or p in INTERPRETER_PARTS for p in parts[1:]
    )


def make_guards(refuse: Callable[[str, int], Any]) -> tuple[Callable, Callable]:
    """The two runtime guards :class:`Guarded` code calls: ``own(obj, line)`` before an
    attribute write (only objects of classes the learner's cells defined, and those
    classes) and ``read(obj, name, line)`` for an attribute read (never a module outside
    :func:`module_allowed`, an interpreter object such as a frame, nor a function a
    module hands out from ``sys``, ``os``, ``gc`` ...). ``refuse(what, line)`` reports
    and raises. Everything they use is bound here: they run no code of the learner's but
    the attribute lookup itself."""
    import types

    type_, isinstance_, getattr_, callable_ = type, isinstance, getattr, callable
    proxy_get = type(type.__dict__).get
    type_dict = type.__dict__["__dict__"].__get__  # cls.__dict__, whatever its metaclass says
    module_dict = types.ModuleType.__dict__["__dict__"].__get__
    module_type = types.ModuleType
    interpreter = (types.FrameType, types.CodeType, types.TracebackType, types.CellType)
    str_type, allowed, homes = str, module_allowed, _UNSAFE_HOMES

    def module_name(module: Any) -> str:
        name = module_dict(module).get("__name__", "?")
        return name if type_(name) is str_type else "?"

    def own(target: Any, line: int) -> Any:
        cls = target if isinstance_(target, type_) else type_(target)
        if proxy_get(type_dict(cls), "__module__") == "__main__":
            return target
        if isinstance_(target, module_type):
            what = f"the module {module_name(target)}"
        else:
            what = f"a {proxy_get(type_dict(cls), '__qualname__', '?')} object"
        refuse(f"writing an attribute of {what}, which is not an object of a class of yours", line)

    def read(obj: Any, name: str, line: int) -> Any:
        value = getattr_(obj, name)
        if isinstance_(value, module_type):
            if not allowed(module_name(value)):
                refuse(f"reaching the module {module_name(value)}", line)
        elif isinstance_(value, interpreter):
            refuse(f"reaching an interpreter object ({type_(value).__name__})", line)
        elif isinstance_(obj, module_type) and callable_(value):
            home = getattr_(value, "__module__", None)  # a library's object: no code of theirs
            if type_(home) is str_type and home.split(".")[0] in homes:
                refuse(f"reaching {home}.{name} through {module_name(obj)}", line)
        return value

    return own, read


class Guarded(ast.NodeTransformer):
    """Rewrites a cell so that its attribute reads and writes go through the runtime
    guards of :func:`make_guards`: ``a.b`` becomes ``__jitlab_read__(a, "b", line)``,
    ``a.b = v`` becomes ``__jitlab_own__(a, line).b = v`` (``a`` evaluated once, as
    before), and so do ``del a.b``, ``a.b += 1``, ``setattr(a, ...)``, ``delattr(a, ...)``
    and ``object.__setattr__(a, ...)``. Line numbers are kept, and so is ``super()``. A
    cell that opens with ``skip`` (the runner's announcement of a grader cell) is left
    as it is."""

    def __init__(self, skip: str = "") -> None:
        self.skip = skip

    def visit_Module(self, node: ast.Module) -> ast.AST:
        if self.skip and node.body and ast.unparse(node.body[0]).startswith(self.skip):
            return node
        self.generic_visit(node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Store | ast.Del):
            node.value = _call(OWN, node.value, ast.Constant(node.lineno))
            return node
        text = ast.Constant(node.attr)
        return ast.copy_location(_call(READ, node.value, text, ast.Constant(node.lineno)), node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        writer = isinstance(node.func, ast.Name) and node.func.id in _WRITERS
        writer = writer or (
            isinstance(node.func, ast.Attribute)
            and node.func.attr in ("__setattr__", "__delattr__")
            and _is_name(node.func.value, "object")
        )
        self.generic_visit(node)
        if writer and node.args:
            node.args[0] = _call(OWN, node.args[0], ast.Constant(node.lineno))
        return node


def _call(name: str, *args: ast.expr) -> ast.Call:
    call = ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])
    return ast.copy_location(call, args[0])


def guarded_code(source: str, filename: str) -> Any:
    """``source`` compiled with :class:`Guarded` applied (for code run outside IPython:
    the processes exercise's cell in its workers)."""
    tree = Guarded().visit(ast.parse(source, filename))
    return compile(ast.fix_missing_locations(tree), filename, "exec")
