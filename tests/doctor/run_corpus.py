"""Run every program in tests/doctor/corpus under the doctor, in this one process, and
write what the doctor found as JSON (one Python start instead of forty).

Each program defines its own functions, so no program sees another's compilations; each
runs under its own ``watch()``. Two CPU devices are configured first, for the device
programs.

    python tests/doctor/run_corpus.py OUT.json [PROGRAM.py ...]
    python tests/doctor/run_corpus.py --summary OUT.json   # results per cause, and JAX's

Each program states what the doctor must find, in comment lines:

    # doctor-cause: shape                 (the cause the program is filed under)
    # doctor-expect: NAME MISS MISS ...   (one cause set per miss after the first, in order;
                                           a set is written a+b, a repeat as a*3)
    # doctor-expect: NAME causes=a,b compiles=N   (the union of causes, and the count)
    # doctor-expect: NAME retraces=N      (retraces that found a compiled program: apart)
    # doctor-expect: NAME python=N        (warm calls that went through jit's Python path)

A line with a name and nothing else expects no miss at all. Two functions of one name
are named as the report shows them (their qualified names). Optionally:

    # doctor-functions: NAME NAME ...     (exactly the functions the doctor watched)
    # doctor-helpers: NAME@LINE ...       (JAX's helpers the report advises on, by line)
    # doctor-persistent: NAME miss=N hit=N written=N not_written=N   (the disk cache's say)
    # doctor-says: TEXT                   (words the text report prints, spaces as wrapped)
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
from pathlib import Path

import jax

import jitlab.course  # noqa: F401 - registers the course's lessons with the doctor
from jitlab.doctor import watch
from jitlab.doctor.report import helper_sites

CORPUS = Path(__file__).parent / "corpus"


def programs() -> list[Path]:
    return sorted(p for p in CORPUS.glob("*.py") if not p.name.startswith("_"))


def capstone(path: Path) -> bool:
    """The capstone's loops cost as much as all the other programs together: they run in a
    test file of their own (tests/doctor/test_corpus_capstone.py), so that pytest-xdist
    runs them beside the rest."""
    return path.name.startswith("capstone_")


def run_in_a_subprocess(chosen: list[Path], out: Path) -> dict[str, dict]:
    """Run ``chosen`` in one fresh Python, as ``main`` does; their results by file name."""
    import subprocess

    done = subprocess.run(
        [sys.executable, __file__, str(out), *map(str, chosen)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["program"]: r for r in json.loads(out.read_text())}


def watched_names(path: Path, key: str = "functions") -> list[str] | None:
    for line in path.read_text().splitlines():
        if line.startswith(f"# doctor-{key}:"):
            return sorted(line.split(":", 1)[1].split())
    return None


def header(path: Path) -> tuple[str, list[list[str]]]:
    cause, expects = "", []
    for line in path.read_text().splitlines():
        if line.startswith("# doctor-cause:"):
            cause = line.split(":", 1)[1].strip()
        elif line.startswith("# doctor-expect:"):
            expects.append(line.split(":", 1)[1].split())
    return cause, expects


def expected_misses(tokens: list[str]) -> list[set[str]]:
    misses = []
    for token in tokens:
        spec, _, times = token.partition("*")
        misses += [set(spec.split("+"))] * (int(times) if times else 1)
    return misses


def problems(path: Path, result: dict) -> list[str]:
    """What differs from the program's header (empty when the doctor got it right)."""
    found = []
    if result["error"] is not None:
        found.append(f"the program failed: {result['error']}")
    if result["internal_errors"]:
        found.append(f"internal errors: {result['internal_errors']}")
    names = watched_names(path)
    if names is not None and sorted(result["functions"]) != names:
        found.append(f"watched {sorted(result['functions'])}, expected {names}")
    for line in path.read_text().splitlines():
        if not line.startswith("# doctor-persistent:"):
            continue
        name, *counts = line.split(":", 1)[1].split()
        said = result["functions"].get(name, {}).get("persistent", {})
        got = {
            "miss": said.get("miss", 0),
            "hit": said.get("hit", 0),
            "written": said.get("written", 0),
            "not_written": sum(n for k, n in said.items() if k.startswith("not written")),
        }
        want = {k: int(v) for k, v in (c.split("=") for c in counts)}
        if {k: got[k] for k in want} != want:
            found.append(f"{name}: persistent cache {said}, expected {want}")
    said = " ".join(result["report"].split())
    for line in path.read_text().splitlines():
        if line.startswith("# doctor-says:"):
            words = " ".join(line.split(":", 1)[1].split())
            if words not in said:
                found.append(f"the report does not say {words!r}")
    helpers = watched_names(path, "helpers") or []
    if sorted(result["helpers"]) != helpers:
        found.append(f"advice on helpers {sorted(result['helpers'])}, expected {helpers}")
    for tokens in header(path)[1]:
        name, rest = tokens[0], tokens[1:]
        seen = result["functions"].get(name)
        if seen is None:
            found.append(f"{name} did not run (ran: {sorted(result['functions'])})")
            continue
        options = dict(t.split("=", 1) for t in rest if "=" in t)
        misses = [t for t in rest if "=" not in t]
        got = [set(m) for m in seen["misses"]]
        if "causes" in options:
            union = set().union(*got) if got else set()
            if union != set(options["causes"].split(",")):
                found.append(f"{name}: causes {sorted(union)}, expected {options['causes']}")
        for count in ("compiles", "retraces", "calls", "python"):
            if count in options and seen[count] != int(options[count]):
                found.append(f"{name}: {seen[count]} {count}, expected {options[count]}")
        if (misses or not options) and got != expected_misses(misses):
            found.append(f"{name}: misses {got}, expected {expected_misses(misses)}")
    return found


