"""Strict mode (`jitlab check --strict`): right answers pass, and every kind of cheat of
issue 27 that attacks the grader from inside its process is rejected.

Each cheat is a small learner's file: the fixture exercise with a wrong answer (or a
right one, where the cheat is against the compile count) and the cheat in a cell of its
own above the grader, or in the learner's function, as a learner would write it; the
cheat on the counters of the grader's wrappers needs a grader that hands some out, so it
is exercise 10's solution, changed."""

from __future__ import annotations

import answers
import pytest
from answers import SOLVED, run

from jitlab.course.manifest import load_course
from jitlab.learner.strict import LAYERS_ENV

WRONG = "    return x * 3\n"

# A kernel per cheat: its own lane, `make test-strict` (CI runs it after `make test`).
pytestmark = pytest.mark.strict_mode


@pytest.fixture(autouse=True)
def hook_alone(monkeypatch):
    """These tests hold the audit hook to account on its own: the reading of the cells and
    the attribute guards in front of it (tests/learner/test_safe_subset.py) are put
    aside, as they would be for a cheat that got past them."""
    monkeypatch.setenv(LAYERS_ENV, "hook")


def write_answer(course, body: str, cell: str = "") -> None:
    answers.write_answer(course, body, before="# %%\n" + cell + "\n" if cell else "")


def test_a_right_answer_passes_in_strict_mode(fixture_course, capsys):
    write_answer(fixture_course, SOLVED)
    code, out = run(capsys, "check", "--strict", "01")
    assert code == 0, out
    assert "PASS" in out


def test_a_learner_cell_that_raises_is_named_not_the_watch(fixture_course, capsys):
    write_answer(fixture_course, SOLVED, "undefined_name")
    code, out = run(capsys, "check", "--strict", "01")
    assert code == 1 and "NameError" in out and "did not start its watch" not in out, out


def test_a_wrong_answer_fails_in_strict_mode_as_it_does_otherwise(fixture_course, capsys):
    write_answer(fixture_course, WRONG)
    code, out = run(capsys, "check", "--strict", "01")
    assert code == 1 and "✗ double doubles" in out and "strict mode" not in out, out


INPUT_TRANSFORMER = """
def _skip_grader(lines):
    return [line.replace("doubling.grade(double)", "pass") for line in lines]
get_ipython().input_transformers_post.append(_skip_grader)
"""

AST_TRANSFORMER = """
import ast
class _NoGrade(ast.NodeTransformer):
    def visit_Expr(self, node):
        if "grade" in ast.unparse(node):
            return ast.Pass()
        return node
get_ipython().ast_transformers.append(_NoGrade())
"""

IMPORT_REPLACED = """
import builtins, types
_real_import = builtins.__import__
def _import(name, *args, **kwargs):
    module = _real_import(name, *args, **kwargs)
    if name == "fixture_graders":
        fake = types.ModuleType("doubling")
        fake.grade = lambda *a: None
        module.doubling = fake
    return module
builtins.__import__ = _import
"""

META_PATH_FINDER = """
import sys, types, importlib.abc, importlib.machinery
class _Fake(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "fixture_graders.doubling":
            return importlib.machinery.ModuleSpec(name, self)
    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.grade = lambda *a: None
        return module
    def exec_module(self, module):
        pass
sys.modules.pop("fixture_graders.doubling", None)
sys.meta_path.insert(0, _Fake())
"""

PACKAGE_ON_PATH = """
import os, sys
os.makedirs("fake/fixture_graders", exist_ok=True)
open("fake/fixture_graders/__init__.py", "w").close()
with open("fake/fixture_graders/doubling.py", "w") as out:
    out.write("def grade(*args):\\n    pass\\n")
sys.path.insert(0, os.path.abspath("fake"))
for name in [n for n in sys.modules if n.startswith("fixture_graders")]:
    del sys.modules[name]
"""

GRADER_FILE_OVERWRITTEN = """
import fixture_graders.doubling as _d
try:
    with open(_d.__file__, "a") as out:
        out.write("\\ndef grade(*args):\\n    pass\\n")
except OSError:
    pass  # caught: the refusal is recorded all the same
"""

MONITORING_WRAPPED = """
import jax.monitoring
_register = jax.monitoring.register_event_duration_secs_listener
jax.monitoring.register_event_duration_secs_listener = lambda listener: None
"""

ALLCLOSE_REPLACED = """
import numpy as np
_allclose = np.allclose
np.allclose = lambda *args, **kwargs: True
"""

SETTRACE = """
import sys
def _tracer(frame, event, arg):
    if event == "return" and frame.f_code.co_name == "require_close":
        pass
    return _tracer
try:
    sys.settrace(_tracer)
except PermissionError:
    pass
"""

FRAMES_WALKED = (
    "    import inspect\n"
    "    frame = inspect.currentframe()\n"
    "    while frame is not None:\n"
    "        if 'n' in frame.f_locals and hasattr(frame.f_locals['n'], 'compiles'):\n"
    "            frame.f_locals['n'].compiles = 1\n"
    "        frame = frame.f_back\n"
    "    return x * 2\n"
)

TRACEBACK_FRAMES = (
    "    try:\n"
    "        raise RuntimeError\n"
    "    except RuntimeError as err:\n"
    "        frame = err.__traceback__.tb_frame.f_back\n"
    "    return x * 2\n"
)

