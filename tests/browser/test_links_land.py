"""Links land on their target: every heading of every page, at a phone's width and a desktop's.

A chapter's sections are laid out only when they come near the screen (``content-visibility``,
``book/_static/mha-site.css``), so a browser left alone scrolls to where a target would be if
every section above it had its placeholder's height: thousands of pixels short on a long
chapter. These tests follow links as a reader does, in headless Chromium, and check that the
target is on the screen, near its top (or the page is scrolled to its end), not under the
theme's sticky header, and still there a moment later, when the sections around it are drawn.

The browser's scroll anchoring is turned off (``overflow-anchor: none``), as in a browser
without it (Safari has long had none): Chromium's anchoring hides the short landing on some
pages and not on others (the same chapter landed right or 7,000 px short as its text changed),
so with it on a test would pass by chance. The long chapters are also followed with it on, as
Chromium and Firefox readers have it. Links are followed two ways:

- from another page: the first, a middle and the last heading's address (``page.html#id``),
  each opened in a fresh page;
- on the page: each link of the page's own contents and of its text to a target of the same
  page, clicked in the order of their targets on a freshly opened page, and the link to the
  last target clicked first on another fresh page (nothing laid out above it yet). On the
  API reference's pages, one template repeated per member, an even sample of those links.

On the page, the clicks run in the page itself, one script for all of a page's links (click,
wait until neither the scroll nor the target has moved for a few frames, read where the target
is, next link). Both ways, a page is followed at both widths at once, in two tabs: most of a
click or a load is waiting for frames, so the two tabs share the machine's cores rather than
queue for one.
"""

from __future__ import annotations

from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import loopback
import pytest
from booktoc import toc_sections

pytestmark = [pytest.mark.browser, pytest.mark.site]

WIDTHS = [390, 1280]
# Scroll anchoring off, as in a browser without it (a style sheet adopted before any script).
NO_ANCHORING_JS = """
(() => { const sheet = new CSSStyleSheet(); sheet.replaceSync("html { overflow-anchor: none; }");
         document.adoptedStyleSheets = [sheet]; })();
"""
LONG_CHAPTERS = [
    "book/inference",
    "book/attention-without-the-score-matrix",
    "book/pretrained-heads",
]
# The API reference's pages are written from one template (a heading and a signature per
# member), and have many more in-page links than a chapter: on them the in-page test follows
# a sample, spread evenly, the first and the last link among them. Chapters: every link.
API_PAGES = {"book/api", *toc_sections("book/api")}
API_SAMPLE = 12
HEIGHT = 844
LOAD_TIMEOUT_MS = 60_000
STILL_FRAMES = 6  # a landing is read once neither the scroll nor the target has moved this long
LATER_MS = 1_000  # and a moment later, when figures and formulas near it are drawn
NEAR_TOP = 0.4  # a target lands in the top 40% of the screen (unless the page ends first)

