"""Markdown generated from the course's own data, for the site's placeholders."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jitlab.course.manifest import Lesson, load_course

def _results_dir() -> Path:
    return load_course().root / "results"


def _lesson_link(item: Lesson, prefix: str = "") -> str:
    return f"[{item.label}]({prefix}lessons/{item.stem}.ipynb)"


def learning_path() -> str:
    rows = ["| lesson | the fix it teaches | minutes |", "|---|---|---|"]
    lessons = load_course().lessons
    for item in lessons:
        minutes = item.meta.minutes
        rows.append(
            f"| {_lesson_link(item)} | {item.meta.fix} | "
            f"{minutes.teaching} + {minutes.exercises} |"
        )
    total = sum(i.meta.minutes.teaching + i.meta.minutes.exercises for i in lessons)
    rows.append(f"| **all lessons** | | **{total}** |")
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


SETUP_SLOT = Slot("Welcome, and `jitlab preflight` on every laptop", 15, 0)
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
            days[-1].append((last_clock + last.teaching + last.exercises, Slot("*end*", 0, is_pause=True)))
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


def _schedule(slots: list[Slot], *, lunch: bool = True) -> str:
    days = _plan_days(slots, lunch=lunch)
    if len(days) == 1:
        return _table(days[0])
    return "\n\n".join(f"**Day {n}**\n\n{_table(day)}" for n, day in enumerate(days, 1))


def _lesson_slot(item: Lesson, *, half: bool = False) -> Slot:
    if half and item.meta.half_day is not None:
        minutes = item.meta.half_day.minutes
        return Slot(_lesson_link(item), minutes.teaching, minutes.exercises, item.meta.half_day.skip)
    return Slot(_lesson_link(item), item.meta.minutes.teaching, item.meta.minutes.exercises)


def half_day() -> str:
    """Setup, then the lessons whose front matter has a ``half_day`` plan (shorter minutes,
    sections to skip), in course order: a path that reaches the capstone in a morning."""
    chosen = [item for item in load_course().lessons if item.meta.half_day is not None]
    if not chosen:
        return "*No lesson has a half-day plan yet (`half_day:` in its front matter).*"
    slots = [SETUP_SLOT, *(_lesson_slot(item, half=True) for item in chosen)]
    left = [item for item in load_course().lessons if item.meta.half_day is None]
    table = _schedule(slots, lunch=False)
    if left:
        table += "\n\nLeft for self-study after the workshop: " + ", ".join(
            _lesson_link(item) for item in left
        ) + "."
    return table


def full_day() -> str:
    """Every lesson with its full minutes from 9:00, with breaks and lunch; what does not
    fit before 17:30 moves to the next day, so nobody is promised a nine-hour day."""
    lessons = list(load_course().lessons)
    return _schedule([SETUP_SLOT, *(_lesson_slot(item) for item in lessons)])


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
    folder = folder or _results_dir() / "machines"
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]


def run_name(run: dict[str, Any]) -> str:
    """A results file's short name: device (or CPU), core count, and JAX release."""
    env = run["environment"]
    if env.get("platform") == "cpu":
        device = f"CPU {str(env.get('cpu_model', '')).replace('(R)', '').replace('(TM)', '')}"
        device = " ".join(device.replace("CPU @", "@").split()[:5])
    else:
        device = f"{str(env.get('platform', '')).upper()} {env.get('device_kind', '')}"
    return f"{device} · {env.get('cpu_cores', '?')} cores · jax {env.get('jax', '?')}"


def _lesson_label(key: str) -> str:
    course = load_course()
    found = course.find_lesson(str(key))
    return found.label if found else str(key)


def _measure(row: dict[str, Any]) -> str:
    parts = []
    if row.get("compiles") is not None:
        parts.append(f"{row['compiles']} compiles")
    if row.get("first_ms") is not None:
        parts.append(f"first {_number(row['first_ms'])} ms")
    if row.get("steady_us") is not None:
        parts.append(f"cached {_number(row['steady_us'])} µs")
    if row.get("total_s") is not None:
        parts.append(f"{_number(row['total_s'], 2)} s")
    if row.get("speedup") is not None:
        parts.append(f"ratio {_number(row['speedup'])}")
    return " · ".join(parts) or "–"


