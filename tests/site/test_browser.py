"""The site in a real browser: headless Chromium, every request outside the local server
blocked. Fails on a console error, a failed request, a plot that did not load, or a
search that finds nothing. Keeps one screenshot per page type in _build/screenshots/."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from jitlab.course import load_course

pytestmark = pytest.mark.slow  # builds the site: left out of `make test-fast`

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


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), "Chromium is missing: apt-get install chromium (.ci/run does)"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


class PageVisit:
    """One page load with every problem the browser reports collected."""

    def __init__(self, browser, base_url: str) -> None:
        self.problems: list[str] = []
        self.blocked: list[str] = []
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
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


def _visit(browser, base_url: str, path: str, screenshot: str | None = None) -> PageVisit:
    visit = PageVisit(browser, base_url)
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
        assert visit.page.locator("img").count() > 0, f"{path}: no plot on the page"
    assert visit.page.locator("text=Key points").count() > 0
    visit.page.close()


@pytest.mark.parametrize("page_type", ["exercises", "solutions"])
def test_exercise_and_solution_pages_load_clean(browser, base_url, page_type):
    path = f"{page_type}/{COURSE.exercises[0].stem}/"
    visit = _visit(browser, base_url, path, screenshot=page_type[:-1])
    _assert_clean(visit, path)
    visit.page.close()


def test_search_finds_weak_type(browser, base_url):
    visit = _visit(browser, base_url, "")
    search = visit.page.locator("input.md-search__input")
    search.click()
    search.press_sequentially("weak type", delay=20)  # Material searches as you type
    results = visit.page.locator(".md-search-result__item")
    results.first.wait_for(timeout=15_000)
    assert results.count() > 0
    visit.page.screenshot(path=str(SCREENSHOTS / "search.png"))
    _assert_clean(visit, "search")
    visit.page.close()