# Where a target is on the screen: its box (a section's heading; an element with no box of
# its own, its next sibling's), whether something else (the sticky header) is drawn over it,
# and whether the page is scrolled to its end.
WHERE_JS = """
(id) => {
  const element = document.getElementById(id);
  if (!element) return null;
  let box = element.matches("section") ?
    element.querySelector(":scope > h1, :scope > h2, :scope > h3, :scope > h4, :scope > h5, " +
                          ":scope > h6") || element : element;
  let rect = box.getBoundingClientRect();
  for (let next = box; !rect.height && next.nextElementSibling; ) {
    next = next.nextElementSibling;
    box = next;
    rect = box.getBoundingClientRect();
  }
  const x = Math.min(Math.max(rect.left + 8, 1), innerWidth - 2);
  const y = rect.top + Math.min(rect.height / 2, 12);
  const hit = y >= 0 && y < innerHeight ? document.elementFromPoint(x, y) : null;
  const root = document.documentElement;
  return {
    top: Math.round(rect.top), bottom: Math.round(rect.bottom),
    covered: !hit || !(box.contains(hit) || hit.contains(box)),
    end: Math.ceil(scrollY + innerHeight) >= root.scrollHeight - 2,
    scrollY: Math.round(scrollY), pageHeight: root.scrollHeight,
  };
}
"""
# Wait until neither the page's scroll nor the target ``id`` has moved for ``frames`` frames
# (two seconds at most): a smooth scroll has ended, and the sections near the screen are laid
# out, where they stay.
SETTLED_JS = """
async ([id, frames]) => {
  const frame = () => new Promise((done) => requestAnimationFrame(done));
  const element = document.getElementById(id);
  let last = "", still = 0;
  for (let i = 0; i < 120 && still < frames; i++) {
    await frame();
    const now = `${scrollY} ${element ? element.getBoundingClientRect().top : 0}`;
    still = now === last ? still + 1 : 0;
    last = now;
  }
}
"""
# The links of the page to targets on the same page (its contents and its text): for each
# target, in the order of the targets on the page, the first link to it.
IN_PAGE_LINKS_JS = """
() => {
  const page = location.href.split("#")[0];
  const seen = new Map();
  for (const link of document.querySelectorAll(
      "nav.bd-toc-nav a[href], article.bd-article a[href]")) {
    if (!link.hash || link.href.split("#")[0] !== page) continue;
    const id = decodeURIComponent(link.hash.slice(1));
    const target = document.getElementById(id);
    if (target && !seen.has(id) && !target.closest("details:not([open])")) seen.set(id, target);
  }
  const ids = [...seen.keys()];
  const order = (a, b) => seen.get(a).compareDocumentPosition(seen.get(b)) &
    Node.DOCUMENT_POSITION_FOLLOWING ? -1 : 1;
  return ids.sort(order);
}
"""
CLICK_LINK_JS = """
(id) => {
  const page = location.href.split("#")[0];
  const link = [...document.querySelectorAll("nav.bd-toc-nav a[href], article.bd-article a[href]")]
    .find((a) => a.hash && a.href.split("#")[0] === page &&
                 decodeURIComponent(a.hash.slice(1)) === id);
  link.click();
}
"""
# Each link of ``ids`` clicked in turn, in the page: once it has settled (``SETTLED_JS``), where
# its target is. Started without waiting (a promise kept on the window), so that other tabs
# follow their links meanwhile; ``LANDINGS_JS`` waits for it.
FOLLOW_LINKS_JS = f"""
([ids, frames]) => {{
  const click = {CLICK_LINK_JS};
  const where = {WHERE_JS};
  const settled = {SETTLED_JS};
  window.mhaTestLandings = (async () => {{
    const landings = [];
    for (const id of ids) {{
      click(id);
      await settled([id, frames]);
      landings.push(where(id));
    }}
    return landings;
  }})();
}}
"""
LANDINGS_JS = "() => window.mhaTestLandings"


