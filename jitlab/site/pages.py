"""Markdown generated from the course's own data, for the site's placeholders."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jitlab.course.manifest import Lesson, load_course

HALF_DAY_MINUTES = 210  # 3.5 hours of teaching and exercises, breaks excluded


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


def _schedule(items: list[Lesson], start: int = 9 * 60) -> str:
    rows = ["| start | lesson | teaching | exercises |", "|---|---|---|---|"]
    now, since_break = start, 0
    for item in items:
        block = item.meta.minutes.teaching + item.meta.minutes.exercises
        if since_break and since_break + block > 90:
            rows.append(f"| {_clock(now)} | *break* | 15 | |")
            now, since_break = now + 15, 0
        rows.append(
            f"| {_clock(now)} | {_lesson_link(item)} | {item.meta.minutes.teaching} | "
            f"{item.meta.minutes.exercises} |"
        )
        now += block
        since_break += block
    rows.append(f"| {_clock(now)} | *end* | | |")
    return "\n".join(rows)


def half_day() -> str:
    chosen, used = [], 0
    for item in load_course().lessons:
        block = item.meta.minutes.teaching + item.meta.minutes.exercises
        if used + block > HALF_DAY_MINUTES:
            break
        chosen.append(item)
        used += block
    return _schedule(chosen)


def full_day() -> str:
    return _schedule(list(load_course().lessons))


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


def results() -> str:
    machines = load_results()
    if not machines:
        return "*No results yet: run `jitlab bench` and commit `results/`.*"
    parts = [
        "## Machines\n",
        "| | " + " | ".join(f"machine {i + 1}" for i in range(len(machines))) + " |",
    ]
    parts.append("|---" * (len(machines) + 1) + "|")
    for key in machines[0]["environment"]:
        values = " | ".join(str(m["environment"].get(key, "")) for m in machines)
        parts.append(f"| {key} | {values} |")
    experiments: list[tuple[str, str]] = []
    for machine in machines:
        for row in machine["records"]:
            key = (row["lesson"], row["experiment"])
            if key not in experiments:
                experiments.append(key)
    columns = [
        ("compiles", "compilations", 0),
        ("first_ms", "first call (ms)", 1),
        ("steady_us", "cached call (µs)", 1),
        ("total_s", "total (s)", 2),
        ("speedup", "ratio", 1),
    ]
    parts.append("\n## Experiments\n")
    parts.append(
        "Each cell shows one machine's number; machines are in the order of the table above. "
        "*ratio* is the fix against the problem (or first call against cached call).\n"
    )
    header = "| lesson | experiment | " + " | ".join(title for _, title, _ in columns) + " |"
    parts += [header, "|---" * (len(columns) + 2) + "|"]
    for lesson_number, experiment in experiments:
        cells = []
        for field, _, digits in columns:
            per_machine = []
            for machine in machines:
                match = [
                    r
                    for r in machine["records"]
                    if r["lesson"] == lesson_number and r["experiment"] == experiment
                ]
                per_machine.append(_number(match[0].get(field), digits) if match else "")
            cells.append(" / ".join(v or "–" for v in per_machine) if any(per_machine) else "")
        parts.append(f"| {lesson_number} | {experiment} | " + " | ".join(cells) + " |")
    parts += ["\n## Ratios, side by side\n", ratio_chart(machines)]
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
        env = machine["environment"]
        ax.barh(
            [i + index * height for i in range(len(labels))],
            [ratios.get(label, 0) for label in labels],
            height=height,
            label=f"{env['platform']} · {env['cpu_model'][:32]} · {env['cpu_cores']} cores",
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
    from jitlab.maintainer.matrix import releases_page

    return releases_page(_results_dir() / "releases")


RENDERERS: dict[str, Callable[[], str]] = {
    "releases": releases,
    "learning-path": learning_path,
    "half-day": half_day,
    "full-day": full_day,
    "teaching-notes": teaching_notes,
    "results": results,
}


def render(name: str) -> str:
    if name not in RENDERERS:
        raise KeyError(f"unknown placeholder jitlab:{name}; known: {sorted(RENDERERS)}")
    return RENDERERS[name]()
