"""`make course` serves the built site; a taken port gets a clear message, not a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jitlab.site.serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_taken_port_is_reported_clearly(tmp_path):
    (tmp_path / "index.html").write_text("<h1>course</h1>")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve("--port", str(port), "--directory", str(tmp_path))
    assert result.returncode == 2
    assert f"port {port} is already in use" in result.stderr
    assert f"PORT={port + 1} make course" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_site_says_to_build_it(tmp_path):
    result = _serve("--directory", str(tmp_path / "nothing"))
    assert result.returncode == 2 and "make site" in result.stderr
