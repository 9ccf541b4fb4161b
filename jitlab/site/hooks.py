"""MkDocs hooks: the glue between the course's files and the site.

- The navigation is built from ``course.yml`` and the lessons' front matter, so a new
  lesson appears without editing ``mkdocs.yml``.
- Lesson pages are the notebooks that the pipeline executed (``make test`` executes them
  once, under nbval; the site reuses them, and executes only lessons that changed since).
  The downloaded ``.ipynb`` therefore carries its outputs.
- Placeholders in Markdown pages (``<!-- jitlab:NAME -->``) are filled from the same
  front matter and from ``results/``: learning path, schedules, teaching notes, measured
  results and the release matrix are never typed twice.
- Every notebook page gets its ``.py`` source and an ``.ipynb`` beside it, for the
  download buttons in ``overrides/main.html``.
- mkdocs-jupyter builds a notebook page's table of contents from heading text with the
  inline code dropped, so a heading like "`lax.cond`: run one" gets a TOC link to an
  anchor that does not exist; ids and titles are taken from the headings themselves.
- nbconvert inlines about 600 kB of JupyterLab CSS into every notebook page; large
  blocks move into one shared stylesheet, so the site fits on a USB stick.
- nbconvert's template and mkdocs-jupyter's loader fetch MathJax from a CDN; the
  lessons use no maths, so both scripts are dropped and the site makes no request outside itself.
- Notebook pages link to each other as ``../09_diagnosing/``; the offline build (one
  file per page, opened over file://) gets those links rewritten to ``09_diagnosing.html``.
- Exercise pages (online and offline) show the learner's copy as generated from its source
  in ``solutions/`` (written to ``_build/site-exercises``), never the ``exercises/`` files
  of whoever builds the site, which may hold their own answers.
- Plots (SVG, with real text: see ``jitlab.course.boxes.plots_as_svg``) shrink with the
  page, but never below the width at which their smallest text is 9 px high; below
  that, a plot scrolls in its own box, as wide tables do.
- On a static page the answer to each *Predict* prompt sits right under the question;
  the outputs of the cells that answer it are folded until the reader opens them.
- Notebook pages lose nbconvert's cell-tag labels ("answer") and the copy button's
  "Copied!" text, which the search index would return; a solution page's code is folded
  under its spoiler banner.
- mkdocs-jupyter's two INFO lines a page are silenced (``QUIETED_LOGGERS``).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import math
import posixpath
import re
import shutil
import time
from html import escape as html_escape
from pathlib import Path
from typing import Any, NamedTuple

import jupytext
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

from jitlab.course.exercise_source import generated_text
from jitlab.course.manifest import Course, load_course
from jitlab.notebooks.pipeline import executed_dir, executed_lessons
from jitlab.site import pages

_PLACEHOLDER = re.compile(r"<!--\s*jitlab:([a-z-]+)(?:\s+(.*?))?\s*-->")
_EXTERNAL_SCRIPT = re.compile(
    r"<script[^>]*\bsrc=\"(?:https?:)?//[^\"]*\"[^>]*>\s*</script>", re.IGNORECASE
)
_HEADING = re.compile(r"<h([1-6])[^>]*\bid=\"([^\"]+)\"[^>]*>(.*?)</h\1>", re.DOTALL)
_ANCHOR_LINK = re.compile(r"<a class=\"anchor-link\".*?</a>", re.DOTALL)
_MATHJAX_CONFIG = re.compile(
    r"<script (?:type=\"text/x-mathjax-config\"|data-mkdocs-jupyter-mathjax=)[^>]*>.*?</script>",
    re.IGNORECASE | re.DOTALL,
)
_INLINE_STYLE = re.compile(r"<style type=\"text/css\">(.*?)</style>", re.DOTALL)
SHARED_CSS_MIN_BYTES = 20_000
NOTEBOOK_PAGE = (".py", ".ipynb")


def course_nav(course: Course) -> list[dict[str, str]]:
    """Each lesson, then its exercise: the order a learner works in, so the footer's
    Previous and Next follow it (an exercise's Previous is its lesson). The solutions
    are not listed: each exercise page links to its own, behind a spoiler."""
    nav = []
    for item in course.lessons:
        nav.append({item.label: f"lessons/{item.stem}.ipynb"})
        if item.exercise is not None:
            nav.append({item.exercise.label: f"exercises/{item.exercise.stem}.py"})
    return nav


def on_config(config: Any) -> Any:
    config["nav"] = [
        {"Home": "index.md"},
        {"Setup": "setup.md"},
        {"Lessons and exercises": course_nav(load_course())},
        {
            "Reference": [
                {"Cheat sheet": "cheatsheet.md"},
                {"Glossary": "glossary.md"},
                {"Use it on your own code": "doctor.md"},
                {"The source chapter": "source-chapter.md"},
            ]
        },
        {
            "Instructors": [
                {"Instructor guide": "instructor.md"},
            ]
        },
        {"Measured": [{"Measured results": "results.md"}, {"JAX releases": "releases.md"}]},
        {"Solutions (spoilers)": "solutions.md"},
    ]
    return config


SITE_EXERCISES = "site-exercises"


def original_exercises(course: Course) -> Path:
    """Every learner's copy as generated from its source, in ``_build/site-exercises``
    (a file is rewritten only when its text changes, so the page cache holds)."""
    root = course.build_dir / SITE_EXERCISES
    (root / "exercises").mkdir(parents=True, exist_ok=True)
    for exercise in course.exercises:
        target = root / "exercises" / f"{exercise.stem}.py"
        text = generated_text(exercise)
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
    return root


@event_priority(50)  # before mkdocs-jupyter wraps the notebook files
def on_files(files: Files, config: Any) -> Files:
    """Swap the lesson sources for the executed notebooks (executing stale ones), and
    the exercises for the originals generated from their sources."""
    course = load_course()
    executed_lessons(course, echo=lambda line: print(line, flush=True))
    generated = {
        "lessons": (executed_dir(course), [f"{item.stem}.ipynb" for item in course.lessons]),
        "exercises": (original_exercises(course), [f"{e.stem}.py" for e in course.exercises]),
    }
    kept = [f for f in files if f.src_uri.split("/")[0] not in generated]
    for folder, (root, names) in generated.items():
        for name in names:
            kept.append(
                File(
                    f"{folder}/{name}", str(root), config["site_dir"], config["use_directory_urls"]
                )
            )
    notebooks = sum(f.src_uri.endswith(NOTEBOOK_PAGE) for f in kept)
    print(f"rendering {len(kept)} files, {notebooks} of them notebook pages", flush=True)
    return Files(kept)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def fill(match: re.Match[str]) -> str:
        return pages.render(match.group(1), match.group(2) or "")

    return _PLACEHOLDER.sub(fill, markdown)


# nbconvert's toolbar naming a cell's tags: "answer" printed above every proof cell.
_TAG_TOOLBAR = re.compile(
    r'<div class="celltoolbar">\s*<div class="button_container tags_button_container">'
    r"\s*(?:<span[^>]*>\s*(?:<span[^>]*>[^<]*</span>\s*)*</span>\s*)*</div>\s*</div>"
)
# mkdocs-jupyter's copy button carries its "Copied!" notice as text, which the search
# index then holds once per code cell; the notice's text comes from course.css instead.
_COPIED = '<span class="notice" hidden="">Copied!</span>'


def without_cell_chrome(html: str) -> str:
    """A notebook page without its cells' tag labels, and with no "Copied!" text for the
    search index to find (the copy button still shows it, from the stylesheet)."""
    return _TAG_TOOLBAR.sub("", html).replace(_COPIED, '<span class="notice" hidden=""></span>')


_TABLE = re.compile(r"<table>.*?</table>", re.DOTALL)
_HEAD_CELL = re.compile(r"<th[^>]*>(.*?)</th>", re.DOTALL)
_ROW = re.compile(r"<tr>(.*?)</tr>", re.DOTALL)


def label_table_cells(html: str) -> str:
    """Give every ``<td>`` its column's heading as ``data-label``: on a phone, the tables
    of a ``jitlab-cards`` block show a row as a card, each cell under its label (CSS)."""

    def table(match: re.Match[str]) -> str:
        heads = [re.sub(r"<[^>]+>", "", h).strip() for h in _HEAD_CELL.findall(match.group(0))]

        def row(found: re.Match[str]) -> str:
            cells = iter(heads)
            labelled = re.sub(
                r"<td(?=[ >])",
                lambda _: f'<td data-label="{html_escape(next(cells, ""))}"',
                found.group(1),
            )
            return f"<tr>{labelled}</tr>"

        return _ROW.sub(row, match.group(0))

    return _TABLE.sub(table, html)


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Runs before the search plugin indexes the page (its ``on_page_context``)."""
    if page.file.src_uri.endswith(NOTEBOOK_PAGE):
        return without_cell_chrome(html)
    if 'class="jitlab-cards"' in html:
        return label_table_cells(html)
    return html


def _share_large_styles(output: str, page: Any, config: Any) -> str:
    to_root = "../" * page.url.count("/")

    def replace(match: re.Match[str]) -> str:
        css = match.group(1)
        if len(css) < SHARED_CSS_MIN_BYTES:
            return match.group(0)
        name = f"notebook-{hashlib.sha256(css.encode()).hexdigest()[:12]}.css"
        target = Path(config["site_dir"]) / "assets" / name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(css, encoding="utf-8")
        return f'<link rel="stylesheet" href="{to_root}assets/{name}">'

    return _INLINE_STYLE.sub(replace, output)


def _flatten(items: list[Any]) -> list[Any]:
    flat = []
    for item in items:
        flat.append(item)
        flat += _flatten(item.children)
    return flat


def on_page_context(context: Any, page: Any, config: Any, nav: Any) -> Any:
    if not page.file.src_uri.endswith(NOTEBOOK_PAGE) or page.content is None:
        return context
    folder, _, name = page.file.src_uri.partition("/")
    if folder in ("exercises", "solutions"):  # overrides/main.html links to the lesson
        context["jitlab_lesson"] = load_course().lesson(name.split("_", 1)[0]).label
    found = _HEADING.findall(page.content)
    headings = [(h_id, _ANCHOR_LINK.sub("", inner)) for _, h_id, inner in found]
    entries = _flatten(list(page.toc))
    if len(entries) == len(headings):  # same headings, in the same order
        for entry, (real_id, title) in zip(entries, headings, strict=True):
            entry.id, entry.title = real_id, title.strip()
    return context


def fold_predicted_answers(html: str) -> str:
    """Fold what answers a Predict box, so the reader predicts before seeing it.

    After a Predict box (up to the next text cell), a code cell tagged ``answer`` (the
    proof: its asserts and the printed result) is folded whole, code and output; any
    other code cell keeps its code in view, the experiment, and has its output folded.
    The page is scanned for its div and details tags, not parsed: the rest of it stays
    byte for byte as nbconvert and the theme wrote it (a parse and re-serialisation of
    fifteen lesson pages took a third of the site's build).
    """
    elements = _elements(html)
    details = [e for e in elements if e.tag == "details"]
    cells = [e for e in elements if "jp-Cell" in e.classes]

    def inside(e: _Element, of: list[_Element]) -> bool:
        return any(o.start < e.start and e.end <= o.end for o in of if o is not e)

    folds, answering = [], False
    for cell in (c for c in cells if not inside(c, cells)):  # a cell nested in a cell: done
        if "jp-MarkdownCell" in cell.classes:
            answering = bool(_PREDICT_TITLE.search(html, cell.start, cell.end))
        elif answering and "jp-CodeCell" in cell.classes and not inside(cell, details):
            if ANSWER_CLASS in cell.classes:
                folds.append(cell)
                continue
            output = next((e for e in elements if _is_output_of(e, cell)), None)
            if output and not inside(output, details) and _SHOWS.search(html, *output[:2]):
                folds.append(output)
    for e in reversed(folds):
        html = f"{html[: e.start]}{_FOLD}{html[e.start : e.end]}</details>{html[e.end :]}"
    return html


def fold_solution(html: str) -> str:
    """Fold a solution page below its title cell: the spoiler banner comes first, and the
    solution only after one more click."""
    elements = _elements(html)
    cells = [e for e in elements if "jp-Cell" in e.classes]
    top = [c for c in cells if not any(o.start < c.start and c.end <= o.end for o in cells)]
    if len(top) < 2:
        return html
    start, end = top[1].start, top[-1].end
    return f"{html[:start]}{_SPOILER}{html[start:end]}</details>{html[end:]}"


_SPOILER = '<details class="jitlab-spoiler"><summary>Show the solution</summary>'
ANSWER_CLASS = "celltag_answer"  # nbconvert gives a cell tagged "answer" this class
_FOLD = '<details class="jitlab-answer"><summary>Show what happened</summary>'
_TAG = re.compile(r"<(/?)(div|details)\b([^>]*)>")
_CLASS = re.compile(r'\bclass="([^"]*)"')
_PREDICT_TITLE = re.compile(
    r'<div class="admonition question\b[^"]*"[^>]*>\s*<p class="admonition-title">\s*Predict\s*</p>'
)
_SHOWS = re.compile(r">[^<]*\S[^<]*<|<img\b")  # some text, or an image


class _Element(NamedTuple):
    start: int
    end: int  # past its closing tag
    tag: str
    classes: tuple[str, ...]


def _elements(html: str) -> list[_Element]:
    """Every div and details element of ``html``, in the order they open."""
    opened: list[tuple[int, str, tuple[str, ...]]] = []
    found = []
    for tag in _TAG.finditer(html):
        if not tag.group(1):
            classes = _CLASS.search(tag.group(3))
            names = tuple(classes.group(1).split()) if classes else ()
            opened.append((tag.start(), tag.group(2), names))
        elif opened:
            start, name, names = opened.pop()
            found.append(_Element(start, tag.end(), name, names))
    return sorted(found)


def _is_output_of(e: _Element, cell: _Element) -> bool:
    return cell.start < e.start < cell.end and "jp-Cell-outputWrapper" in e.classes


_RELATIVE_DIRECTORY_HREF = re.compile(r'href="((?:\.\./)+[\w./-]*/)(#[^"]*)?"')


def link_without_directory_urls(href: str, src_uri: str) -> str:
    """Where a link written for directory URLs (``../09_diagnosing/``, as notebook
    pages spell them, since MkDocs never rewrites a notebook's HTML) points in the
    offline build, where each page is a file (``09_diagnosing.html``)."""
    page_dir = posixpath.splitext(src_uri)[0] + "/"  # lessons/01_shapes/ when served
    target = posixpath.normpath(posixpath.join(page_dir, href))  # lessons/09_diagnosing
    here = posixpath.dirname(src_uri) or "."  # the offline page is lessons/01_shapes.html
    return posixpath.relpath(target + ".html", here)


def _flatten_directory_links(output: str, page: Any) -> str:
    def flatten(match: re.Match[str]) -> str:
        target = link_without_directory_urls(match.group(1), page.file.src_uri)
        return f'href="{target}{match.group(2) or ""}"'

    return _RELATIVE_DIRECTORY_HREF.sub(flatten, output)


MIN_TEXT_PX = 9.5  # on screen; a little above the 9 px the browser test asks for
_SVG = re.compile(r"<svg\b[^>]*>.*?</svg>", re.DOTALL)
_VIEWBOX = re.compile(r'\bviewBox="[\d.\-]+ [\d.\-]+ ([\d.]+) [\d.]+"')
_FONT_SIZE = re.compile(r"font-size:\s*([\d.]+)px")


_SVG_IMAGE = re.compile(r'<img\b[^>]*\bsrc="data:image/svg\+xml;base64,([A-Za-z0-9+/=\s]+)"[^>]*>')


def inline_svg_images(html: str) -> str:
    """nbconvert shows a plot's SVG as an ``<img>`` of a data URL; the page gets the SVG
    itself instead (it is the course's own output, from its executed lessons), so its
    text is text: sized by :func:`readable_svgs`, selectable, and measured by the
    browser tests."""

    def inline(match: re.Match[str]) -> str:
        svg = base64.b64decode(match.group(1)).decode("utf-8")
        start = svg.find("<svg")
        return svg[start:] if start >= 0 else match.group(0)

    return _SVG_IMAGE.sub(inline, html)


def readable_svgs(html: str) -> str:
    """Give every SVG with text a ``min-width`` at which its smallest text is
    ``MIN_TEXT_PX`` high: its font sizes are in its own units (a matplotlib figure's
    points), so the width on screen, over the viewBox width, is the scale of its text."""

    def fix(match: re.Match[str]) -> str:
        svg = match.group(0)
        opening = svg[: svg.index(">") + 1]
        width = _VIEWBOX.search(opening)
        sizes = [float(size) for size in _FONT_SIZE.findall(svg)]
        if width is None or not sizes or "min-width" in opening:
            return svg
        min_width = math.ceil(MIN_TEXT_PX * float(width.group(1)) / min(sizes))
        if ' style="' in opening:
            return svg.replace(' style="', f' style="min-width: {min_width}px; ', 1)
        return f'<svg style="min-width: {min_width}px"' + svg[4:]

    return _SVG.sub(fix, html)


def on_post_page(output: str, page: Any, config: Any) -> str:
    output = readable_svgs(inline_svg_images(_EXTERNAL_SCRIPT.sub("", output)))
    if page.file.src_uri.endswith(NOTEBOOK_PAGE):
        if not config["use_directory_urls"]:
            output = _flatten_directory_links(output, page)
        output = _share_large_styles(output, page, config)
        if page.file.src_uri.startswith("lessons/"):
            output = fold_predicted_answers(output)
        elif page.file.src_uri.startswith("solutions/"):
            output = fold_solution(output)
    return _MATHJAX_CONFIG.sub("", output)


def _page_dir(site: Path, folder: str, stem: str, config: Any) -> Path:
    # With directory URLs a page is folder/stem/index.html; without (the offline build,
    # opened over file://) it is folder/stem.html, and its downloads sit beside it.
    return site / folder / stem if config["use_directory_urls"] else site / folder


_STARTED = [time.monotonic()]
# mkdocs-jupyter logs two lines a notebook page at INFO ("Converting notebook", "Cache
# miss, writing"): 86 lines that bury the course's own progress lines, and whose "cache
# miss" is the page cache, not jit's. Its warnings and errors still show.
QUIETED_LOGGERS = ("mkdocs.mkdocs-jupyter", "mkdocs.plugins.mkdocs_jupyter")


def on_startup(command: str, dirty: bool) -> None:
    _STARTED[0] = time.monotonic()
    for name in QUIETED_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def on_post_build(config: Any) -> None:
    """Put each notebook page's downloads beside it (see :func:`_put_downloads`), and say
    how long the build took."""
    _put_downloads(config)
    print(f"site built in {time.monotonic() - _STARTED[0]:.0f} s", flush=True)


def _put_downloads(config: Any) -> None:
    """Each notebook page's .py source and an .ipynb (the executed notebook for lessons,
    the converted source for exercises and solutions), beside the page."""
    course = load_course()
    site = Path(config["site_dir"])
    executed = executed_dir(course)
    for item in course.lessons:
        page_dir = _page_dir(site, "lessons", item.stem, config)
        if page_dir.is_dir():
            shutil.copyfile(item.path, page_dir / f"{item.stem}.py")
            shutil.copyfile(
                executed / "lessons" / f"{item.stem}.ipynb", page_dir / f"{item.stem}.ipynb"
            )
    originals = course.build_dir / SITE_EXERCISES / "exercises"
    for exercise in course.exercises:
        original = originals / f"{exercise.stem}.py"
        sources = (("exercises", original), ("solutions", exercise.source))
        for folder, source in sources:
            page_dir = _page_dir(site, folder, exercise.stem, config)
            if page_dir.is_dir():
                shutil.copyfile(source, page_dir / f"{exercise.stem}.py")
                jupytext.write(jupytext.read(source), page_dir / f"{exercise.stem}.ipynb")
