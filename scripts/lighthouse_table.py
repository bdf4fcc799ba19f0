"""Lighthouse table of the built site: performance, FCP, LCP, TBT, CLS and weight per page.

Serves the built site (``_build/html`` by default) over loopback and runs Lighthouse 12.2.3
(``scripts/node``, installed by ``make node``) with its mobile defaults in headless Debian
Chromium on every page of ``_toc.yml``, one page after another. A *run* is one pass over all
pages. Each run prints its table with, per chapter, the ratios of its total blocking time and
first contentful paint to the preface's in that run (targets: TBT <= 1.5x, FCP <= 1.2x the
preface's; a preface TBT under 50 ms counts as 50 ms). After the last run, the median over
runs of each page's figures is held to the budget of a page that is "good" by Core Web
Vitals: FCP <= 1.8 s, LCP <= 2.5 s, TBT <= 200 ms, CLS <= 0.1, and a performance score of at
least 0.9. The median of each ratio is printed against its target too (a chapter that costs
much more than the text-only preface), but the budget is what the command holds: once the
preface itself is fast, a chapter can be over 1.2x its first paint and still well inside the
budget. Lighthouse timings vary a lot between runs on a small, busy machine: the budget is
applied to the median of several runs (3 by default), never to one run.

Usage: ``python scripts/lighthouse_table.py [--runs 3] [--site _build/html] [--json out.json]
[--reports DIR] [--pages book/x ...] [--gzip]`` (``make lighthouse`` runs it with 3 runs and
``--gzip``; ``--reports`` keeps every full report, with its boot-up time and main-thread work
per script, for profiling). By default files are served as they are; ``--gzip`` compresses
HTML, CSS, JavaScript, JSON and SVG responses for clients that accept it, as static hosts such
as GitHub Pages do, so the figures are what a reader of the published site waits for. Exits 1
if the medians miss the budget.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from booktoc import toc_pages  # noqa: E402
from loopback import serve  # noqa: E402

LIGHTHOUSE = ROOT / "scripts" / "node" / "node_modules" / ".bin" / "lighthouse"
CHROME = "/usr/bin/chromium"
CHROME_FLAGS = "--headless=new --no-sandbox --disable-background-networking --disable-gpu"
REFERENCE = "book/preface"
TBT_TARGET = 1.5  # chapter TBT / preface TBT, in the same run
# A preface that blocks for less than this is compared as if it blocked this long: a ratio to a
# TBT of a few ms (or 0) says nothing, and 1.5x of 50 ms is still well inside the budget.
TBT_FLOOR_MS = 50.0
FCP_TARGET = 1.2  # chapter FCP / preface FCP, in the same run
# Core Web Vitals' "good" page, and Lighthouse's "good" score, held by each page's median.
BUDGET = {"fcp_ms": 1800.0, "lcp_ms": 2500.0, "tbt_ms": 200.0, "cls": 0.1}
MIN_PERFORMANCE = 0.9


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
        "cls": audits["cumulative-layout-shift"]["numericValue"],
        "bytes": audits["total-byte-weight"]["numericValue"],
    }


def ratios(run: dict[str, dict[str, float]], page: str) -> tuple[float, float]:
    """(TBT, FCP) of ``page`` relative to the preface's, within one run."""
    ref = run[REFERENCE]
    tbt = run[page]["tbt_ms"] / max(ref["tbt_ms"], TBT_FLOOR_MS)
    return tbt, run[page]["fcp_ms"] / ref["fcp_ms"]


