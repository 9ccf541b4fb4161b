# ---
# jupyter:
#   jitlab:
#     fix: one global shape and one configuration on every process, checked before the
#       first step
#     instructor_notes:
#     - Every experiment starts two fresh Python processes (about 3 s each on an idle
#       laptop). Run the cells in order and let each launch finish.
#     - 'The silent disagreement in section 2 is the hook: both processes finish, no
#       error, and neither has the right weights (both sum the gradient over the 7 real
#       rows; one divides by 8, the other by 6). Ask the room which process is right
#       before showing the reference.'
#     - Section 2 has two jobs that end badly on purpose. In the gathered-errors job,
#       process 1 aborts and the launcher kills process 0 after 3 s of silence; whether
#       process 0 raised first is a race, and the cell accepts each outcome (raised,
#       finished the step, or rarely still inside it). The declared-shape job runs with
#       shutdown_timeout_seconds=2 so that it ends by itself; mention that the default
#       is five minutes.
#     - The persistent-cache result (process 1 never gets a hit) is what this CPU setup
#       does. Do not promise learners the same on their cluster; teach them to count
#       cache hits per process.
#     - jax.distributed catches SIGTERM (its preemption notifier), so a stuck worker
#       survives a plain kill; the launcher uses SIGKILL (tests/instruments/test_multiprocess.py
#       checks both). Say so if someone tries to stop a runaway worker by hand.
#     - The exercise's grader starts two processes too; its cell takes about 5 to 10
#       s.
#     keypoints:
#     - Every process traces and compiles the step for itself. Two processes mean two
#       cold starts, and compile counts must be collected from each process.
#     - With a shared persistent cache, only process 0 writes. On this CPU setup process
#       1's cache key also differs from process 0's (its accelerator_config part), so
#       process 1 compiles again at every start.
#     - make_array_from_process_local_data infers the global shape from each process's
#       own rows. A ragged batch on one process gives that process a program of its
#       own. If the collectives still match in size, nothing fails and the processes
#       silently disagree; if not, gloo aborts a process (SIGABRT) and the other raises,
#       finishes or stalls, then hangs on its way out.
#     - 'Declaring the global shape makes the ragged process raise ValueError while
#       the other waits in the collective: a hang that ends only when jax.distributed''s
#       shutdown barrier gives up (shutdown_timeout_seconds, 300 s by default).'
#     - The fix is one global shape for every process and every step (pad to an agreed
#       number of rows, mask the padding), and configuration that process 0 decides
#       and broadcasts.
#     - Per-process compile counts do not show a static value that differs between processes.
#       Compare a fingerprint of each process's lowered program (multihost_utils.assert_equal)
#       before the first step.
#     minutes:
#       exercises: 20
#       teaching: 30
#     needs_sockets: 'Its processes run on the CPU (gloo collectives, as on a laptop)
#       and meet over TCP on 127.0.0.1, so it needs a machine that allows sockets: it
#       does not run on the TPU machine, which refuses them.'
#     objectives:
#     - Start two JAX processes on one machine with jax.distributed and collect what
#       each one reports.
#     - Count compilations per process, and tell which process writes the persistent
#       compilation cache.
#     - Predict what a ragged batch on one process does to a data-parallel step, and
#       fix it with one global shape and a mask.
#     - Make static configuration agree across processes, and check that every process
#       compiled the same program.
#     - Put every process's compile counts, cache-miss reasons and program fingerprints
#       in one table.
#     prerequisites:
#       lessons:
#       - shapes
#       - compiling_less
#       - devices_and_shardings
#     questions:
#     - When a job runs as several JAX processes, who traces and compiles, and how often?
#     - What does the persistent compilation cache do for a job of several processes?
#     - What happens when one process gets a batch of another shape than the others?
#     - What happens when a static value differs between processes?
#     - How do you see that two processes compiled different programs?
#     title: Many processes
#   jupytext:
#     formats: py:percent
#     notebook_metadata_filter: jitlab,kernelspec,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 14 · Many processes
#
# Once training outgrows one machine it runs as several JAX processes, one per host,
# joined by `jax.distributed`. They share one mesh of devices and meet in collectives
# (the all-reduce of the gradients, for instance). Who traces and compiles the step
# then, how often, and with which key? This lesson runs two real JAX processes on this
# machine, on CPU, with JAX's own multi-process runtime, and finds that a cause that
# cost one extra compilation on one machine can make the processes run *different
# programs*.

