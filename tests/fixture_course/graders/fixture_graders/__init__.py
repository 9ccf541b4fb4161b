"""Graders of the fixture course (importable through PYTHONPATH in the runner's tests)."""