RENAMED = """
double.__wrapped__.__name__ = "not_double"
"""

CLEAR_CACHE_NO_OP = """
double.clear_cache = lambda: None
"""

LISTENERS_EMPTIED_FOR_A_WHILE = """
from jax._src import monitoring as _m
_saved = list(_m._event_duration_secs_listeners)
_m._event_duration_secs_listeners.clear()
jax.jit(lambda y: y * 2)(jax.numpy.ones(3))  # a compilation no listener hears
_m._event_duration_secs_listeners.extend(_saved)
"""

FAKE_RECORDS = """
import tempfile, os
try:
    with open(os.path.join("/tmp", "jitlab-fake-worker-output.json"), "w") as out:
        out.write('{"compiles": 1}')
except OSError:
    pass
"""

DUMP_FLAG_DROPPED = """
import os
os.environ["XLA_FLAGS"] = " ".join(
    f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_dump_to" not in f
)
"""

PROCESS = """
import subprocess
try:
    subprocess.run(["true"])
except PermissionError:
    pass
"""

# The grader's random draw made known, so that an answer could be written for it.
SEED_SET = """
import jitlab.grading.checks
jitlab.grading.checks.SEED = 0
"""

ENTROPY_FIXED = """
import numpy.random.bit_generator
numpy.random.bit_generator.randbits = lambda bits: 0
"""

# From inside the learner's function, while the grader runs: a tolerance widened in
# place (the function is the same object, its defaults are not), and a method of the
# course's own class replaced.
TOLERANCE_WIDENED = (
    "    import jitlab.grading.checks as checks\n"
    "    checks.require_close.__kwdefaults__['rtol'] = 1e9\n"
    "    return x * 3\n"
)
METHOD_REPLACED = (
    "    import jitlab.grading.checks as checks\n"
    "    checks.Hints.require = lambda *args, **kwargs: None\n"
    "    return x * 2\n"
)

# What grading and the hook call without naming, replaced: a library's function (the
# hook's own json.dumps, filtering its report), NumPy's internals behind np.isclose, a
# JAX class's method, IPython's shell class rewriting the grader cell.
REPORT_FILTERED = """
import json
import jitlab.grading.checks as _checks
_dumps = json.dumps
def _quiet(obj, *args, **kwargs):
    if isinstance(obj, dict) and "problems" in obj:
        obj = {**obj, "problems": []}
    return _dumps({} if isinstance(obj, dict) and "refused" in obj else obj, *args, **kwargs)
json.dumps = _quiet
_checks.require_close = lambda check, *args, **kwargs: _checks.passed(check)
"""

NUMPY_INTERNALS = """
import numpy._core.numeric as _numeric
_numeric.less_equal = lambda a, b, *args, **kwargs: np.ones(np.broadcast(a, b).shape, bool)
"""

JAX_CLASS_METHOD = """
from jax._src import core as _core
_str = _core.ShapedArray.__str__
_core.ShapedArray.__str__ = lambda self: _str(self).lstrip("~")
"""

SHELL_CLASS_METHOD = """
from IPython.core.interactiveshell import InteractiveShell as _Shell
_transform = _Shell.transform_cell
_Shell.transform_cell = lambda self, cell: _transform(self, cell.replace("grade(double)", "id(1)"))
"""

# An announcement of the grader's objects laundered through a library: the C function
# sys.audit handed to jax.tree.map leaves JAX's frame as the caller.
LAUNDERED_ANNOUNCEMENT = """
import sys
try:
    jax.tree.map(sys.audit, ["jitlab.grader_state"], [[1, 2]], ["after"])
except PermissionError:
    pass
"""


# Who is calling, without a frame (an answer that lies to the grader alone); JAX's
# events silenced by its own exit flag while the learner's function runs.
CALLER_MODULE = "    import sys\n    sys._getframemodulename(1)\n    return x * 2\n"
EVENTS_SILENCED = (
    "    import jax._src.dispatch as dispatch\n    dispatch._on_exit = True\n    return x * 2\n"
)

# A compilation reported to JAX's listeners that XLA never made (one the grader would
# count for a function of the learner's choosing).
EVENT_FORGED = """
jax.monitoring.record_event_duration_secs(
    "/jax/core/compile/backend_compile_duration", 0.1, fun_name="jit(double)"
)
"""

# A module of the learner's under the course's package, before the grader imports it.
MODULE_PLANTED = """
import sys, types
sys.modules["jitlab.grading.planted"] = types.ModuleType("planted")
"""

# A frame without asking for one: Python hands a signal handler the frame it interrupts
# (a timer fires it inside the grader).
SIGNAL_HANDLER = """
import signal
signal.signal(signal.SIGALRM, lambda number, frame: frame.f_locals)
"""

# Every call's callable and first argument, as settrace would see them.
MONITORING_CALLBACK = """
import sys
sys.monitoring.use_tool_id(3, "mine")
sys.monitoring.register_callback(3, sys.monitoring.events.CALL, lambda *args: None)
"""

# The learner's own frame by another door, then up the stack (f_back is not audited).
CURRENT_FRAMES = (
    "    import sys\n"
    "    import threading\n"
    "    sys._current_frames()[threading.get_ident()].f_back\n"
    "    return x * 2\n"
)


