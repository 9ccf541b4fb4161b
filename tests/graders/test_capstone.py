"""The capstone grader passes right answers, however solved, and rejects each kind of
wrong answer at the check that names its real cause."""

from __future__ import annotations

import functools

import exercise_cells
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tables import fails, passes, rows

from jitlab.graders import capstone as cap

CONFIG = {"weight_decay": 0.0}


def update_config(step):
    CONFIG["weight_decay"] = cap._weight_decay(step)


def next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def few_buckets(n: int) -> int:  # 16 and 32 only: two compilations per grading, not four
    return max(16, next_power_of_two(n))


def step_body(params, batch, lr, decay, *, mask=True, le=False, global_decay=False,
              plain_mean=False, padded_mean=False, decay_all=False):  # fmt: skip
    """One SGD step on a padded batch; the switches make the wrong answers."""

    def batch_loss(params):
        x, length = batch["x"], batch["length"]
        hidden = jnp.tanh(x @ params["w"] + params["b"])
        steps = jnp.arange(x.shape[1])
        real = ((steps <= length) if le else (steps < length))[None, :, None]
        pooled = jnp.sum(jnp.where(real, hidden, 0.0), axis=1) / (
            x.shape[1] if padded_mean else length
        )
        pooled = pooled if mask else hidden.mean(axis=1)
        err = (pooled @ params["v"] - batch["y"]) ** 2
        weights = batch.get("weights")
        if weights is None or plain_mean:
            data = jnp.mean(err if weights is None else weights * err)
        else:
            data = jnp.sum(weights * err) / jnp.sum(weights)
        decayed = jax.tree.leaves(params) if decay_all else [params["w"]]
        return data + (CONFIG["weight_decay"] if global_decay else decay) * sum(
            jnp.sum(p**2) for p in decayed
        )

    value, grads = jax.value_and_grad(batch_loss)(params)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), value


def pad_batch(batch, bucket=few_buckets, tidy=True):
    """The boundary: a new dict, x padded in NumPy, weights of one when missing."""
    size, length, features = batch["x"].shape
    x = np.zeros((size, bucket(length), features), np.float32)
    x[:, :length] = batch["x"]
    fixed = {"x": x, "y": batch["y"], "length": np.int32(length)}
    if tidy or "weights" in batch:
        weights = batch.get("weights")
        fixed["weights"] = np.ones(size, np.float32) if tidy and weights is None else weights
    return fixed


def make_learner(*, static_lr=False, cast_lr=True, tidy=True, per_step_partial=False,
                 eager_pad=False, memo=None, next_lr=False, bucket=few_buckets, each=None,
                 call=None, via_default=False, late_decay=False, **body):  # fmt: skip
    """(train_fast, train_step) for the solution, or for one plausible wrong answer:
    ``bucket`` is how it pads, ``each(batch)`` runs first at every step, ``call(train_step)``
    is what it calls instead, reached through a default argument if ``via_default``."""

    def train_step(params, batch, lr, weight_decay):
        return step_body(params, batch, lr, weight_decay, **body)

    jitted = jax.jit(train_step, static_argnames="lr" if static_lr else ())
    cache = {}

    def prepare(step, batch):
        if memo is not None:  # padded batches remembered by the id() of an object
            fixed = cache.setdefault(id(memo(batch)), pad_batch(batch, bucket, tidy))
        else:
            fixed = pad_batch(batch, bucket, tidy)
        if eager_pad:
            n = batch["x"].shape[1]
            fixed["x"] = jnp.pad(batch["x"], ((0, 0), (0, bucket(n) - n), (0, 0)))
        lr = cap._learning_rate(step + 1 if next_lr else step)
        lr = float(lr) if static_lr else np.float32(lr) if cast_lr else lr
        if late_decay:  # its own rule, > where update_config has >=
            return fixed, lr, np.float32(cap.WEIGHT_DECAY if step > cap.DECAY_FROM else 0.0)
        return fixed, lr, np.float32(CONFIG["weight_decay"])

    stepper = call(jitted) if call else jitted

    def train_fast(params, batches, step_fn=stepper if via_default else None):
        losses, step_fn = [], step_fn or stepper
        for step, batch in enumerate(batches):
            update_config(step)
            if each:
                each(batch)
            fixed, lr, decay = prepare(step, batch)
            if per_step_partial:  # a new function object every step
                step_fn = jax.jit(functools.partial(train_step, lr=lr, weight_decay=decay))
                params, value = step_fn(params, fixed)
            elif static_lr:
                params, value = jitted(params, fixed, lr=lr, weight_decay=decay)
            else:
                params, value = step_fn(params, fixed, lr, decay)
            losses.append(float(value))
        return params, np.array(losses)

    return train_fast, jitted


