"""The course's causes of recompilation, the lesson that teaches each fix, and the
classification of a difference between two signatures into those causes.

JAX's own explanation is read here too, but only to compare notes: it is shown next to the
doctor's verdict, never used as the verdict. (On jax 0.12.0.1 it compares a miss with one
"closest" earlier key, ranked by kind of difference, so it can name a context change for a
shape miss, a pytree change for a miss that also changed shapes, and it says nothing for
a static argument, a device change or a transformation.)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from jitlab.doctor import lessons
from jitlab.instruments import signature as sig
from jitlab.instruments.explanations import closest_key_difference


def lesson_number(slug: str) -> str:
    """The lesson's number as the course registered it ("" where the doctor runs without
    the course, e.g. installed into a team's project)."""
    return lessons.lookup(slug).number


@dataclasses.dataclass(frozen=True)
class Cause:
    """A cause of recompilation, named by the part of jit's cache key that changed
    (:attr:`part`: the function itself, a static argument, the pytree structure, the array
    types, the shardings, the context) and what in it changed (:attr:`what`)."""

    id: str
    title: str  # the short name the course's graders use ("shape", "static value")
    slug: str  # the lesson that teaches the fix, by its slug in course.yml
    fix: str
    part: str = ""  # the part of jit's cache key
    what: str = ""  # what in that part changed, when the part has several

    @property
    def heading(self) -> str:
        """How a report names it: ``array types (shape)``, ``static argument``."""
        return f"{self.part} ({self.what})" if self.what else self.part or self.title

    @property
    def reference(self) -> lessons.LessonRef:
        return lessons.lookup(self.slug)

    @property
    def lesson(self) -> str:
        """The lesson's number (its position in course.yml), or its slug without one."""
        return self.reference.short

    @property
    def lesson_name(self) -> str:
        return self.reference.name


SHAPE = "shape"
DTYPE = "dtype"
WEAK_TYPE = "weak_type"
PYTREE = "pytree_structure"
STATIC_VALUE = "static_argument"
NEW_FUNCTION = "function"
DEVICE = "shardings"
CONTEXT = "context"
UNKNOWN = "unknown"

TYPES = "array types"

# How a report's header counts cache misses: all functions together, so that "2 cache
# misses" over two functions is never read as two each.
MISSES_IN_ALL = "in all, not counting each function's first compilation"

CAUSES: dict[str, Cause] = {
    c.id: c
    for c in (
        Cause(SHAPE, "shape", "shapes", "pad to a few bucket sizes and mask", TYPES, "shape"),
        Cause(DTYPE, "dtype", "dtypes", "cast inputs to one dtype at the boundary", TYPES, "dtype"),
        Cause(
            WEAK_TYPE,
            "weak type / Python scalar",
            "python_scalars",
            "pass scalars with an explicit dtype, e.g. np.float32(x)",
            TYPES,
            "weak type",
        ),
        Cause(
            PYTREE,
            "pytree structure or keywords",
            "pytree_structure",
            "same containers and keys every call; one calling convention",
            "pytree structure",
        ),
        Cause(
            STATIC_VALUE,
            "static value",
            "static_arguments",
            "trace it instead, or keep its values few",
            "static argument",
        ),
        Cause(
            NEW_FUNCTION,
            "new function object",
            "functions_as_arguments",
            "define the function once; pass what changes as arguments",
            "the function itself",
        ),
        Cause(
            DEVICE,
            "device or sharding",
            "devices_and_shardings",
            "place inputs the same way every call (device_put at the boundary)",
            "shardings",
        ),
        Cause(
            CONTEXT,
            "configuration context",
            "devices_and_shardings",
            "call under one configuration; keep context managers out of the loop",
            "context",
        ),
        Cause(
            UNKNOWN,
            "unknown",
            "diagnosing",
            "nothing the doctor records changed (cleared caches?); read JAX's text",
            "unknown",
        ),
    )
}

