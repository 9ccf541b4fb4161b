"""Strict mode's first two lines: the reading of the learner's cells before anything runs
(:func:`jitlab.learner.safe_subset.refusals`) and the attribute guards the cells run
under. Each kind of cheat that beat the audit hook alone is refused by name; every
honest idiom an answer needs, every solution and every exercise as given pass."""

from __future__ import annotations

import ast
import types

import numpy as np
import pytest
from answers import SOLVED, run, write_answer

from jitlab.course.exercise_source import generated_text
from jitlab.course.manifest import load_course
from jitlab.grading.sandbox import GUARDS, Guarded, make_guards
from jitlab.learner.check import code_cells
from jitlab.learner.safe_subset import refusals

# Each cheat kind of issue 27 and of the red teams, as a learner writes it: words the
# refusal holds.
REFUSED = {
    "the interpreter's module": ("import sys\nsys.settrace(print)", "sys is not one of"),
    "a frame": ("def f():\n    return g.gi_frame", "gi_frame"),
    "a traceback's frame": (
        "try:\n    1 / 0\nexcept Exception as e:\n    t = e.__traceback__",
        "__traceback__",
    ),  # noqa: E501
    "a closure cell": ("fn.__closure__[0].cell_contents = 1", "__closure__"),
    "code swapped": ("f.__code__ = g.__code__", "__code__"),
    "a library's attribute by name": ("getattr(np, 'allclose')", "getattr"),
    "text run as code": ("eval('1 + 1')", "eval"),
    "a weak reference callback": ("import weakref", "weakref is not one of"),
    "ctypes memory": ("x = np.ones(3).ctypes", "ctypes"),
    "jax's primitives and lowering": ("from jax.extend.core import Primitive", "extend"),
    "the compile counters' listeners": (
        "import jax\njax.monitoring.clear_event_listeners()",
        "monitoring",
    ),  # noqa: E501
    "jit switched off by the config": (
        "import jax\njax.config.update('jax_disable_jit', True)",
        "config",
    ),  # noqa: E501
    "memory through strides": (
        "import numpy as np\nnp.lib.stride_tricks.as_strided(x, (9,), (0,))",
        "lib",
    ),  # noqa: E501
    "a grader's module": ("from jitlab.grading import checks", "instruments"),
    "a grader's internals": ("import jitlab\njitlab.grading.checks.SEED = 1", "instruments"),
    "a wrapper written into another object": (
        "import functools\nfunctools.update_wrapper(a, b)",
        "update_wrapper",
    ),  # noqa: E501
    "a pytree node for a library's class": (
        "import jax, numpy as np\njax.tree_util.register_pytree_node(np.ndarray, f, g)",
        "registry",
    ),  # noqa: E501
    "an IPython input transformer": (
        "get_ipython().input_transformers_post.append(f)",
        "get_ipython",
    ),  # noqa: E501
    "a magic": ("%timeit f(x)", "magics"),
    "a shell line": ("!rm -rf /", "shell lines"),
    "a dunder in text": ("x = '__class__'", "__"),
    "attributes read by .format": ("'{0.f_back}'.format(f)", "format"),
    "a class made by type": ("T = type('T', (), {})", "type() with more"),
    "a class from an object": ("type(x).put(np, f)", "type(x)"),
    "XLA's options": (
        "import jax\njax.jit(f, compiler_options={'xla_dump_to': 'x'})",
        "compiler_options",
    ),  # noqa: E501
    "annotations evaluated": ("import typing\ntyping.get_type_hints(f)", "get_type_hints"),
    "the builtins": ("__builtins__['getattr']", "__builtins__"),
    "setattr as a value": ("f = setattr", "setattr"),
    "async code": ("async def f():\n    pass", "async"),
    "jax.distributed": ("import jax\njax.distributed.initialize()", "distributed"),
    "a file loaded": ("import numpy as np\nnp.load('x.npy', allow_pickle=True)", "load"),
    "bytes unpickled": (
        "from jax.experimental import serialize_executable",
        "serialize_executable",
    ),  # noqa: E501
    "a module loaded by name": (
        "import matplotlib\nmatplotlib.backends.backend_registry",
        "backends",
    ),  # noqa: E501
    "an attribute read by a class pattern": (
        "match x:\n    case object(func_globals=g):\n        pass",
        "match",
    ),  # noqa: E501
    "a Cython function's globals": (
        "import numpy as np\ng = np.random.Generator.normal.func_globals",
        "func_globals",
    ),  # noqa: E501
    "builtins from enum": ("from enum import bltns", "bltns"),
    "a dunder in bytes": ("x = b'__class__'", "dunder name"),
    "a class pattern": ("match x:\n    case C(y):\n        pass", "match"),
    "a pytree node of its own": (
        "import jax\n@jax.tree_util.register_dataclass\nclass S:\n    x: int",
        "registry",
    ),  # noqa: E501
    "a metaclass": ("class M(type):\n    pass", "metaclass"),
    "a raw address": (
        "class A:\n    def __array_interface__(self):\n        return {}",
        "raw address",
    ),  # noqa: E501
    "a name computed on lookup": (
        "class F:\n    def __getattr__(self, n):\n        return n",
        "__getattr__",
    ),  # noqa: E501
    "an array's address": ("p = x.unsafe_buffer_pointer()", "unsafe_buffer_pointer"),
    "the interpreter through self": (
        "class R:\n    def get(self):\n        return self.raw_frames()",
        "raw_frames",
    ),  # noqa: E501
    "another object's __dict__": (
        "class P:\n    def own(self, o):\n        return o.__dict__",
        "__dict__",
    ),  # noqa: E501
}

