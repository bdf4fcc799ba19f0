"""The live MiniLM of pretrained-heads in headless Chromium, against the package.

The chapter's live model tokenises in the browser with a WordPiece of its own
(``book/_static/mha-live-tokenizer.js``), loads MiniLM's attention, exported by
:mod:`mha.models.minilm_onnx`, and ONNX Runtime Web (``mha-live-loader.js``) and shows every
head (``mha-live-minilm.js``). These tests hold the tokenizer, alone in a blank page, to the
``tokenizers`` package on many texts (the book's own lines and random unicode), then type
sentences into the page and compare what it shows with
:func:`mha.models.minilm_onnx.reference_views` to ``LIVE_TOLERANCE`` (the served graph stores
its weights as float16: ``scripts/live_model_sizes.py`` chose it by this tolerance, which
also asks that the most-attended key of at least ``SAME_TOP_KEY`` of the rows be the
package's): sentences no chapter
uses, unicode, the longest text the model takes and one token more, and many sentences in a
row. Each gets a result or a clear message (an empty text is not run: the page asks for a
sentence); none hangs. The chosen head is marked, the large map has its tokens on both axes,
and its values can be read with the keyboard. The page loads nothing
before the button is pressed, and nothing from another host after; opened from a file, it
runs the model too.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import loopback
import numpy as np
import pytest
from tokenizers import Tokenizer

from mha.models import minilm_onnx
from mha.models.minilm import load_minilm, model_dir

pytestmark = [pytest.mark.browser, pytest.mark.site]

ROOT = Path(__file__).resolve().parents[2]
PAGE = "book/pretrained-heads.html"
LIVE_TOLERANCE = 0.01
"""Largest absolute difference allowed between the page's numbers (float16 weights, float32
arithmetic) and the package's (float32)."""
SAME_TOP_KEY = 0.99
"""Least share of rows (layer, head, query) whose most-attended key is the package's."""
RUN_TIMEOUT_MS = 180_000  # loading 60 MB and running 512 tokens on a busy 2-core machine
FINISHED = "['done', 'too-long', 'empty', 'error'].includes("
FINISHED += "document.querySelector('.mha-live-minilm').dataset.state)"
FINISHED += " && !window.mhaLiveMiniLM.panel.busy"

SENTENCES = [
    "Seven otters debated the merits of wet umbrellas.",
    "Ça coûte 12 € — naïve façade? Ünïcödé, ñandú and Zürich.",
    "東京は晴れ。서울은 흐림 🙂 Ελληνικά ΣΟΦΙΑΣ",
]


@pytest.fixture(scope="module")
def live_url(built_site: Path) -> Iterator[str]:
    """The built site over loopback."""
    with loopback.serve(built_site) as url:
        yield url


@pytest.fixture(scope="module")
def model():
    return load_minilm()


