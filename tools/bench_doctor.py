"""How much does ``jitlab doctor`` cost a program that does not recompile?

Runs the same small training loop (one compilation, then N steps that hit the cache)
alternately with ``python`` and with ``python -m jitlab.doctor --``, several times each,
and prints the whole-process wall time and the loop's own time for both. A second
program calls a tiny jitted function in a tight loop: the worst case for the doctor's
per-call wrapper, reported in microseconds per call.

    .venv/bin/python tools/bench_doctor.py [--repeats 5] [--steps 2000]

This is a benchmark, not a test: on a shared machine the numbers are noisy, so it reports
the minimum and the median of the repeats and the machine it ran on.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAINING = """
import sys, time
import jax, jax.numpy as jnp, numpy as np

steps = int(sys.argv[1])

@jax.jit
def train_step(params, x, y):
    def loss(p):
        hidden = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((hidden @ p["w2"] - y) ** 2)
    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), value

rng = np.random.default_rng(0)
params = {
    "w1": jnp.asarray(rng.normal(size=(64, 256)) / 8, jnp.float32),
    "b1": jnp.zeros(256),
    "w2": jnp.asarray(rng.normal(size=(256, 1)) / 16, jnp.float32),
}
data = [
    (rng.normal(size=(128, 64)).astype(np.float32), rng.normal(size=(128, 1)).astype(np.float32))
    for _ in range(16)
]
params, value = train_step(params, *data[0])  # the one compilation
jax.block_until_ready(params)
start = time.perf_counter()
for i in range(steps):
    params, value = train_step(params, *data[i % 16])
    if i % 100 == 0:
        float(value)  # the loop logs now and then, as training loops do
jax.block_until_ready(params)
print(f"loop_seconds {time.perf_counter() - start:.6f} per_step_us "
      f"{1e6 * (time.perf_counter() - start) / steps:.1f}")
"""

TINY = """
import sys, time
import jax, jax.numpy as jnp

calls = int(sys.argv[1])

@jax.jit
def tiny(x):
    return x + 1

x = jnp.ones(3)
tiny(x).block_until_ready()
start = time.perf_counter()
for _ in range(calls):
    tiny(x)
tiny(x).block_until_ready()
print(f"loop_seconds {time.perf_counter() - start:.6f} per_step_us "
      f"{1e6 * (time.perf_counter() - start) / calls:.2f}")
"""


def run(command: list[str]) -> tuple[float, float, float]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    words = done.stdout.split()
    loop = float(words[words.index("loop_seconds") + 1])
    per = float(words[words.index("per_step_us") + 1])
    return wall, loop, per


def compare(source: str, n: int, repeats: int, label: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "program.py"
        script.write_text(source)
        plain_cmd = [sys.executable, str(script), str(n)]
        doctor_cmd = [sys.executable, "-m", "jitlab.doctor", "--", "python", str(script), str(n)]
        plain, doctor = [], []
        run(plain_cmd)  # warm the file system cache once
        for _ in range(repeats):  # alternate, so drifts in machine load hit both alike
            plain.append(run(plain_cmd))
            doctor.append(run(doctor_cmd))
    result = {}
    print(f"\n{label} ({n} calls, {repeats} runs each, alternating)")
    print(f"{'':22}{'plain':>12}{'doctor':>12}{'overhead':>10}")
    for i, what in enumerate(("process wall s", "loop s", "per call us")):
        for stat_name, stat in (("min", min), ("median", statistics.median)):
            a = stat(r[i] for r in plain)
            b = stat(r[i] for r in doctor)
            over = 100 * (b - a) / a
            print(f"{what + ' ' + stat_name:<22}{a:>12.4f}{b:>12.4f}{over:>9.1f}%")
            result[f"{what} {stat_name}"] = over
    return result


def in_process(source: str, n: int, repeats: int, label: str) -> None:
    """The same program's jitted function, watched and not, in one process: alternating
    blocks of n calls, so both see the same machine load."""
    import jax

    from jitlab.doctor import watch

    namespace: dict = {}
    body = source.split("steps = int(sys.argv[1])")[-1].split("calls = int(sys.argv[1])")[-1]
    head, _, _ = body.partition("start = time.perf_counter()")
    plain_ns: dict = {"jax": jax}
    exec("import jax, jax.numpy as jnp, numpy as np\n" + head, plain_ns)
    fn_name = "train_step" if "train_step" in head else "tiny"
    with watch():
        watched_ns: dict = {}
        exec("import jax, jax.numpy as jnp, numpy as np\n" + head, watched_ns)
        timings: dict[str, list[float]] = {"plain": [], "watched": []}
        for _ in range(repeats):
            for which, ns in (("plain", plain_ns), ("watched", watched_ns)):
                fn = ns[fn_name]
                if fn_name == "train_step":
                    params, data = ns["params"], ns["data"]
                    start = time.perf_counter()
                    for i in range(n):
                        params, value = fn(params, *data[i % 16])
                    jax.block_until_ready(params)
                else:
                    x = ns["x"]
                    start = time.perf_counter()
                    for _ in range(n):
                        fn(x)
                    fn(x).block_until_ready()
                timings[which].append(1e6 * (time.perf_counter() - start) / n)
    del namespace
    a, b = min(timings["plain"]), min(timings["watched"])
    ma, mb = statistics.median(timings["plain"]), statistics.median(timings["watched"])
    print(f"\n{label}, in one process ({repeats} blocks of {n} calls each, alternating)")
    print(
        f"  us per call, min:    plain {a:9.2f}  watched {b:9.2f}  overhead {100 * (b - a) / a:5.1f}%"
    )
    print(
        f"  us per call, median: plain {ma:9.2f}  watched {mb:9.2f}  overhead {100 * (mb - ma) / ma:5.1f}%"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--tiny-calls", type=int, default=50000)
    args = parser.parse_args()
    import jax

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.system()}; Python {platform.python_version()}; jax {jax.__version__}"
    )
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    in_process(TRAINING, 500, 2 * args.repeats + 1, "training step")
    in_process(TINY, 20000, 2 * args.repeats + 1, "tiny jitted function")
    compare(TRAINING, args.steps, args.repeats, "training loop that does not recompile")
    compare(TINY, args.tiny_calls, args.repeats, "worst case: a tiny jitted function, tight loop")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