# Round 4: the verdict channel forged from inside the grader cell (its path and token are
# the verdict module's), the grader's own reports sent nowhere and its error hidden; the
# runner then reads the hook's copy, which holds the real failure.
CHANNEL_FORGED = (
    "    import json\n"
    "    import jitlab.grading.verdict as v\n"
    "    if v._channel is not None:\n"
    "        path, token, cell = v._channel\n"
    "        with open(path, 'a') as out:\n"
    "            for kind in ('check', 'complete'):\n"
    "                record = {'kind': kind, 'name': 'double doubles', 'passed': True,\n"
    "                          'grader': '01 doubling', 'declared': [], 'token': token}\n"
    "                out.write(json.dumps({**record, 'cell': cell}) + '\\n')\n"
    "        v._channel = None\n"
    "        get_ipython().showtraceback = lambda *args, **kwargs: None\n"
    "    return x * 3\n"
)
# The watch's announcement heard by an audit hook of the learner's, or made by its code.
AUDIT_HOOK = """
import sys
sys.addaudithook(lambda event, args: None)
"""
ANNOUNCED = "    __import__('sys').audit('jitlab.strict', 'after', 0, 'token')\n    return x * 2\n"
VERDICT_WRITTEN = (
    "    import jitlab.grading.verdict as v\n"
    "    v._write({'kind': 'check', 'name': 'double doubles', 'passed': True})\n"
    "    return x * 3\n"
)
# A garbage-collector callback runs between any two of the grader's lines (it rewrote
# an answer in place after its check); set_custom_exc swallows the grader's failure.
GC_CALLBACK = """
import gc
gc.callbacks.append(lambda phase, info: None)
"""
CUSTOM_EXC = """
get_ipython().set_custom_exc((Exception,), lambda *args, **kwargs: None)
"""
# The report writer reached through strict mode's own JAX listener's closure, and swapped
# for one that drops every problem; then a check's function replaced.
REPORT_NEUTERED = (
    "    from jax._src import monitoring as m\n"
    "    for listener in list(m._event_duration_secs_listeners):\n"
    "        code, cells = getattr(listener, '__code__', None), listener.__closure__ or ()\n"
    "        for name, cell in zip(code.co_freevars if code else (), cells):\n"
    "            if name == 'report':\n"
    "                cell.cell_contents = lambda record: None\n"
    "    import jitlab.grading.checks as checks\n"
    "    checks.require_close.__kwdefaults__['rtol'] = 1e9\n"
    "    return x * 3\n"
)

# Round 5: a cell of the learner's own run by IPython inside the grader cell, to report
# a check or announce the grader cell's end; code named after an installed file (its
# frames would pass for trusted); a grader's constant swapped in memory through ctypes,
# which raises no audit event.
NESTED_REPORT = (
    "    get_ipython().run_cell('import jitlab.grading.verdict as v\\n'\n"
    "                           \"v._write({'kind': 'complete', 'declared': []})\")\n"
    "    return x * 3\n"
)
NESTED_ANNOUNCEMENT = (
    "    get_ipython().run_cell(\"__import__('sys').audit('jitlab.strict', 'after', 0, 't')\")\n"
    "    return x * 2\n"
)
NAMED_AS_INSTALLED = """
import os, numpy
exec(compile("import sys", os.path.join(os.path.dirname(numpy.__file__), "fake.py"), "exec"))
"""
# Red teams 9 and 11: the hook's helpers rebound and its tables written through its module
# (a name added to the list of what changes by design): the hook runs on a sealed copy.
HOOK_BLINDED = """
import jitlab.learner.strict as _strict
import jitlab.grading.checks as _checks
_strict._VOLATILE.update({"require_close"})
_strict._differences = _strict._changed_modules = lambda *args: []
_checks.require_close = lambda *args, **kwargs: None
"""

CONSTANT_SWAPPED = """
import ctypes
from fixture_graders import doubling
_consts = doubling.grade.__wrapped__.__code__.co_consts
_kept = "keep it"
ctypes.cast(id(_consts) + 24, ctypes.POINTER(ctypes.c_void_p))[
    _consts.index("keep the shape the same")] = id(_kept)
"""


