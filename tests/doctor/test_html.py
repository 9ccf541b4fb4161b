"""``jitlab doctor --html``: one self-contained page, checked in headless Chromium the way
the site is (tests/site/test_browser.py: every request outside the page blocked and
counted), at 1280 px and at a phone's 390 px. The report is of a loop that compiles as
often as the capstone's naive loop (32 compilations) with three causes at once and a
second function, and it must stay under 1 MB. Its programs are trivial, so that the page,
not XLA, is what the test spends its time on."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "doctor" / "corpus"


def _site_browser_tests():
    """tests/site/test_browser.py's browser fixture and page visit (tests/ is no package)."""
    spec = importlib.util.spec_from_file_location(
        "site_test_browser", ROOT / "tests" / "site" / "test_browser.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_browser_tests = _site_browser_tests()
browser = _browser_tests.browser  # the fixture: Chromium, or a skip (a failure in CI)
PageVisit = _browser_tests.PageVisit


def _doctor(*args: str, cwd: Path = CORPUS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jitlab.doctor", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


LOOP = """
import jax
import numpy as np


@jax.jit
def train_step(batch, lr):
    return (batch["x"].sum(axis=1) * lr).mean()


@jax.jit
def evaluate(x):
    return x.mean()


for n in range(1, 33):  # a new length every step, a key now and then, two kinds of lr
    batch = {"x": np.ones((4, n), np.float32)}
    if n % 4 == 0:
        batch["weights"] = np.ones(4, np.float32)
    train_step(batch, 0.1 if n % 3 else np.float64(0.1))
for n in (2, 3):
    evaluate(np.ones(n, np.float32))
"""


@pytest.fixture(scope="module")
def loop_report(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("html")
    (folder / "loop.py").write_text(LOOP)
    page, data = folder / "report.html", folder / "report.json"
    done = _doctor("--html", str(page), "--json", str(data), "--", "python", "loop.py", cwd=folder)
    assert done.returncode == 0, done.stderr
    report = json.loads(data.read_text())
    assert [f["compiles"] for f in report["functions"]] == [32, 2], done.stderr
    return page, report


def test_the_report_of_32_compilations_is_one_small_self_contained_file(loop_report):
    page, data = loop_report
    size = page.stat().st_size
    print(f"32 compilations: report.html is {size:,} bytes")
    assert size < 1_000_000
    text = page.read_text()
    assert "<link" not in text and " src=" not in text  # nothing to fetch
    assert text.count('<section class="function"') == len(data["functions"])


def test_an_unwritable_path_is_said_before_the_program_runs(tmp_path):
    target = tmp_path / "no such folder" / "report.html"
    done = _doctor("--html", str(target), "--", "python", "shape_2_last_batch.py")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"jitlab doctor: cannot write the HTML report to {target}: its folder does not exist"
    ]
    assert "(shape): 1 miss" not in done.stderr  # the program was not run for nothing
    assert not target.parent.exists()


def test_a_folder_given_as_the_json_report_is_refused(tmp_path):
    done = _doctor("--json", str(tmp_path), "--", "python", "shape_2_last_batch.py")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"jitlab doctor: cannot write the JSON report to {tmp_path}: it is a folder"
    ]


SIDEWAYS = "() => document.documentElement.scrollWidth - window.innerWidth"


@pytest.mark.slow  # Chromium, as the site's browser tests
@pytest.mark.parametrize("width", [1280, 390])
def test_the_page_in_a_browser(browser, loop_report, width):
    page_file, data = loop_report
    base = page_file.parent.as_uri() + "/"
    visit = PageVisit(browser, base, width)
    page = visit.page
    page.goto(page_file.as_uri(), wait_until="load")
    assert not visit.blocked, f"outside requests: {visit.blocked[:5]}"
    assert not visit.problems, visit.problems
    assert page.evaluate(SIDEWAYS) <= 0, f"the page scrolls sideways at {width} px"

    # Every function in the table has its section, and the row links to it.
    names = [f["name"] for f in data["functions"]]
    links = page.eval_on_selector_all("#functions tbody a", "as => as.map(a => a.hash)")
    assert len(links) == len(names)
    for link in links:
        assert page.locator(f"section.function{link}").count() == 1, link

    # A click on a miss opens it; so does a click on its column of the timeline.
    worst = next(i for i, f in enumerate(data["functions"], 1) if f["recompiles"])
    miss = page.locator(f"#f{worst}-miss-2")
    assert miss.evaluate("d => d.open") is False
    miss.locator("> summary").click()
    assert miss.evaluate("d => d.open") is True
    assert "JAX says" in miss.inner_text()
    third = page.locator(f"#f{worst}-miss-3")
    assert third.evaluate("d => d.open") is False
    page.locator(f'#f{worst} svg.timeline a[href="#f{worst}-miss-3"]').click()
    page.wait_for_function(f"() => document.getElementById('f{worst}-miss-3').open")

    # The table sorts: by calls, most first, then fewest first.
    def column(index: int) -> list[float]:
        return page.eval_on_selector_all(
            "#functions tbody tr",
            f"rows => rows.map(r => parseFloat(r.cells[{index}].dataset.value))",
        )

    heading = page.locator("#functions th", has_text="calls")
    heading.click()
    assert column(2) == sorted(column(2), reverse=True)
    heading.click()
    assert column(2) == sorted(column(2))
    assert not visit.blocked and not visit.problems, visit.problems
    page.close()


def test_a_location_wraps_only_at_a_folder_and_jax_text_keeps_its_address_apart():
    """`train.py:29` never splits (it did, as `train.py:2` / `9`): a location breaks only
    after a folder's slash or at a space; and JAX's text that runs into a web address
    gets a space before it."""
    from jitlab.doctor import html as page

    shown = page._path("src/project/train.py:29")
    assert shown == '<code class="path">src/<wbr>project/<wbr>train.py:29</code>'
    assert "code.path { overflow-wrap: normal; word-break: normal; }" in page._STYLE
    said = "different input types: * at x, now f32[3] and before f32[2]https://docs.jax.dev/x"
    assert page._url_apart(said).endswith("f32[2] https://docs.jax.dev/x")
    assert page._url_apart("see https://a.b") == "see https://a.b"