# %% tags=["remove-input"]
import jitlab

jitlab.intro()

# %%
import collections
import hashlib
import inspect
import logging
import os
import re
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jitlab.instruments import multiprocess

# %% [markdown]
# ## Two processes on one machine
#
# `jitlab.instruments.multiprocess.run(task)` starts two Python processes. Each one
# switches JAX's CPU collectives to gloo, calls
# `jax.distributed.initialize(coordinator_address="127.0.0.1:PORT", num_processes=2,
# process_id=i)` on a free port, and then calls `task(worker)`. The task reports with
# `worker.emit(kind, **numbers)`; `run` returns every record of every process. It also
# kills and reaps the processes, whatever happens, and stops a run in which nothing has
# happened for `stall_timeout` seconds.
#
# The workers cannot see this notebook's variables. `run` writes the source of the task
# and of its `helpers` to a small module that each worker imports (after the usual
# imports: `jax`, `jnp`, `np`, `NamedSharding`, `P`, `jitlab`, ...). So the worker
# program is the next cell, and it is plain JAX: a mesh over every device of every
# process, this process's rows of each batch, and a data-parallel SGD step for a
# linear model.


# %%
def data_mesh():
    """Every device of every process on one axis, "data" (Auto axes, see lesson 12)."""
    auto = (jax.sharding.AxisType.Auto,)
    return jax.make_mesh((jax.device_count(),), ("data",), axis_types=auto)


# %%
def local_batch(process_id, step, rows):
    """This process's rows of one step. The notebook calls it too, to check results."""
    rng = np.random.default_rng([process_id, step])
    x = rng.normal(size=(rows, 3)).astype(np.float32)
    y = x @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=rows)
    return x, y.astype(np.float32)


# %%
def inferred_batch(mesh, x, y):
    """One global array per input from each process's rows; JAX infers the global
    shape as (rows on this process) x (number of processes)."""
    rows = NamedSharding(mesh, P("data"))
    return tuple(jax.make_array_from_process_local_data(rows, a) for a in (x, y))


# %%
@jax.jit
def sgd_step(w, x, y):
    """Mean squared error of x @ w - y and one SGD step; x and y are split over "data",
    so XLA adds an all-reduce for the gradient and the loss."""
    err = x @ w - y
    return w - 0.1 * 2.0 * (x.T @ err) / y.shape[0], jnp.mean(err**2)


def program_id(step_fn, *args, **static):
    """A short fingerprint of the program step_fn compiles for these arguments."""
    text = step_fn.lower(*args, **static).as_text()
    return hashlib.sha256(text.encode()).hexdigest()[:10]


# %%
def train(worker, step_fn, make_batch, check=False, **static):
    """The loop every experiment shares: count step_fn's compilations on this process
    (xla_s: XLA's seconds, compiling or reading the persistent cache), report each
    step's shape, weights and time; check=True first compares programs (section 3)."""
    mesh = data_mesh()
    w = jax.device_put(np.zeros(3, np.float32), NamedSharding(mesh, P()))
    sizes = worker.options["sizes"][worker.process_id]
    with jitlab.count_compiles(step_fn) as n:
        for step, size in enumerate(sizes):
            start = time.perf_counter()
            batch = make_batch(mesh, *local_batch(worker.process_id, step, size))
            if check and step == 0:
                report_same_program(worker, step_fn, w, *batch, **static)
            w, _ = step_fn(w, *batch, **static)
            w_here = np.asarray(w.addressable_data(0))  # replicated: all of w
            seconds, shape = time.perf_counter() - start, batch[0].shape
            worker.emit("step", step=step, shape=shape, w=w_here, seconds=seconds)
    counts = {"traces": n.traces, "compiles": n.compiles, "xla_s": n.compile_seconds}
    reasons = [jitlab.miss_reason(e) for e in n.explanations]
    program = program_id(step_fn, w, *batch, **static)
    worker.emit("compiles", **counts, reasons=reasons, program=program)


# %%
HELPERS = [data_mesh, local_batch, inferred_batch, sgd_step, program_id, train]


def launch(task, *more, **settings):
    """multiprocess.run(task, ...) with the helpers above, and `more`."""
    return multiprocess.run(task, helpers=[*HELPERS, *more], **settings)


