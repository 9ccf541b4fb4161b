"""Markdown generated from the course's own data, for the site's placeholders."""

from __future__ import annotations

import dataclasses
import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jitlab.course.manifest import Lesson, load_course
from jitlab.course.metadata import CourseError
from jitlab.course.pace import half_day_problems


def _results_dir() -> Path:
    return load_course().root / "results"


def _lesson_link(item: Lesson, prefix: str = "") -> str:
    return f"[{item.label}]({prefix}lessons/{item.stem}.ipynb)"


def learning_path() -> str:
    """Every lesson, what it fixes, and its minutes: reading and teaching, then the
    exercise (a dash where the lesson has none)."""
    rows = [
        "| lesson | the fix it teaches | lesson (min) | exercise (min) |",
        "|---|---|--:|--:|",
    ]
    lessons = load_course().lessons
    for item in lessons:
        minutes = item.meta.minutes
        exercise = minutes.exercises or "–"
        rows.append(f"| {_lesson_link(item)} | {item.meta.fix} | {minutes.teaching} | {exercise} |")
    teaching = sum(i.meta.minutes.teaching for i in lessons)
    exercises = sum(i.meta.minutes.exercises for i in lessons)
    rows.append(f"| **all lessons** | | **{teaching}** | **{exercises}** |")
    return "\n".join(rows)


def _clock(minutes: int) -> str:
    return f"{minutes // 60}:{minutes % 60:02d}"


@dataclasses.dataclass(frozen=True)
class Slot:
    """One line of a workshop schedule: a lesson, or a break, lunch or the setup check."""

    title: str
    teaching: int
    exercises: int = 0
    skip: tuple[str, ...] = ()
    is_pause: bool = False


# A quarter of an hour more than `jitlab preflight` needs: the slack for a laptop whose
# `make course` failed at home (it installs from the wheelhouse while the room starts).
SETUP_SLOT = Slot(
    "Welcome, and `jitlab preflight` on every laptop<br><small>with slack for one whose "
    "install failed at home: `make setup` from the wheelhouse (2 min)</small>",
    20,
    0,
)
READ_MINUTES = 2  # a lesson's Key points box, read in the room
HALF_DAY_END = 13 * 60  # a morning: the half day ends by 13:00
HANDS_ON_SHARE = 1 / 3  # of the half day, at least: the exercises
BREAK_MINUTES, LUNCH_MINUTES, BLOCK_MINUTES = 15, 60, 90


DAY_START, LUNCH_FROM, LUNCH_BY, DAY_END = 9 * 60, 12 * 60, 13 * 60 + 15, 17 * 60 + 30


def _plan_days(slots: list[Slot], *, lunch: bool) -> list[list[tuple[int, Slot]]]:
    """Clock times for the slots, day by day: a break after about 90 minutes of work, lunch
    between 12:00 and 13:15, and a new day rather than a slot that would end after 17:30."""
    days: list[list[tuple[int, Slot]]] = [[]]
    now, since_break, had_lunch = DAY_START, 0, not lunch
    queue = list(slots)
    while queue:
        slot = queue[0]
        block = slot.teaching + slot.exercises
        if not had_lunch and now >= LUNCH_FROM and (now + block > LUNCH_BY or since_break):
            days[-1].append((now, Slot(f"*lunch ({LUNCH_MINUTES} min)*", 0, is_pause=True)))
            now, since_break, had_lunch = now + LUNCH_MINUTES, 0, True
            continue
        if since_break and since_break + block > BLOCK_MINUTES:
            days[-1].append((now, Slot(f"*break ({BREAK_MINUTES} min)*", 0, is_pause=True)))
            now, since_break = now + BREAK_MINUTES, 0
            continue
        if days[-1] and now + block > DAY_END:
            while days[-1][-1][1].is_pause:  # no break just before the end of a day
                days[-1].pop()
            last_clock, last = days[-1][-1]
            days[-1].append(
                (last_clock + last.teaching + last.exercises, Slot("*end*", 0, is_pause=True))
            )
            days.append([])
            now, since_break, had_lunch = DAY_START, 0, not lunch
            continue
        days[-1].append((now, queue.pop(0)))
        now += block
        since_break += block
    days[-1].append((now, Slot("*end*", 0, is_pause=True)))
    return days