@pytest.mark.parametrize(
    ("body", "cell", "said"),
    [
        (WRONG, INPUT_TRANSFORMER, "input_transformers_post"),
        (CALLER_MODULE, "", "refused a frame (sys._getframemodulename)"),
        (EVENTS_SILENCED, "", "jax._src.dispatch._on_exit replaced"),
        (WRONG, AST_TRANSFORMER, "ast_transformers"),
        (WRONG, IMPORT_REPLACED, "builtins.__import__"),
        (WRONG, META_PATH_FINDER, "sys.meta_path"),
        (WRONG, PACKAGE_ON_PATH, "sys.path"),
        (WRONG, GRADER_FILE_OVERWRITTEN, "refused writing"),
        (SOLVED, MONITORING_WRAPPED, "jax.monitoring.register_event_duration_secs_listener"),
        (WRONG, ALLCLOSE_REPLACED, "numpy.allclose"),
        (SOLVED, SETTRACE, "refused sys.settrace"),
        (FRAMES_WALKED, "", "refused a frame"),
        (TRACEBACK_FRAMES, "", "refused a frame (tb_frame)"),
        (SOLVED, RENAMED, "renamed"),
        (SOLVED, CLEAR_CACHE_NO_OP, "double.clear_cache was replaced"),
        (SOLVED, LISTENERS_EMPTIED_FOR_A_WHILE, "monitoring events reported"),
        (SOLVED, FAKE_RECORDS, "refused writing /tmp/jitlab-fake-worker-output.json"),
        (SOLVED, PROCESS, "refused a process"),
        (SOLVED, DUMP_FLAG_DROPPED, "XLA dumped none"),
        (SOLVED, SEED_SET, "jitlab.grading.checks.SEED replaced"),
        (SOLVED, ENTROPY_FIXED, "numpy.random.bit_generator.randbits replaced"),
        (TOLERANCE_WIDENED, "", "jitlab.grading.checks.require_close replaced or changed"),
        (METHOD_REPLACED, "", "jitlab.grading.checks.Hints replaced or changed"),
        (WRONG, REPORT_FILTERED, "json.dumps replaced"),
        (WRONG, NUMPY_INTERNALS, "numpy._core.numeric.less_equal replaced"),
        (SOLVED, JAX_CLASS_METHOD, "jax._src.core.ShapedArray.__str__ replaced"),
        (WRONG, SHELL_CLASS_METHOD, "InteractiveShell.transform_cell"),
        (SOLVED, LAUNDERED_ANNOUNCEMENT, "refused announcing the grader's own objects"),
        (SOLVED, EVENT_FORGED, "reported by other code than XLA's"),
        (SOLVED, MODULE_PLANTED, "a module of your own"),
        (SOLVED, SIGNAL_HANDLER, "a signal handler of your own (SIGALRM)"),
        (SOLVED, MONITORING_CALLBACK, "refused sys.monitoring"),
        (CURRENT_FRAMES, "", "refused a frame (sys._current_frames)"),
        (CHANNEL_FORGED, "", "IPython's error handlers were changed"),
        (SOLVED, AUDIT_HOOK, "refused an audit hook of your own"),
        (ANNOUNCED, "", "refused announcing a grader cell from your code"),
        (VERDICT_WRITTEN, "", "refused reporting a grader's check from your code"),
        (SOLVED, GC_CALLBACK, "a garbage-collector callback of your own"),
        (WRONG, CUSTOM_EXC, "IPython's error handlers were changed"),
        (REPORT_NEUTERED, "", "jitlab.grading.checks.require_close replaced or changed"),
        (NESTED_REPORT, "", "refused reporting a grader's check from your code"),
        (NESTED_ANNOUNCEMENT, "", "refused announcing a grader cell from your code"),
        (SOLVED, NAMED_AS_INSTALLED, "refused code named after an installed file"),
        (SOLVED, CONSTANT_SWAPPED, "fixture_graders.doubling.grade replaced or changed"),
        (WRONG, HOOK_BLINDED, "jitlab.grading.checks.require_close replaced or changed"),
    ],
    ids=[
        "ipython-input-transformer",
        "caller-module-without-a-frame",
        "jax-events-silenced-by-its-exit-flag",
        "ipython-ast-transformer",
        "builtins-import-replaced",
        "meta-path-finder",
        "patched-package-first-on-sys-path",
        "grader-file-overwritten",
        "monitoring-register-wrapped",
        "allclose-replaced",
        "settrace",
        "counters-through-the-call-stack",
        "frames-through-a-traceback",
        "name-changed-after-jit",
        "clear-cache-no-op",
        "listeners-emptied-for-a-while",
        "fake-records-written",
        "a-process-of-its-own",
        "xla-dump-flag-dropped",
        "grading-seed-set",
        "entropy-fixed",
        "tolerance-widened-in-place",
        "course-class-method-replaced",
        "hooks-report-filtered",
        "numpy-internals-replaced",
        "jax-class-method-replaced",
        "ipython-shell-class-method-replaced",
        "announcement-laundered-through-jax",
        "compile-event-forged",
        "module-planted-in-the-package",
        "signal-handler-of-its-own",
        "sys-monitoring-callback",
        "current-frames",
        "channel-forged-and-error-hidden",
        "audit-hook-of-its-own",
        "grader-cell-announced-by-the-learner",
        "verdict-written-by-the-learner",
        "gc-callback-of-its-own",
        "custom-exception-handler",
        "report-writer-swapped-through-the-listener",
        "check-reported-from-a-cell-of-its-own",
        "grader-cell-ended-from-a-cell-of-its-own",
        "code-named-after-an-installed-file",
        "grader-constant-swapped-through-ctypes",
        "hooks-helpers-and-tables-rebound",
    ],
)
def test_a_cheat_is_rejected_in_strict_mode(fixture_course, capsys, body, cell, said):
    write_answer(fixture_course, body, cell)
    code, out = run(capsys, "check", "--strict", "01")
    assert code == 1, out
    assert "strict mode" in out and said in out, out
    assert "PASS" not in out
    if body is CHANNEL_FORGED:  # the hook's copy: the grader's own failure, not the forgery
        assert "✗ double doubles" in out and "✓ double doubles" not in out, out