# %% [markdown]
# Each process reads the weights back from its own copy (`addressable_data(0)`): the
# weights are replicated, so every process holds all of them. The notebook can
# recompute any process's rows with `local_batch`, and so compute what one process
# training on *all* rows would get:


# %%
def reference(sizes):
    """Weights after each step, for one process that sees every real row (float64)."""
    w, history = np.zeros(3), []
    for step in range(len(sizes[0])):
        parts = [local_batch(p, step, sizes[p][step]) for p in range(len(sizes))]
        x = np.concatenate([x for x, _ in parts]).astype(np.float64)
        y = np.concatenate([y for _, y in parts]).astype(np.float64)
        w = w - 0.1 * 2.0 * x.T @ (x @ w - y) / len(y)
        history.append(w)
    return np.array(history)


# %%
def weights(run):
    """Each process's weights after each step: an array (process, step, 3)."""
    return np.array([[r["w"] for r in worker.of("step")] for worker in run.workers])


def show(run):
    """How each process of a run ended, and the start of its error if it raised."""
    for worker in run.workers:
        said = worker.error["message"][:110] if worker.error else "-"
        print(f"process {worker.process_id}: {worker.status()}; its error: {said}")


# %% [markdown]
# ## 1. One step, two processes, two jobs
#
# Five steps of four rows per process: the global batch is 8 x 3 at every step, on
# both processes. Each process turns on the persistent compilation cache (lesson 10) in
# one shared directory, with the thresholds at zero so that even this small step is
# written. A few more lines listen to JAX's cache events and keep the log of its
# compiler and of its cache key.


# %%
def watch_compilation_cache():
    """JAX's persistent-cache events and the log of its compiler and cache key."""
    events, lines = collections.Counter(), []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    def on_event(name, **kwargs):
        if name.startswith("/jax/compilation_cache/"):
            events[name.rsplit("/", 1)[-1]] += 1

    jax.monitoring.register_event_listener(on_event)
    for name in ("jax._src.compiler", "jax._src.cache_key"):
        logging.getLogger(name).setLevel(logging.DEBUG)
        logging.getLogger(name).addHandler(Keep())
    return events, lines


# %%
def cold_start(worker):
    events, lines = watch_compilation_cache()
    train(worker, sgd_step, inferred_batch)
    worker.emit("cache", events=dict(events), log=lines)


# %%
cache_dir = tempfile.TemporaryDirectory(prefix="jitlab-l14-")
same_shapes = {
    "sizes": [[4] * 5, [4] * 5],
    "jax_config": {
        "jax_compilation_cache_dir": cache_dir.name,
        "jax_persistent_cache_min_compile_time_secs": 0,
        "jax_persistent_cache_min_entry_size_bytes": -1,
    },
}

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How many compilations of <code>sgd_step</code> on each process? Then the same job
# starts again with the cache the first one left: which process gets a cache hit?</p>
# </div>

# %%
first_job = launch(cold_start, watch_compilation_cache, options=same_shapes).check()
written = sorted(os.listdir(cache_dir.name))
second_job = launch(cold_start, watch_compilation_cache, options=same_shapes).check()


# %% tags=["answer"] jupyter={"source_hidden": true}
def start_row(job, worker):
    counts, events = worker.one("compiles"), worker.one("cache")["events"]
    first_ms, xla_ms = 1e3 * worker.of("step")[0]["seconds"], 1e3 * counts["xla_s"]
    row = {"job": job, "process": worker.process_id, "compiles": counts["compiles"]}
    row |= {"XLA ms": xla_ms, "first step ms": first_ms}
    hits, written = events.get("cache_hits", 0), events.get("cache_misses", 0)
    return row | {"hits": hits, "written": written}


runs = {"first": first_job, "second": second_job}
start_rows = [start_row(job, w) for job, run in runs.items() for w in run.workers]
jitlab.print_table(start_rows)
print("files in the cache after the first job:", [n[:24] + "..." for n in written])
first, second = first_job.workers, second_job.workers
for run in runs.values():
    ready = run.one("ready")
    assert [(r["devices"], r["local_devices"]) for r in ready] == [(2, 1)] * 2
    assert [r["compiles"] for r in run.one("compiles")] == [1, 1]  # once per process
    assert len({r["program"] for r in run.one("compiles")}) == 1  # the same program
