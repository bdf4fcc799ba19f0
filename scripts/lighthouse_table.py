"""Lighthouse table of the built site: performance, TBT, FCP, LCP and page weight per page.

Serves the built site (``_build/html`` by default) over loopback and runs Lighthouse 12.2.3
(``scripts/node``, installed by ``make node``) with its mobile defaults in headless Debian
Chromium on every page of ``_toc.yml``, one page after another. A *run* is one pass over all
pages; Lighthouse timings vary a lot between runs on a small, busy machine, so pages are
compared within one run only: each run prints its table and, per chapter, the ratios of its
total blocking time and first contentful paint to the preface's in that run, against the
site's targets (TBT <= 1.5x, FCP <= 1.2x the preface's).

Usage: ``python scripts/lighthouse_table.py [--runs 3] [--site _build/html] [--json out.json]
[--reports DIR] [--pages book/x ...] [--gzip]`` (``make lighthouse`` runs it with 3 runs;
``--reports`` keeps every full report, with its boot-up time and main-thread work per script,
for profiling). By default files are served as they are; ``--gzip`` compresses HTML, CSS,
JavaScript, JSON and SVG responses for clients that accept it, as static hosts such as GitHub
Pages do, so the table shows what a reader of the published site downloads. Exits 1 if a run
misses a target.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import http.server
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from booktoc import toc_pages  # noqa: E402

LIGHTHOUSE = ROOT / "scripts" / "node" / "node_modules" / ".bin" / "lighthouse"
CHROME = "/usr/bin/chromium"
CHROME_FLAGS = "--headless=new --no-sandbox --disable-background-networking --disable-gpu"
REFERENCE = "book/preface"
TBT_TARGET = 1.5  # chapter TBT / preface TBT, in the same run
FCP_TARGET = 1.2  # chapter FCP / preface FCP, in the same run


COMPRESSED = {".html", ".css", ".js", ".json", ".svg", ".txt", ".xml"}


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class _GzipHandler(_QuietHandler):
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
def serve(site: Path, compress: bool = False) -> Iterator[str]:
    """Serve ``site`` on a free loopback port (text gzip-compressed if ``compress``); yield
    its base URL."""
    handler_class = _GzipHandler if compress else _QuietHandler
    handler = functools.partial(handler_class, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def measure(url: str, out: Path) -> dict[str, float]:
    """One Lighthouse run (performance only) of ``url``; the numbers this table reports."""
    command = [
        str(LIGHTHOUSE),
        url,
        "--only-categories=performance",
        "--output=json",
        f"--output-path={out}",
        f"--chrome-flags={CHROME_FLAGS}",
        "--quiet",
    ]
    env = dict(os.environ, CHROME_PATH=CHROME)
    subprocess.run(command, env=env, check=True, timeout=600, stdout=subprocess.DEVNULL)
    report = json.loads(out.read_text(encoding="utf8"))
    audits = report["audits"]
    return {
        "performance": report["categories"]["performance"]["score"],
        "tbt_ms": audits["total-blocking-time"]["numericValue"],
        "fcp_ms": audits["first-contentful-paint"]["numericValue"],
        "lcp_ms": audits["largest-contentful-paint"]["numericValue"],
        "bytes": audits["total-byte-weight"]["numericValue"],
    }


def ratios(run: dict[str, dict[str, float]], page: str) -> tuple[float, float]:
    """(TBT, FCP) of ``page`` relative to the preface's, within one run."""
    ref = run[REFERENCE]
    tbt = run[page]["tbt_ms"] / max(ref["tbt_ms"], 1.0)  # TBT can be 0: count 1 ms
    return tbt, run[page]["fcp_ms"] / ref["fcp_ms"]


def run_table(run: dict[str, dict[str, float]]) -> list[str]:
    """A Markdown table of one run, with the ratios to the preface and the targets."""
    lines = [
        "| page | performance | TBT (s) | FCP (s) | LCP (s) | weight (MB) | TBT / preface "
        "| FCP / preface |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for page, m in run.items():
        tbt, fcp = ratios(run, page)
        tbt_mark = "" if tbt <= TBT_TARGET else " (over)"
        fcp_mark = "" if fcp <= FCP_TARGET else " (over)"
        lines.append(
            f"| {page.split('/')[-1]} | {m['performance']:.2f} | {m['tbt_ms'] / 1e3:.2f} "
            f"| {m['fcp_ms'] / 1e3:.2f} | {m['lcp_ms'] / 1e3:.2f} | {m['bytes'] / 1e6:.2f} "
            f"| {tbt:.2f}{tbt_mark} | {fcp:.2f}{fcp_mark} |"
        )
    return lines


def misses(run: dict[str, dict[str, float]]) -> list[str]:
    """The chapters of one run over a target, as readable lines."""
    found = []
    for page in run:
        tbt, fcp = ratios(run, page)
        if tbt > TBT_TARGET:
            found.append(f"{page}: TBT {tbt:.2f}x the preface's (target <= {TBT_TARGET}x)")
        if fcp > FCP_TARGET:
            found.append(f"{page}: FCP {fcp:.2f}x the preface's (target <= {FCP_TARGET}x)")
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--site", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument(
        "--reports", type=Path, help="keep each page's full Lighthouse report in this folder"
    )
    parser.add_argument("--pages", nargs="+", help="only these pages (book/preface first)")
    parser.add_argument(
        "--gzip", action="store_true", help="serve text gzip-compressed, as static hosts do"
    )
    args = parser.parse_args(argv)
    if not LIGHTHOUSE.exists():
        print(f"Lighthouse is not installed at {LIGHTHOUSE}: run `make node`", file=sys.stderr)
        return 2
    pages = [REFERENCE, *[page for page in args.pages or toc_pages() if page != REFERENCE]]
    runs: list[dict[str, dict[str, float]]] = []
    failed = []
    with serve(args.site, compress=args.gzip) as base, tempfile.TemporaryDirectory() as tmp:
        for number in range(1, args.runs + 1):
            run = {}
            for page in pages:
                out = Path(tmp) / "report.json"
                if args.reports:
                    args.reports.mkdir(parents=True, exist_ok=True)
                    out = args.reports / f"run{number}-{page.replace('/', '__')}.json"
                run[page] = measure(f"{base}{page}.html", out)
                print(f"  run {number}: {page} done", file=sys.stderr, flush=True)
            runs.append(run)
            served = "gzip-compressed" if args.gzip else "uncompressed"
            print(f"\nRun {number} of {args.runs} (Lighthouse 12.2.3, mobile defaults, {served})\n")
            print("\n".join(run_table(run)), flush=True)
            failed += [f"run {number}: {line}" for line in misses(run)]
    if args.runs > 1:
        print("\nMedian over runs of each page's ratio to the preface (TBT, FCP)\n")
        for page in pages:
            tbt = statistics.median(ratios(run, page)[0] for run in runs)
            fcp = statistics.median(ratios(run, page)[1] for run in runs)
            print(f"  {page:36s} TBT {tbt:5.2f}x   FCP {fcp:5.2f}x")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2) + "\n", encoding="utf8")
    if failed:
        print("\nTargets missed:\n  " + "\n  ".join(failed))
        return 1
    print("\nEvery chapter met both targets in every run.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
