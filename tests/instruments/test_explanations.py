"""count_compiles hears JAX's explanations without swallowing JAX's other warnings.

The printing test runs in a fresh interpreter: under pytest the root logger has
pytest's capture handler, and Python prints a warning through its last-resort handler
only when no handler at all is installed, which is the learner's notebook or script.
"""

from __future__ import annotations

import subprocess
import sys

from jitlab.instruments.explanations import (
    closest_key_difference,
    explained_callable,
    explained_function,
)

PROGRAM = """
import logging
import jax, jax.numpy as jnp
from jitlab import count_compiles

@jax.jit
def f(x):
    return x * 2

with count_compiles(f) as n:
    f(jnp.ones(3))
    f(jnp.ones(4))
    logging.getLogger("jax._src.interpreters.partial_eval").warning("inside: JAX says A")
    logging.getLogger("jax._src.dispatch").warning("inside: JAX says B")
logging.getLogger("jax._src.dispatch").warning("outside: JAX says C")
print("explanations", len(n.explanations), n.compiles)
"""


def test_jax_warnings_inside_count_compiles_are_printed_and_explanations_kept():
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "explanations 2 2" in done.stdout
    for said in ("inside: JAX says A", "inside: JAX says B", "outside: JAX says C"):
        assert said in done.stderr, done.stderr
    assert "TRACING CACHE MISS" not in done.stderr  # not asked for: kept, not printed


EXPLANATION = """TRACING CACHE MISS at x.py:9:16 (<module>):
  for f defined at x.py:7
  all previously seen cache keys differ. For the closest previous key:
  different input types:
  * at x, now f32[4] and before f32[3]"""


def test_the_closest_key_difference_and_the_function_are_read_from_the_text():
    assert closest_key_difference(EXPLANATION).startswith("different input types:")
    assert closest_key_difference(EXPLANATION).endswith("before f32[3]")
    assert explained_function(EXPLANATION) == "f"
    new = "TRACING CACHE MISS at x.py:9:\n  never seen function:\n    g id=1 defined at x.py:7"
    assert closest_key_difference(new) == "" and explained_function(new) == "g"
    unknown = "TRACING CACHE MISS at x.py:9:\n  for <unknown>\n  all previously seen"
    assert explained_function(unknown) == "<unknown>"


def test_no_function_is_being_explained_outside_jax_s_explaining_frame():
    assert explained_callable() is None


def test_a_count_inside_the_doctors_watch_hears_the_explanations_too():
    """Two hearers on one logger: the doctor's filter sees a record first and drops it
    (nobody asked to print it), yet the count_compiles block inside still hears it."""
    import jax
    import jax.numpy as jnp

    from jitlab import count_compiles
    from jitlab.instruments import events

    def twice_heard(x):
        return x * 2

    jitted = jax.jit(twice_heard)
    events.start()
    try:
        with count_compiles(jitted) as n:
            jitted(jnp.ones(3))
            jitted(jnp.ones(4))
    finally:
        events.stop()
    assert n.traces == 2 and len(n.explanations) == 2, n.explanations