def median_run(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Each page's median over ``runs`` of each figure, and of its ratios to the preface."""
    medians = {}
    for page in runs[0]:
        figures = {key: statistics.median(run[page][key] for run in runs) for key in runs[0][page]}
        figures["tbt_ratio"] = statistics.median(ratios(run, page)[0] for run in runs)
        figures["fcp_ratio"] = statistics.median(ratios(run, page)[1] for run in runs)
        medians[page] = figures
    return medians


def _over(value: float, limit: float, fmt: str) -> str:
    return f"{value:{fmt}}" + ("" if value <= limit else " (over)")


def run_table(run: dict[str, dict[str, float]]) -> list[str]:
    """A Markdown table of one run (or of the medians, which carry their own ratios): the
    absolute figures against the budget and the ratios to the preface against the targets."""
    lines = [
        "| page | performance | FCP (s) | LCP (s) | TBT (ms) | CLS | transferred (KiB) "
        "| TBT / preface | FCP / preface |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for page, m in run.items():
        tbt, fcp = (m["tbt_ratio"], m["fcp_ratio"]) if "tbt_ratio" in m else ratios(run, page)
        score = f"{m['performance']:.2f}"
        score += "" if m["performance"] >= MIN_PERFORMANCE else " (under)"
        lines.append(
            f"| {page.split('/')[-1]} | {score} "
            f"| {_over(m['fcp_ms'] / 1e3, BUDGET['fcp_ms'] / 1e3, '.2f')} "
            f"| {_over(m['lcp_ms'] / 1e3, BUDGET['lcp_ms'] / 1e3, '.2f')} "
            f"| {_over(m['tbt_ms'], BUDGET['tbt_ms'], '.0f')} "
            f"| {_over(m.get('cls', 0.0), BUDGET['cls'], '.3f')} | {m['bytes'] / 1024:.0f} "
            f"| {_over(tbt, TBT_TARGET, '.2f')} | {_over(fcp, FCP_TARGET, '.2f')} |"
        )
    return lines


def budget_misses(medians: dict[str, dict[str, float]]) -> list[str]:
    """The pages whose median figures miss the "good" budget, as readable lines."""
    names = {"fcp_ms": "FCP", "lcp_ms": "LCP", "tbt_ms": "TBT", "cls": "CLS"}
    found = []
    for page, m in medians.items():
        for key, limit in BUDGET.items():
            if m[key] > limit:
                found.append(f"{page}: median {names[key]} {m[key]:.3g} (budget <= {limit:g})")
        if m["performance"] < MIN_PERFORMANCE:
            found.append(
                f"{page}: median performance {m['performance']:.2f} (budget >= {MIN_PERFORMANCE})"
            )
    return found


def misses(medians: dict[str, dict[str, float]]) -> list[str]:
    """The chapters whose median ratios to the preface are over a target, as readable lines."""
    found = []
    for page, m in medians.items():
        tbt, fcp = m["tbt_ratio"], m["fcp_ratio"]
        if tbt > TBT_TARGET:
            found.append(f"{page}: TBT {tbt:.2f}x the preface's (target <= {TBT_TARGET}x)")
        if fcp > FCP_TARGET:
            found.append(f"{page}: FCP {fcp:.2f}x the preface's (target <= {FCP_TARGET}x)")
    return found


def verdict(medians: dict[str, dict[str, float]]) -> tuple[list[str], int]:
    """What the medians say, and the exit code: 1 if a page misses the budget. Ratios over
    their targets are reported, not failed: a chapter 1.3x a fast preface may be well inside
    the budget."""
    lines = []
    over_target, failed = misses(medians), budget_misses(medians)
    if over_target:
        lines += ["Ratios to the preface over their targets (medians):"]
        lines += [f"  {line}" for line in over_target]
    if failed:
        return [*lines, "Budget missed (medians):", *(f"  {line}" for line in failed)], 1
    return [*lines, "Every page met the budget (medians)."], 0


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
    served = "gzip-compressed" if args.gzip else "uncompressed"
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
            print(f"\nRun {number} of {args.runs} (Lighthouse 12.2.3, mobile defaults, {served})\n")
            print("\n".join(run_table(run)), flush=True)
    medians = median_run(runs)
    print(f"\nMedian of {args.runs} run(s) per page ({served}): the budget applies here\n")
    print("\n".join(run_table(medians)))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2) + "\n", encoding="utf8")
    lines, code = verdict(medians)
    print("\n" + "\n".join(lines))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
