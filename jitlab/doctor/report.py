"""The doctor's report: a table sorted by cost (worst first), then for each function that
recompiled its causes with call sites and lessons, JAX's explanation as a second opinion,
and a cache-key timeline. Everything fits in 100 columns. The same data as JSON for CI.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

from jitlab.doctor import budgets as budgets_mod
from jitlab.doctor import captured as captured_mod
from jitlab.doctor import classify, lessons, wrap
from jitlab.doctor import config as config_mod
from jitlab.doctor.recorder import (
    AOT,
    FIRST,
    MISS,
    TRANSFORM,
    FunctionRecord,
    Miss,
    Recorder,
    Unwatched,
    jitted_names,
)
from jitlab.instruments import signature as sig

WIDTH = 100
SCHEMA = "jitlab-doctor/1"


@dataclasses.dataclass
class Report:
    functions: list[FunctionRecord]
    unwatched: list[Unwatched]
    wall_seconds: float
    verdicts: list[budgets_mod.Verdict] = dataclasses.field(default_factory=list)
    command: list[str] = dataclasses.field(default_factory=list)
    interrupted: bool = False
    exit_code: int | None = None
    program_failed: str | None = None
    internal_errors: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def from_recorder(
        cls,
        recorder: Recorder,
        budgets: list[budgets_mod.Budget] | None = None,
        command: list[str] | None = None,
        project: Path | None = None,
    ) -> Report:
        """``project``: the folder of the ``pyproject.toml`` the budgets came from, whose
        files tell a budget for a function this run did not call from a misspelt one."""
        functions = recorder.snapshot()
        _name_clashes(functions)
        unwatched = recorder.unwatched()
        known = config_mod.known_to(project, jitted_names())
        verdicts = budgets_mod.check(budgets or [], functions, unwatched, known)
        return cls(
            functions=functions,
            unwatched=unwatched,
            wall_seconds=recorder.wall_seconds,
            verdicts=verdicts,
            command=list(command or []),
            internal_errors=list(recorder.internal_errors),
        )

    # -- questions a lesson or a test asks ----------------------------------------------

    def function(self, name: str) -> FunctionRecord:
        """The costliest recorded function with this name (or qualified name)."""
        for f in self.functions:
            if name in (f.name, f.qualname):
                return f
        known = ", ".join(sorted({f.name for f in self.functions})) or "none"
        raise KeyError(f"no jitted function named {name!r} ran (recorded: {known})")

    def causes(self, name: str) -> dict[str, int]:
        """Cause id -> number of recompilations of ``name`` it explains."""
        return self.function(name).cause_counts()

    def lessons(self, name: str) -> set[str]:
        """The lessons ("07 functions_as_arguments", ...) the misses of ``name`` point to."""
        return {lesson for m in self.function(name).recompiles for lesson in m.lessons}

    @property
    def budgets_passed(self) -> bool:
        return all(v.passed for v in self.verdicts)

    @property
    def compiles(self) -> int:
        return sum(f.compiles for f in self.functions)

    @property
    def seconds(self) -> float:
        return sum(f.seconds for f in self.functions)

    # -- output -------------------------------------------------------------------------

    def text(self, timelines: int = 3) -> str:
        return render(self, timelines=timelines)

    def __str__(self) -> str:
        return self.text()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text())

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")


def _name_clashes(functions: list[FunctionRecord]) -> None:
    """Two functions of one name are shown by their qualified names (``A.do``, ``B.do``),
    and by their lines too when those clash as well."""
    by_name: dict[str, list[FunctionRecord]] = {}
    for f in functions:
        by_name.setdefault(f.name, []).append(f)
    for same in by_name.values():
        if len(same) < 2:
            unnamed = (same[0].name == sig.UNNAMED or same[0].library) and same[0].qualname
            # a callable object has no __name__ (JAX: "<unnamed function>"): its class's
            # __call__ is what the user wrote; a library's method is Exported.call
            same[0].display = same[0].qualname if unnamed else same[0].name
            continue
        qualnames = Counter(f.qualname for f in same)
        for f in same:
            line = f.location.rsplit(":", 1)[-1]
            f.display = f.qualname if qualnames[f.qualname] == 1 else f"{f.qualname}:{line}"


# ---------------------------------------------------------------------------------------
# Text


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


def _lines(text: str, indent: str, width: int = WIDTH, most: int = 4) -> list[str]:
    """``text`` wrapped to ``width`` under ``indent`` (continuation lines indented two more
    columns), at most ``most`` lines."""
    wrapped = textwrap.wrap(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_on_hyphens=False,
    ) or [indent]
    if len(wrapped) > most:
        wrapped = wrapped[: most - 1] + [_clip(wrapped[most - 1] + " ...", width)]
        wrapped[-1] = _clip(wrapped[-1], width)
    return wrapped


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}es" if word.endswith("s") else f"{n} {word}s"


def _cause_summary(record: FunctionRecord) -> str:
    counts = record.cause_counts()
    if not counts:
        if record.failures and not record.compilations:
            return "its trace raised: " + record.failures[-1].error
        return "no recompilation"
    parts = [f"{_heading(record, c)} {n} ({_lesson_of(record, c)})" for c, n in counts.items()]
    return ", ".join(parts)


def _heading(record: FunctionRecord, cause_id: str) -> str:
    misses = _by_cause(record).get(cause_id, [])
    return classify.heading_for(cause_id, [d for m in misses for d in m.differences])


def _lesson_of(record: FunctionRecord, cause_id: str) -> str:
    """The number of the lesson the detail's fix links for this cause, so the table, the
    budget lines and the detail name one lesson (a typed key, an NNX train/eval flip and a
    callable static argument each have their own)."""
    _, slugs = fix_for(cause_id, _by_cause(record).get(cause_id, []))
    return lessons.lookup(slugs[0]).short if slugs else classify.CAUSES[cause_id].lesson


def _table(report: Report) -> list[str]:
    out = [
        f"{'':3}{'function / defined at':<36}{'calls':>7}{'traces':>7}{'compiles':>9}"
        f"{'trace s':>9}{'lower s':>9}{'compile s':>10}{'total s':>9}"
    ]
    for i, f in enumerate(report.functions, 1):
        trace = sum(m.trace_seconds for m in f.misses)
        lower = sum(m.lower_seconds for m in f.misses)
        comp = sum(m.compile_seconds for m in f.misses) + f.outside_seconds
        numbers = (
            f"{f.calls:>7}{f.traces:>7}{f.compiles:>9}"
            f"{trace:>9.3f}{lower:>9.3f}{comp:>10.3f}{f.seconds:>9.3f}"
        )
        name = f.display or f.name
        if len(name) <= 35:
            out.append(f"{i:>2} {name:<36}{numbers}")
        else:  # a long name has its own line, whole: never cut to fit the column
            out += _lines(name, f"{i:>2} ", most=3)
            out.append(f"{'':39}{numbers}")
        extra = []
        if f.aot_compiles:
            extra.append(f"{f.aot_compiles} compiled ahead of time (.lower().compile())")
        if f.retraces:
            seconds = sum(m.seconds for m in f.retraces)
            extra.append(
                f"{_plural(len(f.retraces), 'retrace')} that found the compiled program "
                f"({seconds:.3f} s; not compilations)"
            )
        if f.transformed_compiles:
            extra.append(f"+{f.transformed_compiles} for jax.grad/vmap of it (not recompiles)")
        inside = [m for m in f.inside if m.kind in (FIRST, MISS)]
        if inside:
            where = _plural(f.nested_calls, "call") if f.nested_calls else "calls"
            extra.append(
                f"{where} inside other jits: traced {_plural(len(inside), 'time')}"
                + (" (their compilations are the outer functions')" if f.compilations else "")
            )
        elif f.nested_calls:
            extra.append(f"{_plural(f.nested_calls, 'call')} inside other jits")
        if f.python_calls:
            why = ", ".join(f"{r} {n}" for r, n in f.python_reasons.items())
            extra.append(
                f"{f.python_calls} of {_plural(f.warm_calls, 'warm call')} through jit's "
                f"Python path, not its C++ fast path ({why})"
            )
        said = f.persistent_cache()
        if said:
            hits, misses = said.get("hit", 0), said.get("miss", 0)
            notes = [f"{k} ({n}x)" for k, n in said.items() if k.startswith(("not written", "key"))]
            extra.append(
                f"persistent cache: {_plural(hits, 'hit')}, {_plural(misses, 'miss')}"
                + (f", {said['written']} written" if said.get("written") else "")
                + ("; " + "; ".join(notes) if notes else "")
            )
        if f.failures and f.compilations:
            extra.append(f"a trace raised {f.failures[-1].error}")
        memory = captured_line(f)
        if memory:
            extra.append(memory)
        detail = _cause_summary(f) + ("; " + "; ".join(extra) if extra else "")
        # every line of the detail: a cut here would hide the last thing said (the
        # persistent cache, the fast path), with no mark that something was left out
        wrapped = textwrap.wrap(detail, width=WIDTH - 39, break_on_hyphens=False) or [""]
        if len(f.location) <= 34:
            out.append(f"   {f.location:<36}{wrapped[0]}")
        else:  # a long path has its own line, whole
            out += _lines(f.location, "   ", most=3)
            out.append(f"{'':39}{wrapped[0]}")
        out.extend(f"{'':39}{more}" for more in wrapped[1:])
    return out


def _slow_lines(report: Report) -> list[str]:
    """Compile time with no recompilation: which functions' compile time dominates, and
    for a slow program the user's lines that put the most operations into it."""
    total = sum(m.compile_seconds for f in report.functions for m in f.misses)
    slow = [f for f in report.functions if f.compiles and not f.recompiles and f.seconds > 1.0]
    busy = [
        (f, m) for f in report.functions for m in f.compilations if m.busiest and not f.recompiles
    ]
    if not slow and not busy:
        return []
    out = [""]
    if slow:
        shares = ", ".join(
            f"{f.display or f.name} {sum(m.compile_seconds for m in f.misses):.2f} s"
            + (
                f" ({100 * sum(m.compile_seconds for m in f.misses) / total:.0f}% of all)"
                if total
                else ""
            )
            for f in slow[:3]
        )
        out += _lines(
            f"Compiled once but slowly: {shares} compiling. Fix: "
            f"{classify.COMPILING_LESS.fix}. {_see([classify.COMPILING_LESS.slug])}.",
            "",
        )
    for f, m in busy[:3]:
        lines = ", ".join(f"{where} ({n} operations)" for where, n in m.busiest)
        out += _lines(
            f"{f.display or f.name}, compilation {m.number} ({m.compile_seconds:.2f} s): "
            f"most operations from {lines}. A Python loop around such a line is unrolled into "
            "the program: lax.scan or lax.fori_loop keeps one copy of its body.",
            "   ",
        )
    return out