np.testing.assert_allclose(weights(first_job)[0], weights(first_job)[1])
assert [row["hits"] for row in start_rows] == [0, 0, 2, 0]

# %% [markdown]
# One compilation per process, twice over: the same step compiles on every host, and
# each process has a cold start of its own. The persistent cache helps only process 0
# (two hits in the second job: `sgd_step`, and the small program with which
# `device_put` checks that every process passed the same initial weights). Process 1
# has none. Two reasons, both in what the processes logged:
#
# - **Only process 0 writes.** Process 1 logged "Not writing persistent cache entry
#   since process_id != 0" for both programs, and wrote nothing, in either job.


# %%
def logged(worker, text, after=None):
    """What follows `after` (default: `text`) in each line of a process's compiler and
    cache-key log that holds `text`."""
    lines = [line for line in worker.one("cache")["log"] if text in line]
    return [line.split(after or text)[1] for line in lines]


def keys(worker):
    """The persistent-cache keys under which a process looked for sgd_step."""
    return [key.strip("'") for key in logged(worker, "key 'jit_sgd", "with key ")]


# %%
assert [w.one("cache")["events"].get("cache_misses", 0) for w in first] == [2, 0]
assert [len(logged(w, "since process_id != 0")) for w in first] == [0, 2]
assert [name.split("-")[0] for name in written] == ["jit__identity_fn", "jit_sgd_step"]
assert keys(first[0])[0] + "-cache" in written
assert sorted(os.listdir(cache_dir.name)) == written  # process 1 wrote nothing later

# %% [markdown]
# - **Process 1 looks under another key.** The cache key is a hash of several parts:
#   the lowered program, the jaxlib version, the compile options, the devices, ...
#   With JAX's `jax._src.cache_key` logger at DEBUG level, each part's hash is logged.
#   Side by side:

# %%
hashes = [logged(w, "hash of serialized ") for w in first]  # the last program's
p0_parts, p1_parts = (dict(part.split(": ") for part in h) for h in hashes)
rows = [{"key part": k, "process 0": h[:12]} for k, h in p0_parts.items()]
jitlab.print_table([r | {"process 1": p1_parts[r["key part"]][:12]} for r in rows])
assert [k for k in p0_parts if p0_parts[k] != p1_parts[k]] == ["accelerator_config"]
assert keys(first[1]) == keys(second[1])  # the same key in every job ...
assert keys(first[1])[0] != keys(first[0])[0]  # ... but not process 0's
fallback = [logged(w, "unable to hash accelerator config") for w in first]
assert fallback == [[], []]  # the topology was hashed

# %% [markdown]
# Everything matches except `accelerator_config`, the fingerprint of the device
# topology. JAX hashes `get_topology_for_devices(...).fingerprint()` there, and falls
# back to hashing the devices (logging "unable to hash accelerator config") only where
# a backend cannot describe its topology; neither process logged that fallback, so the
# fingerprint itself differs per process on this CPU setup. So even if process 1 were
# allowed to write, it would never find process 0's entries: at every start it compiles
# again. Other platforms hash other things (on GPU, for one, the key leaves out the
# device assignment, "to use cache key as invariant between processes", says
# `jax/_src/cache_key.py`). What your cluster does, its cache events will tell you:
# count hits per process.

# %%
cold, warm = start_rows[:2], start_rows[2:]  # the first job's processes, the second's
xla = {p: warm[p]["XLA ms"] / cold[p]["XLA ms"] for p in (0, 1)}
for p in (0, 1):
    label = f"process {p}: first step of the job"
    jitlab.record(f"{label}, empty cache", first_ms=cold[p]["first step ms"])
    first_ms = warm[p]["first step ms"]
    jitlab.record(f"{label}, cache left", first_ms=first_ms, speedup=1 / xla[p])
print(f"XLA's part, second job over first: process 0 {xla[0]:.2f}, 1 {xla[1]:.2f}")
assert xla[0] < 0.5  # read, not compiled (tracing and lowering run in both jobs)

# %% [markdown]
# ## 2. A ragged last batch on one process
#
# Four steps of four rows each, except the last one on process 1, which gets only the
# three rows left in its share of the data. Process 0 still has four.
#
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How many compilations on each process? Does the job raise, hang, or finish? And
# if it finishes, does either process have the right weights?</p></div>