# Every solution passes in strict mode: tests/maintainer/test_verify.py checks each one
# strictly (the same kernel run also shows that it passes its graders).


# The `.calls` counters on the wrappers the grader hands in, edited: exercise 10's
# executables count their calls, and this `serve` puts every request in the largest
# bucket, then writes the counts the smallest buckets should have had.
LARGEST_BUCKET = "        size = sizes[-1]  # always the largest bucket\n"
COUNTS_EDITED = (
    "        wanted[next(s for s in sizes if s >= n)] += 1\n"
    "    for size, count in wanted.items():\n"
    "        compiled[size].calls = count\n"
)


def test_edited_call_counters_on_the_graders_wrappers_are_rejected(capsys, tmp_path):
    course = load_course()
    source = course.lesson("compiling_less").exercise.source
    text = source.read_text(encoding="utf-8")
    smallest = (
        "        size = next(s for s in sizes if s >= n)  # the smallest bucket that holds x\n"
    )
    appended = "        results.append(compiled[size](padded, np.int32(n)))\n"
    assert smallest in text and appended in text
    cheat = text.replace(
        "    results = []\n", "    results = []\n    wanted = dict.fromkeys(sizes, 0)\n", 1
    )
    cheat = cheat.replace(smallest, LARGEST_BUCKET).replace(appended, appended + COUNTS_EDITED)
    path = tmp_path / source.name
    path.write_text(cheat, encoding="utf-8")
    code, out = run(capsys, "check", "--strict", str(path))
    assert code == 1, out
    assert "strict mode" in out and "_Watched: .calls" in out, out
    assert "PASS" not in out


def test_a_course_objects_state_may_change_but_not_a_method_it_hides():
    """Strict mode's stock of a course object: a counter it keeps may move (the doctor's
    serials do, while grading), an attribute that hides its class's method may not."""
    from jitlab.grading.checks import Hints
    from jitlab.learner.strict import _fingerprint

    hints, course = Hints({"a": "b"}), ("jitlab",)
    before = _fingerprint(hints, course)
    hints["c"], hints.note = "d", "state"
    assert _fingerprint(hints, course) == before
    hints.require = lambda *args, **kwargs: None
    assert _fingerprint(hints, course) != before
    table = {"rtol": 1e-5}  # a grader's constant table (CLOSE): its entries count too
    before = _fingerprint(table, course, 2)
    table["rtol"] = 10.0
    assert _fingerprint(table, course, 2) != before


# The compile count lowered through the package's listener list: each count_compiles
# block subscribes its count's bound method, which leads to the count itself (before,
# a closure cell held it); or that listener swapped for one that drops the events, and
# put back before the learner's function returns. Exercise 01 with a static n compiles
# once per length.
FORGED_COUNT = (
    "    out = padded_rms(padded, n)\n"
    "    import jitlab.instruments.events as events\n"
    "    for listener in list(events._subscribers):\n"
    "        cells = [c.cell_contents for c in getattr(listener, '__closure__', None) or ()]\n"
    "        for held in [getattr(listener, '__self__', None), *cells]:\n"
    "            if type(held).__name__ == 'CompileCount' and held.name == 'padded_rms':\n"
    "                held.compiles = min(held.compiles, 1)\n"
    "    return out\n"
)
# The same, with an int whose __eq__ says it equals anything: the hook compares by value
# only a plain int, so the count's change is seen.
COUNT_THAT_EQUALS_ANYTHING = FORGED_COUNT.replace(
    "held.compiles = min(held.compiles, 1)",
    "held.compiles = type('Same', (int,), {'__eq__': lambda a, b: True, '__ne__': "
    "lambda a, b: False, '__hash__': int.__hash__})(min(held.compiles, 1))",
)
LISTENER_SWAPPED = (
    "    import jitlab.instruments.events as events\n"
    "    saved = list(events._subscribers)\n"
    "    deaf = lambda event, seconds, **kw: None\n"
    "    events._subscribers[:] = [deaf if 'hear' in repr(s) else s for s in saved]\n"
    "    out = padded_rms(padded, n)\n"
    "    events._subscribers[:] = saved\n"
    "    return out\n"
)

# The same, one level down: the package's one listener taken out of JAX's list for the
# call; a listener of the learner's placed before it that stops JAX's loop at each
# compilation; the event's name the counter matches changed. Each is undone before the
# function returns, so only a look at each event sees it.
DISPATCH_TAKEN_OUT = (
    "    from jax._src import monitoring\n"
    "    import jitlab.instruments.events as events\n"
    "    monitoring._event_duration_secs_listeners.remove(events._dispatch)\n"
    "    out = padded_rms(padded, n)\n"
    "    monitoring._event_duration_secs_listeners.append(events._dispatch)\n"
    "    return out\n"
)
LOOP_STOPPED = (
    "    from jax._src import monitoring\n"
    "    def stop(event, seconds, **kwargs):\n"
    "        if event.endswith('backend_compile_duration'):\n"
    "            raise KeyError(event)\n"
    "    listeners = monitoring._event_duration_secs_listeners\n"
    "    listeners.insert(len(listeners) - 1, stop)\n"
    "    try:\n"
    "        out = padded_rms(padded, n)\n"
    "    except KeyError:\n"
    "        out = padded_rms(padded, n)\n"
    "    listeners.remove(stop)\n"
    "    return out\n"
)
# The traced function renamed for each call and named back after it: the compile
# events carry the other name, and the counter, which matches names, hears none.
RENAMED_FOR_A_CALL = (
    "    fn = padded_rms.__wrapped__\n"
    "    fn.__name__ = 'not_padded_rms'\n"
    "    try:\n"
    "        return padded_rms(padded, n)\n"
    "    finally:\n"
    "        fn.__name__ = 'padded_rms'\n"
)
EVENT_NAME_CHANGED = (
    "    import jitlab.instruments.counting as counting\n"
    "    saved, counting.COMPILE_EVENT = counting.COMPILE_EVENT, 'nothing'\n"
    "    out = padded_rms(padded, n)\n"
    "    counting.COMPILE_EVENT = saved\n"
    "    return out\n"
)