@pytest.fixture(scope="module")
def live_page(browser, live_url: str):
    """The chapter, with the model loaded by its button; records every request."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(live_url + PAGE, wait_until="load")
    page.wait_for_timeout(500)
    before = list(requests)
    page.button_before_click = page.inner_text("button.mha-live-load")
    page.status_before_click = page.inner_text(".mha-live-status")
    page.fill("#mha-live-text", SENTENCES[0])
    page.click("button.mha-live-load")
    page.wait_for_function(FINISHED, timeout=RUN_TIMEOUT_MS)
    page.requests_before_click = before
    page.requests = requests
    yield page
    page.close()


def _shown(page) -> dict:
    return page.evaluate(
        """() => {
        const p = window.mhaLiveMiniLM.panel, r = p.result;
        const root = document.querySelector('.mha-live-minilm');
        if (!r) return {state: root.dataset.state, status: p.status.textContent};
        return {state: root.dataset.state, status: p.status.textContent, tokens: r.tokens,
                weights: Array.from(r.weights), valueWeighted: Array.from(r.valueWeighted),
                firstMap: p.firstMapSeconds, load: p.loadSeconds, modelBytes: p.modelBytes,
                manifest: p.manifest};
    }"""
    )


def _type_and_run(page, text: str) -> None:
    page.fill("#mha-live-text", text)
    page.click("button.mha-live-run")
    page.wait_for_function(FINISHED, timeout=RUN_TIMEOUT_MS)


def _check_against_package(shown: dict, model, text: str) -> float:
    ref = minilm_onnx.reference_views(model, text)
    L = len(ref["tokens"])
    assert shown["state"] == "done", shown["status"]
    assert shown["tokens"] == ref["tokens"]
    weights = np.array(shown["weights"]).reshape(6, 12, L, L)
    shares = np.array(shown["valueWeighted"]).reshape(6, 12, L, L)
    worst = max(
        np.abs(weights - ref["weights"]).max(), np.abs(shares - ref["value_weighted"]).max()
    )
    assert worst < LIVE_TOLERANCE, (text, worst)
    same = (weights.argmax(-1) == ref["weights"].argmax(-1)).mean()
    assert same >= SAME_TOP_KEY, (text, same)
    return float(worst)


# ------------------------------------------------------------------------ tokenizer


def _random_texts(count: int, seed: int = 0) -> list[str]:
    """Random texts over letters, accents, combining marks, CJK, Hangul, emoji, punctuation,
    symbols, every kind of space and control character, and the special tokens."""
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
        "éèêëñÅåøßẞİıΣσςΩωЖжﬁǅĳŉ",
        "\u0301\u0308\u0327\u0303",  # combining marks
        "東京語中文字\u3400\U00020000\uf900",  # CJK ideographs of several blocks
        "한국어のカタナ",  # Hangul, kana (not in the CJK blocks)
        "مرحباनिกข",  # Arabic, Devanagari, Thai
        "🙂👍🏽❤️🇫🇷",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~¿¡«»—–…‘’“”、。「」",
        "∑≤≥±×÷€£¥©®°",
        " \t\n\r\u00a0\u2003\u3000\u2028\x0b\x0c\x85",  # spaces and line breaks
        "\x00\x07\x1b\u200b\u200d\ufeff\ufffd\u00ad",  # controls and format characters
    ]
    words = ["[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]", "##ing", "x" * 100, "y" * 101]
    texts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(0, 12)):
            if rng.random() < 0.1:
                parts.append(rng.choice(words))
            else:
                pool = rng.choice(pools)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
            parts.append(rng.choice([" ", "", "  ", "\n"]))
        texts.append("".join(parts))
    return texts


def _book_lines() -> list[str]:
    lines = []
    for path in sorted((ROOT / "book").glob("*.md")):
        lines += [line for line in path.read_text(encoding="utf8").splitlines() if line.strip()]
    return lines


def test_wordpiece_in_the_browser_matches_the_tokenizers_package(browser, built_site) -> None:
    """The tokenizer script on its own (no page, loader or runtime), with the site's copy of
    the model's tokenizer.json, gives the tokens of the ``tokenizers`` package."""
    texts = _book_lines() + _random_texts(600)
    texts += ["", " ", "a", "Ça", "ΣΟΦΙΑΣ σοφίας", "İstanbul", "naïve café", "[CLS][SEP]x[SEP]"]
    reference = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    reference.no_truncation()
    reference.no_padding()
    expected = [e.tokens for e in reference.encode_batch(texts)]
    spec = json.loads((built_site / "_static" / "live-minilm" / "tokenizer.json").read_text("utf8"))
    page = browser.new_page()
    try:
        page.set_content("<!doctype html><html lang='en'><title>tokenizer</title></html>")
        page.add_script_tag(path=str(ROOT / "book" / "_static" / "mha-live-tokenizer.js"))
        got = page.evaluate(
            """([spec, texts]) => {
            const wp = new window.mhaWordPiece(spec);
            return texts.map((t) => wp.tokenize(t).tokens);
        }""",
            [spec, texts],
        )
    finally:
        page.close()
    wrong = [(t, g, e) for t, g, e in zip(texts, got, expected, strict=True) if g != e]
    assert len(texts) > 1500
    assert wrong == [], f"{len(wrong)} of {len(texts)} texts differ; first: {wrong[:3]}"


# ----------------------------------------------------------------------- live model


def test_nothing_of_the_live_model_loads_before_the_button(live_page) -> None:
    assert not [u for u in live_page.requests_before_click if "/live-minilm/" in u]
    model = _shown(live_page)["manifest"]["model"]
    assert model == minilm_onnx.WEIGHTS_NAMES["float16"]
    assert any(f"/live-minilm/{model}" in u for u in live_page.requests)


def test_the_button_says_the_download_before_it_is_pressed(live_page) -> None:
    manifest = _shown(live_page)["manifest"]
    total = manifest["model_bytes"] + manifest["runtime_bytes"]
    assert live_page.button_before_click.endswith(f"({total / 1e6:.1f} MB)")
    assert (
        f"downloads {total / 1e6:.1f} MB: the model {manifest['model_bytes'] / 1e6:.1f} MB, "
        f"its runtime {manifest['runtime_bytes'] / 1e6:.1f} MB." in live_page.status_before_click
    )


