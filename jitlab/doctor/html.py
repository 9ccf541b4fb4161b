"""The doctor's report as one HTML file to attach to a bug report or a CI run:
``jitlab doctor --html report.html -- python train.py``.

It is drawn from the JSON report (:func:`jitlab.doctor.report.to_dict`), so a report
read back from a file renders the same. Everything is inline (styles, a few lines of
script, the timelines as SVG): the file makes no request and opens from ``file://``.

- the table of functions, sortable by any column (click a heading);
- one section per function: its causes with the lesson for each, the cache-key timeline
  drawn as a graphic (one column per compilation, a coloured cell where a part of the key
  changed; a click opens that miss), and each miss folded: call site, source line, what
  differed, and JAX's own explanation folded inside it as a second opinion.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from jitlab.doctor import classify
from jitlab.instruments import signature as sig

_COLUMNS = (
    ("function", "text"),
    ("defined at", "text"),
    ("calls", "num"),
    ("traces", "num"),
    ("compiles", "num"),
    ("trace s", "num"),
    ("lower s", "num"),
    ("compile s", "num"),
    ("total s", "num"),
    ("causes", "text"),
)

# One colour per row of the timeline (the part of jit's cache key that changed).
_ROW_COLOURS = {
    "function": "#b5179e",
    "pytree": "#f77f00",
    "array types": "#d62828",
    "static args": "#6a4c93",
    "shardings": "#1d7874",
    "context": "#3a86ff",
}

_STYLE = """
:root { color-scheme: light; --ink: #1b1b1f; --muted: #5c5c66; --line: #d9d9e0; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: var(--ink); background: #fbfbfd; }
main { max-width: 1180px; margin: 0 auto; padding: 16px; }
h1 { font-size: 1.5rem; margin: 0 0 4px; }
h2 { font-size: 1.2rem; margin: 0 0 6px; overflow-wrap: anywhere; }
h3 { font-size: 1rem; margin: 14px 0 4px; }
code, pre { font: 13px/1.45 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
pre { background: #f0f0f4; padding: 6px 8px; border-radius: 4px; margin: 4px 0;
  white-space: pre-wrap; overflow-wrap: anywhere; }
.command, code { overflow-wrap: anywhere; }
code.path { overflow-wrap: normal; word-break: normal; }
p, li, summary { overflow-wrap: anywhere; }
.muted { color: var(--muted); }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 14px; }
#functions { width: 100%; }
#functions td:nth-child(2) { max-width: 22em; }
#functions td:last-child { min-width: 14em; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left;
  vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
#functions th { cursor: pointer; user-select: none; white-space: nowrap; background: #eef; }
#functions th[aria-sort="ascending"]::after { content: " \\25B2"; }
#functions th[aria-sort="descending"]::after { content: " \\25BC"; }
section.function { background: #fff; border: 1px solid var(--line); border-radius: 6px;
  padding: 12px; margin: 16px 0; }
details { margin: 6px 0; }
details.miss { border-left: 3px solid #d62828; padding-left: 8px; }
details.miss > summary { cursor: pointer; overflow-wrap: anywhere; }
details.jax > summary { cursor: pointer; color: var(--muted); }
.bad { color: #b00020; font-weight: 600; }
.ok { color: #1d7a35; }
svg.timeline a:hover rect + rect, svg.timeline a:focus rect + rect {
  stroke: #000; stroke-width: 1; }
.legend span { display: inline-block; margin-right: 10px; white-space: nowrap; }
.legend i { display: inline-block; width: 11px; height: 11px; margin-right: 3px;
  vertical-align: -1px; border-radius: 2px; }
@media (max-width: 600px) {
  main { padding: 8px; }
  body { font-size: 14px; }
  th, td { padding: 3px 5px; }
}
"""

# Sorting the table, and opening a miss when a link (a timeline column) points to it.
_SCRIPT = """
(function () {
  var table = document.getElementById("functions");
  if (table) {
    table.querySelectorAll("th").forEach(function (th, column) {
      th.addEventListener("click", function () {
        var descending = th.getAttribute("aria-sort") !== "descending";
        table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", descending ? "descending" : "ascending");
        var numeric = th.dataset.type === "num";
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[column].dataset.value, y = b.cells[column].dataset.value;
          var order = numeric ? parseFloat(x) - parseFloat(y) : x.localeCompare(y);
          return descending ? -order : order;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  }
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id && document.getElementById(id);
    for (var node = target; node; node = node.parentElement) {
      if (node.tagName === "DETAILS") { node.open = true; }
    }
    if (target) { target.scrollIntoView({block: "start"}); }
  }
  window.addEventListener("hashchange", openTarget);
  openTarget();
})();
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}es" if word.endswith("s") else f"{n} {word}s"


def _cause_text(f: dict[str, Any]) -> str:
    """Each cause with its count and the lesson its fix links (the detail's own)."""
    shown = []
    for c, n in f["causes"].items():
        refs = _fix(f, c)["lessons"]
        lesson = refs[0].get("short", classify.CAUSES[c].lesson) if refs else ""
        shown.append(f"{_heading(f, c)} {n} ({lesson or classify.CAUSES[c].lesson})")
    return ", ".join(shown)


def _heading(f: dict[str, Any], cause_id: str) -> str:
    """The cause's heading as the text report writes it for this function's misses."""
    misses = [m for m in f.get("misses", []) if cause_id in m.get("causes", [])]
    return classify.heading_for(cause_id, [d for m in misses for d in _differences(m)])


def _differences(miss: dict[str, Any]) -> list[sig.Difference]:
    return [sig.Difference(**d) for d in miss.get("differences", [])]


def _function_id(i: int) -> str:
    return f"f{i}"


def _miss_id(i: int, m: dict[str, Any], k: int = 0) -> str:
    """A timeline column's miss is ``f1-miss-N`` (N: its column, the compilation number);
    a trace inside another jit, a retrace, a lowering are named by kind and by ``k``, the
    entry's place among the function's."""
    if m.get("column"):
        return f"f{i}-miss-{m['column']}"
    kind = "inside" if m.get("inside_jit") else m["kind"]
    return f"f{i}-{kind}-{k}"


def _miss_title(m: dict[str, Any]) -> str:
    """What the entry is, in the words of the text report: a compilation is numbered as
    in the table and the timeline; a trace that compiled nothing is not called one."""
    if m.get("inside_jit"):
        return f"trace {m['number']} inside another jit"
    return {
        "retrace": f"retrace {m['number']} (found the compiled program; not a compilation)",
        "lowered": "lowered ahead of time, not compiled",
        "transform": "compiled for jax.grad/vmap of it (not a recompilation)",
    }.get(m["kind"], f"compilation {m['number']}")


def _columns(misses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The timeline's columns, the same as the text report's (``FunctionRecord.columns``):
    the compilations, ahead of time ones included, or the traces of a function that only
    ever ran inside other jits."""
    return sorted((m for m in misses if m.get("column")), key=lambda m: m["column"])


def _table(functions: list[dict[str, Any]]) -> str:
    head = "".join(
        f'<th data-type="{kind}" class="{kind}" scope="col">{_e(name)}</th>'
        for name, kind in _COLUMNS
    )
    rows = []
    for i, f in enumerate(functions, 1):
        s = f["seconds"]
        causes = _cause_text(f) or (
            "no recompilation" if f["compiles"] <= 1 else "traced inside other jits"
        )
        cells = [
            (f["name"], f'<a href="#{_function_id(i)}">{_e(f["name"])}</a>', "text"),
            (f["defined_at"], _path(f["defined_at"]), "text"),
            (f["calls"], f["calls"], "num"),
            (f["traces"], f["traces"], "num"),
            (f["compiles"], f["compiles"], "num"),
            (s["trace"], f"{s['trace']:.3f}", "num"),
            (s["lower"], f"{s['lower']:.3f}", "num"),
            (s["compile"], f"{s['compile']:.3f}", "num"),
            (s["total"], f"{s['total']:.3f}", "num"),
            (causes, _e(causes), "text"),
        ]
        tds = "".join(
            f'<td class="{kind}" data-value="{_e(value)}">{shown}</td>'
            for value, shown, kind in cells
        )
        rows.append(f'<tr id="row-{i}">{tds}</tr>')
    return (
        f'<div class="scroll"><table id="functions"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _timeline(i: int, misses: list[dict[str, Any]]) -> str:
    """The cache-key timeline as SVG: one column per compilation, one row per part of the
    key; a column links to its miss."""
    columns = _columns(misses)
    if len(columns) < 2:
        return ""
    cell, gap, label = 16, 2, 96
    width = label + len(columns) * (cell + gap)
    height = 18 + len(classify.TIMELINE_ROWS) * (cell + gap)
    parts = [
        f'<svg class="timeline" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>cache-key timeline: {len(columns)} compilations</title>",
    ]
    for r, row in enumerate(classify.TIMELINE_ROWS):
        y = 18 + r * (cell + gap) + cell - 4
        parts.append(f'<text x="0" y="{y}" font-size="12" fill="#333">{_e(row)}</text>')
    for c, m in enumerate(columns):
        x = label + c * (cell + gap)
        if c == 0 or (c + 1) % 5 == 0:  # centred on its column: never over two
            parts.append(
                f'<text x="{x + cell / 2}" y="12" font-size="10" text-anchor="middle" '
                f'fill="#555">{m["column"]}</text>'
            )
        marks = classify.timeline_marks(_differences(m)) if m["kind"] == "miss" else {}
        unknown = m["kind"] == "miss" and not m.get("differences")
        what = {"first": "first", "aot": "compiled ahead of time"}.get(m["kind"]) or (
            ", ".join(m.get("causes", [])) or "nothing recorded changed"
        )
        parts.append(
            f'<a href="#{_miss_id(i, m)}"><title>{_e(_miss_title(m))}: '
            f"{_e(what)}</title>"
            # the whole column takes the click, gaps between its cells included
            f'<rect x="{x}" y="18" width="{cell}" height="{height - 18}" fill="#fff" '
            'fill-opacity="0"/>'
        )
        for r, row in enumerate(classify.TIMELINE_ROWS):
            y = 18 + r * (cell + gap)
            mark = marks.get(row)
            if m["kind"] == "first":
                fill, text = "#c9c9d3", ""
            elif m["kind"] == "aot":
                fill, text = "#c9c9d3", "a"
            elif unknown:
                fill, text = "#ffd166", "?"
            elif mark:
                fill, text = _ROW_COLOURS[row], mark
            else:
                fill, text = "#ececf1", ""
            parts.append(
                f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" rx="2" fill="{fill}"/>'
            )
            if text:
                parts.append(
                    f'<text x="{x + cell / 2}" y="{y + cell - 4}" font-size="11" '
                    f'text-anchor="middle" fill="#fff">{_e(text)}</text>'
                )
        parts.append("</a>")
    parts.append("</svg>")
    legend = "".join(
        f'<span><i style="background:{colour}"></i>{_e(row)}</span>'
        for row, colour in _ROW_COLOURS.items()
    )
    return (
        '<figure class="timeline"><div class="scroll">' + "".join(parts) + "</div>"
        '<figcaption class="legend muted">Cache-key timeline: one column per compilation '
        "(grey: the first; a: compiled ahead of time), a coloured cell where that part "
        "of jit's cache key changed "
        "(s shape, d dtype, w weak type, * several; t structure, k keyword; ? nothing the "
        f"doctor records changed). Click a column to open its miss.<br>{legend}</figcaption>"
        "</figure>"
    )


def _jax_verdict(miss: dict[str, Any]) -> str:
    named = ", ".join(classify.CAUSES[c].heading for c in miss.get("jax_causes", []))
    if miss.get("jax_agrees"):
        return "agrees"
    if not named:
        return "names no cause"
    if set(miss["jax_causes"]) <= set(miss.get("causes", [])):
        return f"names {named} only"
    return f"names {named}: a different cause"


def _miss(i: int, m: dict[str, Any], k: int) -> str:
    named = ", ".join(classify.CAUSES[c].heading for c in m.get("causes", []))
    causes = (
        {
            "first": "first trace" if m.get("inside_jit") else "first compilation",
            "aot": "compiled ahead of time",
            "lowered": "lowered only",
            "transform": "not a miss",
        }.get(m["kind"])
        or named
        or ("not a miss" if m["kind"] == "retrace" else "unknown")
    )
    seconds = sum(m["seconds"].values())
    out = [
        f'<details class="miss" id="{_miss_id(i, m, k)}"><summary>'
        f"{_e(_miss_title(m))}: <b>{_e(causes)}</b> "
        f'<span class="muted">at {_e(m["call_site"])}, {seconds:.3f} s</span></summary>',
        f"<p>called at <code>{_e(m['call_site'])}</code>"
        + (" (inside another jit)" if m.get("inside_jit") else "")
        + "</p>",
    ]
    if m.get("source"):
        out.append(f"<pre>{_e(m['source'])}</pre>")
    if m["kind"] == "miss":
        if m.get("lessons"):
            out.append(f"<p>lesson {_e(', '.join(m['lessons']))}</p>")
        if m.get("compared_with"):
            out.append(f"<p>against compilation {m['compared_with']}, the closest earlier:</p>")
        if m.get("differences"):
            rows = "".join(
                f"<tr><td><code>{_e(d['where'])}</code></td><td>{_e(_part(d))}</td>"
                f"<td><code>{_e(d['now'])}</code></td><td><code>{_e(d['before'])}</code></td></tr>"
                for d in m["differences"]
            )
            out.append(
                '<div class="scroll"><table class="diffs"><thead><tr><th>where</th>'
                "<th>part</th><th>now</th><th>before</th></tr></thead>"
                f"<tbody>{rows}</tbody></table></div>"
            )
        else:
            out.append("<p>nothing in the signature differs from an earlier compilation</p>")
        for close in m.get("equally_close", [])[-2:]:
            what = "; ".join(
                f"{d['where']}: {d['now']} now, {d['before']} before"
                for d in close["differences"][:2]
            )
            out.append(
                f'<p class="muted">equally close to {close["compilation"]}: '
                f"{_e(what or 'nothing')}</p>"
            )
        text = m.get("jax_explanation")
        out.append(
            f'<details class="jax"><summary>JAX says ({_e(_jax_verdict(m))}): '
            f"{_e(classify.jax_summary(text))}</summary>"
            + (f"<pre>{_e(_url_apart(text))}</pre>" if text else "")
            + "</details>"
        )
    out.append("</details>")
    return "".join(out)


def _url_apart(text: str) -> str:
    """JAX's text with a space before each web address it runs into ("f32[3]https://")."""
    return re.sub(r"(?<=\S)(?=https?://)", " ", text)


def _part(d: dict[str, Any]) -> str:
    """A difference's part of jit's key, as the text report names it, with the user's
    words for it when it has them (node metadata, a static field, a typed key)."""
    heading = classify.CAUSES[classify.cause_of(sig.Difference(**d))].heading
    return f"{heading}: {d['what']}" if d.get("what") else heading


def _fix(f: dict[str, Any], cause_id: str) -> dict[str, Any]:
    """The function's fix for a cause (a report written before fixes were kept: the
    cause's own fix and lesson)."""
    found = f.get("fixes", {}).get(cause_id)
    if found is not None:
        return found
    cause = classify.CAUSES[cause_id]
    return {"fix": cause.fix, "lessons": [{"name": cause.lesson_name, "link": ""}]}


def _lesson_links(refs: list[dict[str, str]]) -> str:
    """Each lesson by name, a link to its page where the report knows one."""
    shown = []
    for ref in refs:
        name = _e(f"lesson {ref['name']}")
        shown.append(f'<a href="{_e(ref["link"])}">{name}</a>' if ref.get("link") else name)
    return "; ".join(shown)


def _path(text: str) -> str:
    """A source location that wraps only after a folder's slash or at a space, never
    inside ``train.py:29``."""
    return '<code class="path">' + _e(text).replace("/", "/<wbr>") + "</code>"


def _section(i: int, f: dict[str, Any]) -> str:
    misses = [m for m in f["misses"] if m["kind"] != "transform"]
    head = (
        f"{_plural(f['compiles'], 'compilation')}, "
        f"{_plural(f['recompiles'], 'cache miss')} after the first, "
        f"{f['seconds']['total']:.3f} s"
    )
    if f["compiles"] == 0 and f["traces"]:
        head = f"traced {f['traces']} times inside other jits, {f['seconds']['total']:.3f} s"
    out = [
        f'<section class="function" id="{_function_id(i)}">'
        f'<h2>{i}. {_e(f["name"])} <small class="muted">{_path(f["defined_at"])}'
        f"</small></h2><p>{_e(head)}; {f['calls']} calls"
        + (
            f"; +{f['transformed_compiles']} for jax.grad/vmap of it (not recompiles)"
            if f.get("transformed_compiles")
            else ""
        )
        + "</p>"
    ]
    if f["causes"]:
        items = "".join(
            f"<li><b>{_e(_heading(f, c))}</b>: {_plural(n, 'miss')}. Fix: "
            f"{_e(_fix(f, c)['fix'])}. See {_lesson_links(_fix(f, c)['lessons'])}</li>"
            for c, n in f["causes"].items()
        )
        out.append(f"<ul>{items}</ul>")
    out.append(_timeline(i, misses))
    if misses:
        out.append("<h3>Compilations</h3>")
        out += [_miss(i, m, k) for k, m in enumerate(misses, 1)]
    out.append("</section>")
    return "".join(out)


def _budgets(data: dict[str, Any]) -> str:
    if not data.get("budgets"):
        return ""
    items = []
    for b in data["budgets"]:
        if b["status"] == "ok":
            items.append(f'<li class="ok">ok: {_e(b["budget"])}</li>')
        elif b["status"] == "unused":
            items.append(
                f'<li class="bad">{_e(b["budget"])}: no jitted function by that name ran, so '
                "this budget was not checked (not a pass)</li>"
            )
        else:
            over = ", ".join(
                f"{c['name']} ({c['defined_at']}) compiled {c['compiles']} times"
                for c in b["counts"]
            )
            items.append(f'<li class="bad">EXCEEDED: {_e(b["budget"])}: {_e(over)}</li>')
    return f"<h2>Budgets</h2><ul>{''.join(items)}</ul>"


def render(data: dict[str, Any]) -> str:
    """The whole page, from a report's JSON form."""
    functions = data["functions"]
    command = " ".join(data.get("command") or [])
    compiles = sum(f["compiles"] for f in functions)
    misses = sum(f["recompiles"] for f in functions)
    seconds = sum(f["seconds"]["total"] for f in functions)
    summary = (
        f"{_plural(len(functions), 'watched function')}, {_plural(compiles, 'compilation')}, "
        f"{_plural(misses, 'cache miss')} {classify.MISSES_IN_ALL}, {seconds:.2f} s "
        f"tracing+lowering+compiling in a {data.get('wall_seconds', 0.0):.2f} s run."
    )
    status = []
    if data.get("interrupted"):
        status.append("interrupted (Ctrl-C): the report so far")
    if data.get("program_failed"):
        status.append(f"the program failed: {data['program_failed']}")
    unwatched = [o for o in data.get("unwatched", []) if o["compiles"] or o["traces"]]
    others = ""
    if unwatched:
        names = ", ".join(f"{o['name']} {o['compiles']}" for o in unwatched[:12])
        others = (
            f'<p class="muted">Not watched ({_plural(len(unwatched), "function")}: JAX\'s own '
            f"helpers, or jitted before the doctor started): "
            f"{_plural(sum(o['compiles'] for o in unwatched), 'compilation')}: {_e(names)}</p>"
        )
    body = [
        "<h1>jitlab doctor</h1>",
        f'<p class="command"><code>{_e(command)}</code></p>' if command else "",
        f"<p>{_e(summary)} Worst first; click a heading to sort.</p>",
        "".join(f'<p class="bad">{_e(s)}</p>' for s in status),
        _table(functions) if functions else "<p>no jitted function was called</p>",
        others,
        _budgets(data),
        "".join(_section(i, f) for i, f in enumerate(functions, 1)),
    ]
    title = "jitlab doctor" + (f": {command}" if command else "")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title[:120])}</title><style>{_STYLE}</style></head>"
        f"<body><main>{''.join(body)}</main><script>{_SCRIPT}</script></body></html>\n"
    )


def write(data: dict[str, Any], path: str | Path) -> int:
    """Write the page; returns its size in bytes. Raises OSError when it cannot."""
    page = render(data).encode("utf-8")
    Path(path).write_bytes(page)
    return len(page)