# %%
ragged = {"sizes": [[4, 4, 4, 4], [4, 4, 4, 3]]}


def ragged_inferred(worker):
    train(worker, sgd_step, inferred_batch)


inferred = launch(ragged_inferred, options=ragged).check()

# %% tags=["answer"] jupyter={"source_hidden": true}
want, got = reference(ragged["sizes"]), weights(inferred)
for w in inferred.workers:
    shapes = " ".join(f"{s['shape'][0]}x3" for s in w.of("step"))
    print(f"process {w.process_id}: global x {shapes}, last w {got[w.process_id, -1]}")
print(f"reference (one process, all real rows): last w {want[-1]}")
assert [r["compiles"] for r in inferred.one("compiles")] == [1, 2]
assert [w.of("step")[-1]["shape"] for w in inferred.workers] == [[8, 3], [6, 3]]
assert "f32[6,3]" in inferred.workers[1].one("compiles")["reasons"][-1]
np.testing.assert_allclose(got[:, :3], [want[:3], want[:3]], rtol=1e-4)  # 3 good steps
assert not np.allclose(got[0, -1], got[1, -1], rtol=1e-3)  # then they disagree ...
assert not np.allclose(got[0, -1], want[-1], rtol=1e-3)  # ... and neither is right
assert not np.allclose(got[1, -1], want[-1], rtol=1e-3)

# %% [markdown]
# No error, no hang, and two different answers. `make_array_from_process_local_data`
# infers the global shape from the rows *this* process holds, so process 1 believed
# the global batch had 3 x 2 = 6 rows and compiled a second program for it (JAX's
# cache-miss explanation, on process 1 only, names the new type `f32[6,3]`). Process 0
# kept its 8-row program. The gradient's all-reduce carries three numbers in both
# programs, so the collective went through: process 0 divided the sum over 7 real rows
# by 8, process 1 divided it by 6. The "replicated" weights now differ between the
# processes, and every later step builds on that:

# %%
last = [local_batch(p, 3, n) for p, n in enumerate([4, 3])]
x7, y7 = (np.concatenate(parts).astype(np.float64) for parts in zip(*last, strict=True))
summed = 2.0 * x7.T @ (x7 @ want[-2] - y7)  # the gradient summed over the 7 real rows
np.testing.assert_allclose(got[0, -1], want[-2] - 0.1 * summed / 8, rtol=1e-4)
np.testing.assert_allclose(got[1, -1], want[-2] - 0.1 * summed / 6, rtol=1e-4)

# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>The same stream, but the step also gathers the per-example errors to every process
# (for logging): a collective that carries one number per row. What happens now?</p>
# </div>


# %%
def sgd_with_errors(w, x, y):
    err = x @ w - y
    return w - 0.1 * 2.0 * (x.T @ err) / y.shape[0], err**2


def ragged_gathered(worker):
    everywhere = NamedSharding(data_mesh(), P())
    step = jax.jit(sgd_with_errors, out_shardings=(everywhere, everywhere))
    train(worker, step, inferred_batch)


# %%
gathered = launch(ragged_gathered, sgd_with_errors, options=ragged, stall_timeout=3)

# %% tags=["answer"] jupyter={"source_hidden": true}
show(gathered)
abort = [line for line in gathered.workers[1].log.splitlines() if "what():" in line]
print("process 1's last words:", abort[0].split("] ")[-1])
p0, p1 = gathered.workers
assert len(p1.of("step")) == 3 and len(p0.of("step")) >= 3  # three good steps first
assert p1.signal_name == "SIGABRT" and not p1.killed
assert "Is there a distributed collective mismatch in your code?" in abort[0]
LOST_PEER = r"Connection (reset|closed) by peer|Broken pipe"  # gloo TCP: a lost peer
if p0.error:  # process 1's abort reached it in the middle of the step
    assert p0.error["type"] == "ValueError"
    assert p0.error["message"].startswith("UNKNOWN: Gloo")
    assert re.search(LOST_PEER, p0.error["message"]), p0.error["message"]
else:  # it finished the step, or (rarely) was still inside it, silent, when stopped
    assert len(p0.of("step")) == (4 if p0.of("finished") else 3), p0.log[-2000:]