def _table(day: list[tuple[int, Slot]]) -> str:
    rows = ["| time | what | teaching | exercises |", "|---|---|---|---|"]
    for clock, slot in day:
        if slot.is_pause:
            rows.append(f"| {_clock(clock)} | {slot.title} | | |")
            continue
        title = slot.title
        if slot.skip:
            title += "<br><small>skip: " + "; ".join(slot.skip) + "</small>"
        rows.append(f"| {_clock(clock)} | {title} | {slot.teaching} | {slot.exercises or ''} |")
    return "\n".join(rows)


def _to_read(item: Lesson, planned: set[str], read: set[str]) -> list[str]:
    """The prerequisites of ``item`` that the half day leaves out and that no earlier
    slot had the room read: read in this slot, ``READ_MINUTES`` each."""
    plan = item.meta.half_day
    if plan is None or not plan.read_before:
        return []
    return [s for s in item.meta.prerequisites.lessons if s not in planned and s not in read]


def _half_day_title(item: Lesson, to_read: list[str]) -> str:
    """The lesson's link, then what the half day asks beyond it: what the room reads
    first, in the slot (its prerequisites the plan leaves out), and the part of the
    exercise to do."""
    plan = item.meta.half_day
    assert plan is not None
    title = _lesson_link(item)
    if to_read:
        course = load_course()
        links = ", ".join(_lesson_link(course.lesson(slug)) for slug in to_read)
        title += (
            f"<br><small>read before, in the slot ({READ_MINUTES} min each): {links}: "
            f"{plan.read_before}</small>"
        )
    if plan.exercise and plan.minutes.exercises:
        title += f"<br><small>exercise: {plan.exercise}</small>"
    return title


def _lesson_slot(item: Lesson, *, to_read: list[str] | None = None) -> Slot:
    if to_read is not None and item.meta.half_day is not None:
        minutes = item.meta.half_day.minutes
        title = _half_day_title(item, to_read)
        teaching = minutes.teaching + READ_MINUTES * len(to_read)
        return Slot(title, teaching, minutes.exercises, item.meta.half_day.skip)
    return Slot(_lesson_link(item), item.meta.minutes.teaching, item.meta.minutes.exercises)


def half_day() -> str:
    """Setup, then the lessons whose front matter has a ``half_day`` plan (shorter minutes,
    sections to skip), in course order: a path that reaches the capstone in a morning."""
    course = load_course()
    chosen = [item for item in course.lessons if item.meta.half_day is not None]
    if not chosen:
        return "*No lesson has a half-day plan yet (`half_day:` in its front matter).*"
    problems = half_day_problems(course)
    if problems:
        raise CourseError("the half-day plan does not hold together:\n" + "\n".join(problems))
    planned, read = {item.slug for item in chosen}, set[str]()
    slots = [SETUP_SLOT]
    for item in chosen:
        to_read = _to_read(item, planned, read)
        read.update(to_read)
        slots.append(_lesson_slot(item, to_read=to_read))
    days = _plan_days(slots, lunch=False)
    end = days[-1][-1][0]
    hands_on = sum(slot.exercises for slot in slots)
    if len(days) > 1 or end > HALF_DAY_END:
        raise CourseError(
            f"the half-day plan does not fit a morning: it ends at {_clock(end)} "
            f"(by {_clock(HALF_DAY_END)}, breaks and setup included)"
        )
    if hands_on < HANDS_ON_SHARE * (end - DAY_START):
        raise CourseError(
            f"the half-day plan gives the exercises {hands_on} of {end - DAY_START} minutes: "
            f"less than {HANDS_ON_SHARE:.0%} of the morning"
        )
    left = [item for item in load_course().lessons if item.meta.half_day is None]
    table = _table(days[0])
    table += (
        f"\n\n{(end - DAY_START) // 60} h {(end - DAY_START) % 60:02d} min in all, breaks "
        "and setup included: "
        f"{hands_on} minutes of exercises, {hands_on / (end - DAY_START):.0%} of the morning."
    )
    if left:
        table += (
            "\n\nLeft for self-study after the workshop: "
            + ", ".join(_lesson_link(item) for item in left)
            + "."
        )
    return table