CLOSURES = Cause(
    "closure", "closure", "closures_and_globals", "pass the captured values as arguments"
)
CONTROL_FLOW = Cause(
    "control_flow",
    "Python control flow on a traced value",
    "control_flow",
    "use lax.cond / jnp.where / lax.fori_loop, or make the value static (06)",
)
COMPILING_LESS = Cause(
    "compiling_less",
    "compilations you keep",
    "compiling_less",
    "warm up ahead of time, or keep compiled programs in the persistent cache",
)

_PART_CAUSE = {
    sig.FUNCTION: NEW_FUNCTION,
    sig.KEYWORD: PYTREE,
    sig.STRUCTURE: PYTREE,
    sig.SHAPE: SHAPE,
    sig.DTYPE: DTYPE,
    sig.WEAK_TYPE: WEAK_TYPE,
    sig.PYTHON_SCALAR: WEAK_TYPE,
    sig.STATIC: STATIC_VALUE,
    sig.PLACEMENT: DEVICE,
    sig.CONTEXT: CONTEXT,
}

# The cache-key timeline's rows: which part of the key changed.
TIMELINE_ROWS = ("function", "pytree", "array types", "static args", "shardings", "context")
_PART_ROW = {
    sig.FUNCTION: ("function", "x"),
    sig.KEYWORD: ("pytree", "k"),
    sig.STRUCTURE: ("pytree", "t"),
    sig.SHAPE: ("array types", "s"),
    sig.DTYPE: ("array types", "d"),
    sig.WEAK_TYPE: ("array types", "w"),
    sig.PYTHON_SCALAR: ("array types", "w"),
    sig.STATIC: ("static args", "x"),
    sig.PLACEMENT: ("shardings", "x"),
    sig.CONTEXT: ("context", "x"),
}


@dataclasses.dataclass(frozen=True)
class Advice:
    """A fix for one case of a cause, where the cause's general fix does not fit."""

    fix: str
    slug: str


KEY_TYPES = Advice(
    "a typed key (jax.random.key) and a raw uint32 key (jax.random.PRNGKey) are two "
    "types, and a key cannot be cast: make every key one way (jax.random.key throughout, "
    "or jax.random.wrap_key_data(raw) where raw keys come in)",
    "dtypes",
)
TRAIN_EVAL = Advice(
    "the model switched between training and evaluation (model.eval() / model.train() "
    "flip use_running_average, deterministic): each mode compiles once, so switch once "
    "per phase, and call model.train() again before the next training step",
    "frameworks",
)
STATIC_CALLABLE = Advice(
    "the static argument is a function (or an object holding one) made again for each "
    "call: make it once, outside the loop, and pass that same object (the jitted function "
    "itself was not rebuilt)",
    "functions_as_arguments",
)
_MODE_FLAGS = ("use_running_average", "deterministic")


def advice_for(cause_id: str, diffs: Iterable[sig.Difference]) -> Advice | None:
    """The fix for this case, when the cause's own fix would mislead: a typed key is no
    dtype to cast, an NNX train/eval flip is no container to keep, a callable passed as
    a static argument is no value to trace."""
    diffs = list(diffs)
    if cause_id == DTYPE and any("PRNG key" in d.what for d in diffs):
        return KEY_TYPES
    if cause_id == PYTREE and any(
        d.part == sig.STRUCTURE
        and any(re.search(rf"(\.|\[')({flag})(?!\w)", d.where) for flag in _MODE_FLAGS)
        for d in diffs
    ):
        return TRAIN_EVAL
    if cause_id == STATIC_VALUE and any("new function object" in d.what for d in diffs):
        return STATIC_CALLABLE
    return None


def _dtype_and_shape(d: sig.Difference) -> bool:
    """A typed key against a raw one whose shape changed too (``key<fry>[]`` and
    ``u32[2]``): one difference, but of two things the array types row names."""
    return d.part == sig.DTYPE and d.what.endswith(sig.KEY_SHAPE_TOO)


def heading_for(cause_id: str, diffs: Iterable[sig.Difference]) -> str:
    """How a report names this cause for these differences: the cause's heading, or
    ``array types (dtype and shape)`` where a typed key met a raw key of another shape."""
    cause = CAUSES[cause_id]
    if cause_id == DTYPE and any(_dtype_and_shape(d) for d in diffs):
        return f"{cause.part} (dtype and shape)"
    return cause.heading


