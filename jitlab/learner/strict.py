"""Strict mode (``jitlab check --strict``): the learner's kernel is set up by the runner
before any learner code runs, and watched by an audit hook that cannot be removed.

Code that runs in the grader's process can always reach the grader; the self-paced
``jitlab check`` says so and catches the casual shortcuts. Strict mode is for assessment.
Its kernel process starts with this module's :func:`arm` (an IPython startup file in a
folder of the runner's), which, before the first cell:

- registers its own JAX monitoring listener, which holds nothing and hands each event to
  the hook, and has XLA dump every compiled module to a folder outside the learner's
  reach (``--xla_dump_to``), so that compilations are counted twice, by means the
  learner's code never held;
- imports the modules the grader cells import, then takes stock of what grading relies
  on: JAX's listener lists, ``builtins``, ``sys.meta_path``, ``sys.path``,
  ``sys.path_hooks``, IPython's input and AST transformers and its cell runner, the
  functions of ``jax``, ``numpy``, ``sys`` and of what draws the grader's random inputs,
  and every attribute of the course's own modules (jitlab's and the graders'), with
  their functions' defaults and their classes' and objects' own attributes;
- at every check the grader decides (``passed``, ``fail``), compares the modules above
  and the callables of every other loaded module with the stock; at each grader cell,
  the callables of the classes those modules define as well;
- installs an audit hook (:func:`sys.addaudithook`) that refuses, and records, writes
  and removals outside the check's scratch folder; ``sys.settrace`` and
  ``sys.setprofile``; frames (``sys._getframe``, ``tb_frame``, ``gi_frame``), the
  garbage collector's object lists, ``ctypes``, threads and processes asked for by the
  learner's code; swapping a function's ``__code__``, or code compiled under an
  installed file's name (its frames would pass for trusted); an audit hook of the learner's
  (it would hear the runner's announcements); and running module code from a file
  outside the standard library, the installed packages and the course's package.

Grading announces the objects it hands to the learner's code and reads back afterwards
(a wrapper's ``.calls`` counter, the list of calls a recorder keeps, the dict of
executables a learner picks from) as it makes them, and around each change it makes
itself (``jitlab.grading.checks.grader_owned`` and ``grader_changes``): the hook keeps
what it saw, and an object changed by anyone else (the learner editing
``compiled[b].calls``) is reported before grading's next change to it and at the next
comparison. Announcing from the learner's own code is refused.

The runner's first line in each grader cell and a last line it adds announce the grader
to the hook (``sys.audit("jitlab.strict", ...)``); the hook accepts them only as
statements of the cell IPython runs, the last run by the frame that ran the first, from
the same line (a grader stopped by an exception never gets there; a cell the learner's
code runs itself is not that frame), whatever token the learner's code may have read. At
both, it compares everything above with its stock, and checks that every compilation XLA
dumped was heard by its listener. The grader's reports reach the runner through the hook
too: the verdict module's writer raises each record, and the hook keeps a copy (only of
records from that writer, with none of the learner's code on the stack below the grader
cell) in a file the learner cannot write, which the runner reads instead of the channel.
Everything it finds goes to a report that only the hook writes, and the runner fails the
check on any entry, whether or not the learner's code caught the refusal.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import inspect
import json
import logging
import operator
import os
import re
import sys
import sysconfig
import threading
import types
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from jitlab.instruments.audit import (
    CALL_EVENT,
    HEARD_EVENT,
    OWN_FRAME_USE,
    STATE_EVENT,
    VERDICT_EVENT,
)

try:  # the hook's own encoder, made before any learner code runs (see _encoder)
    from _json import encode_basestring_ascii as _c_encode_string
    from _json import make_encoder as _c_make_encoder
except ImportError:  # pragma: no cover (CPython always has it)
    _c_make_encoder = None

STRICT_ENV = "JITLAB_STRICT"  # the runner's strict folder (report, XLA dump, IPython)
# "hook" in the runner's environment: the audit hook alone, without the reading of the
# cells and the attribute guards in front of it (the course's tests of the hook set it).
LAYERS_ENV = "JITLAB_STRICT_LAYERS"
GRADERS_ENV = "JITLAB_STRICT_GRADERS"  # what the grader cells import, loaded at arming
EVENT = "jitlab.strict"
GUARD_EVENT = "jitlab.strict.guard"  # raised by the attribute guard only
REPORT = "report.jsonl"
EXEMPT = "given-cells.txt"  # the fingerprints of the cells the exercise gives, as given
VERDICTS = "verdicts.jsonl"  # the hook's copy of the verdict channel, which the runner reads
DUMP = "xla"
STARTUP = "ipython/profile_default/startup/00-jitlab-strict.py"
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

# Audit events the learner's own code may not raise (the first code on the stack that is
# not the standard library's is the learner's); the same events raised by JAX, IPython,
# jitlab or another installed package on their own behalf pass.
_LEARNER_MAY_NOT = {
    "sys._current_frames": "a frame (sys._current_frames)",  # f_back is not audited
    "sys._current_exceptions": "a frame (sys._current_exceptions)",
    "gc.get_objects": "the garbage collector's objects",
    "gc.get_referrers": "the garbage collector's referrers",
    "gc.get_referents": "the garbage collector's referents",
    "_thread.start_new_thread": "a thread",
    "subprocess.Popen": "a process",
    "os.system": "a process",
    "os.exec": "a process",
    "os.posix_spawn": "a process",
    "os.spawn": "a process",
    "os.fork": "a process",
    "os.forkpty": "a process",
    "ctypes.dlopen": "ctypes",
    "ctypes.dlsym": "ctypes",
    "ctypes.cdata": "ctypes",
    "ctypes.addressof": "ctypes",
    "ctypes.string_at": "ctypes",
    "ctypes.call_function": "ctypes",
    "marshal.loads": "code loaded with marshal",  # it carries any file name it likes
}
_NEVER = {
    "sys.settrace": "sys.settrace",
    "sys.setprofile": "sys.setprofile",
    "sys._settraceallthreads": "sys.settrace",
    "sys._setprofileallthreads": "sys.setprofile",
    # Its callbacks see every call, with the callable and its first argument (a grader's
    # reference array on its way into a comparison): settrace by another name.
    "sys.monitoring.register_callback": "sys.monitoring",
}
_FRAME_ATTRIBUTES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "f_locals"}
_PATH_EVENTS = {
    "os.remove": 0,
    "os.rename": 0,
    "os.replace": 0,
    "os.rmdir": 0,
    "os.mkdir": 0,
    "os.chmod": 0,
    "os.chown": 0,
    "os.truncate": 0,
    "os.utime": 0,
    "os.symlink": 1,
    "os.link": 1,
    "shutil.rmtree": 0,
    "shutil.copyfile": 1,
    "shutil.move": 1,
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
# Modules whose functions grading calls: their attributes must stay the objects they were.
_WATCHED_MODULES = (
    "builtins",
    "sys",
    "jax",
    "jax.numpy",
    "jax.monitoring",
    "jax._src.monitoring",
    "jax._src.dispatch",  # its _on_exit flag silences every monitoring event
    "numpy",
    "numpy.testing",
    # What draws the grader's inputs (``fresh_rng``): a known seed would let an answer
    # be written for the draw.
    "numpy.random",
    "numpy.random.bit_generator",
    "random",
    "secrets",
    "os",
    "time",
)
_VOLATILE = {
    "input",  # ipykernel sets it (and sys.argv, getpass.getpass) for every cell
    "getpass",
    "argv",
    "_",
    "__",
    "___",
    "last_type",
    "last_value",
    "last_traceback",
    "last_exc",
    "ps1",
    "ps2",
    "ps3",
    "stdout",
    "stderr",
    "displayhook",
    "excepthook",
}


def strict_env(folder: Path, graders: Iterable[str] = ()) -> dict[str, str]:
    """The environment of a strict kernel: where its startup file is, where XLA dumps
    every module it compiles, and the modules its grader cells import (``graders``)."""
    flags = os.environ.get("XLA_FLAGS", "")
    return {
        LAYERS_ENV: os.environ.get(LAYERS_ENV, "all"),
        STRICT_ENV: str(folder),
        GRADERS_ENV: ",".join(graders),
        "IPYTHONDIR": str(folder / "ipython"),
        "XLA_FLAGS": f"{flags} --xla_dump_to={folder / DUMP}".strip(),
    }


def grader_imports(sources: Iterable[str]) -> list[str]:
    """The modules the grader cells' imports may name (``from jitlab.graders import
    shapes``: ``jitlab.graders`` and ``jitlab.graders.shapes``), for the kernel to load
    and take stock of before any learner code can reach them."""
    found = []
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return list(dict.fromkeys(found))


_GRADER_MARKER = re.compile(r"# %%.*\btags=\[[^\]]*[\"']grader[\"']")


def early_kernel(path: Path) -> Any:
    """A strict kernel for the exercise file ``path``, started before the runner reads the
    file (:mod:`jitlab.notebooks.spare_kernel`) and armed by its startup file like any
    strict kernel, for the grader modules a plain scan of the file's grader cells finds.
    The check adopts it only if Jupytext's reading of the cells finds the same modules;
    otherwise nbval starts a fresh one."""
    import tempfile

    from jitlab.notebooks import spare_kernel

    chunks = re.split(r"(?m)^(?=# %%)", path.read_text(encoding="utf-8"))
    cells = [c.partition("\n")[2] for c in chunks if _GRADER_MARKER.match(c)]
    folder = Path(tempfile.mkdtemp(prefix="jitlab-strict-"))
    prepare(folder)
    env = strict_env(folder, grader_imports(cells))
    return spare_kernel.start(path, env, others=(folder,))


def early_folder(kernel: Any, graders: list[str]) -> Path | None:
    """The strict folder of ``kernel``, a kernel from :func:`early_kernel`, if it was
    started for exactly these grader modules; else None (it must not be adopted)."""
    started = Path(kernel.env[STRICT_ENV]) if kernel and STRICT_ENV in kernel.env else None
    return started if started and kernel.env == strict_env(started, graders) else None


def prepare(folder: Path) -> None:
    """Write the startup file that arms a strict kernel (the runner's side)."""
    startup = folder / STARTUP
    startup.parent.mkdir(parents=True, exist_ok=True)
    startup.write_text(
        "import jitlab.learner.strict as _jitlab_strict\n"
        "_jitlab_strict.arm()\n"
        "del _jitlab_strict\n",
        encoding="utf-8",
    )
    (folder / DUMP).mkdir(exist_ok=True)


# ------------------------------------------------------------------ the kernel's side


def _roots(scratch: str) -> tuple[str, ...]:
    """Where trusted code comes from: the standard library, the installed packages, the
    jitlab package, and what the runner's environment put on ``sys.path`` (the course's
    own folders on ``PYTHONPATH``); never the kernel's folder or the scratch folder."""
    paths = sysconfig.get_paths()
    found = {paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"]}
    found.add(str(Path(__file__).resolve().parents[1]))  # the jitlab package
    found |= {p for p in sys.path if p and os.path.isdir(p)}
    real = {os.path.realpath(p) + os.sep for p in found if p}
    cwd = os.path.realpath(os.getcwd()) + os.sep
    return tuple(sorted(p for p in real if not p.startswith(scratch) and p != cwd))


def _stdlib() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(os.path.realpath(p) + os.sep for p in {paths["stdlib"], paths["platstdlib"]})


@dataclasses.dataclass
class _Stock:
    """What the hook saw before any learner code ran."""

    listeners: dict[str, list[int]]
    modules: dict[str, dict[str, int]]
    meta_path: list[int]
    foreign_finders: list[str]
    path: list[str]
    path_hooks: list[int]
    ipython: dict[str, list[int]]
    course: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


def _listener_lists() -> dict[str, list[Any]]:
    from jax._src import monitoring

    return {
        name: getattr(monitoring, name)
        for name in dir(monitoring)
        if name.endswith("_listeners") and isinstance(getattr(monitoring, name), list)
    }


def _ipython_parts(shell: Any, roots: tuple[str, ...] = ()) -> dict[str, list[int]]:
    if shell is None:
        return {}

    def callbacks(name: str) -> list[Any]:
        """An event's callbacks but those from installed files (matplotlib's inline
        backend adds one when a plot is made)."""
        found = []
        for callback in shell.events.callbacks.get(name, []):
            code = getattr(getattr(callback, "__func__", callback), "__code__", None)
            if not (code and roots and os.path.realpath(code.co_filename).startswith(roots)):
                found.append(callback)
        return found

    manager = getattr(shell, "input_transformer_manager", None)
    found = {
        "input_transformers_cleanup": list(getattr(shell, "input_transformers_cleanup", [])),
        "input_transformers_post": list(getattr(shell, "input_transformers_post", [])),
        "ast_transformers": list(getattr(shell, "ast_transformers", [])),
        "manager.cleanup_transforms": list(getattr(manager, "cleanup_transforms", [])),
        "manager.line_transforms": list(getattr(manager, "line_transforms", [])),
        "manager.token_transformers": list(getattr(manager, "token_transformers", [])),
        "events.pre_run_cell": callbacks("pre_run_cell"),
        "events.pre_execute": callbacks("pre_execute"),
        "events.post_run_cell": callbacks("post_run_cell"),
        "events.post_execute": callbacks("post_execute"),
        # What shows a cell's error (nbval fails a cell on the error it sends), or swallows
        # it: replaced on the shell, or a handler of set_custom_exc.
        "error handlers": [vars(shell).get(name) for name in _ERROR_DISPLAY],
    }
    # A method replaced on the shell itself (an instance attribute shadows the class's).
    found["shell overrides"] = sorted(
        vars(shell).keys()
        & {
            "run_cell",
            "run_cell_async",
            "transform_cell",
            "run_ast_nodes",
            "run_code",
            "should_run_async",
            "compile",
            "transform_ast",
            *_ERROR_DISPLAY,
        }
    )
    found["compiler"] = [type(getattr(shell, "compile", None))]
    return {k: [v if isinstance(v, str) else id(v) for v in values] for k, values in found.items()}


_ERROR_DISPLAY = (
    "showtraceback",
    "_showtraceback",
    "showsyntaxerror",
    "showindentationerror",
    "CustomTB",
    "custom_exceptions",
)


def _foreign_finders(finders: list[Any], roots: tuple[str, ...]) -> list[str]:
    """Import finders whose class was not defined in a trusted file (installed packages
    add finders of their own on import: six, for one)."""
    found = []
    for finder in finders:
        kind = finder if isinstance(finder, type) else type(finder)
        if kind.__module__ in ("_frozen_importlib", "_frozen_importlib_external"):
            continue
        filename = getattr(sys.modules.get(kind.__module__), "__file__", None)
        if not filename or not os.path.realpath(filename).startswith(roots):
            found.append(kind.__qualname__)
    return found


def _course_packages(names: Iterable[str]) -> tuple[str, ...]:
    """jitlab and the top-level packages of the loaded grader modules that are the
    course's own (not the standard library's, nor an installed package's)."""
    paths = sysconfig.get_paths()
    installed = tuple(os.path.realpath(paths[k]) for k in ("stdlib", "purelib", "platlib"))
    found = {"jitlab"}
    for name in names:
        file = getattr(sys.modules.get(name.split(".")[0]), "__file__", None)
        if file and not os.path.realpath(file).startswith(installed):
            found.add(name.split(".")[0])
    return tuple(sorted(found))


_REBOUND: dict[str, frozenset[str]] = {}
_GLOBAL = re.compile(r"^\s*global\s+(.+?)\s*(?:#.*)?$", re.MULTILINE)
_MUTATED = re.compile(
    r"\b([A-Za-z_]\w*)(?:\[[^\]\n]*\]\s*(?:=[^=]|\+=|-=)|\.(?:append|extend|update|setdefault|add|"
    r"pop|popitem|clear|insert|remove|discard)\()"
)


def _rebound(module: Any) -> frozenset[str]:
    """The names a course module rebinds (``global``) or changes in place (a cache it
    fills): its state, not its parts, which are compared by content. A name changed in
    place counts only if it holds a container: a module (``np``) or a function
    (``passed``) whose name the source writes before ``.append(`` is a part."""
    name = module.__name__
    if name not in _REBOUND:
        try:
            text = Path(getattr(module, "__file__", None)).read_text(encoding="utf-8")
        except (OSError, TypeError):  # a module without a file (planted: reported apart)
            text = ""
        rebound = {n.strip() for line in _GLOBAL.findall(text) for n in line.split(",")}
        changed = {
            n for n in _MUTATED.findall(text) if isinstance(vars(module).get(n), dict | list | set)
        }
        _REBOUND[name] = frozenset(rebound | changed)
    return _REBOUND[name]


def _fingerprint(value: Any, course: tuple[str, ...], depth: int = 1, deep: bool = True) -> Any:
    """What a learner could change on a course module's attribute without replacing it:
    a function's code and defaults (``require_close.__kwdefaults__["rtol"]``), a course
    class's own attributes, and an attribute of a course object that hides a method of
    its class (``HINTS.require = ...``; its state, a counter, may change). Not ``deep``:
    code objects by identity, not content (after every call into the learner's code, where
    content could change only through raw memory, which the hook refuses; the stock taken
    at each check and cell compares content)."""
    if inspect.isfunction(value):
        code = value.__code__  # read once: each read is an audit event
        defaults = tuple((k, id(v)) for k, v in (value.__kwdefaults__ or {}).items())
        inner = getattr(value, "__wrapped__", None)  # a grader's body, under @grader
        inner = _code_print(inner.__code__) if deep and inspect.isfunction(inner) else None
        content = (_code_print(code) if deep else None, inner, _cells(value))
        return (id(value), id(code), id(value.__defaults__), defaults, content)
    if isinstance(value, dict | list | set | tuple) and depth == 2:  # a table (_TOL, CLOSE)
        return (id(value), _table_print(value))
    home = value if isinstance(value, type) else type(value)
    own = getattr(value, "__dict__", None)
    if not depth or own is None or home.__module__.split(".")[0] not in course:
        return id(value)
    if home is value:
        return (
            id(value),
            tuple((k, _fingerprint(v, course, 0, deep)) for k, v in dict(own).items()),
        )
    return (id(value), tuple(k for k in own if callable(getattr(home, k, None))))


def _cells(function: Any) -> tuple[int, ...]:
    """What a function's closure holds (the @grader wrapper's body and declared checks):
    a cell's contents can be rewritten in place, raising no audit event."""
    found = []
    for cell in function.__closure__ or ():
        try:
            found.append(id(cell.cell_contents))
        except ValueError:  # a cell not filled yet
            found.append(0)
    return tuple(found)


def _table_print(value: Any, depth: int = 4) -> Any:
    """A table's content: its entries' by value where they are plain (a tolerance edited in
    place, ``_TOL["rtol"] = 1e9``), nested tables and NumPy arrays too, else by identity."""
    if isinstance(value, _SCALARS):
        return (type(value).__name__, repr(value))
    if isinstance(value, _ndarray()) and value.size <= 1 << 16:
        return (value.shape, str(value.dtype), zlib.crc32(value.tobytes()))
    if depth and dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
        return (type(value).__name__, _table_print(fields, depth - 1))
    if not depth or not isinstance(value, dict | list | set | tuple | frozenset):
        return id(value)
    if isinstance(value, dict):
        return tuple((_table_print(k, 0), _table_print(v, depth - 1)) for k, v in value.items())
    items = [_table_print(v, depth - 1) for v in value]
    return tuple(sorted(items, key=repr) if isinstance(value, set | frozenset) else items)


def _ndarray() -> type:
    """NumPy's array type, without importing NumPy into a kernel that has not."""
    numpy = sys.modules.get("numpy")
    return numpy.ndarray if numpy is not None else type(None)


def _library(course: tuple[str, ...], classes: bool = False) -> dict[str, dict[str, int]]:
    """The callables of every other loaded module (``operator.ne``, ``json.dumps``,
    ``numpy._core.numeric.less_equal``), or, with ``classes``, the callables of the
    classes they define (``ShapedArray.__str__``, ``InteractiveShell.transform_cell``):
    what grading and this hook call without naming, so none may be replaced."""
    return {name: _entry(owner) for name, owner in _shelves(course, classes).items()}


def _shelves(course: tuple[str, ...], classes: bool) -> dict[str, Any]:
    """The modules (or their classes) :func:`_library` reads, by name."""
    found: dict[str, Any] = {}
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if name == "__main__" or name.split(".")[0] in course or namespace is None:
            continue
        if not classes:
            found[name] = module
            continue
        for v in [v for v in list(namespace.values()) if isinstance(v, type)]:
            if v.__module__ == name:
                found[f"{name}.{v.__qualname__}"] = v
    return found


def _entry(owner: Any) -> dict[str, int]:
    """A module's callables, or a class's callables and descriptors, by identity."""
    items = list(vars(owner).items())
    if isinstance(owner, type):
        return {k: id(m) for k, m in items if callable(m) or isinstance(m, _DESCRIPTORS)}
    found = {k: id(v) for k, v in items if callable(v) and k not in _VOLATILE}
    return {**found, "(its class)": id(type(owner))}  # a lookup that answers otherwise


def _held(course: tuple[str, ...], classes: bool = False) -> dict[str, tuple[Any, ...]]:
    """What :func:`_library_again` compares with: each namespace's owner, its class and
    every value it held (held, so that no address is reused while the kernel runs)."""
    return {
        name: (owner, type(owner), tuple(vars(owner).values()))
        for name, owner in _shelves(course, classes).items()
    }


def _library_again(
    before: dict[str, dict[str, int]], held: dict[str, tuple[Any, ...]]
) -> dict[str, dict[str, int]]:
    """:func:`_library` again, quickly (after each check: 30 ms, read in full, in a
    kernel that checks a hundred times): a namespace whose every value is the object it
    held keeps its entry, the others are read again. A module is also the one in
    ``sys.modules`` under its name."""
    now = {}
    for name, (owner, kind, values) in held.items():
        if type(owner) is not kind or not (
            isinstance(owner, type) or sys.modules.get(name) is owner
        ):
            current = sys.modules.get(name)  # another module, or none: read as it is
            has = getattr(current, "__dict__", None) is not None and not isinstance(owner, type)
            now[name] = _entry(current) if has else {}
            continue
        current = tuple(vars(owner).values())
        same = len(current) == len(values) and all(map(operator.is_, current, values))
        now[name] = before[name] if same else _entry(owner)
    return now


_DESCRIPTORS = (staticmethod, classmethod, property)


def _code_print(code: Any, depth: int = 3) -> Any:
    """A code object's content, its nested functions' too: memory written in place (a
    constant swapped through ``ctypes``) keeps every id, and only the content shows it."""
    consts = tuple(
        _code_print(c, depth - 1) if inspect.iscode(c) and depth else id(c) for c in code.co_consts
    )
    return (zlib.crc32(code.co_code), consts)


def _module_print(name: str, course: tuple[str, ...], deep: bool = True) -> dict[str, Any]:
    """A course module's attributes as :func:`_fingerprint` sees them (not its state)."""
    module = sys.modules[name]
    found = {
        k: _fingerprint(v, course, 1 if k.startswith("__") else 2, deep)
        for k, v in list(vars(module).items())
        if k not in _rebound(module)
    }
    return {**found, "(its class)": id(type(module))}


def _take_stock(
    shell: Any, roots: tuple[str, ...], course: tuple[str, ...] = (), deep: bool = True
) -> _Stock:
    mine = [n for n, m in list(sys.modules.items()) if m and n.split(".")[0] in course]
    return _Stock(
        listeners={name: [id(x) for x in items] for name, items in _listener_lists().items()},
        modules={
            name: {k: id(v) for k, v in vars(sys.modules[name]).items()}
            for name in _WATCHED_MODULES
            if name in sys.modules
        },
        course={name: _module_print(name, course, deep) for name in mine},
        meta_path=[id(x) for x in sys.meta_path],
        foreign_finders=_foreign_finders(list(sys.meta_path), roots),
        path=list(sys.path),
        path_hooks=[id(x) for x in sys.path_hooks],
        ipython=_ipython_parts(shell, roots),
    )


def _changed_modules(
    before: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]
) -> list[str]:
    found = []
    for module, attributes in before.items():
        current = now.get(module, {})
        # Replaced or removed; an attribute added later (a submodule imported) is not a
        # change, nor are the ones Python and IPython rewrite as they go.
        changed = sorted(
            k for k, v in attributes.items() if current.get(k) != v and k not in _VOLATILE
        )
        if changed:
            found.append(f"{module}.{', '.join(changed[:4])} replaced or changed")
    return found


def _differences(before: _Stock, now: _Stock) -> list[str]:
    found = []
    for name, items in before.listeners.items():
        if now.listeners.get(name) != items:
            found.append(f"JAX's monitoring listeners ({name}) were changed")
    found += _changed_modules(before.modules, now.modules)
    found += _changed_modules(before.course, now.course)
    if any(finder not in now.meta_path for finder in before.meta_path):
        found.append("sys.meta_path was changed (an import finder removed)")
    if now.foreign_finders:
        found.append(
            f"sys.meta_path has an import finder of the learner's: {now.foreign_finders[0]}"
        )
    if now.foreign_finders:
        found.append(
            f"an import finder of the learner's is on sys.meta_path ({now.foreign_finders[0]})"
        )
    if now.path != before.path:
        added = [p for p in now.path if p not in before.path]
        found.append(f"sys.path was changed{' (added: ' + added[0] + ')' if added else ''}")
    if now.path_hooks != before.path_hooks:
        found.append("sys.path_hooks was changed")
    for name, items in before.ipython.items():
        if now.ipython.get(name) != items:
            found.append(f"IPython's {name} were changed")
    return found


_SCALARS = (int, float, complex, str, bytes, bool, type(None))


def _state(holder: Any) -> tuple[Any, ...]:
    """What can change in an object grading hands out: a dict's items, a list's entries,
    an instance's attributes; scalars by value (a freed int's address can come back),
    everything else by identity."""
    if isinstance(holder, dict):
        items: Any = holder.items()
    elif isinstance(holder, list | tuple):
        items = enumerate(holder)
    else:
        items = getattr(holder, "__dict__", {}).items()
    return tuple(
        # Exact types only: a subclass's __eq__, the learner's, would run in the hook and
        # could call a changed value unchanged.
        (key, value if any(type(value) is t for t in _SCALARS) else ("id", id(value)))
        for key, value in list(items)
    )


def _user_functions(shell: Any) -> dict[str, tuple[Any, ...]]:
    """The learner's callables, as grading sees them: identity, names, attributes."""
    if shell is None:
        return {}
    found = {}
    for name, value in list(shell.user_ns.items()):
        jitted = hasattr(value, "__wrapped__") and hasattr(value, "lower")
        if name.startswith("_") or not (inspect.isfunction(value) or jitted):
            continue
        wrapped = getattr(value, "__wrapped__", None)
        found[name] = (
            id(value),
            getattr(value, "__name__", None),
            getattr(value, "__qualname__", None),
            getattr(wrapped, "__name__", None),
            id(getattr(value, "__code__", None)),
            tuple(sorted(k for k in getattr(value, "__dict__", {}) if k != "__wrapped__")),
        )
    return found


def _own_handlers(roots: tuple[str, ...]) -> list[str]:
    """Signal handlers and garbage-collector callbacks of the learner's: Python runs them
    between any two lines of the grader's (a handler is handed the frame it interrupts;
    a ``gc.callbacks`` entry can rewrite an answer after its check). Python's own Ctrl-C
    handler, and handlers from installed files, are not the learner's."""
    import gc
    import signal

    def trusted(handler: Any) -> bool:
        code = getattr(getattr(handler, "__func__", handler), "__code__", None)
        return bool(code) and os.path.realpath(code.co_filename).startswith(roots)

    found = []
    for number in signal.valid_signals():
        try:
            handler = signal.getsignal(number)
        except (OSError, ValueError):
            continue
        if callable(handler) and handler is not signal.default_int_handler and not trusted(handler):
            found.append(f"a signal handler of your own ({signal.Signals(number).name})")
    if any(not trusted(callback) for callback in list(gc.callbacks)):
        found.append("a garbage-collector callback of your own (gc.callbacks)")
    return found


def _disguised(shell: Any) -> list[str]:
    """The learner's jitted functions whose name no longer matches the function JAX
    compiles (compile events carry that one's name), or whose own attributes hide the
    methods grading calls (``clear_cache`` made a no-op, say)."""
    if shell is None:
        return []
    found = []
    for name, value in list(shell.user_ns.items()):
        wrapped = getattr(value, "__wrapped__", None)
        if name.startswith("_") or wrapped is None or not hasattr(value, "lower"):
            continue
        if getattr(wrapped, "__name__", None) != getattr(value, "__name__", None):
            found.append(f"{name}'s function was renamed after jax.jit wrapped it")
        own = getattr(value, "__dict__", {})
        hidden = sorted(k for k in own if not k.startswith("__") and hasattr(type(value), k))
        if hidden:
            found.append(f"{name}.{hidden[0]} was replaced on the jitted function")
    return found


def _jitlab_functions_foreign(roots: tuple[str, ...]) -> list[str]:
    """Functions in jitlab's loaded modules whose code was not loaded from an installed
    file (a learner's cell put them there)."""
    found = []
    for name, module in list(sys.modules.items()):
        if not (name == "jitlab" or name.startswith("jitlab.")) or module is None:
            continue
        home = getattr(module, "__file__", None)
        if not isinstance(home, str) or not os.path.realpath(home).startswith(roots):
            found.append(f"sys.modules[{name!r}] (a module of your own)")
            continue
        for attribute, value in list(vars(module).items()):
            for _ in range(8):  # contextmanager, functools.wraps; never a loop of its own
                try:
                    value = value.__wrapped__
                except Exception:  # none (or a lookup of the learner's that raises)
                    break
            code = getattr(value, "__code__", None)
            if code is not None and not os.path.realpath(code.co_filename).startswith(roots):
                found.append(f"{name}.{attribute}")
    return found


def _encoder() -> Callable[[Any], str]:
    """A JSON encoder of the hook's own: json.dumps goes through ``json._default_encoder``,
    an instance the learner's code can reach and give another ``encode``, which would then
    run inside the hook and could add records of its own. A C encoder made here holds
    nothing the learner's code can reach."""
    if _c_make_encoder is None:  # pragma: no cover
        return json.JSONEncoder().encode

    def refuse_other(value: Any) -> Any:
        raise TypeError(f"strict mode's report holds only JSON values, not {type(value)}")

    chunks = _c_make_encoder(
        None, refuse_other, _c_encode_string, None, ": ", ", ", False, False, True
    )
    join = "".join
    return lambda value: join(chunks(value, 0))


def arm(folder: str | None = None) -> None:
    """Set up this kernel for a strict check: stock, listener, audit hook. Called once
    by the startup file, before the first cell. The hook runs on a sealed copy of this
    module's functions, whose globals are a dictionary of their own: rebinding a name of
    the module later (``strict._differences = ...``, red team 9) changes nothing it calls."""
    namespace = dict(globals())
    for name, value in list(namespace.items()):
        if type(value) in (dict, list, set):  # tables of its own, out of the module's reach
            namespace[name] = type(value)(value)
        if isinstance(value, types.FunctionType) and value.__module__ == __name__:
            copy = types.FunctionType(
                value.__code__, namespace, value.__name__, value.__defaults__, value.__closure__
            )
            copy.__kwdefaults__ = value.__kwdefaults__
            namespace[name] = copy
    namespace["_arm"](folder)


def _arm(folder: str | None = None) -> None:
    """:func:`arm`'s work, run on the sealed copy."""
    import jax
    import numpy.random  # noqa: F401 (what draws the grader's inputs, watched from here)

    import jitlab.grading  # noqa: F401 (loaded before any learner code can plant one)

    graders = [n for n in os.environ.get(GRADERS_ENV, "").split(",") if n]
    for name in graders:
        try:
            importlib.import_module(name)
        except ImportError:  # a name imported from a module, not a module
            pass
    course = _course_packages(graders)

    where = Path(folder or os.environ[STRICT_ENV])
    scratch = os.path.realpath(Path.cwd().parent) + os.sep
    # Temporary files (the grader's own, and its worker processes') go to the scratch
    # folder, the one place this process may write.
    import tempfile

    tmp = Path(scratch) / "tmp"
    tmp.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = str(tmp)
    os.environ.setdefault("MPLCONFIGDIR", str(tmp / "matplotlib"))  # a plot's font cache
    # What answers the exercises, or holds what did: never read from a strict kernel.
    from jitlab.course.manifest import course_root

    sealed = tuple(
        os.path.realpath(course_root() / name) + os.sep for name in ("solutions", ".git")
    )
    report_path = str(where / REPORT)
    dump = where / DUMP
    roots, stdlib = _roots(scratch), _stdlib()
    shell = getattr(builtins, "get_ipython", lambda: None)()
    heard: list[str] = []
    state = threading.local()
    open_file = builtins.open
    getframe, gettrace, getprofile = sys._getframe, sys.gettrace, sys.getprofile

    from jax._src import monitoring as jax_monitoring

    from jitlab.instruments import counting  # noqa: F401 (in stock)
    from jitlab.instruments import events as grading_events

    listeners = jax_monitoring._event_duration_secs_listeners
    at_arm = {id(x) for x in listeners}
    record = jax_monitoring.record_event_duration_secs.__code__
    dispatch, subscribers = grading_events._dispatch, grading_events._subscribers
    said: set[str] = set()
    heard_code = _heard.__code__
    run_code = getattr(getattr(type(shell), "run_code", None), "__code__", None)
    load_unlocked = importlib._bootstrap._load_unlocked.__code__
    run_cell_code = getattr(getattr(type(shell), "run_ast_nodes", None), "__code__", None)
    write_code = importlib.import_module("jitlab.grading.verdict")._write.__code__
    verdicts_path = str(where / VERDICTS)
    grading: dict[str, Any] = {}  # the grader cell announced now: cell, token, runner's line

    def on_heard(frame: Any, event: str, name: str) -> None:
        """An event from strict mode's listener (``frame``, its frame): counted, and at
        each trace, lowering and compilation, the listening path checked."""
        if frame.f_code is not heard_code:
            refuse("raising strict mode's own events", learners_line(frame))
        if event == _COMPILE_EVENT:
            heard.append(name)
        if event.startswith("/jax/core/compile/"):
            problems = listening_path(frame.f_back.f_code if frame.f_back else None)
            problems = [p for p in problems if p not in said]
            if problems:
                said.update(problems)
                report({"phase": "call", "problems": problems})

    def listening_path(delivered_by: Any) -> list[str]:
        """At each trace, lowering and compilation JAX reports: is the path by which the
        grader's counters hear it intact? A change made and undone inside one learner call
        (a listener taken out of JAX's list and put back) is in place only now."""
        found = []
        live = jax_monitoring._event_duration_secs_listeners
        if delivered_by is not record:
            found.append("a JAX monitoring event was delivered by other code than JAX's")
        if live is not listeners:
            found.append("JAX's list of monitoring listeners was replaced")
        if (
            grading_events._dispatch is not dispatch
            or grading_events._subscribers is not subscribers
        ):
            found.append("the compile counters' listener (jitlab.instruments.events) was replaced")
        elif subscribers and not any(x is dispatch for x in live):
            found.append("the compile counters' listener was taken out of JAX's while they counted")
        for x in live:
            code = getattr(getattr(x, "__func__", x), "__code__", None)
            if (
                id(x) not in at_arm
                and x is not dispatch
                and not _trusted(code.co_filename if code else "")
            ):
                found.append(f"a monitoring listener of your own ({x!r}) was added to JAX's")
        found += _own_handlers(roots) + _disguised(shell)  # a name changed for one call
        for name in ("jitlab.instruments.events", "jitlab.instruments.counting"):
            found += _changed_modules(
                {name: stock.course.get(name, {})}, {name: _module_print(name, course)}
            )
        return found

    # Its globals hold only what it calls (the module's would be the hook's, red team 12)
    listener_globals = {"__builtins__": {"str": str}, "sys": types.SimpleNamespace(audit=sys.audit)}
    listener_globals["HEARD_EVENT"] = HEARD_EVENT
    listener = types.FunctionType(_heard.__code__, listener_globals, "_heard")
    jax.monitoring.register_event_duration_secs_listener(listener)

    def stock_now(deep: bool = True) -> _Stock:
        return _take_stock(shell, roots, course, deep)

    # The learner's attribute reads and writes go through two guards (safe_subset
    # rewrites each cell but the grader cells so): writes only on objects of the learner's
    # own classes, reads never reaching a module outside the subset or the interpreter.
    from jitlab.grading import sandbox

    audit_ = sys.audit

    def guard_refuse(what: str, line: int) -> None:
        audit_(GUARD_EVENT, what, f"line {line} of a cell of yours")  # the hook refuses it
        raise PermissionError(f"strict mode: {what} is not allowed")

    if os.environ.get(LAYERS_ENV) != "hook" and shell is not None:
        for name, guard in zip(sandbox.GUARDS, sandbox.make_guards(guard_refuse), strict=True):
            setattr(builtins, name, guard)
        skip, given = announce("", 0, "")[:40], where / EXEMPT
        shell.ast_transformers.append(sandbox.Guarded(skip=skip, exempt=given))
    stock, shallow = stock_now(), stock_now(deep=False).course
    library, library_classes = _library(course), _library(course, classes=True)
    shelved, shelved_classes = _held(course), _held(course, classes=True)
    dumps, realpath = _encoder(), os.path.realpath  # the hook's own, whatever is patched later
    # IPython runs this startup file with its folder put first on sys.path for the while.
    startup = realpath(where / STARTUP).rsplit(os.sep, 1)[0]
    stock.path = [p for p in stock.path if realpath(p or ".") != startup]
    learner_stock: dict[str, dict[str, tuple[Any, ...]]] = {}
    # id -> (object, its state when grading last announced it); the object is held so
    # that its id is not reused.
    grader_state: dict[int, tuple[Any, tuple[Any, ...]]] = {}

    # The helpers that announce the grader's objects: the code that called them is the
    # one that must be trusted.
    from jitlab.grading import checks as announcer_module

    announcer = realpath(announcer_module.__file__)
    homes = [getattr(sys.modules.get(p), "__file__", None) for p in course]
    course_roots = tuple(os.path.dirname(realpath(f)) + os.sep for f in homes if f)

    def ours(frame: Any) -> bool:
        """``frame`` runs the course's own code (jitlab's, or the graders' package's)."""
        return realpath(frame.f_code.co_filename).startswith(course_roots)

    def states_changed(only: int | None = None) -> list[str]:
        """Objects of the grader's changed since it last announced them; each change is
        reported once (the object's new state becomes the one compared from then on)."""
        found = []
        for key, (held, seen) in list(grader_state.items()):
            if only is not None and key != only:
                continue
            now = _state(held)
            if now != seen:
                found.append(
                    "an object the grader handed to your code was changed by your code "
                    f"({type(held).__name__}: {_changed_part(seen, now)})"
                )
                grader_state[key] = (held, now)
        return found

    # No computation here: an exercise may still set XLA_FLAGS (a device count) in its
    # first cell, before JAX starts its backend.
    dumped_at_arm = _dumped(dump)
    heard_at_arm = len(heard)

    def report(record: dict[str, Any]) -> None:
        with open_file(report_path, "a", encoding="utf-8") as out:
            out.write(dumps(record) + "\n")

    def learners_line(frame: Any) -> str | None:
        """The learner's line, if the first code outside the standard library on the
        stack from ``frame`` outward is the learner's (a cell, or a file outside the
        installed packages); None when it is JAX's, jitlab's or another package's."""
        while frame is not None:
            filename = realpath(frame.f_code.co_filename)
            if frame.f_code.co_filename.startswith("<frozen "):
                frame = frame.f_back
                continue
            if filename.startswith(stdlib) and "site-packages" not in filename:
                frame = frame.f_back
                continue
            if filename.startswith(roots):
                return None
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        return None

    def learner_on_stack(frame: Any) -> str | None:
        """The learner's line, if code of the learner's runs anywhere from ``frame`` out to
        the grader cell's own statement (or to an import, which runs a module's own code):
        a C function the learner hands to a library (``jax.tree.map(sys._getframe, [0])``)
        leaves only the library's frames above it, so the first frame is not enough."""
        while frame is not None:
            code = frame.f_code
            if in_grader_cell(frame) or importing_trusted(frame):
                return None
            if not _trusted(code.co_filename):
                return f"{code.co_filename}:{frame.f_lineno}"
            frame = frame.f_back
        return None

    def importing_trusted(frame: Any) -> bool:
        """``frame`` loads a module from an installed file by an installed loader (what
        runs from there on is that module's own code, and the import system's)."""
        if frame.f_code is not load_unlocked:
            return False
        spec = frame.f_locals.get("spec")
        origin, loader = getattr(spec, "origin", None), type(getattr(spec, "loader", None))
        home = getattr(sys.modules.get(loader.__module__), "__file__", None)
        trusted_loader = loader.__module__ in ("_frozen_importlib", "_frozen_importlib_external")
        trusted_loader = trusted_loader or bool(home) and realpath(home).startswith(roots)
        built_in = origin in ("built-in", "frozen")
        return trusted_loader and (built_in or bool(origin) and realpath(origin).startswith(roots))

    def runs_learners_code(args: tuple[Any, ...]) -> bool:
        """A new thread would run code of the learner's (threading.Thread's target or
        run method), however it was started."""
        function = args[0] if args else None
        owner = getattr(function, "__self__", None)
        if isinstance(owner, threading.Thread):
            function = getattr(owner, "_target", None) or type(owner).run
        function = getattr(function, "func", function)  # functools.partial
        code = getattr(getattr(function, "__func__", function), "__code__", None)
        return code is not None and not _trusted(code.co_filename)

    def frame_for_learner(frame: Any) -> str | None:
        """The learner's line, if ``frame`` (the code that asked for a frame) is the
        learner's, or asks while the learner's code is on the stack and is not code that
        asks for its own use (a log record's line, a namedtuple's module): :mod:`inspect`
        hands frames back, a library may be calling a C function of the learner's."""
        code = frame.f_code
        if not _trusted(code.co_filename):
            return learners_line(frame)
        while os.path.basename(code.co_filename) in ("inspect.py", "traceback.py") or (
            code.co_filename == logging.__file__ and code.co_name == "<lambda>"
        ):
            # They hand frames back (logging.currentframe too): their caller is asking.
            frame = frame.f_back
            if frame is None:
                return None
            code = frame.f_code
            if not _trusted(code.co_filename):
                return learners_line(frame)
        base = os.path.basename(code.co_filename)
        if (base, code.co_name) in OWN_FRAME_USE or (base, "*") in OWN_FRAME_USE:
            return None
        line = learner_on_stack(frame)
        return line and f"{line}, asked for through {os.path.basename(code.co_filename)}"

    def _trusted(filename: str) -> bool:
        return filename.startswith("<frozen ") or realpath(filename).startswith(roots)

    def traced() -> list[str]:
        """A trace or profile function in place: none may be (each is refused when set),
        so one found means it was set where no refusal reached."""
        found = [f"a trace function ({gettrace()!r})"] if gettrace() is not None else []
        profile = getprofile()
        return found + ([f"a profile function ({profile!r})"] if profile is not None else [])

    def refuse(what: str, line: str | None) -> None:
        report({"refused": what, "line": line or ""})
        raise PermissionError(f"strict mode: {what} is not allowed")

    def sealed_path(path: Any) -> bool:
        return (realpath(os.fsdecode(path)) + os.sep).startswith(sealed)

    def outside(path: Any) -> bool:
        if isinstance(path, int):
            return False
        text = realpath(os.fsdecode(path))
        return not (text + os.sep).startswith(scratch) and text not in ("/dev/null",)

    def check(phase: str, cell: Any, token: Any) -> None:
        if phase == "before":
            # By the first grader cell the learner's cells have set up JAX as they
            # wanted (a device count): its backend starts now if it has not yet, and
            # the processes the grader starts from here on (exercise 14's workers) do
            # not dump into this kernel's folder, whose count is this process's alone.
            jax.devices()
            os.environ["XLA_FLAGS"] = " ".join(
                flag
                for flag in os.environ.get("XLA_FLAGS", "").split()
                if not flag.startswith("--xla_dump_to=")
            )
        now = stock_now()
        problems = _differences(stock, now) + _changed_modules(library, _library(course))
        problems += _changed_modules(library_classes, _library(course, classes=True))
        problems += [
            f"{name} was replaced by code from outside the installed files"
            for name in _jitlab_functions_foreign(roots)
        ]
        problems += _disguised(shell) + _own_handlers(roots) + traced()
        problems += states_changed()
        functions = _user_functions(shell)
        if phase == "before":
            learner_stock[str(cell)] = functions
        else:
            before = learner_stock.get(str(cell), {})
            problems += [
                f"{name} was changed while the grader ran (its name, code or attributes)"
                for name, seen in before.items()
                if functions.get(name, seen) != seen
            ]
        dumped = _dumped(dump) - dumped_at_arm
        counted = len(heard) - heard_at_arm
        if counted and not dumped:
            problems.append(
                "XLA dumped none of the compilations JAX reported: XLA_FLAGS lost "
                "--xla_dump_to before JAX started, so they cannot be cross-checked"
            )
        if dumped > counted:
            problems.append(
                f"XLA compiled {dumped} programs, but JAX's monitoring events reported "
                f"{counted}: something kept the compile listeners from hearing "
                f"{dumped - counted}"
            )
        if dumped and counted > dumped:
            problems.append(
                f"JAX's monitoring events reported {counted} compilations, but XLA compiled "
                f"{dumped}: {counted - dumped} were reported by other code than XLA's (or "
                "came from a persistent compilation cache, which strict mode does not support)"
            )
        report(
            {
                "phase": phase,
                "cell": cell,
                "token": token,
                "problems": problems,
                "dumped": dumped,
                "heard": counted,
            }
        )

    hook_code: list[Any] = []
    fingerprint_code = _fingerprint.__code__
    trusted_files: dict[str, bool] = {}  # a file name's trust, looked up once

    def inside_hook(frame: Any) -> str | None:
        """The learner's line, if code of the learner's runs between ``frame`` and the
        hook's own busy frame: the hook looks at the learner's objects (an attribute, a
        class), and a ``__getattr__`` or property of the learner's then runs in it."""
        while frame is not None and frame.f_code is not hook_code[0]:
            name = frame.f_code.co_filename
            trusted = trusted_files.get(name)
            if trusted is None:
                trusted = trusted_files[name] = _trusted(name)
            if not trusted:
                return f"{name}:{frame.f_lineno}"
            frame = frame.f_back
        return None

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if getattr(state, "busy", False):
            # While the hook works, its own events are let be; one raised by code of the
            # learner's that the hook's work ran is refused, as it would be anywhere.
            if event == "builtins.id" or getattr(state, "inner", False):
                return  # id() is called by the thousand in the hook's stock, and harmless
            state.inner, line = True, None
            try:
                frame = getframe(1)
                # A function's code or defaults read by the stock's own fingerprint (a
                # thousand per stock): what it reads goes back to it, not to a caller.
                if event == "object.__getattr__" and frame.f_code is fingerprint_code:
                    return
                line = inside_hook(frame)
                if line:
                    what = f"{event} from code of yours run inside strict mode's checks"
                    report({"refused": what, "line": line})
            finally:
                state.inner = False
            if line:
                raise PermissionError(f"strict mode: {event} inside its checks is not allowed")
            return
        state.busy = True
        try:
            _audit(event, args)
        finally:
            state.busy = False

    hook_code.append(hook.__code__)

    def caller() -> Any:
        return getframe(3)  # caller <- _audit <- hook <- the code that raised the event

    def learner_between(frame: Any) -> bool:
        """Whether code of the learner's runs between ``frame`` and the cell IPython runs
        (the grader cell's statement, right under ``run_code``): what only the grader's
        own code may do was then asked for by the learner's."""
        while frame is not None:
            if frame.f_back is not None and frame.f_back.f_code is run_code:
                return not in_grader_cell(frame)  # a run_code of the learner's own: forged
            if not _trusted(frame.f_code.co_filename):
                return True
            frame = frame.f_back
        return True

    def cell_runner(frame: Any) -> Any:
        """The frame running the cell whose statement ``frame`` is (IPython's
        ``run_ast_nodes``, which hands each statement to ``run_code``), else None."""
        runner = frame.f_back
        if frame.f_code.co_name != "<module>" or runner is None or runner.f_code is not run_code:
            return None
        cell = runner.f_back
        if cell is None or cell.f_code is not run_cell_code or _trusted(frame.f_code.co_filename):
            return None
        return cell

    def in_grader_cell(frame: Any) -> bool:
        """``frame`` is a statement of the grader cell announced now, run by the very
        frame that ran its first line (not a ``run_code`` the learner's code called)."""
        return bool(grading) and cell_runner(frame) is grading["runner"]

    def inside_grader_cell(frame: Any) -> bool:
        """The grader cell announced last is still running, outside ``frame``."""
        while grading and frame is not None:
            if frame is grading["runner"]:
                return True
            frame = frame.f_back
        return False

    def announced(phase: str, frame: Any) -> bool:
        """A grader cell announced by the runner's own line: a statement of the cell that
        IPython runs (not a function, nor code a callback ran), and its last line run by
        the frame that ran its first, from the same line (a grader stopped by an exception
        never gets there)."""
        if cell_runner(frame) is None or (phase == "before" and inside_grader_cell(frame)):
            return False  # the "before" of a grader cell inside another: the learner's
        at = (frame.f_code.co_filename, frame.f_back.f_lineno)
        return phase != "after" or (in_grader_cell(frame) and grading.get("at") == at)

    def _audit(event: str, args: tuple[Any, ...]) -> None:
        if event == HEARD_EVENT:
            on_heard(caller(), *(list(args) + ["", ""])[:2])
            return
        if event == VERDICT_EVENT:
            frame = caller()
            if frame.f_code is not write_code or learner_between(frame):
                refuse("reporting a grader's check from your code", learners_line(frame))
            if grading and args and isinstance(args[0], dict):
                record = {**args[0], "cell": grading["cell"], "token": grading["token"]}
                with open_file(verdicts_path, "a", encoding="utf-8") as out:
                    out.write(dumps(record) + "\n")
            return
        if event == GUARD_EVENT:  # the attribute guard refusing a write (see ``own``)
            frame = caller()
            if frame.f_code is guard_refuse.__code__ and len(args) == 2:
                refuse(str(args[0]), str(args[1]))
            refuse("raising strict mode's own events", learners_line(frame))
        if event == EVENT:
            frame, phase = caller(), args[0] if args else ""
            if not announced(phase, frame):
                refuse("announcing a grader cell from your code", learners_line(frame))
            if phase == "before":
                at = (frame.f_code.co_filename, frame.f_back.f_lineno)
                grading.update(cell=args[1], token=args[2], at=at, runner=cell_runner(frame))
            check(*args[:3])
            if phase == "after":
                grading.clear()
            return
        if event == "sys.addaudithook":
            line = learner_on_stack(caller())
            if line:
                refuse("an audit hook of your own", line)
            return
        if event == CALL_EVENT:  # grading, around each call into the learner's code
            # The grader itself registers listeners around a call (its counters), so a
            # call is held to what stood when it began, not to the stock at arming.
            phase = args[0] if args else ""
            calls = state.__dict__.setdefault("calls", [])
            # The course's modules never change: only the stock at arming is theirs.
            if phase == "enter":
                calls.append(_take_stock(shell, roots))
            elif phase == "leave" and calls:
                now = stock_now(deep=False)  # after every call: content at the next check
                problems = _differences(calls.pop(), now) + _own_handlers(roots)
                problems += _changed_modules(shallow, now.course)
                problems += states_changed()
                if problems:
                    report({"phase": "call", "problems": problems})
            elif phase == "check":  # a check decided: nothing it relied on was replaced
                now = stock_now()
                problems = _changed_modules(stock.modules, now.modules)
                problems += _changed_modules(stock.course, now.course) + _own_handlers(roots)
                problems += _changed_modules(library, _library_again(library, shelved))
                # A library class's method swapped for one check and put back before the
                # cell ends (ShapedArray.__str__, which verdicts print) is seen here.
                classes = _library_again(library_classes, shelved_classes)
                problems += _changed_modules(library_classes, classes) + states_changed()
                problems += traced()
                if problems:
                    report({"phase": "call", "problems": problems})
            return
        if event == STATE_EVENT:
            # Only the course's code may announce: a C function handed to a library
            # (jax.tree.map(sys.audit, ...)) leaves the library's frame as the caller.
            frame = _past(caller(), announcer)
            while frame is not None and learners_line(frame) is None and not ours(frame):
                frame = frame.f_back
            if frame is None or not ours(frame):
                refuse("announcing the grader's own objects", learners_line(frame))
            if len(args) < 2:
                return
            held, phase = args[0], args[1]
            if phase == "before" and id(held) in grader_state:
                problems = states_changed(only=id(held))
                if problems:
                    report({"phase": "call", "problems": problems})
            elif phase == "after":
                grader_state[id(held)] = (held, _state(held))
            return
        if event in _NEVER:
            refuse(_NEVER[event], learners_line(caller()))
        if event == "open":
            path, mode, flags = (list(args) + [None, None])[:3]
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writes and path is not None and outside(path):
                refuse(f"writing {path}", learner_on_stack(caller()))
            if isinstance(path, str | bytes | os.PathLike) and sealed_path(path):
                refuse(f"reading {os.fsdecode(path)}", learners_line(caller()))
            return
        if event in _PATH_EVENTS:
            path = args[_PATH_EVENTS[event]] if len(args) > _PATH_EVENTS[event] else None
            if path is not None and outside(path):
                refuse(f"{event} of {path}", learner_on_stack(caller()))
            return
        if event == "exec":
            code = args[0] if args else None
            filename = getattr(code, "co_filename", "") or ""
            if filename.endswith(".py") and code.co_name == "<module>":
                real = realpath(filename)
                if not real.startswith(roots) and os.path.exists(real):
                    refuse(f"importing {filename}", learners_line(caller()))
            return
        if event == "import":
            finders = _foreign_finders(list(args[3] or []), roots)
            added = [p for p in args[2] or [] if p not in stock.path]
            if added or finders:
                refuse(
                    f"importing {args[0]} with {added[0]!r} added to sys.path"
                    if added
                    else f"importing {args[0]} through an import finder of the learner's",
                    learners_line(caller()),
                )
            filename = args[1]
            if filename and not realpath(filename).startswith(roots):
                refuse(f"importing {filename}", learners_line(caller()))
            return
        if event == "object.__getattr__" and len(args) > 1 and args[1] in _FRAME_ATTRIBUTES:
            line = frame_for_learner(caller())
            if line:
                refuse(f"a frame ({args[1]})", line)
            return
        if event in ("compile", "code.__new__") and len(args) > 1 and isinstance(args[1], str):
            named = args[1]  # the file name the new code's frames will carry
            line = learner_on_stack(caller()) if _trusted(named) else None
            if line:  # "<frozen importlib._bootstrap>" too: Python's own frames are trusted
                refuse(f"code named after an installed file or Python's own ({named})", line)
            return
        if event == "object.__setattr__" and len(args) > 1 and args[1] in ("__code__", "__class__"):
            target, line = args[0], learner_on_stack(caller())
            # Not the learner's own (a library's function, a module, an object of the
            # course's or of a module loaded before the learner's cells): refused from
            # anyone, since a C function the grader calls for the learner leaves no frame.
            home = getattr(target, "__module__", None) if args[1] == "__code__" else None
            home = home or type(target).__module__
            foreign = isinstance(target, type(sys)) or home in library
            foreign = foreign or isinstance(home, str) and home.split(".")[0] in course
            if line or foreign:
                what = "a function's __code__" if args[1] == "__code__" else "an object's class"
                refuse(f"replacing {what} ({type(target).__name__})", line)
            return
        if event in ("sys._getframe", "sys._getframemodulename"):  # the second: who calls
            line = frame_for_learner(caller())
            if line:
                refuse(f"a frame ({event})", line)
            return
        if event == "_thread.start_new_thread":  # libraries start their own (ipykernel's)
            line = learners_line(caller()) or (runs_learners_code(args) and "a thread's target")
            if line:
                refuse("a thread", line)
            return
        if event in _LEARNER_MAY_NOT:
            line = learner_on_stack(caller())
            if line:
                refuse(_LEARNER_MAY_NOT[event], line)

    report({"phase": "armed"})  # the watch starts: a report exists from here on
    sys.addaudithook(hook)


def _heard(event: str, seconds: float, **kwargs: Any) -> None:
    """Strict mode's JAX listener: it hands each event to the audit hook and holds
    nothing, so that nothing reachable from JAX's public list of listeners (a closure's
    cells) leads to what the hook keeps or writes with."""
    sys.audit(HEARD_EVENT, event, str(kwargs.get("fun_name", "")))


def _past(frame: Any, filename: str) -> Any:
    """The first frame outward from ``frame`` that is not in ``filename`` nor in
    :mod:`contextlib` (the announcing helpers are a function and a context manager)."""
    while frame is not None and (
        os.path.realpath(frame.f_code.co_filename) == filename
        or os.path.basename(frame.f_code.co_filename) == "contextlib.py"
    ):
        frame = frame.f_back
    return frame


def _changed_part(before: tuple[Any, ...], now: tuple[Any, ...]) -> str:
    """The first key whose value differs, as the verdict names it (``.calls``, ``[2]``)."""
    old, new = dict(before), dict(now)
    for key in list(old) + [k for k in new if k not in old]:
        if old.get(key, "(absent)") != new.get(key, "(absent)"):
            return f".{key}" if isinstance(key, str) and key.isidentifier() else f"[{key!r}]"
    return "its entries"


def _dumped(folder: Path) -> int:
    """How many modules XLA dumped (one per compilation: ``module_NNNN.*``)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    return len({n.split(".", 1)[0] for n in names if n.startswith("module_")})


# ------------------------------------------------------------------ the runner's side


def announce(phase: str, cell: int, token: str) -> str:
    """The line the runner writes at the top (``before``) or end (``after``) of a grader
    cell in a strict check."""
    return f"__import__('sys').audit({EVENT!r}, {phase!r}, {cell}, {token!r})\n"


def findings(folder: Path, tokens: dict[int, str], ran: Callable[[int], bool]) -> list[str]:
    """What the hook reported, as lines for the verdict: every refusal and every
    difference it found, and a grader cell that ran but was not announced as written
    (``ran``: whether the grader cell with that index ran to its end)."""
    path = folder / REPORT
    records = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    found = []
    for record in records:
        if "refused" in record:
            where = f" ({record['line']})" if record.get("line") else ""
            found.append(f"refused {record['refused']}{where}")
        elif record.get("phase") == "call":
            found += [f"{p} (while your code ran)" for p in record.get("problems", ())]
        elif record.get("phase") == "armed":
            continue
        elif "phase" in record:
            cell, token = record.get("cell"), record.get("token")
            if tokens.get(cell) != token:
                found.append("a grader cell was announced by code other than the runner's")
            found += list(record.get("problems", ()))
    if not path.exists() and tokens:
        found.append("the strict kernel did not start its watch (no report)")
    for cell, token in tokens.items():
        phases = {
            r.get("phase") for r in records if r.get("cell") == cell and r.get("token") == token
        }
        if ran(cell) and phases != {"before", "after"}:
            found.append(f"the grader cell {cell} did not run as written (its checks were skipped)")
    return list(dict.fromkeys(found))


def unreported(cells: dict[int, str], reports: dict[int, Any]) -> list[str]:
    """The checks a grader cell's graders declare but did not report passed, for a cell
    that reported no failure: the runner's own copy of each grader (imported here, in a
    process the learner's code never ran in) says what a complete run reports, whatever
    the learner's kernel did to its copy (its closure's declared checks cut)."""
    found = []
    for index, source in cells.items():
        run = reports.get(index)
        if run is None or any(not c.passed for c in run.checks):
            continue
        passed = {(c.grader, c.name) for c in run.checks if c.passed}
        for function in _graders_called(source):
            title = checks_module().grader_title(function.slug, function.part)
            missing = [c for c in function.checks if (title, c) not in passed]
            if missing:
                found.append(f"the grader {title!r} never reported {missing[0]!r} as passed")
    return found


def checks_module() -> Any:
    return importlib.import_module("jitlab.grading.checks")


def _graders_called(source: str) -> list[Any]:
    """The @grader functions a grader cell calls (``shapes.grade_rms(...)`` after ``from
    jitlab.graders import shapes``), as the installed files define them."""
    tree, modules, found = ast.parse(source), {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        holder = node.func.value
        name = modules.get(holder.id) if isinstance(holder, ast.Name) else None
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:0] = extra  # where the kernel finds a course's graders package too
        try:
            function = getattr(importlib.import_module(name), node.func.attr) if name else None
        except ImportError:
            continue
        finally:
            del sys.path[: len(extra)]
        if hasattr(function, "checks") and hasattr(function, "slug"):
            found.append(function)
    return found