assert gathered.stopped == "stalled" and p0.killed  # either way, it never exited
label = "ragged batch, gathered errors: process 1 aborts, the launcher stops process 0"
jitlab.record(label, total_s=gathered.seconds)

# %% [markdown]
# Now the collective itself does not match: the gathered vector has 8 entries in
# process 0's program and 6 in process 1's, so process 0 sends more than process 1 has
# room for. Gloo's size check fails inside process 1 and aborts it (SIGABRT, with
# gloo's own question "Is there a distributed collective mismatch in your code?").
# What process 0 sees is a race: if process 1's abort reaches it in the middle of the
# step, it raises a `ValueError` ("UNKNOWN: Gloo ... failed ... Connection reset by
# peer" here, or gloo's other words for a lost peer); if not, it finishes the step with what it received and carries on (and,
# rarely, it is still waiting inside the step, silent, when it is stopped).
# Either way it then does not exit: `jax.distributed` shuts down with a barrier that
# waits for every process, and process 1 is gone. The launcher stopped it after 3 s in
# which nothing happened.
#
# ## Declaring the global shape: loud on one process, a hang on the other
#
# `make_array_from_process_local_data` also accepts the global shape. Every process
# states it, 8 x 3, and the ragged process should notice.


# %%
def declared_batch(mesh, x, y, rows=4):
    """As inferred_batch, but every process states the global shape it expects."""
    split, total = NamedSharding(mesh, P("data")), rows * jax.process_count()
    put = jax.make_array_from_process_local_data
    return put(split, x, (total, x.shape[1])), put(split, y, (total,))


def ragged_declared(worker):
    train(worker, sgd_step, declared_batch)


# %%
options = {**ragged, "initialize": {"shutdown_timeout_seconds": 2}}
patient = launch(ragged_declared, declared_batch, options=options, stall_timeout=15)
show(patient)
print(f"the job took {patient.seconds:.1f} s, start-up included")

# %%
p0, p1 = patient.workers
assert p1.error["type"] == "ValueError"
assert p1.error["message"].startswith("Invalid host data, each dimension should match")
assert len(p0.of("step")) == 3, patient.describe()  # step 3 never came back
if p0.error:  # process 1's abort closed the connection before process 0 was stopped
    assert p0.error["message"].startswith("UNKNOWN: Gloo all-reduce failed")
assert patient.stopped is None  # nobody had to kill them ...
assert [w.signal_name for w in patient.workers] == ["SIGABRT"] * 2  # ... they aborted
assert all("Shutdown barrier has failed" in w.log for w in patient.workers)
initialize = inspect.signature(jax.distributed.initialize).parameters
assert initialize["shutdown_timeout_seconds"].default == 300
label = "ragged batch, declared global shape: both abort at a 2 s shutdown barrier"
jitlab.record(label, total_s=patient.seconds)

# %% [markdown]
# Process 1 raised at once, before its step: "Invalid host data ... the process data
# has 3 elements. Process addresses 4 elements". Process 0 had no such problem, entered
# the step, and waited in the all-reduce for a partner that never came. Process 1, on
# its way out, waited in `jax.distributed`'s shutdown barrier for process 0. Neither
# said why. The barrier gave up after `shutdown_timeout_seconds`, 2 s in this job, and
# both processes aborted ("Shutdown barrier has failed"; sometimes process 0 first
# raises "Gloo all-reduce failed", when process 1's abort reaches it before its own).
# The default is 300 s: five minutes of a job that neither works nor fails, on every
# host.
#
# ## The fix: one global shape for every process and every step
#
# Every process pads its rows to the same agreed number (here 4, the most any process
# gets) and sends a mask that says which rows are real. The global batch is 8 x 3 at
# every step on every process, and the step divides by the number of real rows, which
# it computes from the mask, inside the program. (The step also takes a weight decay,
# as a static argument; it is 0 here, and section 3 is about it.)


# %%
def padded_batch(mesh, x, y, rows=4):
    """Pad this process's rows to `rows` and add a mask: one global shape, always."""
    missing = rows - len(y)
    mask = np.r_[np.ones(len(y)), np.zeros(missing)].astype(np.float32)
    x, y = np.pad(x, ((0, missing), (0, 0))), np.pad(y, (0, missing))
    split, total = NamedSharding(mesh, P("data")), rows * jax.process_count()
    put = jax.make_array_from_process_local_data
    return tuple(put(split, a, (total, *a.shape[1:])) for a in (x, y, mask))