def summary(results: list[dict]) -> str:
    """Per cause: programs, misses, how many the doctor classified as the header says, and
    how many of those misses JAX's own explanation named the same way."""
    rows: dict[str, list[int]] = {}
    for result in results:
        path = CORPUS / result["program"]
        cause = header(path)[0]
        row = rows.setdefault(cause, [0, 0, 0, 0])
        row[0] += 1
        ok = not problems(path, result)
        for f in result["functions"].values():
            row[1] += len(f["misses"])
            row[2] += len(f["misses"]) if ok else 0
            row[3] += sum(set(j) == set(d) for j, d in zip(f["jax"], f["misses"], strict=True))
    lines = [f"{'filed under':<14}{'programs':>9}{'misses':>8}{'doctor right':>14}{'JAX same':>10}"]
    for cause, (n, misses, right, jax_same) in sorted(rows.items()):
        lines.append(f"{cause:<14}{n:>9}{misses:>8}{right:>14}{jax_same:>10}")
    total = [sum(r[i] for r in rows.values()) for i in range(4)]
    lines.append(f"{'all':<14}{total[0]:>9}{total[1]:>8}{total[2]:>14}{total[3]:>10}")
    return "\n".join(lines)


def run_one(path: Path) -> dict:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(path)]
    sys.path.insert(0, str(path.parent))
    error = None
    out = io.StringIO()
    with watch() as doctor, contextlib.redirect_stdout(out):
        try:
            runpy.run_path(str(path), run_name="__main__")
        except BaseException as err:  # noqa: BLE001 - reported, not raised
            error = f"{type(err).__name__}: {err}"
    sys.argv, sys.path[:] = saved_argv, saved_path
    report = doctor.report()
    functions = {}
    for f in report.functions:
        misses = f.recompiles
        functions.setdefault(
            f.display or f.name,
            {
                "compiles": 0,
                "builds": 0,
                "retraces": 0,
                "calls": 0,
                "python": 0,
                "persistent": {},
                "misses": [],
                "jax": [],
            },
        )
        entry = functions[f.display or f.name]
        entry["compiles"] += f.compiles
        entry["builds"] += f.builds
        entry["retraces"] += len(f.retraces)
        entry["calls"] += f.calls
        entry["python"] += f.python_calls
        for k, n in f.persistent_cache().items():
            entry["persistent"][k] = entry["persistent"].get(k, 0) + n
        entry["misses"] += [m.causes for m in misses]
        entry["jax"] += [m.jax_causes for m in misses]
    return {
        "program": path.name,
        "error": error,
        "functions": functions,
        "internal_errors": report.internal_errors,
        "helpers": [
            f"{name}@{site.split(' in ')[0].rsplit(':', 1)[-1]}"
            for site, _, name, _, _ in helper_sites(report)
            if Path(site.split(":")[0]).name == path.name
        ],
        "report": report.text(),
    }


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--summary":
        print(summary(json.loads(Path(argv[1]).read_text())))
        return 0
    jax.config.update("jax_num_cpu_devices", 2)  # for the device programs; before any run
    target = Path(argv[0])
    chosen = [Path(a) for a in argv[1:]] or programs()
    results = [run_one(p) for p in chosen]
    target.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