def test_the_live_model_loads_nothing_from_another_host(live_page, live_url: str) -> None:
    others = [u for u in live_page.requests if not u.startswith((live_url, "data:", "blob:"))]
    assert others == []


def test_first_sentence_matches_the_package_and_the_page_says_size_and_time(
    live_page, model, artifacts_dir: Path
) -> None:
    shown = _shown(live_page)
    worst = _check_against_package(shown, model, SENTENCES[0])
    manifest = shown["manifest"]
    assert manifest["weights"] == "float16"
    assert shown["modelBytes"] == manifest["model_bytes"] > 40e6
    assert f"model {manifest['model_bytes'] / 1e6:.1f} MB" in shown["status"]
    assert f"runtime {manifest['runtime_bytes'] / 1e6:.1f} MB" in shown["status"]
    assert f"first attention map {shown['firstMap']:.1f} s" in shown["status"]
    (artifacts_dir / "live-minilm.json").write_text(
        json.dumps(
            {
                "model_bytes": manifest["model_bytes"],
                "runtime_bytes": manifest["runtime_bytes"],
                "load_seconds": shown["load"],
                "first_map_seconds": shown["firstMap"],
                "largest_difference": worst,
            },
            indent=1,
        )
    )


@pytest.mark.parametrize("text", SENTENCES[1:], ids=["accents", "cjk-emoji-greek"])
def test_typed_sentence_matches_the_package(live_page, model, text: str) -> None:
    _type_and_run(live_page, text)
    _check_against_package(_shown(live_page), model, text)


def test_both_views_are_drawn_for_every_head(live_page) -> None:
    _type_and_run(live_page, SENTENCES[0])
    for view in ("weights", "value-weighted"):
        live_page.select_option("select.mha-live-view", view)
        cells = live_page.locator(".mha-live-grid button.mha-live-cell")
        assert cells.count() == 72
        label = cells.nth(13).get_attribute("aria-label")
        assert label.startswith("head 2.2, ")
        cells.nth(13).click()
        name = live_page.locator(".mha-live-detail canvas").get_attribute("aria-label")
        assert name.startswith("Head 2.2, ")
        pressed = [cells.nth(k).get_attribute("aria-pressed") for k in range(72)]
        assert pressed == ["false"] * 13 + ["true"] + ["false"] * 58
        if view == "value-weighted":  # the chapter's name of this view, everywhere
            assert label == "head 2.2, norm-weighted share"
            assert "norm-weighted share" in name
            caption = live_page.locator(".mha-live-detail figcaption").text_content()
            assert "norm-weighted share" in caption
    assert "value-weighted" not in live_page.locator(".mha-live-minilm").inner_text()
    live_page.select_option("select.mha-live-view", "weights")


def test_the_grid_is_one_tab_stop_and_arrow_keys_move_in_it(live_page) -> None:
    _type_and_run(live_page, SENTENCES[0])
    cells = live_page.locator(".mha-live-grid button.mha-live-cell")
    cells.nth(0).click()
    stops = live_page.eval_on_selector_all(
        ".mha-live-grid button.mha-live-cell", "bs => bs.filter(b => b.tabIndex === 0).length"
    )
    assert stops == 1
    live_page.keyboard.press("ArrowRight")
    live_page.keyboard.press("ArrowDown")
    focused = live_page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert focused.startswith("head 2.2, ")
    live_page.keyboard.press("Enter")
    assert cells.nth(13).get_attribute("aria-pressed") == "true"
    assert cells.nth(0).get_attribute("aria-pressed") == "false"


