"""The one place that reads JAX's own stack frames.

Some facts JAX's public hooks do not carry: which function a trace event or a cache-miss
explanation is about, when two functions share a name (or JAX names one ``<unknown>``).
JAX calls the listener or the log filter synchronously, from inside the function that
holds the answer, so the answer is a local variable a few frames up. Where JAX lays
its frames out differently (another release), :func:`jax_local` finds nothing and the
callers fall back to names.
"""

from __future__ import annotations

import sys
from typing import Any


def jax_local(function: str, file_suffix: str, local: str, depth: int) -> Any:
    """The local ``local`` of the nearest frame running JAX's ``function`` (in a file
    ending ``file_suffix``) within ``depth`` frames of the caller, or None."""
    frame = sys._getframe(1)
    for _ in range(depth + 1):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name == function and code.co_filename.endswith(file_suffix):
            return frame.f_locals.get(local)
        frame = frame.f_back
    return None