def captured_line(f: FunctionRecord) -> str:
    """The memory its compiled programs hold in arrays it captured ("" when little)."""
    total, latest = f.captured_bytes
    if total < captured_mod.MIN_BYTES or not latest:
        return ""
    names = ", ".join(f"{c.name} {c.type}" for c in latest[:3])
    more = f" and {len(latest) - 3} more" if len(latest) > 3 else ""
    closures = lessons.lookup(classify.CLOSURES.slug).name
    return (
        f"holds {captured_mod.megabytes(total)} of captured arrays in its "
        f"{_plural(len(f.compilations), 'compiled program')} ({names}{more}, "
        f"{captured_mod.megabytes(sum(c.nbytes for c in latest))} baked into each): pass "
        f"them as arguments (lesson {closures})"
    )


def _unwatched_lines(report: Report) -> list[str]:
    others = [o for o in report.unwatched if o.compiles or o.traces]
    if not others:
        return []
    compiles = sum(o.compiles for o in others)
    seconds = sum(o.seconds for o in others)
    names = ", ".join(f"{o.name} {o.compiles}" for o in others[:6])
    more = f", +{len(others) - 6} more" if len(others) > 6 else ""
    return _lines(
        f"Not watched ({_plural(len(others), 'function')}: JAX's own helpers, or jitted "
        f"before the doctor started): {_plural(compiles, 'compilation')}, {seconds:.3f} s: "
        f"{names}{more}",
        "",
    )