def test_on_a_phone_every_head_is_a_44_px_target_and_the_page_does_not_widen(
    browser, live_url: str
) -> None:
    """At 390 px with touch, each of the 72 head buttons is at least 44 px wide and 44 px tall
    as drawn; a layer's twelve heads scroll inside the grid (the last one can be scrolled to
    and tapped, its outline inside the grid), and the page itself does not scroll sideways."""
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, has_touch=True, is_mobile=True
    )
    page = context.new_page()
    try:
        page.goto(live_url + PAGE, wait_until="load")
        assert page.evaluate("matchMedia('(pointer: coarse)').matches")
        # the button, which says the download, fits in the panel before it is pressed
        button, panel = (
            page.locator(s).bounding_box() for s in ("button.mha-live-load", ".mha-live-minilm")
        )
        assert button["x"] + button["width"] <= panel["x"] + panel["width"] + 0.5, (button, panel)
        page.fill("#mha-live-text", SENTENCES[0])
        page.click("button.mha-live-load")
        page.wait_for_function(FINISHED, timeout=RUN_TIMEOUT_MS)
        boxes = page.eval_on_selector_all(
            ".mha-live-grid button.mha-live-cell",
            "bs => bs.map(b => { const r = b.getBoundingClientRect();"
            " return [b.getAttribute('aria-label'), r.width, r.height]; })",
        )
        assert len(boxes) == 72
        narrow = [(name, width) for name, width, _ in boxes if width < 44]
        assert not narrow, f"head buttons under 44 px wide on a phone: {narrow[:3]}"
        short = [(name, height) for name, _, height in boxes if height < 44]
        assert not short, f"head buttons under 44 px tall on a phone: {short[:3]}"
        page_width = page.evaluate("document.documentElement.scrollWidth")
        assert page_width <= 390, f"the page scrolls sideways: {page_width} px wide"
        grid = page.eval_on_selector(
            ".mha-live-grid", "g => [g.scrollWidth, g.clientWidth, getComputedStyle(g).overflowX]"
        )
        assert grid[0] > grid[1] and grid[2] == "auto", grid
        last = page.locator('.mha-live-grid button.mha-live-cell[data-layer="0"][data-head="11"]')
        last.scroll_into_view_if_needed()
        last.tap()
        assert last.get_attribute("aria-pressed") == "true", "head 1.12 cannot be tapped"
        # the outline (3 px, 1 px away) of the chosen head is not cut off by the scrolling grid
        inside = page.evaluate(
            """() => {
            const g = document.querySelector('.mha-live-grid');
            const b = g.querySelector('[aria-pressed=true]').getBoundingClientRect();
            const r = g.getBoundingClientRect();
            return b.left - 4 >= r.left + g.clientLeft && b.top - 4 >= r.top + g.clientTop
                && b.right + 4 <= r.left + g.clientLeft + g.clientWidth
                && b.bottom + 4 <= r.top + g.clientTop + g.clientHeight;
        }"""
        )
        assert inside, "the chosen head's outline is cut off by the grid's edge"
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        context.close()


def test_the_large_map_has_its_tokens_on_both_axes(live_page) -> None:
    _type_and_run(live_page, SENTENCES[0])
    tokens = live_page.evaluate("window.mhaLiveMiniLM.panel.result.tokens")
    for axis in ("queries", "keys"):
        labels = live_page.locator(f".mha-live-detail .mha-live-{axis} span").all_text_contents()
        assert labels[:3] == [f"{i} {t}" for i, t in enumerate(tokens[:3])]
        assert 0 < len(labels) <= len(tokens)


def test_a_cell_value_can_be_read_with_the_keyboard(live_page, model) -> None:
    text = SENTENCES[0]
    _type_and_run(live_page, text)
    live_page.locator(".mha-live-grid button.mha-live-cell").nth(0).click()
    live_page.focus(".mha-live-detail canvas")
    for key in ("ArrowDown", "ArrowDown", "ArrowRight", "ArrowDown"):
        live_page.keyboard.press(key)
    caption = live_page.locator(".mha-live-detail figcaption").text_content()
    assert "(position 3) → key" in caption and "(position 1):" in caption
    ref = minilm_onnx.reference_views(model, text)
    value = float(caption.rsplit(" ", 1)[1])
    assert abs(value - ref["weights"][0, 0, 3, 1]) < LIVE_TOLERANCE + 5e-5


@pytest.mark.parametrize("text", ["", "  \n "], ids=["empty", "spaces"])
def test_an_empty_text_is_not_run_and_the_page_asks_for_a_sentence(live_page, text) -> None:
    _type_and_run(live_page, text)
    shown = _shown(live_page)
    assert shown["state"] == "empty"
    assert "The box is empty. Type a sentence" in shown["status"]
    assert live_page.locator(".mha-live-grid button").count() == 0