@pytest.mark.parametrize(
    ("cheat", "said"),
    [
        (FORGED_COUNT, "CompileCount: .compiles"),
        (COUNT_THAT_EQUALS_ANYTHING, "CompileCount: .compiles"),
        (LISTENER_SWAPPED, "(list: ["),
        (DISPATCH_TAKEN_OUT, "taken out of JAX's"),
        (LOOP_STOPPED, "a monitoring listener of your own"),
        (EVENT_NAME_CHANGED, "jitlab.instruments.counting.COMPILE_EVENT replaced"),
        (RENAMED_FOR_A_CALL, "padded_rms's function was renamed after jax.jit wrapped it"),
    ],
    ids=[
        "count-lowered",
        "count-lowered-to-an-int-equal-to-anything",
        "listener-swapped-and-restored",
        "dispatch-taken-out-and-put-back",
        "listener-loop-stopped",
        "event-name-changed-and-restored",
        "renamed-for-each-call",
    ],
)
def test_a_compile_count_forged_through_its_listener_is_rejected(capsys, tmp_path, cheat, said):
    source = load_course().lesson("shapes").exercise.source
    text = source.read_text(encoding="utf-8")
    jitted, returned = "@jax.jit\ndef padded_rms(", "    return padded_rms(padded, n)\n"
    assert jitted in text and returned in text
    text = text.replace(jitted, "@jax.jit(static_argnums=1)\ndef padded_rms(", 1)
    path = tmp_path / source.name
    path.write_text(text.replace(returned, cheat, 1), encoding="utf-8")
    code, out = run(capsys, "check", "--strict", str(path))
    assert code == 1, out
    assert "strict mode" in out and said in out, out
    assert "PASS" not in out


# Round 6: the grader reached without replacing anything strict mode compares by
# identity. The @grader wrapper's closure cells rewritten (its body swapped for print,
# its declared checks cut to the canary); a module's class swapped, so that attribute
# lookups on it answer what the learner wants (the grader's module, numpy); a library
# function's __code__ swapped, or a frame asked for, by a C function handed to JAX's
# tree.map (JAX's frame is then the caller); code compiled under a name of Python's own
# frozen modules, whose frames passed for trusted.
CLOSURE_CELLS = """
from fixture_graders import doubling as _doubling
for _name, _cell in zip(_doubling.grade.__code__.co_freevars, _doubling.grade.__closure__):
    if _name == "fn":
        _cell.cell_contents = print
    elif _name == "declared":
        _cell.cell_contents = _cell.cell_contents[:1]
"""
MODULE_CLASS = """
import types
from fixture_graders import doubling as _doubling
_fake = {}
exec(compile(
    "def grade(*args):\\n"
    "    import jitlab.grading.verdict as v\\n"
    "    v.send_complete('01 doubling', ())\\n",
    "<frozen importlib._bootstrap>", "exec"), _fake)
class _Module(types.ModuleType):
    def __getattribute__(self, name):
        return _fake["grade"] if name == "grade" else super().__getattribute__(name)
try:
    object.__setattr__(_doubling, "__class__", _Module)
except PermissionError:
    pass
"""
NUMPY_CLASS = """
import types
import numpy as _np
class _Numpy(types.ModuleType):
    def __getattribute__(self, name):
        if name == "isclose":
            return lambda a, b, **kwargs: _np.ones(_np.broadcast(a, b).shape, bool)
        return super().__getattribute__(name)
try:
    _np.__class__ = _Numpy
except PermissionError:
    pass
"""
CODE_SWAPPED_BY_A_LIBRARY = """
import functools
import numpy as _np
def _all_close(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    import numpy
    return numpy.ones(numpy.broadcast(a, b).shape, bool)
try:
    jax.tree.map(
        functools.partial(setattr, _np.isclose._implementation, "__code__"),
        [_all_close.__code__],
    )
except PermissionError:
    pass
"""
FRAME_BY_A_LIBRARY = (
    "    import sys\n"
    "    frame = jax.tree.map(sys._getframe, [0])[0]\n"
    "    while frame is not None:\n"
    "        frame = frame.f_back\n"
    "    return x * 2\n"
)
FRAME_BY_LOGGING = (
    "    import logging\n"
    "    frame = logging.currentframe()\n"
    "    while frame is not None:\n"
    "        frame = frame.f_back\n"
    "    return x * 2\n"
)
FROZEN_NAME = """
_mine = {}
try:
    exec(compile("import sys\\ndef up():\\n    return sys._getframe(1)\\n",
                 "<frozen importlib._bootstrap>", "exec"), _mine)
except PermissionError:
    _mine["up"] = lambda: None
"""
FRAME_BY_FROZEN_CODE = "    _mine['up']()\n    return x * 2\n"
# An answer computed outside jit: the jitted function returns the input in a pytree of
# the learner's whose __array__ doubles it when the grader reads it.
LAZY_ARRAY = """
import numpy as _np
@jax.tree_util.register_pytree_node_class
class Lazy:
    def __init__(self, x):
        self.x = x
    def tree_flatten(self):
        return (self.x,), None
    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)
    def __array__(self, dtype=None, copy=None):
        return _np.asarray(self.x, dtype) * 2
"""


