"""Shared fixtures.

- Every test gets its own progress file: a learner's ``.jitlab/`` is never touched.
- Every test sees an 80-column terminal, whatever it runs in: the runner wraps its
  verdicts to the terminal's width, and a phrase a test looks for must not be split in
  a narrow terminal and whole in a wide one.
- ``fixture_course`` copies the two-lesson course in ``tests/fixture_course`` to a
  temporary folder and points the tools at it, so the runner's tests never run (or
  write to) the real exercises.
- ``site`` builds the real site once per session, reusing the lessons that the same
  ``make test`` run executed under nbval; ``offline_site`` builds the file:// copy.

How ``make test`` spreads the tests over its workers: ``SPREAD`` and ``TOGETHER`` below.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

from jitlab.course.manifest import ROOT_ENV, Course, load_course
from jitlab.learner.progress import STATE_ENV

FIXTURE = Path(__file__).parent / "fixture_course"


@pytest.fixture(autouse=True)
def isolated_progress(tmp_path, monkeypatch):
    monkeypatch.setenv(STATE_ENV, str(tmp_path / "state.json"))


@pytest.fixture(autouse=True)
def terminal_of_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # read first by shutil.get_terminal_size
    monkeypatch.setenv("LINES", "24")


@pytest.fixture
def fixture_course(tmp_path, monkeypatch) -> Course:
    """A private copy of the fixture course, with the tools pointed at it."""
    root = tmp_path / "course"
    shutil.copytree(FIXTURE, root)
    monkeypatch.setenv(ROOT_ENV, str(root))
    graders = str(root / "graders")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [graders, os.environ.get("PYTHONPATH")]))
    )
    return load_course(root)


# How `make test` spreads the tests over pytest-xdist's workers (``--dist loadfile``,
# refined by ``pytest_xdist_make_scheduler`` below): a file to a worker, so that its
# module fixtures are set up once, except these files, whose tests are independent and
# long (a kernel or two each), and go one by one to whichever worker is free ...
SPREAD = frozenset({"tests/maintainer/test_verify.py"})
# ... and these files, which go together to one worker: the other would wait for the
# site build they share.
TOGETHER = {"tests/site/test_site.py": "site", "tests/site/test_browser.py": "site"}


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, its group, or the test itself."""
    path = nodeid.split("::", 1)[0]
    return nodeid if path in SPREAD else TOGETHER.get(path, path)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: `-p no:xdist` runs too
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class CourseScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return CourseScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The units are sent in the order collected: the long ones first (`slow` is the mark
    # they carry) packs the workers best, since none starts last while the other worker
    # sits idle. The sort is stable: within each half the files keep their order.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _build_site(target_name: str, **env: str) -> Path:
    """Build once per test run, even when pytest-xdist's workers each ask for it: the
    first one builds under a lock, and the others find the build stamped with the run."""
    course = load_course()
    target = course.build_dir / target_name
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")
    stamp = course.build_dir / f"{target_name}.run"
    course.build_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(course.build_dir / f"{target_name}.lock")):
        if run and stamp.exists() and stamp.read_text(encoding="utf-8") == run:
            return target
        stamp.unlink(missing_ok=True)
        _run_mkdocs(course, target, env)
        stamp.write_text(run, encoding="utf-8")
    return target


def _run_mkdocs(course: Course, target: Path, env: dict[str, str]) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=course.root,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", **env},
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-5000:]


@pytest.fixture(scope="session")
def site() -> Path:
    """The real site, built once per test session."""
    return _build_site("site")


@pytest.fixture(scope="session")
def offline_site(site: Path) -> Path:
    """The copy for a USB stick (`make site-offline`): one file per page, opened over
    file://. Built after ``site``, so it reuses the lessons that build executed."""
    return _build_site("site-offline", OFFLINE="true")
