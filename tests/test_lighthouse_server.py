"""scripts/lighthouse_table.py's server: files as they are, or gzip-compressed text."""

from __future__ import annotations

import gzip
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import lighthouse_table  # noqa: E402


def _get(url: str, accept: str | None) -> tuple[bytes, str | None]:
    request = urllib.request.Request(url, headers={"Accept-Encoding": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read(), response.headers.get("Content-Encoding")


def test_gzip_server_compresses_text_for_clients_that_accept_it(tmp_path):
    page = "<html><body>" + "attention " * 2000 + "</body></html>"
    (tmp_path / "page.html").write_text(page, encoding="utf8")
    (tmp_path / "image.png").write_bytes(b"\x89PNG" + bytes(range(256)) * 8)
    with lighthouse_table.serve(tmp_path, compress=True) as base:
        body, encoding = _get(f"{base}page.html", "gzip, deflate")
        assert encoding == "gzip" and len(body) < len(page) / 10
        assert gzip.decompress(body).decode("utf8") == page
        plain, encoding = _get(f"{base}page.html", None)  # the client does not accept gzip
        assert encoding is None and plain.decode("utf8") == page
        image, encoding = _get(f"{base}image.png", "gzip")  # not text: as it is
        assert encoding is None and image == (tmp_path / "image.png").read_bytes()


def test_default_server_sends_files_as_they_are(tmp_path):
    (tmp_path / "page.html").write_text("<p>heads</p>" * 500, encoding="utf8")
    with lighthouse_table.serve(tmp_path) as base:
        body, encoding = _get(f"{base}page.html", "gzip")
        assert encoding is None and body.decode("utf8") == "<p>heads</p>" * 500