HELPER_SHARE = 0.1
HELPER_REPEATS = 5
HELPER_DOMINANT = 0.5
HELPER_FEW = 3
"""JAX's helpers get advice for a line of the user's that compiled one of them at least
``HELPER_REPEATS`` times (a line in a loop, meeting new shapes), when such lines together
cost at least ``HELPER_SHARE`` of all the tracing and compiling the doctor heard; and, in
a small loop that met fewer shapes, for every line where two or more operations each
compiled ``HELPER_FEW`` times or more (the line ran again with a new shape: a line that
makes three arrays of three shapes once compiles one operation three times), when such
lines together cost at least ``HELPER_DOMINANT`` of it (a padding loop over three
lengths is most of a short program's compile time)."""


def helper_sites(report: Report) -> list[tuple[str, str, str, int, float]]:
    """(call site, source line, helper, compilations, its seconds) for JAX's own helpers
    that compiled at the user's lines, when together they cost a real share of the run."""
    total = report.seconds + sum(o.seconds for o in report.unwatched)
    if total <= 0:
        return []

    def compiled_at_least(least: int) -> list[tuple[str, str, str, int, float]]:
        return [
            (site, source, o.name, n, o.seconds * n / max(o.compiles, 1))
            for o in report.unwatched
            for (site, source), n in o.sites.items()
            if n >= least
        ]

    rows = compiled_at_least(HELPER_REPEATS)
    if not rows or sum(r[4] for r in rows) < HELPER_SHARE * total:
        few = compiled_at_least(HELPER_FEW)
        per_line = Counter((r[0], r[1]) for r in few)
        rows = [r for r in few if per_line[r[0], r[1]] >= 2]
        if sum(r[4] for r in rows) < HELPER_DOMINANT * total:
            return []
    return sorted(rows, key=lambda r: -r[4])


