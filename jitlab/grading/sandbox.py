"""What a learner's code may reach when strict mode runs it, and the guards that hold it
there at run time.

:mod:`jitlab.learner.safe_subset` reads the learner's cells before anything runs, with
the tables below: the modules an answer imports, the parts of them that reach the
compiler, the process or the disk, the interpreter's own parts, the builtins that reach
objects by name or run text. What a reading cannot see (a module handed back by a
call, a method called with a module for ``self``) is held at run time: the strict
kernel rewrites each cell (:class:`Guarded`) so that everything entering the learner's
code, and every attribute it writes, passes the guards of :func:`make_guards`. The
processes exercise's workers run the learner's cell the same way. This module is the
grading frame's, so that both the runner and a grader can use it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
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
        "func_globals",  # a Cython function's (numpy.random's methods)
        "func_closure",
        "func_code",
        "func_dict",
        "serialize_executable",  # unpickles what it is given (red team 10)
        "deserialize_and_load",
        "backends",  # matplotlib.backends: loads any module by name
        "backend_registry",
        "load_backend_module",
        "resolve_name",
        "pkgutil",
        "find_class",
        "Unpickler",
        "bltns",  # enum's name for builtins
        "unsafe_buffer_pointer",  # an array's address (red team 12)
        "raw_frames",  # jaxlib's Traceback: the live stack's code objects
        "as_python_traceback",
        "get_traceback",
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
OPEN_PARTS = {("jax", "core"), ("flax", "core")}  # public modules named like internals


def is_name(node: ast.AST | None, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def is_super(node: ast.AST) -> bool:
    """``super()`` with no arguments: it binds the method's own class and instance (the
    two-argument form could bind any object)."""
    return is_call_to(node, "super") and not node.args and not node.keywords


def is_call_to(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and is_name(node.func, name)


OWN = "__jitlab_own__"  # the guards' names in builtins (the subset cannot say them)
READ = "__jitlab_read__"
VALUE = "__jitlab_value__"
EACH = "__jitlab_each__"
GUARDS = (OWN, READ, VALUE, EACH)  # the names, in the order make_guards returns them
WRITERS = {"setattr", "delattr"}
# Modules whose functions an allowed module may not hand out (``lib.getframe = sys._getframe``);
# the builtins that reach objects by name or run text are refused wherever they come from.
_UNSAFE_HOMES = frozenset(
    {"sys", "os", "posix", "nt", "gc", "ctypes", "_ctypes", "importlib", "inspect",
     "marshal", "pickle", "_pickle", "io", "_io", "signal", "_signal", "_thread", "threading",
     "weakref", "_weakref", "subprocess", "_posixsubprocess", "faulthandler", "tracemalloc",
     "atexit", "types", "code", "runpy", "shutil", "tempfile", "pathlib", "socket", "string",
     "operator", "_operator", "_string", "copyreg", "codecs", "_codecs", "mmap", "resource",
     "pkgutil", "zipimport"}
)  # fmt: skip
# Mutable objects of the frameworks' own, which answers write by design (nnx.Variable.value).
_MUTABLE_BY_DESIGN = ("flax.nnx",)


def module_allowed(name: str) -> bool:
    """Whether an answer may hold the module called ``name`` (``jax.numpy``, ``jitlab``:
    yes; ``numpy.lib``, ``jax._src.core``, ``jitlab.graders.shapes``, ``os``: no)."""
    parts = name.split(".")
    if parts[0] == "jitlab":
        return len(parts) == 1  # the instruments; never the graders or the runner
    return parts[0] in ALLOWED_MODULES and not any(
        (parts[i - 1], p) not in OPEN_PARTS
        and (p.startswith("_") or p in LIBRARY_PARTS or p in INTERPRETER_PARTS)
        for i, p in enumerate(parts[1:], start=1)
    )


def make_guards(refuse: Callable[[str, int], Any]) -> tuple[Callable, ...]:
    """The runtime guards :class:`Guarded` code calls. ``own(obj, line)`` before an
    attribute write: only objects of classes the learner's cells defined (and those
    classes), and the frameworks' mutable objects (``nnx.Variable``). ``read(obj, name,
    line)`` for an attribute read: never off a module outside :func:`module_allowed`
    (the graders'), and its value passes ``value``. ``value(x, line)`` for whatever else
    enters the learner's code (a call's result, an item, an imported name): never a
    module outside :func:`module_allowed`, an interpreter object (a frame, code, a
    cell), a builtin that reaches objects by name or runs text (``getattr``, ``exec``),
    nor a function a module hands out from ``sys``, ``os``, ``gc``, ``pickle`` ...
    ``refuse(what, line)`` reports and raises. Everything they use is bound here: they
    run no code of the learner's but the lookup itself."""
    import builtins
    import types

    type_, isinstance_, getattr_, id_ = type, isinstance, getattr, id
    proxy_get = type(type.__dict__).get
    type_dict = type.__dict__["__dict__"].__get__  # cls.__dict__, whatever its metaclass says
    module_of = type.__dict__["__module__"].__get__
    mro_of = type.__dict__["__mro__"].__get__
    module_dict = types.ModuleType.__dict__["__dict__"].__get__
    module_type = types.ModuleType
    interpreter = (types.FrameType, types.CodeType, types.TracebackType, types.CellType)
    functions = (
        types.FunctionType, types.BuiltinFunctionType, types.MethodType,
        types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType,
    )  # fmt: skip
    str_type, allowed, homes = str, module_allowed, _UNSAFE_HOMES
    forbidden = {id_(getattr_(builtins, n)): n for n in BUILTINS if hasattr(builtins, n)}
    forbidden |= {id_(f): f.__name__ for f in (builtins.__import__, setattr, delattr)}
    by_design = _MUTABLE_BY_DESIGN
    open_names = frozenset(
        {"__name__", "__qualname__", "__doc__", "__init__", "__new__", "_replace", "_asdict",
         "_fields", "_make", "_cache_size"}
    )  # fmt: skip
    super_type = super

    def module_name(module: Any) -> str:
        name = module_dict(module).get("__name__", "?")
        return name if type_(name) is str_type else "?"

    def own(target: Any, line: int) -> Any:
        cls = target if isinstance_(target, type_) else type_(target)
        if proxy_get(type_dict(cls), "__module__") == "__main__":
            return target
        homes_ = [str(module_of(c)) for c in mro_of(cls)]
        if not isinstance_(target, type_) and any(h.startswith(by_design) for h in homes_):
            if not homes_[0].startswith("jitlab"):  # the grader's own model stays its own
                return target
        if isinstance_(target, module_type):
            what = f"the module {module_name(target)}"
        else:
            what = f"a {homes_[0]}.{type_.__dict__['__qualname__'].__get__(cls)} object"
        refuse(f"writing an attribute of {what}, which is not an object of a class of yours", line)

    def value(found: Any, line: int) -> Any:
        if type_(found) is dict and ("__builtins__" in found or "__build_class__" in found):
            refuse("reaching a module's namespace (its globals, or the builtins')", line)
        if isinstance_(found, module_type):
            if not allowed(module_name(found)):
                refuse(f"reaching the module {module_name(found)}", line)
        elif isinstance_(found, interpreter):
            refuse(f"reaching an interpreter object ({type_(found).__name__})", line)
        elif id_(found) in forbidden:
            refuse(f"reaching the builtin {forbidden[id_(found)]}", line)
        elif isinstance_(found, functions):  # a function handed out by a library
            home = getattr_(found, "__module__", None)
            if type_(home) is str_type and home.split(".")[0] in homes:
                refuse(f"reaching {home}.{getattr_(found, '__name__', '?')}", line)
        return found

    def read(obj: Any, name: str, line: int) -> Any:
        if isinstance_(obj, module_type) and not allowed(module_name(obj)):
            refuse(f"reading {name} off the module {module_name(obj)}", line)
        if name[:1] == "_" and name not in open_names and type_(obj) is not super_type:
            # __dict__, __class__, _src: only off the learner's own objects (super() binds
            # to the learner's own class and object)
            cls = obj if isinstance_(obj, type_) else type_(obj)
            if proxy_get(type_dict(cls), "__module__") != "__main__":
                refuse(f"reading {name} of an object that is not of a class of yours", line)
        return value(getattr_(obj, name), line)

    def each(items: Any, line: int) -> Any:
        """``items``, each checked as it is handed to the learner's loop."""
        for item in items:
            yield value(item, line)

    return own, read, value, each