# %%
@jax.jit(static_argnames="decay")
def decayed_step(w, x, y, mask, decay):
    err = (x @ w - y) * mask
    real = jnp.sum(mask)
    grad = 2.0 * (x.T @ err) / real + decay * w
    return w - 0.1 * grad, jnp.sum(err**2) / real


def ragged_padded(worker):
    train(worker, decayed_step, padded_batch, decay=0.0)


# %%
fixed = launch(ragged_padded, padded_batch, decayed_step, options=ragged).check()
fixed_w = weights(fixed)
errors = {"padded": np.abs(fixed_w - want).max(), "inferred": np.abs(got - want).max()}
print("largest error against the reference:", errors)
assert [r["compiles"] for r in fixed.one("compiles")] == [1, 1]
assert len({r["program"] for r in fixed.one("compiles")}) == 1
assert len({r["program"] for r in inferred.one("compiles")}) == 2
assert {tuple(s["shape"]) for w in fixed.workers for s in w.of("step")} == {(8, 3)}
np.testing.assert_allclose(fixed_w, [want, want], rtol=1e-4, atol=1e-6)

# %% [markdown]
# One compilation per process, one program on both (the fingerprint of the lowered
# step is the same), and the weights of one process training on all real rows. The
# agreed number of rows is the contract: it must be the same on every process, so take
# it from the configuration of the job (the largest batch any process can get), never
# from the data a process happens to hold. When batch sizes vary a lot, the same holds
# for buckets: a few sizes, and every process must pick the same one at every step.
#
# ## 3. A static value read from each process's environment
#
# A job reads its weight decay from an environment variable, and the step takes it as
# a static argument (lesson 06): `decayed_step`, the fix's step. On one host the
# variable is set to something else: a stale shell profile, a different launch script.
# Process 1 gets `WEIGHT_DECAY=0.1`; process 0 has none and uses 0.


# %%
def assert_same_program(step_fn, *args, **static):
    """Raise AssertionError on every process unless all compile the same program."""
    from jax.experimental import multihost_utils

    fingerprint = program_id(step_fn, *args, **static)
    digest = np.frombuffer(bytes.fromhex(fingerprint), np.uint8)
    multihost_utils.assert_equal(digest, "the processes compile different programs")


# %%
def report_same_program(worker, step_fn, *args, **static):
    """assert_same_program, reported instead of raised: this lesson wants to see what
    happens next. A real job lets the AssertionError stop it."""
    try:
        assert_same_program(step_fn, *args, **static)
        worker.emit("same program", passed=True, **static)
    except AssertionError as err:
        worker.emit("same program", passed=False, message=str(err), **static)


# %%
def from_environment(worker):
    decay = float(os.environ.get("WEIGHT_DECAY", "0"))
    if worker.options["agree"]:  # process 0 decides, everyone uses its value
        from jax.experimental import multihost_utils

        decay = float(multihost_utils.broadcast_one_to_all(np.float32(decay)))
    train(worker, decayed_step, padded_batch, check=True, decay=decay)


# %% [markdown]
# <div class="admonition question"><p class="admonition-title">Predict</p>
# <p>How many compilations on each process? Would per-process compile counts, or
# JAX's cache-miss explanations, warn you?</p></div>

# %%
more = (padded_batch, decayed_step, assert_same_program, report_same_program)
stale = [{}, {"WEIGHT_DECAY": "0.1"}]  # the doctor's tests read these two by name
even = {"sizes": [[4, 4, 4, 4], [4, 4, 4, 4]]}
disagree, agreed = (  # process 1's weight decay as it reads it, then broadcast
    launch(from_environment, *more, options={**even, "agree": a}, env=stale).check()
    for a in (False, True)
)


# %% tags=["answer"] jupyter={"source_hidden": true}
for version, run in (("as each process reads it", disagree), ("broadcast", agreed)):
    for p, same in enumerate(run.one("same program")):
        decay, passed = same["decay"], same["passed"]
        print(f"{version}, process {p}: decay {decay}, same program? {passed}")
