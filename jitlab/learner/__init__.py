"""The learner's runner, in the manner of rustlings: list, check, hint, reset, watch."""
