"""Measuring what JAX does: compilations per function, time per call, the machine."""