def _helper_lines(report: Report) -> list[str]:
    rows = helper_sites(report)
    if not rows:
        return []
    total = report.seconds + sum(o.seconds for o in report.unwatched)
    spent = sum(r[4] for r in rows)
    out = [""]
    out += _lines(
        f"JAX's own helpers, called outside jit from your lines, compiled "
        f"{_plural(sum(r[3] for r in rows), 'time')} ({spent:.3f} s, "
        f"{100 * spent / total:.0f}% of all tracing and compiling):",
        "",
    )
    by_line: dict[tuple[str, str], list[tuple[str, int, float]]] = {}
    for site, source, name, n, seconds in rows:
        by_line.setdefault((site, source), []).append((name, n, seconds))
    ranked = sorted(by_line.items(), key=lambda kv: -sum(s for _, _, s in kv[1]))
    for (site, source), helpers in ranked[:4]:
        what = ", ".join(f"{name} {n}x" for name, n, _ in helpers)
        n_all, spent_here = sum(n for _, n, _ in helpers), sum(s for _, _, s in helpers)
        out += _lines(
            f"at {site}: {_plural(n_all, 'compilation')}, {spent_here:.3f} s ({what})"
            + (":" if source else ""),
            "   ",
        )
        if source:
            out += _lines(source, "       ", most=1)
    if len(ranked) > 4:
        out += _lines(f"and {len(ranked) - 4} more lines", "   ")
    shapes = classify.CAUSES[classify.SHAPE]
    out += _lines(
        "Each new shape or dtype of an eager jnp call compiles one small program. Build "
        "the array inside your jitted function (or with NumPy), or keep its shapes few "
        f"(lesson {shapes.lesson_name}).",
        "   ",
    )
    return out