# What honest answers write: none of it is refused.
ALLOWED = {
    "a frozen dataclass": (
        "import dataclasses\n@dataclasses.dataclass(frozen=True)\nclass C:\n    eps: float\n"
        "    def __post_init__(self):\n        object.__setattr__(self, 'eps', float(self.eps))"
    ),
    "slots and a private key": (
        "class C:\n    __slots__ = ('a',)\n    def __init__(self, a):\n        self.a = a\n"
        "    def _key(self):\n        return (self.a,)\n"
        "    def __eq__(self, other):\n        return self._key() == other._key()\n"
        "    def __hash__(self):\n        return hash(self._key())"
    ),
    "super and a setattr of its own": (
        "class C(dict):\n    def __init__(self):\n        super().__init__()\n"
        "        setattr(self, 'b', 2)\n    def __setattr__(self, k, v):\n"
        "        super().__setattr__(k, v)"
    ),
    "a named tuple's own API": (
        "from typing import NamedTuple\nclass P(NamedTuple):\n    a: int\np = P(1)._replace(a=2)"
    ),
    "jit, lax and static arguments": (
        "import functools\nimport jax\nimport jax.numpy as jnp\nfrom jax import lax\n"
        "@functools.partial(jax.jit, static_argnames=('n',))\ndef f(x, n):\n"
        "    return lax.fori_loop(0, n, lambda i, a: a + jnp.sin(x), x)"
    ),
    "formatted text": ("print(f'{x:.3f}', '{:.3f} {}'.format(1.0, 'a'), type(x) is float)"),
    "flax, optax and a plot": (
        "import optax\nfrom flax import nnx\nimport matplotlib.pyplot as plt\n"
        "opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)\n"
        "plt.plot([1, 2], [3, 4])"
    ),
    "a memo of its own": ("_cache = {}\ndef f(x):\n    _cache[id(x)] = x\n    return _cache"),
    "a docstring that names a dunder": ('def f():\n    """Like __init__."""\n    return 1'),
    "the course's instruments": ("import jitlab\nwith jitlab.count_compiles(f) as n:\n    f(1)"),
    "list.extend": ("xs = []\nxs.extend([1])"),
    "a class's name": ("def describe(x):\n    return type(x).__name__"),
    "a decorator of its own": (
        "import functools\ndef logged(f):\n    @functools.wraps(f)\n"
        "    def inner(*a):\n        return f(*a)\n    return inner"
    ),
    "a tracer test and a frozen dict": (
        "import jax\nfrom flax.core import freeze\nok = isinstance(x, jax.core.Tracer)"
    ),
    "an indexed format field and a key with underscores": ("t = '{0[0]}'.format(x, {'w__0': 1})"),
    "an NNX variable written": ("def set_w(model, w):\n    model.lin.kernel.value = w"),
    "a file saved": ("import numpy as np\nnp.save('w.npy', w)"),
    "what lessons 06 and 09 use": (
        "import jax\nn = f._cache_size()\njax.config.update('jax_log_compiles', True)\n"
        "x64 = jax.config.jax_enable_x64"
    ),
    "a repr, a main guard, a message, an alias": (
        "import jax.numpy as jnp\nxp = jnp\nclass C:\n    def __repr__(self):\n"
        "        return self.__class__.__name__\nif __name__ == '__main__':\n"
        "    raise TypeError('x needs __len__')"
    ),
}