def learner(bucket_size=few_buckets, **switches):
    return lambda: (*make_learner(**switches), bucket_size)


def grade(train_fast, train_step, bucket_size=few_buckets, *, seed=None):
    cap.grade(train_fast, train_step, bucket_size, seed=seed)


grade.checks = cap.grade.checks  # a row may name its check by words only one holds


# ------------------------------------------------------------------ right answers


def bucket_of_eight(n: int) -> int:
    return max(8, -(-n // 8) * 8)


@jax.jit
def flat_step(params, x, y, weights, length, *, lr, decay):
    batch = {"x": x, "y": y, "weights": weights, "length": length}
    return step_body(params, batch, lr, decay)


def a_different_design():
    # Buckets in steps of 8 (six sizes), a flat signature with keyword arguments, jnp
    # float32 scalars, params kept as NumPy arrays between steps, and a warm-up call per
    # bucket before the loop.
    def arguments(step, batch):
        fixed = pad_batch(batch, bucket=bucket_of_eight)
        return (fixed["x"], fixed["y"], fixed["weights"], fixed["length"]), {
            "lr": jnp.float32(cap._learning_rate(step)),
            "decay": jnp.float32(CONFIG["weight_decay"]),
        }

    def train_fast(params, batches):
        for size in sorted({bucket_of_eight(b["x"].shape[1]) for b in batches}):
            dummy = {"x": np.zeros((cap.B, size, cap.F), np.float32), "y": np.zeros(cap.B)}
            args, kwargs = arguments(0, dummy)
            flat_step(params, *args, **kwargs)  # warm-up, results thrown away
        losses = []
        for step, batch in enumerate(batches):
            update_config(step)
            args, kwargs = arguments(step, batch)
            params, value = flat_step(params, *args, **kwargs)
            params = {k: np.asarray(p) for k, p in params.items()}
            losses.append(value)
        return params, jnp.stack(losses)

    return train_fast, flat_step, bucket_of_eight


RIGHT = {
    "the reference design": make_learner,
    "the step reached through a default argument": learner(via_default=True),
    "powers of two from 4": learner(next_power_of_two, bucket=next_power_of_two),
    "another design": a_different_design,
}


@pytest.mark.parametrize("name", RIGHT)
def test_right_answers_pass(name):
    passes(grade, *RIGHT[name]())


# ------------------------------------------------------------------ the grader itself


def test_grader_reference_is_the_exercise_loop():
    # The grader's float64 reference and constants agree with the naive `train` of the
    # exercise's setup cell, on the grader's own kind of batches.
    namespace = exercise_cells.namespace("capstone", until="jitlab.count_compiles")
    for name in ("B", "F", "H", "STEPS", "WARMUP", "DECAY_FROM", "MIN_LENGTH", "MAX_LENGTH"):
        assert namespace[name] == getattr(cap, name), name
    rng = np.random.default_rng(7)
    params = cap._make_params(rng)
    batches = cap._make_problem(rng, cap._problem(rng, few_buckets)[: cap.DECAY_FROM + 2])
    want_params, want_losses = cap._reference_train(params, batches)
    got_params, got_losses = namespace["train"](params, batches)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-4, atol=1e-6)
    for name in ("w", "b", "v"):
        np.testing.assert_allclose(got_params[name], want_params[name], rtol=1e-4, atol=1e-6)


def test_the_exercise_states_the_bounds_and_the_reuse():
    text = exercise_cells.exercise("capstone").source.read_text()
    assert f"at most {cap.MOST_BUCKETS}**" in text
    assert f"for every `n` from 1\n#    to {cap.BUCKETS_UP_TO}" in text
    assert "refilled" in text


@pytest.mark.parametrize("bucket", [next_power_of_two, few_buckets, bucket_of_eight])
@pytest.mark.parametrize("seed", range(4))
def test_every_problem_has_the_edge_cases(seed, bucket):
    rng = np.random.default_rng(seed)
    lengths = cap._problem(rng, bucket)
    batches = cap._make_problem(rng, lengths)
    assert [bucket(n) == n for n in lengths[:3]] == [True, True, False]
    assert bucket(lengths[2] - 1) == lengths[2] - 1  # the most padding
    assert [type(b.get("weights", "absent")) for b in batches[:3]] == [np.ndarray, type(None), str]
    assert lengths[cap.DECAY_FROM] == lengths[0] and "weights" not in batches[cap.DECAY_FROM]
    buckets, arrays = {bucket(n) for n in lengths}, [b["x"] for b in batches]
    again = [b["x"].shape[1] for b in cap._second(rng, bucket, lengths, batches)]
    assert {bucket(n) for n in again} <= buckets and again[1::2] == lengths[1::2]
    assert [b["x"] is a for b, a in zip(batches, arrays, strict=True)][1::2] == [True] * 6


def test_the_reference_is_private():
    for name in ("reference_train", "reference_step", "learning_rate", "make_problem"):
        assert not hasattr(cap, name), name


# ------------------------------------------------------------------ wrong answers


def naive_loop():  # the exercise's own `train`: right numbers, a new jit every step
    namespace = exercise_cells.namespace("capstone", until="jitlab.count_compiles")
    return namespace["train"], make_learner()[1]


def in_a_new_jit(train_step):
    return lambda p, *args: jax.jit(lambda p: train_step(p, *args))(p)


def static_length():
    @functools.partial(jax.jit, static_argnames="length")
    def static_length_step(params, x, y, weights, lr, decay, length):
        return step_body(params, {"x": x, "y": y, "weights": weights, "length": length}, lr, decay)

    def call(params, fixed, lr, decay):
        args = fixed["x"], fixed["y"], fixed["weights"], lr, decay
        return static_length_step(params, *args, length=int(fixed["length"]))

    return make_learner(call=lambda _: call)[0], static_length_step


def fill(batch):  # the caller's dict
    if batch.get("weights") is None:
        batch["weights"] = np.ones(cap.B, np.float32)


def table(n):  # by (n - 1).bit_length(): stops short at 33
    return [16, 16, 16, 16, 16, 32][(n - 1).bit_length()]


sizes = {k: few_buckets(k) for k in range(1, 33)}  # stops short at 33 too
CALLED, LOSSES, PER_BUCKET, AGAIN = cap.CALLED, cap.LOSSES, cap.PER_BUCKET, cap.LOSSES_AGAIN
HOLD, WEAK = cap.BUCKETS_HOLD, ["lr: f32[] (NumPy float64) now, ~f32[]", "np.float32"]


def first_params_kept():
    """The solution, but every later run hands back the first run's final params."""
    train_fast, train_step = make_learner()
    kept = []

    def fast(params, batches):
        final, losses = train_fast(params, batches)
        kept.append(final)
        return kept[0], losses

    return fast, train_step, few_buckets


# fmt: off
WRONG = {  # name: (the answer, the check it fails, key words of the verdict)
    "the naive loop": (naive_loop, CALLED, ["0 calls"]),
    "a new function per step": (learner(per_step_partial=True), CALLED, ["new function each time"]),
    "the step in a new jit per step": (learner(call=in_a_new_jit), CALLED, ["inside another jax"]),
    "no mask": (learner(mask=False), LOSSES, ["padded", "mask", "step 2"]),
    "a mask off by one": (learner(le=True), LOSSES, ["mask's bound"]),
    "the mean over the padded length": (learner(padded_mean=True), LOSSES, ["true length"]),
    "a plain mean of w*err": (learner(plain_mean=True), LOSSES,
                              ["step 0", "weights an array", "sum(w"]),
    "the next step's learning rate": (learner(next_lr=True), LOSSES, ["update at step 0"]),
    "a stale global": (learner(global_decay=True), LOSSES, ["Read CONFIG"]),
    "a stale global, a bucket traced after the switch": (
        learner(next_power_of_two, bucket=next_power_of_two, global_decay=True), LOSSES,
        ["Read CONFIG", "frozen at trace time"]),
    # Weight decay wrong in the learner's own code: never blamed on CONFIG (blind test 2).
    "weight decay from step > DECAY_FROM": (learner(late_decay=True), LOSSES,
                                            ["from step 7, not 6", "step >= DECAY_FROM"]),
    "weight decay on w, b and v": (learner(decay_all=True), LOSSES,
                                   ["on every parameter", "on w only"]),
    "a memo by id() of the batch": (learner(memo=lambda b: b), AGAIN, ["refilled", "id()"]),
    "a memo by id() of its x": (learner(memo=lambda b: b["x"]), AGAIN, ["refilled"]),
    "a static lr": (learner(static_lr=True), PER_BUCKET, ["lr: ", "(static value)", "traced"]),
    "a static length": (static_length, PER_BUCKET, ["length: ", "(static value)"]),
    "its cache cleared per step": (learner(call=lambda f: lambda *a: f.clear_cache() or f(*a)),
                                   PER_BUCKET, ["had compiled already", "do not clear"]),
    "two learning-rate types": (learner(cast_lr=False), PER_BUCKET, WEAK),
    "weights in 3 forms": (learner(tidy=False), PER_BUCKET, ["batch['weights']", "same keys"]),
    "batches not padded": (learner(bucket=lambda n: n), cap.PADDED,
                           ["padded to another size", "bucket_size("]),
    # One compilation and right numbers: only the padded shapes show it, read every run.
    "all to the largest bucket": (learner(bucket=lambda n: 32), cap.PADDED,
                                  ["32 time steps", "the largest bucket"]),
    "an eager pad per length": (learner(eager_pad=True), cap.NOTHING_NEW, []),
    "the caller's batches changed": (learner(each=fill), "leaves the caller's", ["'weights'"]),
    "one huge bucket": (learner(lambda n: 64), "wastes less than half", []),
    "a bucket per length": (learner(lambda n: n), "lengths share a few", []),
    "1 << n.bit_length()": (learner(lambda n: 1 << n.bit_length()), HOLD,
                            ["bucket_size(16) is 32, twice 16", "(n - 1).bit_length()"]),
    "multiples of 6": (learner(lambda n: 6 * -(-n // 6)), "lengths share a few",
                       ["8 distinct sizes", "1 more than the 7", "step by 6"]),
    "a lookup table that stops short": (learner(table), HOLD, ["bucket_size(33)", "IndexError"]),
    "a dict that stops short": (learner(sizes.__getitem__), HOLD, ["KeyError", "bucket_size(33)"]),
    "the first run's params again": (first_params_kept, cap.PARAMS_AGAIN, ["differ"]),  # stop 42
}
# fmt: on
SEEDED = [
    *("no mask", "a mask off by one", "the next step's learning rate"),
    *("the mean over the padded length", "a plain mean of w*err"),
    *("a memo by id() of the batch", "a memo by id() of its x"),
    *("a stale global, a bucket traced after the switch", "weight decay from step > DECAY_FROM"),
]


@pytest.mark.parametrize(("name", "seed"), rows(WRONG, SEEDED))
def test_wrong_answers_fail_at_the_check_that_names_them(name, seed):
    answer, check, words = WRONG[name]
    fails(grade, *answer(), check=check, words=words, seed=seed)


@pytest.mark.parametrize(
    ("seed", "words"),
    [(4, ["from step 7, not 6", "Or train_step reads CONFIG"]), (5, ["steps 6, 8, 9 ran with"])],
)
def test_a_stale_global_is_named_alone_where_only_it_gives_the_losses(seed, words):
    # Seed 4 traces a bucket at step 7: a stale global and decay from step 7 give the same
    # losses, and the hint names both; seed 5 traces buckets at steps 7 and 9: only stale.
    answer = WRONG["a stale global, a bucket traced after the switch"][0]()
    fails(grade, *answer, check=LOSSES, words=words, seed=seed)
