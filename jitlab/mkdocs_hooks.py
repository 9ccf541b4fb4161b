"""MkDocs hooks: the glue between the course's files and the site.

- The navigation is built from the lessons' front matter, so a new lesson appears in
  the path without editing ``mkdocs.yml``.
- Placeholders in Markdown pages (``<!-- jitlab:NAME -->``) are filled from the same
  front matter and from ``results/``: the learning path, the workshop schedules, the
  teaching notes and the measured results are never typed twice.
- Every notebook page gets its generated ``.ipynb`` beside it, for the download button
  in ``overrides/main.html``.
- mkdocs-jupyter builds a notebook page's table of contents from heading text with the
  inline code dropped, so a heading like "`lax.cond`: run one" gets a TOC link to an
  anchor that does not exist and a title without its code; both are taken from the
  headings themselves.
- nbconvert inlines about 600 kB of JupyterLab CSS into every notebook page; the hook
  moves each large block into one shared stylesheet, so the site stays small enough
  to hand round on a USB stick.
- nbconvert's template loads MathJax from a CDN; the lessons use no maths, so the
  script is dropped and the site makes no request outside itself.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import jupytext

from jitlab import course, site_content

_PLACEHOLDER = re.compile(r"<!--\s*jitlab:([a-z-]+)\s*-->")
_EXTERNAL_SCRIPT = re.compile(
    r"<script[^>]*\bsrc=\"(?:https?:)?//[^\"]*\"[^>]*>\s*</script>", re.IGNORECASE
)
_HEADING = re.compile(r"<h([1-6])[^>]*\bid=\"([^\"]+)\"[^>]*>(.*?)</h\1>", re.DOTALL)
_ANCHOR_LINK = re.compile(r"<a class=\"anchor-link\".*?</a>", re.DOTALL)
_MATHJAX_CONFIG = re.compile(
    r"<script type=\"text/x-mathjax-config\">.*?</script>", re.IGNORECASE | re.DOTALL
)


def _title(path: Any) -> str:
    meta = course.header_metadata(path)
    return f"{path.name[:2]} · {meta.get('title', path.stem)}"


def on_config(config: Any) -> Any:
    lessons = [
        {f"{les.number} · {les.title}": f"lessons/{les.path.name}"} for les in course.lessons()
    ]
    exercises = [{_title(p): f"exercises/{p.name}"} for p in course.exercise_paths()]
    solutions = [
        {_title(p): f"solutions/{p.name}"}
        for p in course.exercise_paths()
        if course.solution_for(p).exists()
    ]
    config["nav"] = [
        {"Home": "index.md"},
        {"Setup": "setup.md"},
        {"Lessons": lessons},
        {"Exercises": exercises},
        {"Reference": [{"Cheat sheet": "cheatsheet.md"}, {"Glossary": "glossary.md"}]},
        {"Instructors": [{"Instructor guide": "instructor.md"}]},
        {"Measured results": "results.md"},
        {"Solutions (spoilers)": [{"About the solutions": "solutions.md"}, *solutions]},
    ]
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def fill(match: re.Match[str]) -> str:
        return site_content.render(match.group(1))

    return _PLACEHOLDER.sub(fill, markdown)


_INLINE_STYLE = re.compile(r"<style type=\"text/css\">(.*?)</style>", re.DOTALL)
SHARED_CSS_MIN_BYTES = 20_000


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
    if not page.file.src_uri.endswith(".py") or page.content is None:
        return context
    found = _HEADING.findall(page.content)
    headings = [(h_id, _ANCHOR_LINK.sub("", inner)) for _, h_id, inner in found]
    entries = _flatten(list(page.toc))
    if len(entries) == len(headings):  # same headings, in the same order
        for entry, (real_id, title) in zip(entries, headings, strict=True):
            entry.id, entry.title = real_id, title.strip()
    return context


def on_post_page(output: str, page: Any, config: Any) -> str:
    output = _EXTERNAL_SCRIPT.sub("", output)
    if page.file.src_uri.endswith(".py"):
        output = _share_large_styles(output, page, config)
    return _MATHJAX_CONFIG.sub("", output)


def on_post_build(config: Any) -> None:
    site = Path(config["site_dir"])
    for folder in (course.LESSONS, course.EXERCISES, course.SOLUTIONS):
        for source in sorted(folder.glob("[0-9][0-9]_*.py")):
            page_dir = site / folder.name / source.stem
            if page_dir.is_dir():
                jupytext.write(jupytext.read(source), page_dir / f"{source.stem}.ipynb")