@pytest.mark.parametrize(
    ("body", "cell", "said"),
    [
        (WRONG, CLOSURE_CELLS, "fixture_graders.doubling.grade replaced or changed"),
        (WRONG, MODULE_CLASS, "refused"),
        (WRONG, NUMPY_CLASS, "refused"),
        (WRONG, CODE_SWAPPED_BY_A_LIBRARY, "refused replacing a function's __code__"),
        (FRAME_BY_A_LIBRARY, "", "refused a frame (sys._getframe)"),
        (FRAME_BY_FROZEN_CODE, FROZEN_NAME, "refused code named"),
        (FRAME_BY_LOGGING, "", "refused a frame (sys._getframe)"),
    ],
    ids=[
        "grader-closure-cells-rewritten",
        "grader-module-class-swapped",
        "numpy-module-class-swapped",
        "code-swapped-through-a-library",
        "frame-asked-for-through-a-library",
        "code-named-as-frozen",
        "frame-handed-back-by-logging",
    ],
)
def test_a_cheat_through_a_library_or_a_closure_is_rejected(
    fixture_course, capsys, body, cell, said
):
    write_answer(fixture_course, body, cell)
    code, out = run(capsys, "check", "--strict", "01")
    assert code == 1, out
    assert "strict mode" in out and said in out, out
    assert "PASS" not in out


def test_an_answer_computed_when_the_grader_reads_it_fails(fixture_course, capsys):
    write_answer(fixture_course, "    return Lazy(x)\n", LAZY_ARRAY)
    code, out = run(capsys, "check", "01")
    assert code == 1 and "✗ double doubles" in out and "__array__" in out, out


def test_a_jitted_function_whose_trace_reads_another_function_fails(fixture_course, capsys):
    """``.trace()`` and ``clear_cache()`` read ``_fun``; the calls run what jit wrapped."""
    write_answer(fixture_course, WRONG, "double._fun = lambda x: x * 2\n")
    code, out = run(capsys, "check", "01")
    assert code == 1 and "another _fun" in out and "PASS" not in out, out


def test_the_solution_file_is_out_of_a_strict_kernels_reach(fixture_course, capsys):
    solution = fixture_course.lesson("doubling").exercise.source
    cell = f"exec(open({str(solution)!r}).read().split('# %% tags')[0])\n"
    write_answer(fixture_course, WRONG, cell)
    code, out = run(capsys, "check", "--strict", "01")
    assert code == 1 and "refused reading" in out and "PASS" not in out, out


def test_a_plot_in_a_learners_cell_passes_in_strict_mode(fixture_course, capsys):
    cell = "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n"
    write_answer(fixture_course, SOLVED, cell)
    code, out = run(capsys, "check", "--strict", "01")
    assert code == 0 and "PASS" in out, out


def _module_from(tmp_path, monkeypatch, name: str, text: str):
    """A module of the test's own, importable while the test runs and gone after it."""
    import importlib
    import sys

    (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)  # undone: removed again
    return importlib.import_module(name)


def test_a_private_table_is_compared_by_content_and_a_cache_is_not(tmp_path, monkeypatch):
    """A course module's tables, private ones too, edited in place (``_TOL["rtol"]``, a
    frozen record's field) change its print; a cache the module fills itself does not."""
    import dataclasses

    from jitlab.learner.strict import _module_print

    text = (
        "import dataclasses\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class Problem:\n"
        "    tol: float\n"
        "_TOL = {'rtol': 1e-5, 'nested': {'atol': 1e-6}}\n"
        "PROBLEMS = (Problem(1.5),)\n"
        "_SEEN = {}\n"
        "def remember(key):\n"
        "    _SEEN[key] = True\n"
    )
    module = _module_from(tmp_path, monkeypatch, "course_tables", text)
    course = ("course_tables",)
    before = _module_print("course_tables", course)
    module.remember("a")
    assert _module_print("course_tables", course) == before
    module._TOL["nested"]["atol"] = 1.0
    assert _module_print("course_tables", course) != before
    module._TOL["nested"]["atol"] = 1e-6
    assert _module_print("course_tables", course) == before
    object.__setattr__(module.PROBLEMS[0], "tol", 100.0)
    assert _module_print("course_tables", course) != before
    assert dataclasses.is_dataclass(module.PROBLEMS[0])