def _one_per_place(diffs: list[Any]) -> list[Any]:
    """One line per argument path: a leaf whose shape and dtype both changed is two
    differences (two causes) but one change to show, the fuller text of the two."""
    kept: list[Any] = []
    for d in diffs:
        same = next((i for i, k in enumerate(kept) if _one_text(k, d)), None)
        if same is None:
            kept.append(d)
        elif len(f"{d.now}{d.before}") > len(f"{kept[same].now}{kept[same].before}"):
            kept[same] = d
    return kept


def _one_text(a: Any, b: Any) -> bool:
    """Two differences at one path that show one change (``f64[9]`` and ``f64[9] (NumPy
    float64 array)``); a placement change at the same path is another change."""
    if a.where != b.where:
        return False
    short, long = sorted((str(a.now), str(b.now)), key=len)
    before_short, before_long = sorted((str(a.before), str(b.before)), key=len)
    return long.startswith(short) and before_long.startswith(before_short)


def _miss_example(miss: Miss, indent: str) -> list[str]:
    against = f", against {miss.compared_with}" if miss.compared_with else ""
    out = _lines(f"e.g. compilation {miss.number}{against}:", indent)
    places = _one_per_place(miss.differences)
    shown = places[:4]
    for d in shown:
        out += _lines(str(d), indent + "    ")
    if len(places) > len(shown):
        out += _lines(f"... and {len(places) - len(shown)} more", indent + "    ")
    if not miss.differences:
        out += _lines(
            "nothing in the signature differs from an earlier compilation", indent + "    "
        )
    for number, diffs in miss.also_close[-2:]:
        what = "; ".join(str(d) for d in _one_per_place(diffs)[:2]) or "nothing"
        out += _lines(f"equally close to {number}: {what}", indent + "    ")
    jax_causes = miss.jax_causes
    named = ", ".join(classify.CAUSES[c].heading for c in jax_causes)
    if miss.jax_agrees:
        verdict = "agrees"
    elif not jax_causes:
        verdict = "names no cause"
    elif set(jax_causes) <= set(miss.causes):
        verdict = f"names {named} only"
    else:
        verdict = f"names {named}: a different cause"
    out += _lines(f"JAX says ({verdict}): {classify.jax_summary(miss.jax_text)}", indent + "    ")
    return out


def fix_for(cause_id: str, misses: list[Miss]) -> tuple[str, list[str]]:
    """The fix for these misses of one cause, and the slugs of the lessons that teach it:
    the cause's own, or the fix for the case when the cause's would mislead."""
    advice = classify.advice_for(cause_id, [d for m in misses for d in m.differences])
    if advice is not None:
        return advice.fix, [advice.slug]
    closure = cause_id == classify.NEW_FUNCTION and any(
        m.signature.function.closure for m in misses
    )
    return classify.CAUSES[cause_id].fix, classify.slugs_for([cause_id], closure)


def _by_cause(record: FunctionRecord) -> dict[str, list[Miss]]:
    by_cause: dict[str, list[Miss]] = {}
    for m in record.recompiles:
        for c in m.causes:
            by_cause.setdefault(c, []).append(m)
    return by_cause


def cause_lines(record: FunctionRecord) -> list[str]:
    out = []
    for cid, misses in sorted(_by_cause(record).items(), key=lambda kv: -len(kv[1])):
        fix, slugs = fix_for(cid, misses)
        out += _lines(f"{_heading(record, cid)}: {_plural(len(misses), 'miss')}.", "   ")
        out += _lines(f"Fix: {fix}.", "      ")
        out += _lines(_see(slugs), "      ")
        sites = Counter((m.call_site, m.source) for m in misses)
        for (site, source), n in sites.most_common(2):
            out += _lines(f"at {site} ({n}x)" + (":" if source else ""), "      ")
            if source:
                out += _lines(source, "          ", most=1)
        if len(sites) > 2:
            out += _lines(f"and {len(sites) - 2} more call sites", "      ")
        alone = [m for m in misses if m.causes == [cid]]  # the clearest example, if any
        out += _miss_example((alone or misses)[0], "      ")
    return out


