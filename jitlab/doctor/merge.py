"""``jitlab doctor --merge report.p*.json``: the reports of a job's processes, side by side.

Every process of a ``jax.distributed`` job compiles for itself. When one process compiles
a program the others do not (a ragged last batch on one host, a flag read from its own
environment), their collectives no longer match, and the job hangs, crashes or silently
computes different results. So the merged report names a **divergence** first: the first
compilation of a function that happened on some processes but not all, or with different
argument types on different processes, with the call where it began and what changed.
Then, per function, its compile count on each process.

Reports of different runs are refused, naming the files: a different command, number
of processes or run id, or recordings that started too far apart. A report marked
partial (its process died before the end) is merged, and marked so.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path
from typing import Any

from jitlab.doctor import classify
from jitlab.doctor.report import SCHEMA

WIDTH = 100
# Processes of one job start within seconds of each other. Without a run id, reports
# whose recordings started further apart than this are from different runs.
SAME_RUN_SECONDS = 120.0
LESSON = "processes"  # the course's lesson on many processes (its slug)


class MergeError(ValueError):
    """Reports that cannot be merged; the message is one line naming the files."""


@dataclasses.dataclass
class ProcessReport:
    path: Path
    data: dict[str, Any]

    @property
    def process(self) -> dict[str, Any]:
        return self.data.get("process") or {"index": 0, "count": 1, "partial": False}

    @property
    def index(self) -> int:
        return int(self.process["index"])

    @property
    def partial(self) -> bool:
        return bool(self.process.get("partial"))

    @property
    def command(self) -> str:
        return " ".join(self.data.get("command") or [])


def load(paths: list[str | Path]) -> list[ProcessReport]:
    """Read and check the reports; sorted by process index. Raises MergeError."""
    if not paths:
        raise MergeError("--merge needs the reports: jitlab doctor --merge report.p*.json")
    reports = []
    for path in map(Path, paths):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as err:
            raise MergeError(f"cannot read {path}: {err.strerror or err}") from None
        except json.JSONDecodeError as err:
            raise MergeError(f"{path} is not JSON ({err.msg}, line {err.lineno})") from None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise MergeError(f"{path} is not a jitlab doctor report (no schema {SCHEMA!r})")
        reports.append(ProcessReport(path, data))
    same_run(reports)
    return sorted(reports, key=lambda r: r.index)


def same_run(reports: list[ProcessReport]) -> None:
    """Raise MergeError unless every report comes from one run, each process once."""
    first = reports[0]
    for other in reports[1:]:
        pair = f"{first.path} and {other.path}"
        if other.command != first.command:
            raise MergeError(
                f"{pair} are from different runs: the commands differ "
                f"({first.command!r}, {other.command!r})"
            )
        a, b = first.process, other.process
        if a.get("count") != b.get("count"):
            raise MergeError(
                f"{pair} are from different runs: of {a.get('count')} and {b.get('count')} "
                "processes"
            )
        if a.get("run") and b.get("run") and a["run"] != b["run"]:
            raise MergeError(f"{pair} are from different runs ({a['run']}, {b['run']})")
        apart = abs(float(a.get("started", 0)) - float(b.get("started", 0)))
        if not (a.get("run") and a.get("run") == b.get("run")) and apart > SAME_RUN_SECONDS:
            raise MergeError(f"{pair} are from different runs: they started {apart:.0f} s apart")
    seen: dict[int, Path] = {}
    for r in reports:
        if r.index in seen:
            raise MergeError(
                f"{seen[r.index]} and {r.path} are both process {r.index}: from different runs"
            )
        seen[r.index] = r.path


# ---------------------------------------------------------------------------------------
# Divergences


@dataclasses.dataclass
class Divergence:
    function: str
    defined_at: str
    compilation: int  # the function's first compilation that is not the same everywhere
    call: int | None  # the call where it began (the earliest of the processes that had it)
    on: list[int]  # processes that made this compilation
    missing: list[int]  # processes that did not
    lines: list[str]  # what each process compiled, and what changed

    @property
    def kind(self) -> str:
        return "on some processes only" if self.missing else "with different signatures"


def _compilations(r: ProcessReport, name: str, defined_at: str) -> list[dict[str, Any]]:
    """A function's compilations on one process, in order; the last ones may be
    unfinished: compiled in a call that had not returned when the process stopped."""
    f = _function(r, name, defined_at)
    # its timeline's columns: the compilations (ahead of time too), as the report counts them
    done = (
        sorted((m for m in f["misses"] if m.get("column")), key=lambda m: m["column"]) if f else []
    )
    for u in r.data.get("unfinished") or []:
        if (u["name"], u["defined_at"]) == (name, defined_at):
            done.append(
                {
                    "kind": "unfinished",
                    "number": len(done) + 1,
                    "call": u.get("call"),
                    "call_site": None,
                    "signature": "(its arguments: unknown, the call never returned)",
                    "jax_explanation": u.get("jax_explanation"),
                }
            )
    return done


def _changed(m: dict[str, Any]) -> str:
    if m["kind"] == "first":
        return "its first compilation"
    if m["kind"] == "unfinished":
        return f"JAX said: {classify.jax_summary(m.get('jax_explanation'))}"
    diffs = m.get("differences") or []
    text = "; ".join(f"{d['where']}: {d['now']} now, {d['before']} before" for d in diffs[:3])
    return text or "nothing in the signature changed"


def _where(m: dict[str, Any]) -> str:
    call = f"call {m['call']}" if m.get("call") else "a call"
    if m["kind"] == "unfinished":
        return f"{call}, which never returned (the process stopped in it)"
    return f"{call}, at {m['call_site']}"


def divergences(reports: list[ProcessReport]) -> list[Divergence]:
    """The first divergent compilation of each function, earliest call first."""
    found = []
    for name, defined_at in _functions(reports):
        per = {r.index: _compilations(r, name, defined_at) for r in reports}
        for k in range(max(len(c) for c in per.values())):
            have = {p: c[k] for p, c in per.items() if len(c) > k}
            signatures = {m["signature"] for m in have.values()}
            if len(have) == len(per) and len(signatures) == 1:
                continue
            missing = sorted(set(per) - set(have))
            calls = [m["call"] for m in have.values() if m.get("call")]
            lines = []
            for p, m in sorted(have.items()):
                lines.append(f"process {p}: compilation {k + 1} at {_where(m)}: {_changed(m)}")
                if len(signatures) > 1:
                    lines.append(f"   with {m['signature']}")
            for p in missing:
                last = per[p][-1] if per[p] else None
                kept = f"kept {last['signature']}" if last else "never compiled it"
                lines.append(f"process {p}: no compilation {k + 1}; {kept}")
            found.append(
                Divergence(
                    name,
                    defined_at,
                    k + 1,
                    min(calls) if calls else None,
                    sorted(have),
                    missing,
                    lines,
                )
            )
            break
    return sorted(found, key=lambda d: (d.call is None, d.call or 0))


def _functions(reports: list[ProcessReport]) -> list[tuple[str, str]]:
    """Every watched function of any process, worst (most compiles anywhere) first."""
    best: dict[tuple[str, str], int] = {}
    for r in reports:
        for f in r.data["functions"]:
            key = (f["name"], f["defined_at"])
            best[key] = max(best.get(key, 0), f["compiles"])
    return sorted(best, key=lambda k: -best[k])


def _function(r: ProcessReport, name: str, defined_at: str) -> dict[str, Any] | None:
    return next(
        (f for f in r.data["functions"] if (f["name"], f["defined_at"]) == (name, defined_at)),
        None,
    )


# ---------------------------------------------------------------------------------------
# Text


def _wrap(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_on_hyphens=False,
    ) or [indent]


def render(reports: list[ProcessReport]) -> str:
    count = int(reports[0].process.get("count", len(reports)))
    many = f"{count} process" + ("es" if count != 1 else "")
    out = _wrap(f"jitlab doctor: {many} of {reports[0].command or 'a program'}")
    folders = {r.path.parent for r in reports}
    for r in reports:
        state = (
            "partial: the process ended before its report was complete" if r.partial else "complete"
        )
        failed = r.data.get("program_failed")
        shown = r.path.name if len(folders) == 1 else str(r.path)
        out += _wrap(
            f"process {r.index}: {shown}, {state}"
            + (f"; the program failed: {failed}" if failed else ""),
            "   ",
        )
    if len(folders) == 1 and (folder := folders.pop()) != Path("."):
        out += _wrap(f"(in {folder})", "   ")
    absent = sorted(set(range(count)) - {r.index for r in reports})
    if absent:
        out += _wrap(f"no report from process {', '.join(map(str, absent))}", "   ")

    found = divergences(reports)
    out.append("")
    if found:
        for d in found:
            began = f", from its call {d.call}" if d.call else ""
            where = ", ".join(map(str, d.on))
            if d.missing:
                what = f"happened on process {where}, not on {', '.join(map(str, d.missing))}"
            else:
                what = f"differs between processes {where}"
            out += _wrap(
                f"DIVERGENCE: {d.function} ({d.defined_at}) compiled {d.kind}{began}: "
                f"compilation {d.compilation} {what}."
            )
            for line in d.lines:
                out += _wrap(line, "   ")
        out += _wrap(
            "Processes that compile different programs do not run the same collectives: the "
            "job can hang, crash, or compute different results on each process. Give every "
            "process the same global shapes and static values (the course's lesson "
            f"{LESSON}: pad the last batch, declare the global shape, decide a setting once "
            "and broadcast it).",
        )
    else:
        out += _wrap("No divergence: every function compiled the same programs on every process.")

    out.append("")
    head = f"   {'function / defined at':<44}" + "".join(
        f"{'p' + str(r.index):>6}" for r in reports
    )
    out.append(head)
    diverged = {(d.function, d.defined_at) for d in found}
    starred = False
    for name, defined_at in _functions(reports):
        counts = ""
        for r in reports:
            n = len(_compilations(r, name, defined_at))
            unfinished = any(m["kind"] == "unfinished" for m in _compilations(r, name, defined_at))
            counts += f"{str(n) + ('*' if unfinished else ''):>6}"
            starred = starred or unfinished
        flag = "  <- diverges" if (name, defined_at) in diverged else ""
        out.append(f"   {name[:43]:<44}{counts}{flag}")
        out.append(f"     {defined_at if len(defined_at) <= 42 else '...' + defined_at[-39:]}")
    if starred:
        out += _wrap("* the last in a call that had not returned when the process stopped", "   ")
    return "\n".join(out)