def test_a_library_read_again_quickly_sees_what_a_full_read_sees(tmp_path, monkeypatch):
    """After each check the hook reads only the library namespaces that changed: one
    whose every value is the same object keeps its entry; a function replaced, a method
    replaced on a class, or the module replaced in sys.modules (by an object with no
    namespace too) is read again and shows the change, as the full read would."""
    import sys

    from jitlab.learner.strict import _changed_modules, _held, _library, _library_again

    text = "def helper():\n    return 1\nclass Shape:\n    def __str__(self):\n        return 's'\n"
    module = _module_from(tmp_path, monkeypatch, "some_library", text)
    course = ("jitlab",)
    before, held = _library(course), _held(course)
    classes, held_classes = _library(course, classes=True), _held(course, classes=True)
    assert _changed_modules(before, _library_again(before, held)) == []
    original, module.helper = module.helper, lambda: 2
    said = ["some_library.helper replaced or changed"]
    assert _changed_modules(before, _library_again(before, held)) == said
    assert _changed_modules(before, _library(course)) == said
    module.helper = original
    module.Shape.__str__ = lambda self: "t"
    changed = _changed_modules(classes, _library_again(classes, held_classes))
    assert changed == ["some_library.Shape.__str__ replaced or changed"]
    sys.modules["some_library"] = 42
    changed = _changed_modules(before, _library_again(before, held))
    assert changed == ["some_library.(its class), Shape, helper replaced or changed"]


def test_the_runner_names_a_declared_check_no_report_passed(fixture_course):
    """The runner's own copy of the grader says which checks a complete run reports."""
    from jitlab.grading.verdict import Check, GraderRun
    from jitlab.learner.strict import unreported

    cell = "from fixture_graders import doubling\n\ndoubling.grade(double)\n"
    canary = Check("jit is on and the compile counter hears JAX", True, grader="01 doubling")
    only_canary = {3: GraderRun(3, (canary,), completed=True)}
    assert unreported({3: cell}, only_canary) == [
        "the grader '01 doubling' never reported 'double is jitted' as passed"
    ]
    from fixture_graders import doubling

    every = tuple(Check(name, True, grader="01 doubling") for name in doubling.grade.checks)
    assert unreported({3: cell}, {3: GraderRun(3, every, completed=True)}) == []


# Round 7: a library class's method swapped while checks are decided and put back
# before the grader cell ends (ShapedArray.__str__, which verdicts print): bucket_size,
# called first, swaps it, and rms, called later, puts it back.
SWAPPED_FOR_A_WHILE = (
    "def bucket_size(n: int) -> int:\n"
    "    from jax._src import core as _core\n"
    "    if not hasattr(_core, '_kept'):\n"
    "        _core._kept = _core.ShapedArray.__str__\n"
    "        _core.ShapedArray.__str__ = lambda self: 'float32[1]'\n"
)
PUT_BACK = (
    "def rms(x: np.ndarray) -> jax.Array:\n"
    "    from jax._src import core as _core\n"
    "    _core.ShapedArray.__str__ = _core._kept\n"
)


def test_a_library_class_changed_between_cell_boundaries_is_seen(capsys, tmp_path):
    source = load_course().lesson("shapes").exercise.source
    text = source.read_text(encoding="utf-8")
    first, later = "def bucket_size(n: int) -> int:\n", "def rms(x: np.ndarray) -> jax.Array:\n"
    assert first in text and later in text
    text = text.replace(first, SWAPPED_FOR_A_WHILE, 1).replace(later, PUT_BACK, 1)
    path = tmp_path / source.name
    path.write_text(text, encoding="utf-8")
    code, out = run(capsys, "check", "--strict", str(path))
    assert code == 1, out
    assert "strict mode: jax._src.core.ShapedArray.__str__ replaced" in out, out
    assert "PASS" not in out


# Code of the learner's run by the hook itself: json.dumps's shared encoder given an
# encode of the learner's (the hook's reports went through it, so a failed check could
# be written as passed), and an object whose __getattr__ runs when the hook looks at the
# learner's names, where the hook's own work let every event through.
ENCODER_SWAPPED = """
import json as _json
_encode = type(_json._default_encoder).encode
def _passed(obj):
    if isinstance(obj, dict) and obj.get("kind") == "check":
        obj = {**obj, "passed": True}
    return _encode(_json._default_encoder, obj)
_json._default_encoder.encode = _passed
"""
INSIDE_THE_HOOK = """
import sys as _sys
class _Looked:
    def __getattr__(self, name):
        _sys._getframe(1)
        raise AttributeError(name)
looked = _Looked()
"""


def test_the_hooks_reports_do_not_go_through_the_learners_encoder(fixture_course, capsys):
    write_answer(fixture_course, WRONG, ENCODER_SWAPPED)
    code, out = run(capsys, "check", "--strict", "01")
    assert code == 1 and "✗ double doubles" in out and "✓ double doubles" not in out, out


def test_code_of_the_learners_run_inside_the_hook_is_refused(fixture_course, capsys):
    write_answer(fixture_course, SOLVED, INSIDE_THE_HOOK)
    code, out = run(capsys, "check", "--strict", "01")
    assert code == 1 and "PASS" not in out, out
    assert "refused sys._getframe from code of yours run inside" in out, out