@pytest.mark.parametrize(("source", "words"), REFUSED.values(), ids=REFUSED)
def test_each_kind_of_cheat_is_refused_by_name(source, words):
    found = refusals(source)
    assert found and any(words in r.why or words in r.code for r in found), found


@pytest.mark.parametrize("source", ALLOWED.values(), ids=ALLOWED)
def test_what_honest_answers_write_is_not_refused(source):
    assert refusals(source) == []


def test_every_solution_and_exercise_passes_the_reading(fixture_course):
    from jitlab.learner.check import _outside_the_subset

    for exercise in load_course().exercises:
        texts = {exercise.source: exercise.source.read_text(encoding="utf-8")}
        texts[exercise.learner_copy] = generated_text(exercise)  # not a learner's work
        for path, text in texts.items():
            cells = code_cells(text)
            assert _outside_the_subset(cells, exercise, path) == "", path


def test_a_refusal_names_the_file_line():
    (found,) = refusals("x = 1\nimport sys\n", first_line=40)
    assert found.line == 41 and found.code == "import sys"


# ----------------------------------------------------------------- the runtime guards


class Refused(Exception):
    pass


def refuse(what: str, line: int) -> None:
    raise Refused(f"{what} (line {line})")


OWN, READ, VALUE, EACH = make_guards(refuse)
Mine = type("Mine", (), {"__module__": "__main__"})  # a class a learner's cell defined


def test_writes_go_only_to_the_learners_own_objects():
    mine = Mine()
    assert OWN(mine, 1) is mine and OWN(Mine, 1) is Mine
    for foreign in (np.random, np.ones(2), types.SimpleNamespace()):
        with pytest.raises(Refused, match="not an object of a class of yours"):
            OWN(foreign, 3)


def test_reads_never_reach_the_interpreter_or_a_module_outside_the_subset():
    import matplotlib.cbook

    assert READ(np, "float32", 1) is np.float32
    assert READ(matplotlib.cbook, "functools", 1).__name__ == "functools"
    with pytest.raises(Refused, match="module operator"):
        READ(matplotlib.cbook, "operator", 2)
    with pytest.raises(Refused, match="interpreter object"):
        READ(types.SimpleNamespace(f=(lambda: 0).__code__), "f", 3)
    handed_out = types.ModuleType("numpy.handed_out")  # an allowed module's own name
    handed_out.peek = __import__("sys")._getframe
    with pytest.raises(Refused, match="reaching sys._getframe"):
        READ(handed_out, "peek", 4)
    import jitlab.graders.static_arguments as grader_module  # bound by a grader cell

    with pytest.raises(Refused, match="off the module jitlab.graders.static_arguments"):
        READ(grader_module, "ACTIVATIONS", 5)


