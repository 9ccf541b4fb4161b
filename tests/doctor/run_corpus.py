"""Run every program in tests/doctor/corpus under the doctor, in this one process, and
write what the doctor found as JSON (one Python start instead of forty).

Each program defines its own functions, so no program sees another's compilations; each
runs under its own ``watch()``. Two CPU devices are configured first, for the device
programs.

    python tests/doctor/run_corpus.py OUT.json [PROGRAM.py ...]
    python tests/doctor/run_corpus.py --summary OUT.json   # the table per cause
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
from pathlib import Path

import jax

jax.config.update("jax_num_cpu_devices", 2)

from jitlab.doctor import watch  # noqa: E402
from jitlab.doctor.recorder import MISS  # noqa: E402

CORPUS = Path(__file__).parent / "corpus"


def programs() -> list[Path]:
    return sorted(p for p in CORPUS.glob("*.py") if not p.name.startswith("_"))


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
        misses = [m for m in f.misses if m.kind == MISS]
        functions.setdefault(f.name, {"compiles": 0, "builds": 0, "misses": [], "jax": []})
        entry = functions[f.name]
        entry["compiles"] += f.compiles
        entry["builds"] += f.builds
        entry["misses"] += [m.causes for m in misses]
        entry["jax"] += [m.jax_causes for m in misses]
    return {
        "program": path.name,
        "error": error,
        "functions": functions,
        "internal_errors": report.internal_errors,
        "report": report.text(),
    }


def main(argv: list[str]) -> int:
    target = Path(argv[0])
    chosen = [Path(a) for a in argv[1:]] or programs()
    results = [run_one(p) for p in chosen]
    target.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
