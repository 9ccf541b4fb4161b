"""The one notebook pipeline: find the sources, convert them, execute them under nbval."""

from __future__ import annotations

import os
from collections.abc import Mapping


def run_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every pytest run of the pipeline, and so of its kernels."""
    return {
        **os.environ,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # only nbval and the recorder: faster start
        **(extra or {}),
    }