bad, good = disagree.workers, agreed.workers
assert [r["decay"] for r in disagree.one("same program")] == [0.0, 0.1]
assert [r["compiles"] for r in disagree.one("compiles")] == [1, 1]  # looks healthy
first_time = "never seen function (a new function object)"
assert all(r["reasons"] == [first_time] for r in disagree.one("compiles"))
assert len({r["program"] for r in disagree.one("compiles")}) == 2
assert [r["passed"] for r in disagree.one("same program")] == [False, False]  # both
said = bad[0].one("same program")["message"]
assert said.startswith("the processes compile different programs")
last_w, right_w = [w.of("step")[-1]["w"] for w in bad], good[0].of("step")[-1]["w"]
assert not np.allclose(last_w[0], last_w[1], rtol=1e-3)
assert not np.allclose(last_w[0], right_w, rtol=1e-4)  # process 0 is wrong too

# %% tags=["answer"] jupyter={"source_hidden": true}
assert [r["decay"] for r in agreed.one("same program")] == [0.0, 0.0]
assert [r["passed"] for r in agreed.one("same program")] == [True, True]
assert [(r["traces"], r["compiles"]) for r in agreed.one("compiles")] == [(1, 1)] * 2
np.testing.assert_allclose(right_w, good[1].of("step")[-1]["w"])  # the same weights

# %% [markdown]
# One compilation on each process, and a "never seen function" explanation on each:
# nothing in either process's counts or explanations is wrong, because each process is
# consistent with itself. Yet the weights differ, and not only on process 1: process 0,
# which read the right value, ends with weights that differ from the broadcast job's
# too: once process 1's weights have drifted, the all-reduce hands process 0 a share of
# the gradient computed with them. Only a comparison *across* processes shows the
# problem. Two things fix it:
#
# - **Decide configuration once.** Process 0 reads the value and
#   `multihost_utils.broadcast_one_to_all` hands it to everyone, so every process
#   traces with the same static value.
# - **Check before the first step.** `assert_same_program` hashes the lowered step and
#   compares the hashes with `multihost_utils.assert_equal`. The comparison is itself a
#   collective, of a fixed size, so it cannot hang on a mismatch: it raises
#   `AssertionError` on *every* process at once. (Lowering does not compile; and the
#   step traced here is cached, so the real first step costs no extra trace.)
#
# ## 4. Diagnosing across processes
#
# Every run above left each process's counts, its cache-miss reasons and the
# fingerprint of the program it ran last. Put them side by side, one row per process
# and job, and the broken jobs are the ones whose processes disagree.

# %%
jobs = {"same shapes": first_job, "ragged, shape inferred": inferred}
jobs |= {"ragged, padded": fixed, "static from env": disagree}
jobs |= {"static broadcast": agreed}
table = []
for job, run in jobs.items():
    agree = "yes" if len({r["program"] for r in run.one("compiles")}) == 1 else "NO"
    for p, r in enumerate(run.one("compiles")):
        jitlab.record(f"{job}: process {p}", compiles=r["compiles"])
        row = {
            "job": job,
            "process": p,
            "traces": r["traces"],
            "compiles": r["compiles"],
        }
        row |= {"last miss": r["reasons"][-1][:44], "program": r["program"]}
        table.append(row | {"agree?": agree})
jitlab.print_table(table)

# %%
broken = {row["job"] for row in table if row["agree?"] == "NO"}
assert broken == {"ragged, shape inferred", "static from env"}
counts = {
    job: {r["compiles"] for r in run.one("compiles")} for job, run in jobs.items()
}
uneven = {job for job, seen in counts.items() if len(seen) > 1}
assert uneven == {"ragged, shape inferred"}  # counts alone miss the static mismatch

# %% [markdown]
# Counts that differ between processes are a sure sign (the ragged batch), but equal
# counts are no proof (the weight decay). The fingerprint column is the one to read.
# In a real job, have every process log its counts and its program fingerprint at
# start-up, and run `assert_same_program` once before training.
#
# <div class="admonition tip"><p class="admonition-title">Launching processes</p>
# <p><code>jitlab.instruments.multiprocess</code> is a small launcher for this course: it gives
# every worker a time limit, stops a run that has gone quiet, and always kills and
# reaps its processes. On a cluster, the scheduler (Slurm, Kubernetes) plays this
# role, and its time limit is the one that ends a hang: set it, and set
# <code>shutdown_timeout_seconds</code> to something you are willing to wait.</p></div>

# %%
cache_dir.cleanup()

# %% tags=["remove-input"]
jitlab.outro()
