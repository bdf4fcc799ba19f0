"""The built site: every page, offline figures and math, nothing from other hosts.

Tests marked ``site`` check ``_build/html`` as built by ``scripts/build_book.py`` (the
``built_site`` fixture builds it once per session). The unmarked tests check the book's
Sphinx extension (``book/_ext/mha_site.py``) and the JupyterLab setup on small inputs.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from booktoc import toc_pages

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
MAX_PAGE_BYTES = 2 * 1024 * 1024  # a page plus what it alone loads
PLOTLY_JS = "_static/plotly/plotly.min.js"
MATHJAX_JS = "_static/mathjax/tex-chtml.js"
REPOSITORY = "https://github.com/mha-book/mha-book"


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


mha_site = load("mha_site", BOOK / "_ext" / "mha_site.py")
setup_jupyterlab = load("setup_jupyterlab", ROOT / "scripts" / "setup_jupyterlab.py")
build_book = load("build_book", ROOT / "scripts" / "build_book.py")


def makes_plotly_figures(source: str) -> bool:
    """Whether a chapter's code builds and shows a Plotly figure (directly or by mha.plotting)."""
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


def test_figure_html_drops_the_default_template_and_marks_the_figure_auto() -> None:
    import plotly.graph_objects as go

    figure = json.loads(go.Figure(go.Bar(y=[1, 2]), layout={"title": "t"}).to_json())
    html = mha_site.figure_html(figure, "fig-1")
    assert '<div class="mha-plotly" id="fig-1" data-theme-template="auto">' in html
    payload = re.search(r'data-for="fig-1">(.*)</script>', html, re.S).group(1)
    drawn = json.loads(payload)
    assert "template" not in drawn["layout"]
    assert drawn["data"][0]["type"] == "bar"
    assert len(payload) < len(json.dumps(figure)) / 2  # the template was most of it


def test_figure_html_keeps_a_chosen_template() -> None:
    import plotly.graph_objects as go

    figure = json.loads(go.Figure(layout={"template": "simple_white"}).to_json())
    html = mha_site.figure_html(figure, "fig-2")
    assert 'data-theme-template="fixed"' in html
    assert '"template"' in html


def test_figure_html_cannot_close_its_script_element() -> None:
    figure = {"data": [{"type": "scatter", "name": "</script><script>alert(1)"}], "layout": {}}
    html = mha_site.figure_html(figure, "fig-3")
    assert html.count("</script>") == 1
    payload = re.search(r'data-for="fig-3">(.*)</script>', html, re.S).group(1)
    assert json.loads(payload)["data"][0]["name"] == "</script><script>alert(1)"


def test_api_modules_reads_one_module_per_line() -> None:
    text = "intro\n```{mha-api}\nmha\nmha.params  # core\n\nmha.cost\n```\nafter\n"
    assert mha_site.api_modules(text) == ["mha", "mha.params", "mha.cost"]


def test_api_markdown_documents_members_of_submodules_only() -> None:
    text = mha_site.api_markdown(["mha", "mha.params"])
    assert "(api-mha)=\n## `mha`" in text
    assert ".. automodule:: mha\n```" in text  # the package: its docstring only
    assert ".. automodule:: mha.params\n   :members:\n```" in text


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


@pytest.mark.site
def test_figure_pages_contain_figure_containers_with_data(built_site: Path) -> None:
    figure_pages = [
        page
        for page in toc_pages()
        if makes_plotly_figures((ROOT / f"{page}.md").read_text(encoding="utf8"))
    ]
    assert figure_pages, "no chapter makes a Plotly figure"
    for page in figure_pages:
        html = page_path(built_site, page).read_text(encoding="utf8")
        ids = re.findall(r'<div class="mha-plotly" id="([^"]+)"', html)
        assert ids, f"{page}: no figure container"
        for fig_id in ids:
            data = re.search(rf'data-for="{re.escape(fig_id)}">(.*?)</script>', html, re.S)
            assert data, f"{page}: figure {fig_id} has no data"
            assert json.loads(data.group(1))["data"], f"{page}: figure {fig_id} is empty"


