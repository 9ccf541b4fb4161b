"""The learner's runner, in the manner of rustlings: list, check, hint, reset, watch."""

# Seconds one cell of an exercise may run before the runner stops it (a loop that never
# ends). Here, not in ``check``, so the command line can state it without importing that.
DEFAULT_CELL_TIMEOUT_S = 60
