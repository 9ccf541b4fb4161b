"""Serve the built site on localhost, with a clear message when the port is taken."""

from __future__ import annotations

import argparse
import errno
import functools
import http.server
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve the built course site.")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--directory", default="site")
    args = parser.parse_args(argv)
    return serve(port=args.port, directory=Path(args.directory))


def serve(*, port: int, directory: Path) -> int:
    """Serve ``directory`` on 127.0.0.1:``port``; 2 with a message when it cannot."""
    folder = directory
    if not (folder / "index.html").exists():
        print(f"no built site in {folder}/: run `make site` first", file=sys.stderr)
        return 2
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            print(
                f"port {port} is already in use: stop the other server, "
                f"or choose another port with `PORT={port + 1} make course`",
                file=sys.stderr,
            )
            return 2
        raise
    print(f"serving the course at http://127.0.0.1:{port}/  (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nstopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