def test_the_hovered_value_is_the_package_value(live_page, model) -> None:
    text = SENTENCES[0]
    _type_and_run(live_page, text)
    live_page.locator(".mha-live-grid button.mha-live-cell").nth(0).click()
    canvas = live_page.locator(".mha-live-detail canvas")
    ref = minilm_onnx.reference_views(model, text)
    L = len(ref["tokens"])
    i, j = 3, 1
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    canvas.hover(position={"x": (j + 0.5) * box["width"] / L, "y": (i + 0.5) * box["height"] / L})
    caption = live_page.locator(".mha-live-detail figcaption").text_content()
    assert f"(position {i}) → key" in caption and f"(position {j}):" in caption
    value = float(caption.rsplit(" ", 1)[1])
    assert abs(value - ref["weights"][0, 0, i, j]) < LIVE_TOLERANCE + 5e-5  # shown to 4 places


def _rows(page, picks: list[tuple[int, int, int]]) -> dict:
    """Rows ``(layer, head, query)`` of the shown weights and shares (a 512-token result is
    too large to hand over whole)."""
    return page.evaluate(
        """(picks) => {
        const p = window.mhaLiveMiniLM.panel, r = p.result;
        const root = document.querySelector('.mha-live-minilm');
        if (!r) return {state: root.dataset.state, status: p.status.textContent};
        const L = r.tokens.length;
        const row = (a, [l, h, i]) => {
            const start = ((l * r.heads + h) * L + i) * L;
            return Array.from(a.subarray(start, start + L));
        };
        return {state: root.dataset.state, status: p.status.textContent, L: L,
                weights: picks.map((k) => row(r.weights, k)),
                valueWeighted: picks.map((k) => row(r.valueWeighted, k))};
    }""",
        picks,
    )


def test_the_longest_text_runs_and_one_more_token_gets_a_message(live_page, model) -> None:
    longest = " ".join(["a"] * 510)  # 510 word pieces + [CLS] + [SEP] = 512 positions
    _type_and_run(live_page, longest)
    rng = np.random.default_rng(0)
    picks = [
        (int(l), int(h), int(i))
        for l, h, i in zip(*(rng.integers(0, n, 40) for n in (6, 12, 512)), strict=True)
    ]
    shown = _rows(live_page, picks + [(0, 0, 0), (5, 11, 511)])
    assert shown["state"] == "done" and shown["L"] == 512, shown["status"]
    ref = minilm_onnx.reference_views(model, longest)
    for key, name in (("weights", "weights"), ("valueWeighted", "value_weighted")):
        expected = np.stack([ref[name][k] for k in picks + [(0, 0, 0), (5, 11, 511)]])
        assert np.abs(np.array(shown[key]) - expected).max() < LIVE_TOLERANCE
    _type_and_run(live_page, longest + " a")
    shown = _shown(live_page)
    assert shown["state"] == "too-long"
    assert "513 tokens" in shown["status"] and "512 positions" in shown["status"]
    assert live_page.locator(".mha-live-grid button").count() == 0


def test_many_sentences_in_a_row_end_on_the_last(live_page, model) -> None:
    texts = [f"Sentence number {n} about {w}." for n, w in enumerate(["owls", "ice", "jazz"])]
    texts += ["Dernière phrase : les hiboux ne dorment jamais."]
    for text in texts:  # without waiting: each request while one runs is queued
        live_page.fill("#mha-live-text", text)
        live_page.click("button.mha-live-run")
    live_page.wait_for_function(FINISHED, timeout=RUN_TIMEOUT_MS)
    _check_against_package(_shown(live_page), model, texts[-1])


@pytest.mark.parametrize("where", ["file", "subpath"])
def test_from_a_file_and_under_a_subpath_the_live_model_runs_too(
    browser, built_site: Path, subpath_url: str, model, where: str
) -> None:
    url = (built_site / PAGE).as_uri() if where == "file" else subpath_url + PAGE
    page = browser.new_page()
    requests: list[str] = []
    failed: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    try:
        page.goto(url, wait_until="load")
        page.fill("#mha-live-text", SENTENCES[1])
        page.click("button.mha-live-load")
        page.wait_for_function(FINISHED, timeout=RUN_TIMEOUT_MS)
        _check_against_package(_shown(page), model, SENTENCES[1])
    finally:
        page.close()
    if where == "file":
        assert all(u.startswith(("file:", "data:", "blob:")) for u in requests), requests
    else:
        own = ("data:", "blob:", subpath_url)
        assert all(u.startswith(own) for u in requests if "favicon.ico" not in u), requests
        assert [f for f in failed if not f.endswith("/favicon.ico")] == [], failed