def _every_lesson_days() -> list[list[tuple[int, Slot]]]:
    lessons = list(load_course().lessons)
    return _plan_days([SETUP_SLOT, *(_lesson_slot(item) for item in lessons)], lunch=True)


def full_day() -> str:
    """Every lesson with its full minutes from 9:00, with breaks and lunch; what does not
    fit before 17:30 moves to the next day, so nobody is promised a nine-hour day."""
    days = _every_lesson_days()
    if len(days) == 1:
        return _table(days[0])
    return "\n\n".join(f"**Day {n}**\n\n{_table(day)}" for n, day in enumerate(days, 1))


_COUNTS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


def full_length() -> str:
    """How long every lesson takes, as the schedule lays it out ("two days and a morning
    of 50 minutes"), so the guide never names a length the schedule does not have."""
    days = _every_lesson_days()
    end = days[-1][-1][0]
    whole = len(days) if end > LUNCH_FROM else len(days) - 1
    count = f"{_COUNTS.get(whole, str(whole))} day{'s' if whole > 1 else ''}"
    if whole == len(days):
        return count
    morning = f"a morning ({_clock(DAY_START)} to {_clock(end)})"
    return f"{count} and {morning}" if whole else morning


def teaching_notes() -> str:
    parts = []
    for item in load_course().lessons:
        notes = item.meta.instructor_notes
        parts.append(f"### {item.label}\n")
        parts += [f"- {note}" for note in notes] or ["- (no notes yet)"]
        parts.append("")
    return "\n".join(parts)


def _number(value: Any, digits: int = 1) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def load_results(folder: Path | None = None) -> list[dict[str, Any]]:
    """Every results file in ``folder`` (default ``results/machines``), its lessons named
    by slug however the file names them (see :func:`jitlab.course.results.read_results`)."""
    from jitlab.course.results import read_results

    folder = folder or _results_dir() / "machines"
    course = load_course()
    return [read_results(path, course) for path in sorted(folder.glob("*.json"))]


def run_name(run: dict[str, Any]) -> str:
    """A results file's short name: device (or CPU), core count, and JAX release."""
    env = run["environment"]
    platform, kind = str(env.get("platform", "")), str(env.get("device_kind", ""))
    if platform == "cpu":
        model = str(env.get("cpu_model", "")).replace("(R)", "").replace("(TM)", "")
        device = "CPU" if model in ("", "unknown") else f"CPU {model}"  # gVisor hides it
        device = " ".join(device.replace("CPU @", "@").split()[:5])
    else:  # "TPU v5 lite", not "TPU TPU v5 lite"
        device = kind if platform.lower() in kind.lower() else f"{platform.upper()} {kind}"
    return f"{device} · {env.get('cpu_cores', '?')} cores · jax {env.get('jax', '?')}"


def _measure(row: dict[str, Any]) -> str:
    parts = []
    if row.get("compiles") is not None:
        parts.append(f"{row['compiles']} compile" + ("" if row["compiles"] == 1 else "s"))
    if row.get("first_ms") is not None:
        parts.append(f"first {_number(row['first_ms'])} ms")
    if row.get("steady_us") is not None:
        parts.append(f"cached {_number(row['steady_us'])} µs")
    if row.get("total_s") is not None:
        total = float(row["total_s"])  # a cached call is microseconds: not "0.00 s"
        parts.append(f"{_number(total, 2)} s" if total >= 0.1 else f"{total * 1e3:.3g} ms")
    if row.get("speedup") is not None:
        parts.append(f"ratio {_number(row['speedup'])}")
    parts += [f"{key.replace('_', ' ')} {_number(value)}" for key, value in row.items()
              if key not in _RECORD_FIELDS and value is not None]  # fmt: skip
    return " · ".join(parts) or "–"


