"""How much does ``jitlab doctor`` cost a program that does not recompile?

Two measurements:

1. Per call, in one process: the same functions jitted plainly and under the doctor,
   timed in many short alternating blocks; the fastest block of each is kept. This is
   the steady-state cost of watching (a training step, and a tiny function: the worst
   case, where the call itself costs a few microseconds).
2. Whole programs: a training loop (one compilation, then N cached steps) and a tight
   loop over a tiny jitted function, each run alternately with ``python`` and with
   ``python -m jitlab.doctor --``. Process wall time includes the doctor's start-up
   (importing it) and its report.

    .venv/bin/python tools/bench_doctor.py [--repeats 5] [--steps 2000] [--blocks 100]

A benchmark, not a test: on a shared machine the numbers are noisy, so it prints the
minimum and median over repeats, the load average, and the machine it ran on.
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


def _make_step(jit):
    import jax
    import jax.numpy as jnp

    @jit
    def train_step(params, x, y):
        def loss(p):
            hidden = jnp.tanh(x @ p["w1"] + p["b1"])
            return jnp.mean((hidden @ p["w2"] - y) ** 2)

        value, grads = jax.value_and_grad(loss)(params)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), value

    return train_step


def _make_tiny(jit):
    @jit
    def tiny(x):
        return x + 1

    return tiny


def in_process(blocks: int) -> None:
    """The same functions jitted plainly and under the doctor, in one process: many short
    blocks of calls, alternating, and the fastest block of each. Both see the same load,
    and the minimum filters out the moments another process had the CPU."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jitlab.doctor import watch

    rng = np.random.default_rng(0)
    params = {
        "w1": jnp.asarray(rng.normal(size=(64, 256)) / 8, jnp.float32),
        "b1": jnp.zeros(256),
        "w2": jnp.asarray(rng.normal(size=(256, 1)) / 16, jnp.float32),
    }
    data = [
        (
            rng.normal(size=(128, 64)).astype(np.float32),
            rng.normal(size=(128, 1)).astype(np.float32),
        )
        for _ in range(16)
    ]
    x = jnp.ones(3)
    plain_step, plain_tiny = _make_step(jax.jit), _make_tiny(jax.jit)
    with watch():
        watched_step, watched_tiny = _make_step(jax.jit), _make_tiny(jax.jit)

        def steps(fn, n=50, clock=time.perf_counter):
            p = params
            start = clock()
            for i in range(n):
                p, _ = fn(p, *data[i % 16])
            jax.block_until_ready(p)
            return 1e6 * (clock() - start) / n

        def tinies(fn, n=1000, clock=time.perf_counter):
            start = clock()
            for _ in range(n):
                fn(x)
            fn(x).block_until_ready()
            return 1e6 * (clock() - start) / n

        for label, bench, plain, watched in (
            ("training step", steps, plain_step, watched_step),
            ("tiny jitted function", tinies, plain_tiny, watched_tiny),
        ):
            bench(plain, 5), bench(watched, 5)  # compile both
            best = {"plain": float("inf"), "watched": float("inf")}
            for _ in range(blocks):
                best["plain"] = min(best["plain"], bench(plain))
                best["watched"] = min(best["watched"], bench(watched))
            a, b = best["plain"], best["watched"]
            print(
                f"{label:<22} plain {a:8.2f} us/call  watched {b:8.2f} us/call  "
                f"+{b - a:.2f} us ({100 * (b - a) / a:.1f}%)"
            )
            # The same in the calling thread's CPU time: on a loaded machine, wall-clock
            # blocks also count the time other processes had the CPU; this thread's CPU
            # time counts only the Python side of each call, where the doctor's wrapper
            # runs (XLA's own threads are not in it).
            cpu = {"plain": float("inf"), "watched": float("inf")}
            for _ in range(blocks):
                cpu["plain"] = min(cpu["plain"], bench(plain, clock=time.thread_time))
                cpu["watched"] = min(cpu["watched"], bench(watched, clock=time.thread_time))
            a, b = cpu["plain"], cpu["watched"]
            print(
                f"{label + ' (cpu)':<22} plain {a:8.2f} us/call  watched {b:8.2f} us/call  "
                f"+{b - a:.2f} us ({100 * (b - a) / a:.1f}%); +{b - a:.2f} us on a 200 us "
                f"step is {100 * (b - a) / 200:.2f}%"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--tiny-calls", type=int, default=50000)
    parser.add_argument("--blocks", type=int, default=100)
    args = parser.parse_args()
    import jax

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.system()}; Python {platform.python_version()}; jax {jax.__version__}"
    )
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"\nper call, in one process (fastest of {args.blocks} alternating blocks)")
    in_process(args.blocks)
    compare(TRAINING, args.steps, args.repeats, "training loop that does not recompile")
    compare(TINY, args.tiny_calls, args.repeats, "worst case: a tiny jitted function, tight loop")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