class Guarded(ast.NodeTransformer):
    """Rewrites a cell so that what enters its code and what it writes go through the
    runtime guards of :func:`make_guards`: ``a.b`` becomes ``__jitlab_read__(a, "b",
    line)``; a call's result, an item ``a[i]`` and a name a ``from`` import binds pass
    ``__jitlab_value__``, and so do the items a loop or an unpacking hands out; ``a.b = v``
    becomes ``__jitlab_own__(a, line).b = v`` (``a``
    evaluated once, as before), and so do ``del a.b``, ``a.b += 1``, ``setattr(a, ...)``,
    ``delattr(a, ...)`` and ``object.__setattr__(a, ...)``. Line numbers are kept, and so
    is ``super()``. A cell that opens with ``skip`` (the runner's announcement of a
    grader cell) is left as it is."""

    def __init__(self, skip: str = "", exempt: Any = None) -> None:
        self.skip = skip
        self.exempt = exempt  # a file of the cells given as they are (:func:`cell_print`)
        self.given: frozenset[str] | None = None

    def visit_Module(self, node: ast.Module) -> ast.AST:
        if self.skip and node.body and ast.unparse(node.body[0]).startswith(self.skip):
            return node
        if self.given is None:  # read once, at the first cell: the runner wrote it by then
            try:
                self.given = frozenset(self.exempt.read_text(encoding="utf-8").split())
            except (AttributeError, OSError):
                self.given = frozenset()
        if cell_print(node) in self.given:
            return node  # a cell exactly as the exercise gave it: the course's own code
        self.generic_visit(node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Store | ast.Del):
            node.value = _call(OWN, node.value, ast.Constant(node.lineno))
            return node
        text = ast.Constant(node.attr)
        return ast.copy_location(_call(READ, node.value, text, ast.Constant(node.lineno)), node)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load):
            return ast.copy_location(_call(VALUE, node, ast.Constant(node.lineno)), node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        writer = isinstance(node.func, ast.Name) and node.func.id in WRITERS
        writer = writer or (
            isinstance(node.func, ast.Attribute)
            and node.func.attr in ("__setattr__", "__delattr__")
            and is_name(node.func.value, "object")
        )
        super_call = is_super(node)
        self.generic_visit(node)
        if writer and node.args:
            node.args[0] = _call(OWN, node.args[0], ast.Constant(node.lineno))
        if super_call:
            return node  # super() reads its frame's first argument: called where it stands
        return ast.copy_location(_call(VALUE, node, ast.Constant(node.lineno)), node)

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        self.generic_visit(node)
        if any(isinstance(t, ast.Tuple | ast.List) for t in node.targets):  # a, b = ...
            line = ast.Constant(node.lineno)
            node.value = ast.copy_location(_call(EACH, node.value, line), node.value)
        return node

    def visit_For(self, node: ast.For) -> ast.AST:
        self.generic_visit(node)
        node.iter = ast.copy_location(_call(EACH, node.iter, ast.Constant(node.lineno)), node.iter)
        return node

    def visit_comprehension(self, node: ast.comprehension) -> ast.AST:
        self.generic_visit(node)
        line = ast.Constant(getattr(node.iter, "lineno", 0))
        node.iter = ast.copy_location(_call(EACH, node.iter, line), node.iter)
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> Any:
        checks = [
            ast.Assign(
                targets=[ast.Name(id=name, ctx=ast.Store())],
                value=_call(VALUE, ast.Name(id=name, ctx=ast.Load()), ast.Constant(node.lineno)),
            )
            for name in (alias.asname or alias.name for alias in node.names)
            if name != "*"
        ]
        return [node, *(ast.copy_location(check, node) for check in checks)]


def cell_print(tree: ast.Module) -> str:
    """A cell's fingerprint, the same for its source as the runner reads it and for the
    syntax tree IPython hands the kernel's transformers."""
    import hashlib

    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def _call(name: str, *args: ast.expr) -> ast.Call:
    call = ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])
    return ast.copy_location(call, args[0])


def guarded_code(source: str, filename: str) -> Any:
    """``source`` compiled with :class:`Guarded` applied (for code run outside IPython:
    the processes exercise's cell in its workers)."""
    tree = Guarded().visit(ast.parse(source, filename))
    return compile(ast.fix_missing_locations(tree), filename, "exec")
