"""``jitlab dev runner-speed``: how fast the course answers, as ratios measured in one run.

A learner waits for ``jitlab check``; the floor under it is Python importing JAX, which
every kernel must do. So the figure that matters is the ratio of the two medians,
measured back to back on the same machine (absolute seconds mean little on a shared
laptop). With ``--site`` it also times the site: rendering when every lesson is already
executed (run it after ``make test``, which leaves them so; it counts the lessons the
site executes again, which makes the number of executions per ``make test``), and from
nothing, executing every lesson.
These are figures to read, not to assert: no test depends on them.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from jitlab.course.manifest import Course

Echo = Callable[[str], None]
GRADER = '# %% tags=["grader"]'  # the first grader cell's marker


def _timed(command: list[str], cwd: Path) -> tuple[float, str]:
    """Seconds the command took, and what it printed."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout[-500:]}{done.stderr[-500:]}")
    return elapsed, done.stdout + done.stderr


def _seconds(command: list[str], cwd: Path) -> float:
    return _timed(command, cwd)[0]


def _median(command: list[str], cwd: Path, repeats: int) -> float:
    return statistics.median(_seconds(command, cwd) for _ in range(repeats))


def measure_check(course: Course, repeats: int, echo: Echo) -> float:
    """Median ``jitlab check`` of a few solved exercises against ``import jax``."""
    jitlab = str(Path(sys.executable).with_name("jitlab"))
    chosen = [e for e in course.exercises if e.slug in ("shapes", "dtypes", "control_flow")]
    chosen = chosen or list(course.exercises[:3])
    _seconds([jitlab, "check", str(chosen[0].source)], course.root)  # warm the disk cache
    import_jax = _median([sys.executable, "-c", "import jax"], course.root, repeats)
    echo(f"python -c 'import jax'          median {import_jax:6.2f} s ({repeats} runs)")
    ratios = []
    for exercise in chosen:
        check = _median([jitlab, "check", str(exercise.source)], course.root, repeats)
        ratios.append(check / import_jax)
        echo(
            f"jitlab check {exercise.number} (solved)       median {check:6.2f} s, "
            f"{check / import_jax:4.1f}x import jax"
        )
    ratio = statistics.median(ratios)
    echo(f"median ratio check / import jax {ratio:6.1f}x   (goal: at most 3x)")
    measure_watch(course, repeats, import_jax, echo)
    return ratio


def measure_watch(course: Course, repeats: int, import_jax: float, echo: Echo) -> float:
    """Median time from saving a solved exercise to ``jitlab watch`` printing its verdict.

    ``watch`` starts the next check's kernel while the learner edits, so a re-check
    skips the kernel's start as well as Python's. It watches a copy, outside the course,
    of one solution; each save adds a comment line above the graders."""
    jitlab = str(Path(sys.executable).with_name("jitlab"))
    exercise = next((e for e in course.exercises if e.slug == "dtypes"), course.exercises[0])
    with tempfile.TemporaryDirectory(prefix="jitlab-runner-speed-") as folder:
        copy = Path(folder) / exercise.source.name
        shutil.copyfile(exercise.source, copy)
        process = subprocess.Popen(
            [jitlab, "watch", str(copy)],
            cwd=course.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"},
        )
        lines: queue.Queue[str] = queue.Queue()
        assert process.stdout is not None
        stream = process.stdout
        threading.Thread(target=lambda: [lines.put(x) for x in stream], daemon=True).start()

        def verdict() -> None:
            while True:
                line = lines.get(timeout=120)
                if line.startswith(("PASS", "FAIL")):
                    if not line.startswith("PASS"):
                        raise RuntimeError(f"jitlab watch {copy.name}: {line.strip()}")
                    return

        try:
            verdict()  # the first check, when watch starts
            seconds = []
            for number in range(repeats):
                time.sleep(1.5)  # the next kernel is up by now, as while a learner edits
                start = time.perf_counter()
                text = copy.read_text(encoding="utf-8")
                copy.write_text(text.replace(GRADER, f"# edit {number}\n\n{GRADER}", 1))
                verdict()
                seconds.append(time.perf_counter() - start)
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)
    median = statistics.median(seconds)
    echo(
        f"jitlab watch {exercise.number}: save -> verdict  median {median:6.2f} s, "
        f"{median / import_jax:4.1f}x import jax"
    )
    return median


def measure_site(course: Course, echo: Echo) -> None:
    mkdocs = str(Path(sys.executable).with_name("mkdocs"))
    out = course.build_dir / "runner-speed-site"
    cache = course.build_dir / "mkdocs-jupyter-cache"
    shutil.rmtree(cache, ignore_errors=True)
    rendered, said = _timed(
        [mkdocs, "build", "--strict", "-q", "--site-dir", str(out)], course.root
    )
    again = re.search(r"executing (\d+) lesson", said)
    total = len(course.lessons)
    executions = 1 + (int(again.group(1)) if again else 0) / total
    echo(
        f"executions of each lesson per `make test`: {executions:.2f} (the site build "
        f"executed {again.group(1) if again else 0} of {total} lessons again)"
    )
    echo(f"make site, lessons already executed {rendered:6.1f} s   (goal: at most 60 s)")
    executed = course.build_dir / "executed"
    shutil.rmtree(executed, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    scratch = _seconds([mkdocs, "build", "--strict", "-q", "--site-dir", str(out)], course.root)
    echo(f"make site from nothing (executes all) {scratch:6.1f} s")
    shutil.rmtree(out, ignore_errors=True)


def run_runner_speed(course: Course, *, repeats: int, site: bool, echo: Echo) -> int:
    measure_check(course, repeats, echo)
    if site:
        measure_site(course, echo)
    return 0