class _Sections(HTMLParser):
    """The ids of a page's ``<section>`` elements inside its ``<article>``, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self._article = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "article":
            self._article += 1
        elif tag == "section" and self._article:
            found = dict(attrs).get("id")
            if found:
                self.ids.append(found)

    def handle_endtag(self, tag: str) -> None:
        if tag == "article":
            self._article -= 1


def section_ids(page_html: str) -> list[str]:
    parser = _Sections()
    parser.feed(page_html)
    return parser.ids


def test_section_ids_reads_the_sections_of_the_article() -> None:
    page = (
        '<section id="no"></section><article><section id="a"><h1>A</h1>'
        '<section id="b"><h2>B</h2></section><section><p>x</p></section></section></article>'
    )
    assert section_ids(page) == ["a", "b"]


def followed(page: str, targets: list[str]) -> list[str]:
    """The in-page targets the test follows on ``page``: all of them, or on an API page at most
    ``API_SAMPLE``, spread evenly, in their order, the first and the last among them."""
    if page not in API_PAGES or len(targets) <= API_SAMPLE:
        return targets
    step = (len(targets) - 1) / (API_SAMPLE - 1)
    return [targets[round(i * step)] for i in range(API_SAMPLE)]


def test_followed_keeps_a_chapters_targets_and_samples_an_api_page() -> None:
    targets = [f"t{i}" for i in range(100)]
    assert followed("book/inference", targets) == targets
    sample = followed("book/api-core", targets)
    assert len(sample) == API_SAMPLE and sample[0] == "t0" and sample[-1] == "t99"
    assert sample == sorted(set(sample), key=targets.index)  # distinct, in the page's order
    assert followed("book/api-core", targets[:5]) == targets[:5]


def landed(where: dict | None) -> str:
    """'' if the target is where a link should land it, else what is wrong."""
    if where is None:
        return "no element with that id"
    if where["top"] < 0 or where["top"] >= HEIGHT - 20:
        return f"off the screen: its top at {where['top']} px (scrolled to {where['scrollY']})"
    if where["covered"]:
        return f"covered by another element at {where['top']} px"
    if where["top"] > NEAR_TOP * HEIGHT and not where["end"]:
        return f"{where['top']} px down the screen, the page not at its end"
    return ""


@pytest.fixture(scope="module")
def site(built_site: Path) -> Iterator[str]:
    with loopback.serve(built_site) as url:
        yield url


def _tab(browser, width: int, anchoring: bool = False):
    context = browser.new_context(viewport={"width": width, "height": HEIGHT})
    if not anchoring:
        context.add_init_script(NO_ANCHORING_JS)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    return context, tab, errors


def _where_after_settling(tab, target: str) -> list[str]:
    """Problems with where ``target`` is, once it has settled (``SETTLED_JS``)."""
    tab.evaluate(SETTLED_JS, [target, STILL_FRAMES])
    problem = landed(tab.evaluate(WHERE_JS, target))
    return [problem] if problem else []


def _where_later(landings: list[tuple[object, str]]) -> list[list[str]]:
    """Problems with where each target is in its tab, of ``(tab, target)`` pairs, a moment
    later (figures and formulas near it drawn): one wait for every tab."""
    landings[0][0].wait_for_timeout(LATER_MS)
    return [
        [f"then moved: {problem}"] if (problem := landed(tab.evaluate(WHERE_JS, target))) else []
        for tab, target in landings
    ]


def _open_in_each(tabs: list, url: str) -> None:
    """Open ``url`` afresh in every tab of ``tabs``, the pages loading at the same time."""
    for tab in tabs:
        tab.goto("about:blank")
        tab.goto(url, wait_until="commit", timeout=LOAD_TIMEOUT_MS)
    for tab in tabs:
        tab.wait_for_load_state("load", timeout=LOAD_TIMEOUT_MS)


def follow_from_another_page(
    browser, built_site: Path, site: str, page: str, widths: list[int], anchoring: bool = False
) -> dict[int, list[str]]:
    """Open headings' addresses in a fresh page each; the problems with where each lands, by
    width (each width has its own tab; they load and settle at the same time).

    The first, a middle and the last heading: the last has the most unlaid sections above
    it, the likeliest to land short. (Every heading is also reached by the in-page test,
    which clicks each link of the page's contents.)
    """
    ids = section_ids((built_site / f"{page}.html").read_text(encoding="utf8"))
    if page != "book/bibliography":
        assert ids, f"{page}: no section ids"
    sample = sorted({0, len(ids) // 2, len(ids) - 1}) if ids else []
    opened = [_tab(browser, width, anchoring) for width in widths]
    tabs = [tab for _, tab, _ in opened]
    problems: dict[int, list[str]] = {width: [] for width in widths}
    try:
        for target in (ids[i] for i in sample):
            _open_in_each(tabs, f"{site}{page}.html#{target}")
            for width, tab in zip(widths, tabs, strict=True):
                problems[width] += [f"#{target}: {p}" for p in _where_after_settling(tab, target)]
        if ids:
            later_problems = _where_later([(tab, ids[-1]) for tab in tabs])
            for width, later in zip(widths, later_problems, strict=True):
                problems[width] += [f"#{ids[-1]}: {p}" for p in later]
    finally:
        for context, _, _ in opened:
            context.close()
    for width, (_, _, errors) in zip(widths, opened, strict=True):
        problems[width] += [f"page error: {e}" for e in errors]
    return problems


def follow_on_the_page(
    browser, site: str, page: str, widths: list[int], anchoring: bool = False
) -> dict[int, list[str]]:
    """Click each in-page link of a fresh page in the order of their targets, then the last
    one first on another fresh page; the problems with where each target lands, by width.

    Each width has its own tab; their clicks run at the same time (``FOLLOW_LINKS_JS``)."""
    url = f"{site}{page}.html"
    opened = [_tab(browser, width, anchoring) for width in widths]
    tabs = [tab for _, tab, _ in opened]
    problems: dict[int, list[str]] = {}
    try:
        _open_in_each(tabs, url)
        targets = {}
        for width, tab in zip(widths, tabs, strict=True):
            targets[width] = followed(page, tab.evaluate(IN_PAGE_LINKS_JS))
            if page not in ("book/bibliography", "book/api"):
                assert targets[width], f"{page}: no link to a target on the page"
            tab.evaluate(FOLLOW_LINKS_JS, [targets[width], STILL_FRAMES])
        for width, tab in zip(widths, tabs, strict=True):
            landings = tab.evaluate(LANDINGS_JS)
            problems[width] = [
                f"#{target}: {problem}"
                for target, where in zip(targets[width], landings, strict=True)
                if (problem := landed(where))
            ]
        # The farthest target first, on a fresh page.
        last = {width: found[-1] for width, found in targets.items() if found}
        first = [(width, tab) for width, tab in zip(widths, tabs, strict=True) if width in last]
        if first:
            _open_in_each([tab for _, tab in first], url)
            for width, tab in first:
                tab.evaluate(CLICK_LINK_JS, last[width])
            for width, tab in first:
                problems[width] += [
                    f"#{last[width]} first: {p}" for p in _where_after_settling(tab, last[width])
                ]
            later_problems = _where_later([(tab, last[width]) for width, tab in first])
            for (width, _), later in zip(first, later_problems, strict=True):
                problems[width] += [f"#{last[width]} first: {p}" for p in later]
    finally:
        for context, _, _ in opened:
            context.close()
    for width, (_, _, errors) in zip(widths, opened, strict=True):
        problems[width] += [f"page error: {e}" for e in errors]
    return problems


@pytest.fixture(scope="module")
def on_the_page(browser, site: str):
    """``on_the_page(page, width, anchoring)``: ``follow_on_the_page`` at every width of
    ``WIDTHS`` at once, the first time a page is asked for; the problems at ``width``."""
    cache: dict[tuple[str, bool], dict[int, list[str]]] = {}

    def get(page: str, width: int, anchoring: bool = False) -> list[str]:
        if (page, anchoring) not in cache:
            cache[page, anchoring] = follow_on_the_page(browser, site, page, WIDTHS, anchoring)
        return cache[page, anchoring][width]

    return get


@pytest.fixture(scope="module")
def from_another_page(browser, built_site: Path, site: str):
    """``from_another_page(page, width, anchoring)``: ``follow_from_another_page`` at every
    width of ``WIDTHS`` at once, the first time a page is asked for; the problems at ``width``."""
    cache: dict[tuple[str, bool], dict[int, list[str]]] = {}

    def get(page: str, width: int, anchoring: bool = False) -> list[str]:
        if (page, anchoring) not in cache:
            cache[page, anchoring] = follow_from_another_page(
                browser, built_site, site, page, WIDTHS, anchoring
            )
        return cache[page, anchoring][width]

    return get


def _report(problems: list[str], header: str) -> str:
    return f"{header}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_link_from_another_page_lands_on_its_heading(
    from_another_page, toc_page: str, width: int
) -> None:
    """A heading's address (first, middle, last), opened in a fresh page, shows it at the top."""
    problems = from_another_page(toc_page, width)
    assert problems == [], _report(problems, f"{toc_page} at {width} px, from another page")


@pytest.mark.parametrize("width", WIDTHS)
def test_a_link_on_the_page_lands_on_its_target(on_the_page, toc_page: str, width: int) -> None:
    """Each in-page link (contents and text), clicked on the page, shows its target."""
    problems = on_the_page(toc_page, width)
    assert problems == [], _report(problems, f"{toc_page} at {width} px, on the page")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", LONG_CHAPTERS)
def test_links_land_with_the_browsers_scroll_anchoring_on(
    from_another_page, on_the_page, page: str, width: int
) -> None:
    """The long chapters' links, followed with Chromium's scroll anchoring on."""
    problems = from_another_page(page, width, anchoring=True)
    problems += on_the_page(page, width, anchoring=True)
    assert problems == [], _report(problems, f"{page} at {width} px, scroll anchoring on")