def _see(slugs: list[str]) -> str:
    """``See lesson 01 shapes: <its page>``, each lesson with its link when it has one."""
    refs = [lessons.lookup(slug) for slug in slugs]
    return "See " + "; ".join(f"lesson {r.name}" + (f": {r.link}" if r.link else "") for r in refs)


def _timeline(record: FunctionRecord, width: int = WIDTH) -> list[str]:
    columns = record.columns
    if len(columns) < 2:
        return []
    room = width - 3 - 14
    shown = columns[:room]
    ruler = [" "] * len(shown)  # column numbers 1, 10, 20, ... written from their column
    for i in range(1, len(shown) + 1):
        label = str(i)
        if (i == 1 or i % 10 == 0) and i - 1 + len(label) <= len(ruler):  # whole or not
            ruler[i - 1 : i - 1 + len(label)] = label
    header = "".join(ruler)
    rows = {row: [] for row in classify.TIMELINE_ROWS}
    for m in shown:
        marks = classify.timeline_marks(m.differences) if m.kind == MISS else {}
        for row in rows:
            if m.kind in (FIRST, AOT):
                rows[row].append("o" if m.kind == FIRST else "a")
            else:
                rows[row].append(marks.get(row, "."))
        if m.kind == MISS and not m.differences:
            for row in rows:
                rows[row][-1] = "?"
    out = [f"   {'timeline':<14}{header}"]
    out += [f"   {row:<14}{''.join(marks)}" for row, marks in rows.items()]
    if len(columns) > len(shown):
        out.append(f"   (+{len(columns) - len(shown)} more compilations in the JSON report)")
    return out


def _shown_name(report: Report, name: str, location: str) -> str:
    """The name the table shows for a function (its qualified name when two share a name,
    a callable object's ``Class.__call__``), so a budget line names the same row."""
    record = next((f for f in report.functions if f.name == name and f.location == location), None)
    return (record.display or record.name) if record is not None else name


def budget_lines(report: Report) -> list[str]:
    if not report.verdicts:
        return []
    sources = ", ".join(dict.fromkeys(v.budget.source for v in report.verdicts))
    out = [f"Budgets (from {sources}):"]
    for v in report.verdicts:
        if v.status == budgets_mod.NOT_RUN:
            out += _lines(
                f"not run: {v.budget}: this run called no function named "
                f"{v.budget.pattern!r}, which the project defines (a subset of it ran), so "
                "there was nothing to check",
                "   ",
            )
            continue
        if v.status == "unused":
            out += _lines(
                f"warning: {v.budget}: no jitted function named {v.budget.pattern!r} ran"
                + (
                    ", and the project defines none (a misspelt name?)"
                    if v.budget.source not in (budgets_mod.COMMAND_LINE, budgets_mod.MARKER)
                    else ""
                )
                + ", so this budget was not checked (not a pass)",
                "   ",
            )
            continue
        worst = max(v.counts, key=lambda c: c[2])
        if v.status == "ok":
            shown = _shown_name(report, worst[0], worst[1])
            out += _lines(f"ok: {v.budget} (at most {worst[2]}: {shown})", "   ")
            continue
        for name, location, n in v.counts:
            if n <= v.budget.limit:
                continue
            record = next(
                (f for f in report.functions if f.name == name and f.location == location), None
            )
            name = _shown_name(report, name, location)
            why = ""
            if record is not None:
                counts = record.cause_counts()
                why = "; ".join(
                    f"{_heading(record, c)} {k} (lesson {_lesson_of(record, c)})"
                    for c, k in counts.items()
                )
            out += _lines(
                f"EXCEEDED: {v.budget}: {name} ({location}) compiled {n} times"
                + (f"; why: {why}" if why else ""),
                "   ",
            )
    return out


