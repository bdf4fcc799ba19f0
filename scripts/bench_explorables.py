"""How long each explorable of the built site takes to redraw after an interaction.

Run it after building the book (``make book``): ``.venv/bin/python scripts/bench_explorables.py``
(``--help`` lists the options). Each explorable's page is opened from ``file://`` in headless
Chromium (Debian's ``/usr/bin/chromium``) at a phone's width, 390 px, and one interaction of
each kind is dispatched many times. The handlers redraw synchronously, so the time from just
before ``dispatchEvent`` to just after a forced layout (reading ``offsetHeight``) is the redraw's
script, style and layout work, measured with ``performance.now()``; painting comes after and is
not counted. The target of the book's issue 26 is at most 100 ms; the median and the largest of
the repetitions are printed against it. Timings vary with the machine's load: this is a
measurement to read, not a test.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
TARGET_MS = 100.0

# page, figure, what is done, and the JavaScript that does it once and returns the time (ms)
TIMED = """
([figure, kind, i]) => {
  const root = document.querySelector(`.mha-explore[data-explore="${figure}"]`);
  let target, event;
  if (kind === "key") {
    target = root.querySelector('[data-point="x"]');
    event = new KeyboardEvent("keydown", {key: i % 2 ? "ArrowLeft" : "ArrowRight", bubbles: true});
  } else if (kind === "drag") {
    target = root.querySelector('[data-point="k1"]');
    const box = target.getBoundingClientRect();
    target.dispatchEvent(new PointerEvent("pointerdown", {pointerId: 1, bubbles: true,
      clientX: box.x + box.width / 2, clientY: box.y + box.height / 2}));
    event = new PointerEvent("pointermove", {pointerId: 1, bubbles: true,
      clientX: box.x + box.width / 2 + (i % 2 ? -8 : 8), clientY: box.y + box.height / 2});
  } else if (kind === "select") {
    target = root.querySelector("select");
    target.selectedIndex = (target.selectedIndex + 1) % target.options.length;
    event = new Event("change", {bubbles: true});
  } else {
    const buttons = [...root.querySelectorAll("button")].filter((b) => !b.disabled);
    target = buttons.find((b) => (b.textContent || "").includes(kind)) || buttons[0];
    event = new MouseEvent("click", {bubbles: true});
  }
  const t0 = performance.now();
  target.dispatchEvent(event);
  void document.body.offsetHeight;  // force style and layout
  const ms = performance.now() - t0;
  if (kind === "drag") {
    target.dispatchEvent(new PointerEvent("pointerup", {pointerId: 1, bubbles: true}));
  }
  return ms;
}
"""

CASES = [
    ("book/one-head-to-many.html", "heads", "drag"),
    ("book/one-head-to-many.html", "heads", "key"),
    ("book/one-head-to-many.html", "heads", "select"),
    ("book/attention-without-the-score-matrix.html", "online-softmax", "Next block"),
    ("book/attention-without-the-score-matrix.html", "online-softmax", "Random scores"),
    ("book/attention-without-the-score-matrix.html", "online-softmax", "select"),
    ("book/inference.html", "kv-cache", "Append a token"),
    ("book/inference.html", "kv-cache", "select"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument("--repeat", type=int, default=50, help="interactions of each kind")
    args = parser.parse_args()
    args.site = args.site.resolve()  # a file:// address needs an absolute path

    from playwright.sync_api import sync_playwright

    if not (args.site / "index.html").exists():
        raise SystemExit(f"no built site at {args.site}: build the book first (make book)")
    print(f"{'explorable':16} {'interaction':16} {'median ms':>10} {'max ms':>8}  target")
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 390, "height": 844})
        current = None
        for path, figure, kind in CASES:
            if path != current:
                page.goto((args.site / path).as_uri(), wait_until="load")
                # an explorable is drawn when it comes near the screen
                page.locator(f'.mha-explore[data-explore="{figure}"]').scroll_into_view_if_needed()
                page.wait_for_selector(f'.mha-explore[data-explore="{figure}"][data-ready]')
                current = path
            times = [page.evaluate(TIMED, [figure, kind, i]) for i in range(args.repeat)]
            median, worst = statistics.median(times), max(times)
            verdict = "ok" if worst <= TARGET_MS else "MISS"
            print(
                f"{figure:16} {kind:16} {median:10.2f} {worst:8.2f}  {verdict} (<= {TARGET_MS:g})"
            )
        browser.close()


if __name__ == "__main__":
    main()
