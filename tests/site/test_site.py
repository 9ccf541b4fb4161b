"""The site: builds strictly with every lesson executed, has no broken internal link or
anchor (including inside notebook pages, which `mkdocs build --strict` does not see), and
makes no request outside itself."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from jitlab.course import load_course
from jitlab.site import pages

# Builds the site: left out of `make test-fast`, and run by `make test` after the lessons
# (it renders what they recorded).
pytestmark = [pytest.mark.slow, pytest.mark.site]

COURSE = load_course()


class _PageParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.resources: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        for key in ("id", "name"):
            if values.get(key):
                self.ids.add(values[key])
        if tag == "a" and "href" in values:
            self.links.append(values["href"])
        if tag in ("script", "img", "iframe", "source", "audio", "video") and values.get("src"):
            self.resources.append((tag, values["src"]))
        # A canonical or alternate <link> names the page's public address; the
        # browser fetches nothing for it.
        fetched = values.get("rel", "") not in ("canonical", "alternate")
        if tag == "link" and values.get("href") and fetched:
            self.resources.append((tag, values["href"]))


def _parse(path: Path) -> _PageParser:
    parser = _PageParser()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser


def _external(url: str) -> bool:
    return url.startswith(("http://", "https://", "//"))


def _pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def test_every_lesson_page_is_executed_with_outputs(site):
    for item in COURSE.lessons:
        page = site / "lessons" / item.stem / "index.html"
        assert page.exists(), f"no page for {item.path.name}"
        html = page.read_text(encoding="utf-8")
        assert "jaxlib" in html, f"{item.slug}: the environment report is missing"
        assert "Key points" in html, f"{item.slug}: the closing box is missing"
        if "plt.show()" in item.path.read_text():  # SVG, with real text (jitlab.intro)
            assert "jp-RenderedSVG" in html and "<text" in html, f"{item.slug}: no plot"


def test_every_notebook_page_offers_its_ipynb_and_py(site):
    pages_ = [("lessons", item.stem) for item in COURSE.lessons]
    pages_ += [(folder, e.stem) for e in COURSE.exercises for folder in ("exercises", "solutions")]
    for folder, stem in pages_:
        page_dir = site / folder / stem
        html = (page_dir / "index.html").read_text(encoding="utf-8")
        assert f'href="{stem}.ipynb"' in html, f"{page_dir}: no notebook download"
        assert f'href="{stem}.py"' in html and (page_dir / f"{stem}.py").exists()
        notebook = json.loads((page_dir / f"{stem}.ipynb").read_text(encoding="utf-8"))
        assert notebook["cells"], f"{stem}.ipynb is empty"
        if folder == "lessons":  # the lesson's download carries its executed outputs
            outputs = [c.get("outputs") for c in notebook["cells"] if c["cell_type"] == "code"]
            assert all(o is not None for o in outputs) and any(outputs), stem


def test_solution_pages_warn_before_they_spoil(site):
    for exercise in COURSE.exercises:
        html = (site / "solutions" / exercise.stem / "index.html").read_text(encoding="utf-8")
        assert "Spoiler: this page solves the exercise" in html
        banner, fold = html.index("Spoiler:"), html.index("<summary>Show the solution</summary>")
        assert banner < fold < html.index("# BEGIN SOLUTION"), exercise.stem
        exercise_html = (site / "exercises" / exercise.stem / "index.html").read_text("utf-8")
        assert "Spoiler:" not in exercise_html
        lesson = f'href="../../lessons/{exercise.stem}/"'
        assert lesson in exercise_html and f"../../solutions/{exercise.stem}/" in exercise_html
        assert exercise.title in exercise_html


def test_nothing_a_reader_did_not_write_reaches_the_search_index(site):
    """Neither the copy button's "Copied!" nor the "answer" tag above every proof cell."""
    index = (site / "search" / "search_index.json").read_text(encoding="utf-8")
    assert "Copied!" not in index
    lesson = (site / "lessons" / "01_shapes" / "index.html").read_text(encoding="utf-8")
    assert 'class="cell-tag"' not in lesson and "celltag_answer" in lesson


def test_no_request_leaves_the_site(site):
    offenders = []
    for page in _pages(site):
        for tag, url in _parse(page).resources:
            if _external(url):
                offenders.append(f"{page.relative_to(site)}: <{tag}> {url}")
    for sheet in site.rglob("*.css"):
        text = sheet.read_text(encoding="utf-8", errors="replace")
        if "url(http" in text.replace(" ", "") or "@import url(//" in text:
            offenders.append(f"{sheet.relative_to(site)}: remote url() in CSS")
    assert not offenders, "\n".join(offenders[:20])


@pytest.mark.parametrize("build", ["site", "offline_site"])
def test_internal_links_and_anchors_resolve(build, request):
    site = request.getfixturevalue(build)
    parsed = {page: _parse(page) for page in _pages(site)}
    broken = []
    for page, parser in parsed.items():
        for href in parser.links:
            if _external(href) or href.startswith(("mailto:", "javascript:", "data:")):
                continue
            parts = urlsplit(href)
            if parts.path.startswith("/"):  # root-relative, as on the 404 page
                target = (site / unquote(parts.path).lstrip("/")).resolve()
            elif parts.path:
                target = (page.parent / unquote(parts.path)).resolve()
                if target.is_dir():
                    # A server answers a folder with its index.html; file:// lists
                    # the folder, so the offline build must link to the file itself.
                    if build != "site":
                        broken.append(f"{page.relative_to(site)} -> {href}: a folder")
                        continue
                    target = target / "index.html"
            else:
                target = page
            if not target.exists():
                broken.append(f"{page.relative_to(site)} -> {href}: no such file")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{page.relative_to(site)} -> {href}: no such anchor")
    assert not broken, "\n".join(broken[:30])


def test_generated_tables_are_filled(site):
    home = (site / "index.html").read_text(encoding="utf-8")
    for item in COURSE.lessons:
        assert item.title in home, f"learning path lacks {item.title}"
    guide = (site / "instructor" / "index.html").read_text(encoding="utf-8")
    assert "Half-day schedule" in guide and "break" in guide
    results = (site / "results" / "index.html").read_text(encoding="utf-8")
    for name in pages.RENDERERS:
        assert f"jitlab:{name}" not in home + guide + results, f"placeholder {name} unfilled"