def render(report: Report, timelines: int = 3) -> str:
    out: list[str] = []
    title = "jitlab doctor"
    if report.command:
        title += ": " + " ".join(report.command)
    out.append(_clip(title, WIDTH))
    if report.interrupted:
        out.append("interrupted (Ctrl-C): the report so far")
    recompiled = sum(m.compiles for f in report.functions for m in f.compilations if m.kind == MISS)
    retraces = [m for f in report.functions for m in f.retraces]
    also = ""
    if retraces:
        also = (
            f", and {_plural(len(retraces), 'retrace')} that found a compiled program "
            f"({sum(m.seconds for m in retraces):.3f} s, not counted)"
        )
    ahead = sum(f.aot_compiles for f in report.functions)
    out += _lines(
        f"{_plural(len(report.functions), 'watched function')}, "
        f"{_plural(report.compiles, 'compilation')}"
        + (f" ({ahead} ahead of time)" if ahead else "")
        + f", {_plural(recompiled, 'cache miss')} {classify.MISSES_IN_ALL}{also}, "
        f"{report.seconds:.2f} s tracing+lowering+compiling in a {report.wall_seconds:.2f}"
        " s run. Worst first.",
        "",
    )
    out.append("")
    if report.functions:
        out += _table(report)
    else:
        out.append("   no jitted function created while the doctor watched compiled")
    out += _unwatched_lines(report)
    out += _helper_lines(report)
    shown_timelines = 0
    legend = _lines(
        "Cache-key timeline: one column per compilation, one row per part of jit's cache "
        "key. o: first compilation; a: compiled ahead of time (.lower().compile()); .: same "
        "as in the closest earlier compilation; x: changed (array types: s shape, d dtype, "
        "w weak type, * several; pytree: t structure or node metadata, k keyword); ?: "
        "nothing the doctor records changed.",
        "",
    )
    if timelines and any(len(f.recompiles) for f in report.functions):
        out += [""] + legend
    for i, record in enumerate(report.functions, 1):
        if not record.recompiles:
            continue
        out.append("")
        name = record.display or record.name
        head = (
            f"{i}. {name} ({record.location}): {_plural(record.compiles, 'compilation')}"
            f", {_plural(len(record.recompiles), 'cache miss')} after the first, "
            f"{record.seconds:.3f} s"
        )
        if not record.compilations:
            head = (
                f"{i}. {name} ({record.location}): traced {len(record.columns)} times inside "
                f"other jits, {record.seconds:.3f} s"
            )
        out += _lines(head, "")
        out += cause_lines(record)
        if shown_timelines < timelines:
            lines = _timeline(record)
            if lines:
                shown_timelines += 1
                out += lines
    out += _slow_lines(report)
    budget = budget_lines(report)
    if budget:
        out.append("")
        out += budget
    if wrap.FASTPATH_UNAVAILABLE:
        out.append("")
        out += _lines(f"doctor: {wrap.FASTPATH_UNAVAILABLE}", "")
    if report.internal_errors:
        out.append("")
        out += _lines(
            f"doctor: {len(report.internal_errors)} internal error(s) while recording, e.g. "
            f"{report.internal_errors[0]}",
            "",
        )
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# JSON