def results() -> str:
    runs = load_results()
    if not runs:
        return "*No results yet: run `jitlab dev bench` and commit `results/machines/`.*"
    names = [run_name(run) for run in runs]
    parts = [
        "## Machines and releases\n",
        "| run | platform | device | CPU | cores | Python | jax | measured | cells failed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, run in zip(names, runs, strict=True):
        env = run["environment"]
        failed = sum(len(cells) for cells in run.get("failed_cells", {}).values())
        parts.append(
            f"| **{name}** | {env.get('platform')} | {env.get('device_kind')} | "
            f"{env.get('cpu_model')} | {env.get('cpu_cores')} | {env.get('python')} | "
            f"{env.get('jax')} | {str(run.get('generated', ''))[:10]} | {failed} |"
        )
    experiments: dict[str, list[str]] = {}
    for run in runs:
        for row in run["records"]:
            names_ = experiments.setdefault(str(row["lesson"]), [])
            if row["experiment"] not in names_:
                names_.append(row["experiment"])
    parts.append("\n## Experiments\n")
    parts.append(
        "One column per run. *ratio* is the fix against the problem, or the first call "
        "against a cached call. Timings differ between machines; compilation counts "
        "should not.\n"
    )
    for lesson, rows in experiments.items():
        parts.append(f"### {_lesson_label(lesson)}\n")
        parts.append("| experiment | " + " | ".join(names) + " |")
        parts.append("|---" * (len(names) + 1) + "|")
        for experiment in rows:
            cells = []
            for run in runs:
                match = [
                    r
                    for r in run["records"]
                    if str(r["lesson"]) == lesson and r["experiment"] == experiment
                ]
                cells.append(_measure(match[0]) if match else "–")
            parts.append(f"| {experiment} | " + " | ".join(cells) + " |")
        parts.append("")
    parts += ["## Ratios, side by side\n", ratio_chart(runs)]
    return "\n".join(parts)


def ratio_chart(machines: list[dict[str, Any]]) -> str:
    """Every recorded ratio (fix against problem, first against cached call) per machine,
    as an inline SVG: the page needs no image file and no script."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels: list[str] = []
    for machine in machines:
        for row in machine["records"]:
            label = f"{row['lesson']} {row['experiment']}"
            if row.get("speedup") and label not in labels:
                labels.append(label)
    if not labels:
        return ""
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(labels) * len(machines) + 1.2))
    height = 0.8 / len(machines)
    for index, machine in enumerate(machines):
        ratios = {
            f"{r['lesson']} {r['experiment']}": r["speedup"]
            for r in machine["records"]
            if r.get("speedup")
        }
        ax.barh(
            [i + index * height for i in range(len(labels))],
            [ratios.get(label, 0) for label in labels],
            height=height,
            label=run_name(machine),
        )
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(labels))], labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ratio (log scale)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    svg = buffer.getvalue()
    return '<div class="jitlab-chart">' + svg[svg.index("<svg") :] + "</div>"


def releases() -> str:
    from jitlab.site.releases import releases_page

    return releases_page(_results_dir() / "releases")


def pinned_jax_release() -> str:
    """The release the lessons teach, read from the lock (never typed in a page)."""
    from jitlab.course.boxes import pinned_jax

    return pinned_jax(load_course().root) or "(unpinned)"


RENDERERS: dict[str, Callable[[], str]] = {
    "pinned-jax": pinned_jax_release,
    "releases": releases,
    "learning-path": learning_path,
    "half-day": half_day,
    "full-day": full_day,
    "teaching-notes": teaching_notes,
    "results": results,
}


def quote(arguments: str) -> str:
    """``<!-- jitlab:quote LESSON TEXT -->``: the line of the lesson's executed output that
    contains TEXT, as inline code. The cheat sheet quotes JAX only this way, so a quote is
    always what the pinned JAX printed, and a change of wording fails the build."""
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
                    shown = " ".join(line.split("https://")[0].strip().lstrip("*").split())
                    return "`" + shown.replace("`", "'").replace("|", "\\|") + "`"
    raise ValueError(f"cheat sheet: no output line of lesson {slug!r} contains {wanted!r}")


RENDERERS_WITH_ARGUMENTS: dict[str, Callable[[str], str]] = {"quote": quote}


def render(name: str, arguments: str = "") -> str:
    if name in RENDERERS_WITH_ARGUMENTS:
        return RENDERERS_WITH_ARGUMENTS[name](arguments)
    if name not in RENDERERS:
        known = sorted([*RENDERERS, *RENDERERS_WITH_ARGUMENTS])
        raise KeyError(f"unknown placeholder jitlab:{name}; known: {known}")
    return RENDERERS[name]()