@pytest.mark.site
def test_plotly_js_is_served_once_and_loaded_locally(built_site: Path) -> None:
    copies = [p for p in (built_site / "_static").rglob("*.js") if p.name.startswith("plotly")]
    assert [p.relative_to(built_site).as_posix() for p in copies] == [PLOTLY_JS]
    plotly_js = (built_site / PLOTLY_JS).read_bytes()
    assert len(plotly_js) > 1_000_000
    signature = plotly_js[-2000:-1000].decode("utf8", "replace")  # a slice of its code
    for html_file in built_site.rglob("*.html"):
        html = html_file.read_text(encoding="utf8")
        page = assets(html)
        srcs = [url for tag, url in page.urls if tag == "script"]
        assert not any("plot.ly" in url or "plotly" in url and is_other_host(url) for url in srcs)
        assert signature not in html, f"{html_file.name} embeds plotly.js"
        if 'class="mha-plotly"' in html:
            local = [url for url in srcs if url.split("?")[0].endswith(PLOTLY_JS)]
            assert len(local) == 1, f"{html_file.name} does not load the shared plotly.js"
            assert (html_file.parent / local[0].split("?")[0]).resolve() == (
                built_site / PLOTLY_JS
            ).resolve()
        else:
            assert PLOTLY_JS not in html, f"{html_file.name} loads plotly.js with no figure"


@pytest.mark.site
def test_mathjax_is_served_by_the_site(built_site: Path) -> None:
    assert (built_site / MATHJAX_JS).stat().st_size > 500_000
    assert (built_site / "_static/mathjax/output/chtml/fonts/woff-v2").is_dir()
    math_pages = 0
    for html_file in built_site.rglob("*.html"):
        html = html_file.read_text(encoding="utf8")
        srcs = [url for tag, url in assets(html).urls if tag == "script"]
        assert not any("mathjax" in url.lower() and is_other_host(url) for url in srcs)
        if 'class="math' in html:
            math_pages += 1
            local = [url for url in srcs if url.split("?")[0].endswith(MATHJAX_JS)]
            assert len(local) == 1, f"{html_file.name} has math but no local MathJax"
    assert math_pages > 0


@pytest.mark.site
def test_no_page_loads_anything_from_another_host(built_site: Path) -> None:
    for html_file in built_site.rglob("*.html"):
        html = html_file.read_text(encoding="utf8")
        page = assets(html)
        other = [url for _, url in page.urls if is_other_host(url)]
        assert other == [], f"{html_file.relative_to(built_site)} loads {other}"
        assert "THEBE_JS_URL" not in html and "thebe" not in " ".join(u for _, u in page.urls)
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
    entries = set(re.findall(r'<div class="citation" id="([^"]+)" role="doc-biblioentry">', html))
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
def test_api_page_documents_each_listed_module(built_site: Path) -> None:
    html = page_path(built_site, "book/api").read_text(encoding="utf8")
    modules = mha_site.api_modules((BOOK / "api.md").read_text(encoding="utf8"))
    for module in modules:
        assert f'id="module-{module}"' in html, f"{module} is not documented"
    assert 'id="mha.np_backend.multi_head_attention"' in html


@pytest.mark.site
def test_pages_offer_search_source_download_and_repository(built_site: Path) -> None:
    assert (built_site / "search.html").is_file()
    assert "attention" in (built_site / "searchindex.js").read_text(encoding="utf8")
    for page in toc_pages():
        html = page_path(built_site, page).read_text(encoding="utf8")
        stem = page.split("/")[-1]
        assert f'href="../_sources/book/{stem}.md"' in html, f"{page}: no source download"
        assert (built_site / "_sources" / "book" / f"{stem}.md").is_file()
        assert f'href="{REPOSITORY}"' in html, f"{page}: no repository link"


@pytest.mark.site
def test_build_reports_execution_times(built_site: Path) -> None:
    times = json.loads((built_site.parent / "execution_times.json").read_text(encoding="utf8"))
    executed = [page for page in toc_pages() if "{code-cell}" in (ROOT / f"{page}.md").read_text()]
    for page in executed:
        assert times[page]["succeeded"] is True
        assert times[page]["runtime"] > 0