def _miss_dict(m: Miss, column: int | None = None) -> dict[str, Any]:
    return {
        "number": m.number,
        "kind": m.kind,
        # its column in the timeline (the text's and the page's), None if it has none
        "column": column,
        "call_site": m.call_site,
        "source": m.source,
        "inside_jit": m.inside_jit,
        "traces": m.traces,
        "lowerings": m.lowerings,
        "compiles": m.compiles,
        "seconds": {
            "trace": m.trace_seconds,
            "lower": m.lower_seconds,
            "compile": m.compile_seconds,
        },
        "signature": m.signature.describe(),
        "function_object": m.signature.function.serial,
        "compared_with": m.compared_with,
        "aot": m.aot,
        "error": m.error,
        "causes": m.causes if m.kind in (MISS, "retrace") else [],
        "lessons": m.lessons if m.kind == MISS else [],
        "differences": [dataclasses.asdict(d) for d in m.differences],
        "equally_close": [
            {"compilation": n, "differences": [dataclasses.asdict(d) for d in diffs]}
            for n, diffs in m.also_close
        ],
        "jax_explanation": m.jax_text,
        "jax_causes": m.jax_causes if m.kind == MISS else [],
        "jax_agrees": m.jax_agrees if m.kind == MISS else None,
    }


def _misses_of(f: FunctionRecord) -> list[dict[str, Any]]:
    column = {id(m): n for n, m in enumerate(f.columns, 1)}
    ordered = [m for m in f.misses if m.kind != TRANSFORM]
    ordered += [m for m in f.misses if m.kind == TRANSFORM]
    return [_miss_dict(m, column.get(id(m))) for m in ordered]


def _fix_dict(cause_id: str, misses: list[Miss]) -> dict[str, Any]:
    fix, slugs = fix_for(cause_id, misses)
    refs = [lessons.lookup(slug) for slug in slugs]
    return {
        "fix": fix,
        "lessons": [{"name": r.name, "short": r.short, "link": r.link} for r in refs],
    }


def to_dict(report: Report) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "command": report.command,
        "exit_code": report.exit_code,
        "interrupted": report.interrupted,
        "program_failed": report.program_failed,
        "wall_seconds": report.wall_seconds,
        "functions": [
            {
                "name": f.name,
                "qualname": f.qualname,
                "defined_at": f.location,
                "calls": f.calls,
                "traces": f.traces,
                "compiles": f.compiles,
                "recompiles": len(f.recompiles),
                "aot_compiles": f.aot_compiles,
                "retraces": len(f.retraces),
                "nested_calls": f.nested_calls,
                "persistent_cache": f.persistent_cache(),
                "fast_path": {
                    "warm_calls": f.warm_calls,
                    "through_python": f.python_calls,
                    "reasons": f.python_reasons,
                },
                "failed_traces": [m.error for m in f.failures],
                "captured": {
                    "bytes_in_all_programs": f.captured_bytes[0],
                    "arrays": [dataclasses.asdict(c) for c in f.captured_bytes[1]],
                },
                "transformed_compiles": f.transformed_compiles,
                "seconds": {
                    "trace": sum(m.trace_seconds for m in f.misses),
                    "lower": sum(m.lower_seconds for m in f.misses),
                    "compile": sum(m.compile_seconds for m in f.misses) + f.outside_seconds,
                    "total": f.seconds,
                },
                "causes": f.cause_counts(),
                "fixes": {cid: _fix_dict(cid, misses) for cid, misses in _by_cause(f).items()},
                "misses": _misses_of(f),
            }
            for f in report.functions
        ],
        "unwatched": [
            {
                "name": o.name,
                "traces": o.traces,
                "compiles": o.compiles,
                "seconds": o.seconds,
                "sites": [{"at": a, "source": b, "compiles": n} for (a, b), n in o.sites.items()],
            }
            for o in report.unwatched
        ],
        "helper_sites": [
            {"at": site, "source": source, "helper": name, "compiles": n, "seconds": sec}
            for site, source, name, n, sec in helper_sites(report)
        ],
        "budgets": [
            {
                "budget": str(v.budget),
                "status": v.status,
                "counts": [{"name": n, "defined_at": loc, "compiles": c} for n, loc, c in v.counts],
            }
            for v in report.verdicts
        ],
        "causes": {
            c.id: {
                "part": c.part,
                "heading": c.heading,
                "title": c.title,
                "lesson": c.lesson_name,
                "link": c.reference.link,
                "fix": c.fix,
            }
            for c in classify.CAUSES.values()
        },
        "internal_errors": report.internal_errors,
    }
