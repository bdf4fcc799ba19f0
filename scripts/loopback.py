"""A static site served over loopback, for the browser tests and the Lighthouse tables.

``serve(root)`` starts a threaded ``http.server`` on a free port of 127.0.0.1 that serves the
folder ``root``, yields its base URL and stops it on exit. With ``compress=True`` it sends text
files gzip-compressed to clients that accept it, as static hosts such as GitHub Pages do. A
site under a subpath (as a project's GitHub Pages site is served under ``/<repository>/``) is
the site's parent folder served, with the site's folder name appended to the URL.
"""

from __future__ import annotations

import functools
import gzip
import http.server
import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

COMPRESSED = {".html", ".css", ".js", ".json", ".svg", ".txt", ".xml"}


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files as they are, without a log line per request."""

    def log_message(self, format: str, *args: object) -> None:
        pass


class GzipHandler(QuietHandler):
    """Serves text files gzip-compressed to clients that accept it (as static hosts do)."""

    def send_head(self) -> io.BytesIO | None:
        path = Path(self.translate_path(self.path))
        accepts = "gzip" in self.headers.get("Accept-Encoding", "")
        if not (accepts and path.is_file() and path.suffix in COMPRESSED):
            return super().send_head()
        body = gzip.compress(path.read_bytes(), compresslevel=6)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Vary", "Accept-Encoding")
        self.end_headers()
        return io.BytesIO(body)


@contextmanager
def serve(root: Path, compress: bool = False) -> Iterator[str]:
    """Serve the folder ``root`` on a free loopback port (text gzip-compressed if
    ``compress``); yield its base URL, ending in ``/``."""
    if not Path(root).is_dir():
        raise ValueError(f"root must be a folder to serve; got {root}")
    handler_class = GzipHandler if compress else QuietHandler
    handler = functools.partial(handler_class, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serve_under_subpath(site: Path) -> Iterator[str]:
    """Serve ``site`` under the subpath ``/<its folder name>/``; yield that URL."""
    with serve(Path(site).parent) as base:
        yield f"{base}{Path(site).name}/"
