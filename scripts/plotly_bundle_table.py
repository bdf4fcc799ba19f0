"""Is the partial plotly.js bundle worth it? Lighthouse on figure pages, partial vs full bundle.

The site serves plotly.js's cartesian partial bundle (``_static/plotly/plotly-cartesian.min.js``,
npm ``plotly.js-cartesian-dist-min``). This script copies the built site into a temporary
folder whose pages load the full ``plotly.min.js`` of the ``plotly`` package instead, serves
both over loopback, and runs Lighthouse 12.2.3 (mobile defaults, as ``lighthouse_table.py``)
on every page with figures, opened at its first figure (``page.html#<figure id>``, so that
plotly.js is loaded and the figure drawn while Lighthouse measures), with the partial and the
full bundle one after the other in the same run. It prints, per page, the total blocking
time, the Lighthouse score, the bytes transferred and the main-thread time of plotly.js
(``bootup-time``) with each bundle, and the ratios full / partial.

Usage: ``python scripts/plotly_bundle_table.py [--site _build/html] [--runs 1]``
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lighthouse_table import LIGHTHOUSE, ROOT, measure  # noqa: E402
from loopback import serve  # noqa: E402

PARTIAL = "plotly/plotly-cartesian.min.js"
FULL = "plotly/plotly.min.js"
FIRST_FIGURE = re.compile(r'<div class="mha-plotly" id="([^"]+)"')


def full_bundle_site(site: Path, into: Path) -> Path:
    """A copy of ``site`` whose pages load the full plotly.js instead of the partial bundle."""
    import plotly

    copy = into / "full"
    shutil.copytree(site, copy)
    shutil.copy2(
        Path(plotly.__file__).parent / "package_data" / "plotly.min.js", copy / "_static" / FULL
    )
    for page in copy.rglob("*.html"):
        text = page.read_text(encoding="utf8")
        if f'data-plotly="{PARTIAL}"' in text:
            page.write_text(text.replace(f'data-plotly="{PARTIAL}"', f'data-plotly="{FULL}"'))
    return copy


def plotly_cost(report: Path) -> tuple[float, float]:
    """(bytes transferred, main-thread ms) of plotly.js in one Lighthouse report."""
    audits = json.loads(report.read_text(encoding="utf8"))["audits"]
    sent = sum(
        item.get("transferSize", 0)
        for item in audits["network-requests"]["details"]["items"]
        if "/_static/plotly/" in item["url"]
    )
    work = sum(
        item["total"]
        for item in audits["bootup-time"]["details"]["items"]
        if "/_static/plotly/" in item["url"]
    )
    return sent, work


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    if not LIGHTHOUSE.exists():
        print(f"Lighthouse is not installed at {LIGHTHOUSE}: run `make node`", file=sys.stderr)
        return 2
    pages = {}
    for html in sorted((args.site / "book").glob("*.html")):
        match = FIRST_FIGURE.search(html.read_text(encoding="utf8"))
        if match:
            pages[f"book/{html.stem}"] = match.group(1)
    rows = {page: {"partial": [], "full": []} for page in pages}
    with tempfile.TemporaryDirectory() as tmp:
        full_site = full_bundle_site(args.site, Path(tmp))
        report = Path(tmp) / "report.json"
        with serve(args.site) as partial_url, serve(full_site) as full_url:
            for number in range(1, args.runs + 1):
                for page, figure in pages.items():
                    for bundle, base in (("partial", partial_url), ("full", full_url)):
                        measured = measure(f"{base}{page}.html#{figure}", report)
                        measured["plotly_bytes"], measured["plotly_ms"] = plotly_cost(report)
                        rows[page][bundle].append(measured)
                        print(f"  run {number}: {page} ({bundle}) done", file=sys.stderr)
    print(
        f"\nLighthouse 12.2.3, mobile defaults, pages opened at their first figure; partial = "
        f"{PARTIAL}, full = {FULL}; medians of {args.runs} run(s), both bundles in each run\n"
    )
    print(
        "| page | TBT partial (s) | TBT full (s) | TBT full / partial | score partial | score full "
        "| plotly.js MB partial / full | plotly.js main-thread s partial / full |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for page, by in rows.items():

        def med(bundle: str, key: str, by: dict = by) -> float:
            return statistics.median(m[key] for m in by[bundle])

        tbt_p, tbt_f = med("partial", "tbt_ms"), med("full", "tbt_ms")
        print(
            f"| {page.split('/')[-1]} | {tbt_p / 1e3:.2f} | {tbt_f / 1e3:.2f} "
            f"| {tbt_f / max(tbt_p, 1.0):.2f} | {med('partial', 'performance'):.2f} "
            f"| {med('full', 'performance'):.2f} "
            f"| {med('partial', 'plotly_bytes') / 1e6:.2f} / "
            f"{med('full', 'plotly_bytes') / 1e6:.2f} "
            f"| {med('partial', 'plotly_ms') / 1e3:.2f} / {med('full', 'plotly_ms') / 1e3:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
