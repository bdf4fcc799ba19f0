"""The opening figures' stills: each page's first Plotly figure as SVGs drawn at build time.

The unmarked tests check the extension's module (``book/_ext/mha_site/figure_stills.py``) on
small inputs; the ``site`` tests check ``_build/html``: the first figure of every page with
figures has its four stills (light and dark, wide and narrow), each an SVG of that figure,
and no other figure has one. What the page does with them is in
``tests/browser/test_opening_figure.py``.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from mha_site import figure_stills, plotly_figures

SVG = "{http://www.w3.org/2000/svg}"
FIGURE_DIV = re.compile(r'<div class="mha-plotly" id="([^"]+)"([^>]*)>')
TITLE = {"layout": {"title": {"text": "Where the verb puts its weight"}}}


def test_a_placeholder_with_stills_holds_four_decorative_images() -> None:
    html = plotly_figures.figure_html(TITLE, "fig-1", "../_figures/")
    assert 'data-still=""' in html
    assert figure_stills.STILL_PLACEHOLDER.findall(html) == ["fig-1"]
    sources = re.findall(r'<img class="mha-still[^"]*" src="([^"]+)" alt=""', html)
    assert sorted(sources) == sorted(
        f"../_figures/fig-1.{theme}.{width}.svg"
        for theme in ("light", "dark")
        for width in ("narrow", "wide")
    )


def test_a_placeholder_without_stills_has_no_image() -> None:
    html = plotly_figures.figure_html(TITLE, "fig-1")
    assert "data-still" not in html and "<img" not in html
    assert figure_stills.STILL_PLACEHOLDER.findall(html) == []


def test_no_chromium_is_looked_for_when_stills_are_off(monkeypatch) -> None:
    monkeypatch.setenv("MHA_FIGURE_STILLS", "off")
    assert figure_stills.find_chromium() is None


def test_a_still_is_current_only_when_newer_than_its_figure(tmp_path: Path) -> None:
    figures = tmp_path / "_figures"
    figures.mkdir()
    (figures / "fig-1.js").write_text("window.mhaFigure('fig-1', {});\n")
    assert not figure_stills.is_current(tmp_path, "fig-1")
    for theme in figure_stills.THEMES:
        for width in figure_stills.VIEWPORTS:
            (figures / figure_stills.still_name("fig-1", theme, width)).write_text("<svg/>")
    assert figure_stills.is_current(tmp_path, "fig-1")
    later = (figures / "fig-1.js").stat().st_mtime + 10
    os.utime(figures / "fig-1.js", (later, later))
    assert not figure_stills.is_current(tmp_path, "fig-1")


def _figure_title(site: Path, fig_id: str) -> str:
    script = (site / "_figures" / f"{fig_id}.js").read_text(encoding="utf8")
    figure = json.loads(script[script.index(",") + 1 : script.rindex(")")])
    title = figure["layout"]["title"]
    return title["text"] if isinstance(title, dict) else title


def _svg_text(path: Path) -> str:
    root = ET.fromstring(path.read_text(encoding="utf8"))
    assert root.tag == f"{SVG}svg", f"{path.name} is not an SVG document"
    return " ".join("".join(node.itertext()) for node in root.iter(f"{SVG}text"))


@pytest.mark.site
def test_each_pages_opening_figure_has_its_stills_and_no_other_figure_has(
    built_site: Path,
) -> None:
    pages = 0
    for page in sorted(built_site.rglob("*.html")):
        figures = FIGURE_DIV.findall(page.read_text(encoding="utf8"))
        if not figures:
            continue
        pages += 1
        (first, attributes), rest = figures[0], figures[1:]
        assert 'data-still=""' in attributes, f"{page.name}: {first} has no still"
        assert not [fig for fig, attrs in rest if "data-still" in attrs], page.name
        words = re.sub(r"<[^>]+>", " ", _figure_title(built_site, first)).split()
        for theme in figure_stills.THEMES:
            for width in figure_stills.VIEWPORTS:
                still = built_site / "_figures" / figure_stills.still_name(first, theme, width)
                text = _svg_text(still)
                # The still is this figure: its title's first words are drawn in it (the
                # title wraps to the width, so its words are compared, not its lines).
                assert words[:3] and all(word in text for word in words[:3]), (
                    f"{still.name} does not show the title {words[:3]}: {text[:120]!r}"
                )
    assert pages >= 10, f"only {pages} pages with figures found"