@pytest.mark.parametrize(
    "found",
    [exec, getattr, setattr, __import__("builtins"), __import__("pickle").loads],
    ids=["exec", "getattr", "setattr", "builtins", "pickle.loads"],
)
def test_a_value_that_reaches_the_interpreter_is_refused_however_it_came(found):
    # red team 10: a call's result (pkgutil.resolve_name("builtins:exec")), an item, a
    # name from-imported (enum's bltns) are checked as attribute reads are
    with pytest.raises(Refused):
        VALUE(found, 6)


def test_a_namespace_is_refused_however_it_is_reached():
    # red team 11: a method of the learner's called with a module for self read its
    # __dict__, and a loop handed its items to the learner's code unchecked
    import jax.numpy

    with pytest.raises(Refused, match="not of a class of yours"):
        READ(jax.numpy, "__dict__", 9)
    with pytest.raises(Refused, match="namespace"):
        VALUE(vars(jax.numpy), 10)
    with pytest.raises(Refused, match="module os"):
        list(EACH([1, __import__("os")], 11))


def test_the_frameworks_mutable_objects_may_be_written():
    from flax import nnx

    variable = nnx.Param(np.zeros(2))
    assert OWN(variable, 7) is variable
    with pytest.raises(Refused, match="not an object of a class of yours"):
        OWN(types.ModuleType("flax.nnx"), 8)


def test_the_rewritten_cell_evaluates_each_target_once_and_keeps_super():
    source = (
        "class Base:\n    def __init__(self):\n        self.made = True\n"
        "class Box(Base):\n    def __init__(self):\n        super().__init__()\n"
        "        self.n = 0\n"
        "calls = []\ndef box():\n    calls.append(1)\n    return b\n"
        "b = Box()\nbox().n += 1\n"
    )
    tree = ast.fix_missing_locations(Guarded().visit(ast.parse(source)))
    names = {"__name__": "__main__", "__builtins__": __builtins__}
    names.update(dict(zip(GUARDS, (OWN, READ, VALUE, EACH), strict=True)))
    exec(compile(tree, "<cell>", "exec"), names)
    assert names["b"].n == 1 and names["b"].made and names["calls"] == [1]


# ----------------------------------------------------------------- in a strict check

UNBOUND = """
import numpy as np


class Box:
    def put(self, value):
        self.allclose = value


Box.put([np.random][0], len)
"""

REACHED = """
import matplotlib.pyplot as plt

operator = plt.cbook.operator
"""

HONEST = """
import dataclasses


@dataclasses.dataclass
class Config:
    scale: float = 2.0


config = Config()
config.scale = 2.0
"""


def test_a_cheat_is_refused_before_anything_runs(fixture_course, capsys):
    write_answer(fixture_course, SOLVED, before="# %%\nimport sys\nsys.settrace(None)\n")
    code, out = run(capsys, "check", "--strict", "01")
    assert code == 1 and "nothing ran" in out and "import sys" in out, out
    assert "✓" not in out


@pytest.mark.parametrize(
    ("cell", "said"),
    [(UNBOUND, "writing an attribute of the module numpy.random"), (REACHED, "module operator")],
    ids=["a-module-written-through-a-method", "a-module-reached-through-a-library"],
)
def test_the_guards_refuse_what_the_reading_cannot_see(fixture_course, capsys, cell, said):
    write_answer(fixture_course, "    return x * 3\n", before="# %%\n" + cell)
    code, out = run(capsys, "check", "--strict", "01")
    assert code == 1 and "strict mode" in out and said in out, out


def test_an_answer_that_writes_its_own_objects_passes(fixture_course, capsys):
    write_answer(fixture_course, SOLVED, before="# %%\n" + HONEST)
    code, out = run(capsys, "check", "--strict", "01")
    assert code == 0 and "PASS" in out, out