def cause_of(difference: sig.Difference) -> str:
    return _PART_CAUSE[difference.part]


def causes_of(diffs: Iterable[sig.Difference]) -> list[str]:
    """The causes behind a list of differences, in the course's order; "unknown" if none."""
    found = {cause_of(d) for d in diffs}
    return [c for c in CAUSES if c in found] or [UNKNOWN]


def timeline_marks(diffs: Iterable[sig.Difference]) -> dict[str, str]:
    """Row -> mark for one compilation's column (rows that did not change are absent)."""
    marks: dict[str, str] = {}
    for d in diffs:
        row, mark = _PART_ROW[d.part]
        mark = "*" if _dtype_and_shape(d) else mark
        marks[row] = mark if marks.get(row, mark) == mark else "*"
    return marks


def slugs_for(cause_ids: Iterable[str], closure: bool = False) -> list[str]:
    """The slugs of the lessons for these causes (the closures lesson too for a closure)."""
    slugs = []
    for cid in cause_ids:
        for slug in (CAUSES[cid].slug, CLOSURES.slug if cid == NEW_FUNCTION and closure else ""):
            if slug and slug not in slugs:
                slugs.append(slug)
    return slugs


def lessons_for(cause_ids: Iterable[str], closure: bool = False) -> list[str]:
    lessons = []
    for cid in cause_ids:
        lesson = CAUSES[cid].lesson_name
        if lesson not in lessons:
            lessons.append(lesson)
        if cid == NEW_FUNCTION and closure and CLOSURES.lesson_name not in lessons:
            lessons.append(CLOSURES.lesson_name)
    return lessons


# ---------------------------------------------------------------------------------------
# JAX's explanation, as a second opinion

_TYPE_LINE = re.compile(r"\* at (.*?), now (.+?) and before (.+?)(?:https?://\S*)?$", re.M)
_SHAPED = re.compile(r"^~?([a-z]+\d*)\[(.*)\]")


def _unsharded(type_text: str) -> str:
    return re.sub(r"\(\{.*?\}\)", "", re.sub(r"@[^,\]]*", "", type_text)).strip()


def _type_change(now: str, before: str) -> set[str]:
    """What changed between two of JAX's type texts: every part of it (a new length and a
    new dtype at once is two causes, as the doctor's own comparison says)."""
    if "weak_type" in now or "weak_type" in before:
        return {WEAK_TYPE}
    if _unsharded(now) == _unsharded(before):
        # only the sharding written into the type differs: the axis a dimension is split
        # on ("f32[4@rows,2]") or the mesh axes ("i32[]({Explicit: ('device',)})")
        return {DEVICE}
    a, b = _SHAPED.match(_unsharded(now)), _SHAPED.match(_unsharded(before))
    if not a or not b:
        return {DTYPE}
    found = set()
    if a.group(1) != b.group(1):
        found.add(DTYPE)
    if a.group(2) != b.group(2):
        found.add(SHAPE)
    return found or {DTYPE}


def jax_opinion(text: str | None) -> list[str]:
    """The causes JAX's explanation names, in the doctor's terms ([] when it names none)."""
    if not text:
        return []
    if "never seen function" in text:
        return [NEW_FUNCTION]
    if "Tracing context doesn't match" in text:
        return [CONTEXT]
    if "different input pytree" in text:
        return [PYTREE]
    if "different input types" in text:
        found = set().union(*(_type_change(m[2], m[3]) for m in _TYPE_LINE.finditer(text)))
        return [c for c in CAUSES if c in found] or [SHAPE]
    return []


def jax_summary(text: str | None) -> str:
    """JAX's explanation on one line, without the preamble and the documentation link."""
    if not text:
        return "(no explanation: JAX explains tracing-cache misses only)"
    if "never seen function" in text:
        again = " (re-defined repeatedly)" if "re-defined repeatedly" in text else ""
        return "never seen function" + again
    body = closest_key_difference(text) or text
    body = re.sub(r"https?://\S+", "", body)
    return " ".join(body.split())