# A record's own fields; any other (a matrix's size, an argument's bytes and layout) is
# shown after them by name.
_RECORD_FIELDS = {"lesson", "experiment", "compiles", "first_ms", "steady_us", "total_s", "speedup"}


def _experiments(runs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each lesson's experiments, in course order, each named once over all runs."""
    found: dict[str, list[str]] = {}
    for run in runs:
        for row in run["records"]:
            names = found.setdefault(row["lesson"], [])
            if row["experiment"] not in names:
                names.append(row["experiment"])
    order = [item.slug for item in load_course().lessons]
    return {slug: found[slug] for slug in order if slug in found}


def _record(run: dict[str, Any], lesson: str, experiment: str) -> dict[str, Any] | None:
    return next(
        (r for r in run["records"] if r["lesson"] == lesson and r["experiment"] == experiment),
        None,
    )


def results(folder: Path | None = None) -> str:
    """The "Measured results" page: one table per lesson, one row per experiment with a
    column per run (machine and JAX release), and a chart of the ratios, runs side by side."""
    runs = load_results(folder)
    if not runs:
        return (
            "*No results yet: run `make bench` (`jitlab dev bench`) and commit "
            "`results/machines/`.*"
        )
    from jitlab.course.results import changed_since

    course = load_course()
    names = [run_name(run) for run in runs]
    parts = [
        "## Machines and releases\n",
        "| run | platform | device | CPU | cores | Python | jax | measured | runner "
        "| cells failed | lessons changed since |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, run in zip(names, runs, strict=True):
        env = run["environment"]
        failed = sum(len(cells) for cells in run.get("failed_cells", {}).values())
        changed = changed_since(run, course)
        since = _lessons_in_short(changed, course)
        runner = {"plain": "plain Python", "kernel": "nbval"}.get(run.get("runner", ""), "nbval")
        parts.append(
            f"| **{name}** | {env.get('platform')} | {env.get('device_kind')} | "
            f"{env.get('cpu_model')} | {env.get('cpu_cores')} | {env.get('python')} | "
            f"{env.get('jax')} | {str(run.get('generated', ''))[:10]} | {runner} | {failed} "
            f"| {since} |"
        )
    parts += ["", *_skipped_lessons(names, runs), "", WHY_RATIOS_DIFFER]
    parts += _outcome_table(names, runs)
    parts.append("\n## Experiments\n")
    parts.append(
        "One row per experiment, one column per run. *ratio* is the fix against the "
        "problem, or the first call against a cached call. Timings differ between "
        "machines; compilation counts should not. A dash: that run did not have the "
        "experiment (an older lesson, or another release).\n"
    )
    for lesson, experiments in _experiments(runs).items():
        parts.append(f"### {course.lesson(lesson).label}\n")
        parts.append("| experiment | " + " | ".join(names) + " |")
        parts.append("|---" * (len(names) + 1) + "|")
        for experiment in experiments:
            cells = [
                _measure(row) if (row := _record(run, lesson, experiment)) else "–" for run in runs
            ]
            parts.append(f"| {experiment} | " + " | ".join(cells) + " |")
        parts += ["", ratio_chart(runs, lesson, experiments), ""]
    return "\n".join(parts)


WHY_RATIOS_DIFFER = """\
### Why a ratio differs between machines

A ratio compares two timings taken on one machine, so it moves with what the machine
spends on each side. *Runner*: where no Jupyter kernel can start (the TPU machine refuses
every socket), `jitlab dev bench` runs the lessons as plain Python, cell by cell.

- **On an accelerator every call launches a program on the chip** and waits for its
  result: hundreds of microseconds that both sides of a ratio pay. Ratios between two
  cached calls (fast path against Python path, `nnx.jit` against its fixes) shrink there,
  while the difference in microseconds stays about the same.
- **Compiling for the chip takes longer, running on it far less**, so first call against
  cached call, and a recompiling loop against its fix, grow or shrink with the model's
  size: the transformer steps of lesson 10 show both.
- **A CPU with 2 cores that other work shares** adds noise to every timing; a ratio that
  misses its margin once is run again before it is reported (see the releases page).
- **Two runs of one file can come from different lesson versions**: the machines table
  names the lessons that changed since each file was recorded.
"""


def _lessons_in_short(changed: list[str] | None, course: Any) -> str:
    """A results file's changed lessons for one table cell: by number, "all", "none", or
    "not kept" (a file recorded before digests were kept)."""
    if changed is None:
        return "not kept"
    if not changed:
        return "none"
    if len(changed) == len(course.lessons):
        return "all"
    return ", ".join(course.lesson(slug).number for slug in changed)


def _skipped_lessons(names: list[str], runs: list[dict[str, Any]]) -> list[str]:
    """The lessons a run skipped, and why (lesson 14 where sockets are refused)."""
    lines = []
    for name, run in zip(names, runs, strict=True):
        for slug, why in (run.get("skipped_lessons") or {}).items():
            lines.append(f"- **{name}** skipped `{slug}`: {why}")
    return lines


def _outcome_table(names: list[str], runs: list[dict[str, Any]]) -> list[str]:
    """Each lesson's cells that held, per run: the TPU beside the CPUs, lesson by lesson."""
    course = load_course()
    lines = [
        "\n## Lessons, cell by cell\n",
        "How many of each lesson's code cells held on each run (their asserts passed). "
        "*timing*: a ratio that missed its margin twice; other failures are behaviour. "
        "Runs that did not keep their cells say only how many failed.\n",
        "| lesson | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for item in course.lessons:
        cells = []
        for run in runs:
            rows = (run.get("cells") or {}).get(item.slug)
            if item.slug in (run.get("skipped_lessons") or {}):
                cells.append("skipped")
            elif rows is not None:
                failed = [r for r in rows if r["status"] != "passed"]
                timing = sum(bool(r.get("timing")) for r in failed)
                text = f"{len(rows) - len(failed)} of {len(rows)}"
                if failed:
                    what = f"{timing} timing, {len(failed) - timing} behaviour" if timing else ""
                    text += f" ({what})" if what else ""
                cells.append(text)
            elif item.slug in run.get("lessons", []):
                failed = len((run.get("failed_cells") or {}).get(item.slug, []))
                cells.append(f"{failed} failed" if failed else "all held")
            else:
                cells.append("–")
        lines.append(f"| {item.label} | " + " | ".join(cells) + " |")
    return lines


CHART_WIDTH_IN, CHART_FONT_PT = 4.6, 10
"""The results charts' size: under 5 inches wide with every text at 10 pt (no smaller
superscripts: plain tick labels), so the site's hooks can let a chart shrink into a
phone's column (about 350 px) with its text still 9 px high or more."""


def ratio_chart(runs: list[dict[str, Any]], lesson: str, experiments: list[str]) -> str:
    """One lesson's ratios (fix against problem, first against cached call), a bar per
    run for each experiment, each bar labelled with its value, as an inline SVG: the
    page needs no image file and no script."""
    import io
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    def ratio(run: dict[str, Any], experiment: str) -> float:
        return float((_record(run, lesson, experiment) or {}).get("speedup") or 0)

    labels = [e for e in experiments if any(ratio(run, e) for run in runs)]
    if not labels:
        return ""
    style = {"font.size": CHART_FONT_PT, "svg.fonttype": "none", "svg.hashsalt": lesson}
    with plt.rc_context(style):
        size = (CHART_WIDTH_IN, 0.45 * len(labels) * len(runs) + 1.5)
        fig, ax = plt.subplots(figsize=size, layout="constrained")
        height = 0.8 / len(runs)
        for index, run in enumerate(runs):
            bars = ax.barh(
                [i + index * height for i in range(len(labels))],
                [ratio(run, label) for label in labels],
                height=height,
                label=textwrap.fill(run_name(run), 44),
            )
            ax.bar_label(bars, labels=[_ratio_text(ratio(run, e)) for e in labels], padding=2)
        ax.set_yticks(
            [i + 0.4 - height / 2 for i in range(len(labels))],
            [textwrap.fill(label, 22) for label in labels],
        )
        ax.invert_yaxis()
        ax.set_xscale("log")
        values = [ratio(run, e) for run in runs for e in labels if ratio(run, e)]
        # Bars start at a ratio of 1 (no change), and leave room for the largest's label.
        ax.set_xlim(1.0 if min(values) >= 1 else min(values) / 2, max(values) * 6)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("ratio (log scale)")
        fig.legend(loc="outside lower center", frameon=False)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
        plt.close(fig)
    svg = buffer.getvalue()
    return '<div class="jitlab-chart">' + svg[svg.index("<svg") :] + "</div>"


def _ratio_text(value: float) -> str:
    return "" if not value else f"{value:,.0f}×" if value >= 100 else f"{value:.2g}×"


def releases() -> str:
    from jitlab.site.releases import releases_page

    return releases_page(_results_dir() / "releases")


def pinned_jax_release() -> str:
    """The release the lessons teach, read from the lock (never typed in a page)."""
    from jitlab.course.boxes import pinned_jax

    return pinned_jax(load_course().root) or "(unpinned)"


# The findings an instructor shows a room on an accelerator: (what, experiment, field, unit)
ACCELERATOR_FINDINGS = (
    ("first call of a tiny jitted function", "first call", "total_s", "ms"),
    ("a cached call of it", "cached call", "total_s", "us"),
    ("first call against cached call", "first call vs cached call", "speedup", "x"),
    ("fast path against Python path", "fast path vs Python path", "speedup", "x"),
    ("asynchronous dispatch: finished / returned", "asynchronous dispatch", "speedup", "x"),
    ("... with square matrices of side", "asynchronous dispatch", "size", ""),
    (
        "jax.grad(jax.jit(f)) against jax.jit(jax.grad(f))",
        "jax.grad(jax.jit(f)) vs jax.jit(jax.grad(f)), warm call",
        "speedup",
        "x",
    ),
    ("nnx.jit, one cached step", "per-call overhead: nnx.jit", "steady_us", "us"),
    ("nnx.jit_partial, one cached step", "per-call overhead: nnx.jit_partial", "steady_us", "us"),
    *(
        (f"transformer step, {n} layer{'s' if n > 1 else ''}: {what}", experiment, field, unit)
        for n in (1, 2, 4)
        for experiment in [f"transformer step, {n} layers: compile vs run"]
        for what, field, unit in (
            ("compile", "first_ms", "ms"),
            ("run", "steady_us", "us"),
            ("runs one compile costs", "speedup", "x"),
            ("written by the persistent cache", "written", ""),
        )
    ),
    (
        "bytes of an f32[9,129] argument (4,644 of data)",
        "bytes of a float32 (9, 129) argument",
        "argument_bytes",
        "",
    ),  # fmt: skip
    ("capstone: the naive loop", "naive", "total_s", "s"),
    ("capstone: naive against all fixes", "training loop, naive vs all fixes", "speedup", "x"),
)


_IN_SECONDS = {"first_ms": 1e-3, "steady_us": 1e-6, "total_s": 1.0}  # a record's time fields
_UNITS = {"s": (1.0, " s"), "ms": (1e3, " ms"), "us": (1e6, " µs"), "x": (1.0, "×"), "": (1.0, "")}


def _finding(value: Any, field: str, unit: str) -> str:
    """A record's value in the finding's unit: times (kept in s, ms or µs) converted."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value).lower()
    factor, suffix = _UNITS[unit]
    scaled = value * _IN_SECONDS.get(field, 1.0) * factor
    text = f"{scaled:,.0f}" if abs(scaled) >= 100 else f"{scaled:,.3g}"
    return text + suffix


def accelerator_findings(folder: Path | None = None) -> str:
    """Each accelerator's results beside the CPU runs of its JAX release (its own
    machine's CPU among them), for the findings worth showing a room: read from the
    committed results files, never typed into a page."""
    runs = load_results(folder)
    accelerators = [r for r in runs if r["environment"].get("platform") != "cpu"]
    if not accelerators:
        return "*No accelerator's results yet: run `make bench` on one and commit the file.*"
    jax_release = accelerators[0]["environment"].get("jax")
    columns = accelerators + [
        r
        for r in runs
        if r["environment"].get("platform") == "cpu" and r["environment"].get("jax") == jax_release
    ]
    lines = [
        "| finding | " + " | ".join(run_name(r) for r in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for what, experiment, field, unit in ACCELERATOR_FINDINGS:
        cells = []
        for run in columns:
            row = next((r for r in run["records"] if r["experiment"] == experiment), {})
            cells.append(_finding(row.get(field), field, unit))
        lines.append(f"| {what} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def solutions() -> str:
    """The list of solution pages: the navigation leaves them out, so nobody lands on one
    by accident."""
    return "\n".join(f"- [{e.label}](solutions/{e.stem}.py)" for e in load_course().exercises)


RENDERERS: dict[str, Callable[[], str]] = {
    "accelerator-findings": accelerator_findings,
    "solutions": solutions,
    "pinned-jax": pinned_jax_release,
    "releases": releases,
    "learning-path": learning_path,
    "half-day": half_day,
    "full-day": full_day,
    "full-length": full_length,
    "teaching-notes": teaching_notes,
    "results": results,
}


_MARKDOWN_SPECIALS = "\\`*_{}[]()#+-.!|"


def _inline_literal(text: str) -> str:
    """``text`` as HTML that Markdown leaves alone: escaped, with every character that
    Markdown reads (a ``[2]({})`` would become a link, a ``|`` a table column) written
    as a character reference."""
    return "".join(f"&#{ord(c)};" if c in _MARKDOWN_SPECIALS else html.escape(c) for c in text)


def quote(arguments: str) -> str:
    """``<!-- jitlab:quote LESSON TEXT -->``: the line of the lesson's executed output that
    contains TEXT, as inline code. The cheat sheet quotes JAX only this way, so a quote is
    always what the pinned JAX printed, and a change of wording fails the build. A line
    of several fields (``name: 2 trace(s), 987.6 ms ... | reason``, as the counters print
    it) is quoted by the field that holds TEXT alone: the reason, not one machine's time.
    The quote is an HTML ``<code>`` that Markdown leaves alone, so a table cell holds it
    whole (in backticks, a table shows the backslash of an escaped bar)."""
    slug, _, wanted = arguments.strip().partition(" ")
    wanted = wanted.strip().strip('"')
    from jitlab.notebooks.pipeline import executed_dir

    course = load_course()
    lesson = course.lesson(slug)
    notebook = json.loads(
        (executed_dir(course) / "lessons" / f"{lesson.stem}.ipynb").read_text("utf-8")
    )
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            for line in ("".join(text) if isinstance(text, list) else text).splitlines():
                if wanted in line:
                    field = next(part for part in line.split(" | ") if wanted in part)
                    shown = " ".join(field.split("https://")[0].strip().lstrip("*").split())
                    return f"<code>{_inline_literal(shown)}</code>"
    raise ValueError(f"cheat sheet: no output line of lesson {slug!r} contains {wanted!r}")


RENDERERS_WITH_ARGUMENTS: dict[str, Callable[[str], str]] = {"quote": quote}


def render(name: str, arguments: str = "") -> str:
    if name in RENDERERS_WITH_ARGUMENTS:
        return RENDERERS_WITH_ARGUMENTS[name](arguments)
    if name not in RENDERERS:
        known = sorted([*RENDERERS, *RENDERERS_WITH_ARGUMENTS])
        raise KeyError(f"unknown placeholder jitlab:{name}; known: {known}")
    return RENDERERS[name]()
