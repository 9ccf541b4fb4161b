"""The site in a real browser: headless Chromium, every request outside the local server
blocked. Fails on a console error, a failed request, a plot that did not load, a code
cell that scrolls sideways at 1280 px, a phone page wider than the phone, an answer to a
Predict prompt shown before it is asked for, a search that finds nothing, or an offline
copy that does not open from its folder. Keeps screenshots in _build/screenshots/.

Without Chromium (say, on macOS) the browser tests are skipped with one line; in CI
(``CI=true``) they fail instead, so a green CI run always includes them."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from jitlab.course import load_course

# Builds the site: left out of `make test-fast`, and run by `make test` after the lessons
# (it renders what they recorded).
pytestmark = [pytest.mark.slow, pytest.mark.site]

COURSE = load_course()

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = COURSE.build_dir / "screenshots"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def base_url(site: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


# Code cells whose text is wider than their box: the reader must scroll sideways.
SCROLLING_CODE_CELLS = """() => [...document.querySelectorAll('.jp-CodeCell .jp-InputArea pre')]
    .filter(pre => pre.scrollWidth > pre.clientWidth + 1).length"""
# How many characters of code a cell shows before it must scroll.
VISIBLE_CODE_COLUMNS = """() => {
    const pre = document.querySelector('.jp-CodeCell .jp-InputArea pre');
    const probe = document.createElement('span');
    probe.textContent = 'x'.repeat(40);
    pre.appendChild(probe);
    const column = probe.getBoundingClientRect().width / 40;
    probe.remove();
    return Math.floor(pre.clientWidth / column);
}"""
PAGE_WIDTH = "() => document.documentElement.scrollWidth"


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        message = "Chromium is missing: apt-get install chromium (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


class PageVisit:
    """One page load with every problem the browser reports collected."""

    def __init__(self, browser, base_url: str, width: int = 1280) -> None:
        self.problems: list[str] = []
        self.blocked: list[str] = []
        self.page = browser.new_page(viewport={"width": width, "height": 900})
        self.page.route("**/*", self._route(base_url))
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda err: self.problems.append(f"page error: {err}"))
        self.page.on(
            "requestfailed",
            lambda req: (
                req.url in self.blocked
                or self.problems.append(f"request failed: {req.url} ({req.failure})")
            ),
        )

    def _route(self, base_url: str):
        def handle(route) -> None:
            url = route.request.url
            if url.startswith(base_url) or url.startswith(("data:", "blob:")):
                route.continue_()
            else:
                self.blocked.append(url)
                route.abort()

        return handle

    def _console(self, message) -> None:
        if message.type == "error":
            self.problems.append(f"console error: {message.text}")

    def broken_images(self) -> list[str]:
        return self.page.eval_on_selector_all(
            "img",
            "imgs => imgs.filter(i => !i.complete || i.naturalWidth === 0)"
            ".map(i => i.src.slice(0, 80))",
        )


def _visit(
    browser, base_url: str, path: str, screenshot: str | None = None, width: int = 1280
) -> PageVisit:
    visit = PageVisit(browser, base_url, width)
    visit.page.goto(base_url + path, wait_until="load")
    visit.page.wait_for_timeout(300)
    if screenshot:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        visit.page.screenshot(path=str(SCREENSHOTS / f"{screenshot}.png"), full_page=False)
    return visit


def _assert_clean(visit: PageVisit, path: str) -> None:
    assert not visit.blocked, f"{path} asked for outside resources: {visit.blocked[:5]}"
    assert not visit.problems, f"{path}: " + "\n".join(visit.problems[:10])
    assert not visit.broken_images(), f"{path}: images did not load"


def test_home_page_loads_clean(browser, base_url):
    visit = _visit(browser, base_url, "", screenshot="home")
    _assert_clean(visit, "home")
    assert "learning path" in visit.page.content().lower()
    visit.page.close()


@pytest.mark.parametrize("item", COURSE.lessons, ids=lambda item: item.slug)
def test_lesson_page_loads_clean_with_its_plots(browser, base_url, item):
    path = f"lessons/{item.stem}/"
    visit = _visit(browser, base_url, path, screenshot="lesson" if item.number == "01" else None)
    _assert_clean(visit, path)
    if "plt.show()" in item.path.read_text():
        plots = visit.page.locator(".jp-OutputArea-output svg, .jp-OutputArea-output img")
        assert plots.count() > 0, f"{path}: no plot on the page"
    assert visit.page.locator("text=Key points").count() > 0
    assert visit.page.evaluate(SCROLLING_CODE_CELLS) == 0, f"{path}: code scrolls at 1280 px"
    visit.page.close()


# Where every cell of the page's tables lies.
CELLS = """() => [...document.querySelectorAll('article td')].map(td => {
    const r = td.getBoundingClientRect();
    return {left: r.left, right: r.right, height: r.height};
})"""


@pytest.mark.parametrize(
    ("path", "name"), [("", "phone-home"), ("lessons/01_shapes/", "phone-lesson")]
)
def test_a_phone_shows_pages_without_sideways_scrolling(browser, base_url, path, name):
    visit = _visit(browser, base_url, path, screenshot=name, width=390)
    _assert_clean(visit, path or "home")
    assert visit.page.evaluate(PAGE_WIDTH) <= 390, f"{path or 'home'} is wider than a phone"
    if path:  # code shows a useful width before its cell scrolls (24 columns, once)
        assert visit.page.evaluate(VISIBLE_CODE_COLUMNS) >= 40
    else:  # the learning path is a card per lesson, its minutes on screen
        cells = visit.page.evaluate(CELLS)
        assert cells and all(0 <= c["left"] and c["right"] <= 391 for c in cells), cells[:3]
        minutes = visit.page.locator("article td[data-label='exercise (min)']").first
        assert minutes.is_visible()
    visit.page.close()


# The on-screen height of every piece of plot text (SVG <text>: its font size in the
# plot's own units, times the scale from those units to screen pixels), folds opened.
PLOT_TEXT_PX = """() => {
    document.querySelectorAll('details').forEach(d => { d.open = true; });
    return [...document.querySelectorAll('article svg text')].map(t => {
        const m = t.getScreenCTM();
        return m ? parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b) : null;
    }).filter(px => px !== null);
}"""


@pytest.mark.parametrize(
    ("path", "name"), [("lessons/01_shapes/", "phone-lesson-plots"), ("results/", "phone-results")]
)
def test_plot_text_is_at_least_9_px_on_a_phone(browser, base_url, path, name):
    visit = _visit(browser, base_url, path, width=390)
    _assert_clean(visit, path)
    sizes = visit.page.evaluate(PLOT_TEXT_PX)
    assert sizes, f"{path}: no plot text found"
    assert min(sizes) >= 9, f"{path}: plot text {min(sizes):.1f} px high at 390 px"
    assert visit.page.evaluate(PAGE_WIDTH) <= 390, f"{path} is wider than a phone"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    visit.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=False)
    visit.page.close()


# Scroll the box that holds the widest table of the page to its end: where its last header
# cell then lies, and the viewport's width.
LAST_COLUMN = """() => {
    const tables = [...document.querySelectorAll('article table')];
    const table = tables.sort((a, b) => b.scrollWidth - a.scrollWidth)[0];
    let box = table;
    while (box && !(['auto', 'scroll'].includes(getComputedStyle(box).overflowX)
                    && box.scrollWidth > box.clientWidth)) {
        box = box.parentElement;
    }
    if (box) { box.scrollLeft = box.scrollWidth; }
    const cells = table.rows[0].cells;
    const last = cells[cells.length - 1].getBoundingClientRect();
    return {left: last.left, right: last.right, width: window.innerWidth,
            text: cells[cells.length - 1].innerText, scrolls: !!box,
            wider: table.getBoundingClientRect().width > window.innerWidth};
}"""




def test_the_cheat_sheet_is_a_card_per_row_on_a_phone(browser, base_url):
    """No column pushed off the screen (the lesson column was), no cell a sliver."""
    visit = _visit(browser, base_url, "cheatsheet/", screenshot="phone-cheatsheet", width=390)
    _assert_clean(visit, "cheatsheet/")
    cells = visit.page.evaluate(CELLS)
    assert cells and all(0 <= c["left"] and c["right"] <= 391 for c in cells), cells[:3]
    assert min(c["right"] - c["left"] for c in cells if c["height"]) > 300
    lesson = visit.page.locator("article td[data-label='lesson'] a").first
    assert lesson.is_visible() and lesson.bounding_box()["x"] < 390
    visit.page.close()


@pytest.mark.parametrize("path", ["releases/", "results/"])
def test_a_wide_table_scrolls_in_its_box_to_its_last_column_on_a_phone(browser, base_url, path):
    visit = _visit(browser, base_url, path, width=390)
    _assert_clean(visit, path)
    assert visit.page.evaluate(PAGE_WIDTH) <= 390, f"{path} is wider than a phone"
    last = visit.page.evaluate(LAST_COLUMN)
    assert last["wider"], f"{path}: the widest table fits the phone: this test tests nothing"
    assert last["scrolls"], f"{path}: the widest table is wider than the phone, and nothing scrolls"
    visit.page.screenshot(path=str(SCREENSHOTS / f"phone-{path.strip('/')}-scrolled.png"))
    assert 0 <= last["left"] and last["right"] <= last["width"] + 1, (path, last)
    visit.page.close()


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("path", ["results/", "lessons/01_shapes/", "cheatsheet/"])
def test_screenshots_of_the_pages_a_reader_compares(browser, base_url, path, width):
    """Screenshots for a person to look at (results, a lesson, the cheat sheet)."""
    visit = _visit(browser, base_url, path, width=width)
    _assert_clean(visit, path)
    name = path.strip("/").replace("/", "-")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    visit.page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"), full_page=True)
    visit.page.close()


def test_predict_answers_stay_folded_until_opened(browser, base_url):
    visit = _visit(browser, base_url, "lessons/01_shapes/")
    answers = visit.page.locator("details.jitlab-answer")
    assert answers.count() > 0, "no Predict answer is folded"
    first = answers.first
    assert first.get_attribute("open") is None
    output = first.locator(".jp-OutputArea").first
    assert not output.is_visible(), "the answer shows before the reader asks for it"
    first.locator("summary").click()
    assert output.is_visible()
    visit.page.close()


@pytest.mark.parametrize("page_type", ["exercises", "solutions"])
def test_exercise_and_solution_pages_load_clean(browser, base_url, page_type):
    path = f"{page_type}/{COURSE.exercises[0].stem}/"
    visit = _visit(browser, base_url, path, screenshot=page_type[:-1])
    _assert_clean(visit, path)
    visit.page.close()


def _search(page, query: str) -> int:
    """Type a query as a reader does; the number of pages Material says match."""
    search = page.locator("input.md-search__input")
    search.click()
    search.press_sequentially(query, delay=20)  # Material searches as you type
    page.locator(".md-search-result__item").first.wait_for(timeout=15_000)
    meta = page.locator(".md-search-result__meta")
    meta.filter(has_text="matching").wait_for(timeout=15_000)
    return int(meta.inner_text().split()[0])


def test_search_finds_weak_type(browser, base_url):
    visit = _visit(browser, base_url, "")
    assert _search(visit.page, "weak type") > 0
    visit.page.screenshot(path=str(SCREENSHOTS / "search.png"))
    _assert_clean(visit, "search")
    visit.page.close()


def test_search_finds_an_api_name_without_its_module(browser, base_url):
    # `jax.no_tracing` is taught in lessons 00, 04, 09 and 11 and on the cheat sheet;
    # a reader who types only `no_tracing` must find those pages, not two of them.
    visit = _visit(browser, base_url, "")
    assert _search(visit.page, "no_tracing") >= 5
    visit.page.close()


def test_the_offline_copy_opens_from_its_folder_with_search(browser, offline_site):
    """`make site-offline`, opened as a file: the learning path's links land on lesson
    pages (not on folder listings), the next-lesson link works, and search answers."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda err: problems.append(f"page error: {err}"))
    page.goto((offline_site / "index.html").as_uri(), wait_until="load")
    page.locator("article table a", has_text="Shapes").first.click()
    page.wait_for_load_state("load")
    assert page.url.endswith("/lessons/01_shapes.html"), page.url
    assert page.locator("text=Key points").count() > 0
    page.locator("a", has_text="Next lesson").first.click()
    page.wait_for_load_state("load")
    assert page.url.endswith("/lessons/02_dtypes.html"), page.url
    assert _search(page, "weak type") > 0
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "offline-search.png"))
    assert not problems, problems
    page.close()
