"""The book's structure: table of contents, chapter headers, configuration, references.

Fast checks on the source files (no build): they fail before a slow build would.
"""

from __future__ import annotations

import inspect
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from booktoc import toc_entries, toc_pages, toc_part, toc_sections
from package import public_modules

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"

HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""
CITE_ROLE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")
BIB_KEY = re.compile(r"^@\w+\s*\{\s*([^,\s]+)\s*,", re.M)


def chapters() -> list[str]:
    return toc_pages()


def chapter_files() -> list[Path]:
    return sorted(BOOK.glob("*.md"))


def test_toc_entries_walks_parts_chapters_and_sections() -> None:
    toc = {
        "root": "book/a",
        "parts": [{"chapters": [{"file": "book/b", "sections": [{"file": "book/c.md"}]}]}],
    }
    assert toc_entries(toc) == ["book/a", "book/b", "book/c"]


def test_toc_sections_lists_the_sections_of_one_entry(tmp_path: Path) -> None:
    toc = {
        "root": "book/a",
        "parts": [
            {"chapters": [{"file": "book/b"}]},
            {"chapters": [{"file": "book/c", "sections": [{"file": "book/d.md"}]}]},
        ],
    }
    (tmp_path / "_toc.yml").write_text(yaml.safe_dump(toc), encoding="utf8")
    assert toc_sections("book/c", tmp_path) == ["book/d"]
    assert toc_sections("book/b", tmp_path) == []
    with pytest.raises(ValueError, match="no entry 'book/x'"):
        toc_sections("book/x", tmp_path)


def test_every_toc_entry_is_a_chapter_file_in_book() -> None:
    for entry in chapters():
        assert entry.startswith("book/"), f"{entry} is not under book/"
        assert (ROOT / f"{entry}.md").is_file(), f"_toc.yml names {entry} but {entry}.md is missing"


def test_every_chapter_file_is_in_the_toc() -> None:
    listed = set(chapters())
    files = {f"book/{path.stem}" for path in chapter_files()}
    assert files - listed == set(), "chapters missing from _toc.yml"
    assert len(chapters()) == len(listed), "a chapter appears twice in _toc.yml"


def test_no_ipynb_file_is_tracked_by_git() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "--", "*.ipynb"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked == []


@pytest.mark.parametrize("path", chapter_files(), ids=lambda path: path.stem)
def test_chapter_starts_with_the_jupytext_header(path: Path) -> None:
    assert path.read_text(encoding="utf8").startswith(HEADER)


@pytest.mark.parametrize("path", chapter_files(), ids=lambda path: path.stem)
def test_chapter_has_its_section_label_on_the_title(path: Path) -> None:
    body = path.read_text(encoding="utf8")[len(HEADER) :].lstrip("\n")
    lines = body.splitlines()
    assert lines[0] == f"(sec-{path.stem})=", f"first line after the header: {lines[0]!r}"
    assert lines[1].startswith("# "), f"the label is not followed by the title: {lines[1]!r}"


@pytest.mark.parametrize("path", chapter_files(), ids=lambda path: path.stem)
def test_chapter_never_mentions_sys_path(path: Path) -> None:
    assert "sys.path" not in path.read_text(encoding="utf8")


def test_config_executes_every_chapter_and_fails_on_errors() -> None:
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf8"))
    execute = config["execute"]
    assert execute["execute_notebooks"] in ("cache", "force")
    assert execute.get("allow_errors", False) is False
    assert execute["raise_on_error"] is True
    assert config["only_build_toc_files"] is True
    assert "book/references.bib" in config["bibtex_bibfiles"]


def test_config_loads_nothing_from_other_hosts() -> None:
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf8"))
    sphinx = config["sphinx"]["config"]
    assert "sphinx_thebe" not in sphinx["extensions"]
    assert "mha_site" in sphinx["extensions"]
    assert not sphinx["mathjax_path"].startswith(("http:", "https:", "//"))
    assert config["launch_buttons"]["thebe"] is False
    for key in ("binderhub_url", "jupyterhub_url", "colab_url", "deepnote_url"):
        assert not config["launch_buttons"][key], key


def bib_keys() -> list[str]:
    return BIB_KEY.findall((BOOK / "references.bib").read_text(encoding="utf8"))


def cited_keys(text: str) -> set[str]:
    return {key.strip() for keys in CITE_ROLE.findall(text) for key in keys.split(",")}


def test_cited_keys_reads_single_multiple_and_styled_citations() -> None:
    text = "a {cite}`x2020a` b {cite:t}`y2021b, z2022c` c {cite:p}`x2020a`"
    assert cited_keys(text) == {"x2020a", "y2021b", "z2022c"}


def test_references_bib_parses_as_the_build_parses_it() -> None:
    """pybtex (what sphinxcontrib-bibtex reads the file with) accepts every entry."""
    import pybtex.database

    entries = pybtex.database.parse_file(ROOT / "book" / "references.bib").entries
    assert sorted(entries) == sorted(bib_keys())


def test_references_bib_keys_are_unique_and_include_the_core_works() -> None:
    keys = bib_keys()
    assert len(keys) == len(set(keys)), "duplicate BibTeX keys"
    core = {
        "vaswani2017attention",
        "voita2019analyzing",
        "michel2019sixteen",
        "bhojanapalli2020lowrank",
        "clark2019what",
        "elhage2021mathematical",
        "olsson2022context",
        "shazeer2019fast",
        "ainslie2023gqa",
        "devlin2019bert",
        "wang2020minilm",
        "reimers2019sentence",
        "ba2016layer",
        "dao2022flashattention",
        "kovaleva2019revealing",
        "xiao2023efficient",
        "bjorck1973numerical",
        "cordonnier2020multi",
        "golub2013matrix",
    }
    assert core - set(keys) == set()


@pytest.mark.parametrize("path", chapter_files(), ids=lambda path: path.stem)
def test_every_citation_is_in_references_bib(path: Path) -> None:
    missing = cited_keys(path.read_text(encoding="utf8")) - set(bib_keys())
    assert missing == set(), f"cited but not in book/references.bib: {sorted(missing)}"


@pytest.mark.parametrize("path", chapter_files(), ids=lambda path: path.stem)
def test_every_footnote_reference_has_its_definition(path: Path) -> None:
    """A ``[^name]`` without a ``[^name]:`` line is printed as it stands, with no warning."""
    text = path.read_text(encoding="utf8")
    defined = set(re.findall(r"^\[\^([^\]]+)\]:", text, flags=re.MULTILINE))
    referenced = set(re.findall(r"\[\^([^\]]+)\](?!:)", text))
    undefined, unused = sorted(referenced - defined), sorted(defined - referenced)
    assert undefined == [], f"footnotes never defined: {undefined}"
    assert unused == [], f"footnotes never referenced: {unused}"


def api_page_modules() -> dict[str, list[str]]:
    """Page -> the modules its ``{mha-api}`` blocks list, for every page of ``_toc.yml``
    that has one."""
    from mha_site.api_reference import api_modules

    listed = {page: api_modules((ROOT / f"{page}.md").read_text("utf8")) for page in chapters()}
    return {page: modules for page, modules in listed.items() if modules}


def test_api_pages_are_the_sections_of_the_api_page() -> None:
    sections = toc_sections("book/api")
    assert len(sections) >= 2, "the API reference has no pages of its own in _toc.yml"
    assert list(api_page_modules()) == sections


def test_api_pages_document_every_public_module_of_mha_once() -> None:
    listed = [module for modules in api_page_modules().values() for module in modules]
    twice = sorted({module for module in listed if listed.count(module) > 1})
    assert twice == [], f"documented on more than one API page (or twice on one): {twice}"
    assert set(listed) == set(public_modules())


API_INDEX_ROW = re.compile(r"^\| \{ref\}`sec-(?P<stem>[a-z-]+)` \| (?P<modules>.*) \|$", re.M)


def test_api_index_names_each_page_and_the_modules_it_holds() -> None:
    text = (BOOK / "api.md").read_text(encoding="utf8")
    rows = {
        f"book/{row['stem']}": re.findall(r"\{py:mod\}`([\w.]+)`", row["modules"])
        for row in API_INDEX_ROW.finditer(text)
    }
    assert rows == api_page_modules()


# ---- order: a chapter uses only what earlier chapters introduced ---------------------------
#
# What these checks can see, and what they cannot:
# - Cross-references. A `{ref}`/`{numref}`/`{eq}` role or a Markdown link `[..](#label)`,
#   `[..](page.md#label)` to a label defined in a page later in `_toc.yml` is a forward link.
#   A link to a later page *as a whole* (the label on its title, `{doc}`, `[..](page.md)`) is
#   a pointer ("the subject of chapter X") and allowed; a link to a later page's section,
#   equation or figure is allowed only in a sentence that says "later", the way a reader is
#   told that it is a look ahead. Anything a chapter uses without linking to it is not seen.
#   The pages of the "Reference" part (the notation, how to run the book, the API) come after
#   the chapters and are looked up, not read in order: a link into them is never a look ahead.
# - Results. The entry points in RESULT_SOURCES load what a chapter produced or introduced
#   (training runs, which `mha.training`'s run store shares between chapters; a pretrained
#   model). Each belongs to the page that introduces it; a code cell of an earlier page that
#   calls one fails. Results reached any other way are not seen.
# - The build: `_config.yml` executes no chapter ahead of its turn.

LABEL_LINE = re.compile(r"^\((?P<label>[A-Za-z0-9_.:-]+)\)=[ \t]*$", re.M)
OPTION_LABEL = re.compile(r"^:(?:label|name):[ \t]*(?P<label>\S+)[ \t]*$", re.M)
EQUATION_LABEL = re.compile(r"\$\$[ \t]*\((?P<label>[A-Za-z0-9_.:-]+)\)[ \t]*$", re.M)
XREF_ROLE = re.compile(r"\{(?P<role>ref|numref|eq|doc)\}`(?:[^`<]*<)?(?P<target>[^`<>]+)>?`")
MD_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)
SENTENCE_END = re.compile(r"[.!?](?=\s)|\n[ \t]*\n")
LATER = re.compile(r"\blater\b", re.I)
RESULT_SOURCES = {
    # entry point: the page that introduces what it loads
    "train_runs": "book/trained-heads",  # training runs (and the run store)
    # the pretrained encoder: chapter 1 introduces it in a sentence and shows two of its heads
    "load_minilm": "book/one-head-to-many",
    "load_smollm2": "book/decoder-heads",  # the pretrained decoder
}
RESULT_CALL = re.compile(r"\b(?P<name>" + "|".join(RESULT_SOURCES) + r")\(")


def label_homes(pages: dict[str, str]) -> dict[str, tuple[str, bool]]:
    """Every label of the pages: label -> (page, whether it is the label on the page's title)."""
    homes = {}
    for page, text in pages.items():
        for match in LABEL_LINE.finditer(text):
            after = text[match.end() :].lstrip("\n")
            homes[match["label"]] = (page, after.startswith("# "))
        for pattern in (OPTION_LABEL, EQUATION_LABEL):
            for match in pattern.finditer(text):
                homes[match["label"]] = (page, False)
    return homes


def sentence_around(text: str, start: int, end: int) -> str:
    """The sentence of ``text`` that holds ``text[start:end]``."""
    before = [m.end() for m in SENTENCE_END.finditer(text, 0, start)]
    after = SENTENCE_END.search(text, end)
    return text[before[-1] if before else 0 : after.start() if after else len(text)]


def link_targets(text: str, page: str, homes: dict) -> list[tuple[int, int, str | None, bool]]:
    """(start, end, page linked to or None, whether the link is to that page as a whole)."""
    found = []
    for match in XREF_ROLE.finditer(text):
        target = match["target"].strip()
        if match["role"] == "doc":
            linked = str(Path(page).parent / target.removesuffix(".md")).lstrip("/")
            found.append((match.start(), match.end(), linked, True))
        elif target in homes:
            found.append((match.start(), match.end(), *homes[target]))
    for match in MD_LINK.finditer(text):
        target = match["target"]
        if "://" in target:
            continue
        path, _, anchor = target.partition("#")
        if anchor in homes:
            found.append((match.start(), match.end(), *homes[anchor]))
        elif path.endswith(".md") and not anchor:
            linked = str(Path(page).parent / path.removesuffix(".md"))
            found.append((match.start(), match.end(), linked, True))
    return found


def forward_links(pages: dict[str, str], reference: frozenset[str] = frozenset()) -> list[str]:
    """The links of ``pages`` (page -> text, in reading order) to a later page's section,
    equation or figure outside a sentence that says "later", one line each. A link to a
    page of ``reference`` (looked up, not read in order) is never one."""
    order = {page: i for i, page in enumerate(pages)}
    homes = label_homes(pages)
    problems = []
    for page, text in pages.items():
        for start, end, linked, whole in link_targets(text, page, homes):
            if linked not in order or order[linked] <= order[page] or whole:
                continue
            if linked in reference:
                continue
            if LATER.search(sentence_around(text, start, end)):
                continue
            line = text.count("\n", 0, start) + 1
            problems.append(f"{page}:{line} links forward to {linked}: {text[start:end]}")
    return problems


def later_results(pages: dict[str, str], sources: dict[str, str] = RESULT_SOURCES) -> list[str]:
    """Code cells of ``pages`` (in reading order) that call an entry point of ``sources``
    before the page that introduces it, one line each."""
    order = {page: i for i, page in enumerate(pages)}
    problems = []
    for page, text in pages.items():
        for cell in CODE_CELL.finditer(text):
            for call in RESULT_CALL.finditer(cell["code"]):
                home = sources.get(call["name"])
                if home in order and order[page] < order[home]:
                    line = text.count("\n", 0, cell.start("code") + call.start()) + 1
                    problems.append(f"{page}:{line} calls {call['name']}, introduced in {home}")
    return problems


def book_pages() -> dict[str, str]:
    return {page: (ROOT / f"{page}.md").read_text(encoding="utf8") for page in chapters()}


SYNTHETIC = {
    "book/a": "(sec-a)=\n# A\n\n(sec-a-part)=\n## Part\n\nText.\n",
    "book/b": "(sec-b)=\n# B\n\n(sec-b-part)=\n## Part\n\n$$\nx\n$$ (eq-b)\n\nBack to "
    "{ref}`sec-a-part`.\n",
}


def with_a(text: str) -> dict[str, str]:
    return {"book/a": SYNTHETIC["book/a"] + "\n" + text + "\n", "book/b": SYNTHETIC["book/b"]}


@pytest.mark.parametrize(
    "text",
    [
        "Heads share keys ({ref}`sec-b-part`).",
        "As {ref}`the part <sec-b-part>` shows.",
        "The bound {eq}`eq-b` holds.",
        "See {numref}`sec-b-part`.",
        "See [the part](b.md#sec-b-part), and [again](#sec-b-part).",
        "One sentence says later. The next uses {ref}`sec-b-part`.",
    ],
)
def test_forward_links_catch_a_link_to_a_later_pages_section(text: str) -> None:
    assert len(forward_links(with_a(text))) >= 1


@pytest.mark.parametrize(
    "text",
    [
        "{ref}`sec-b-part` later measures it.",
        "It is measured later, in\n{ref}`sec-b-part`.",
        "The subject of {ref}`sec-b` and of {doc}`b` and [B](b.md).",
        "Its own part, {ref}`sec-a-part`.",
    ],
)
def test_forward_links_allow_pointers_backward_links_and_links_within_the_page(text) -> None:
    assert forward_links(with_a(text)) == []


def test_forward_links_allow_links_back_to_an_earlier_page() -> None:
    assert forward_links(SYNTHETIC) == []  # book/b links back to book/a's section


def test_forward_links_allow_a_link_into_a_reference_page() -> None:
    pages = with_a("Heads share keys ({ref}`sec-b-part`).")
    assert len(forward_links(pages)) == 1
    assert forward_links(pages, reference=frozenset({"book/b"})) == []


LISTING = re.compile(r"^formatting\.listing\((?P<function>[\w.]+)\)$", re.M)
# The library's own code that each chapter shows (issue 32): the forms in chapter 1, the
# tiled loop, the cache's step and the tiled backward where they are taught.
LISTED = {
    "one-head-to-many": {"np_backend.attention_per_head", "np_backend.attention_fused"},
    "attention-without-the-score-matrix": {"tiled.attention_tiles", "tiled.RunningRows.update"},
    "inference": {"KVCache._appending", "KVCache._stage"},
    "backward-pass": {"backward._tiled_backward"},
}


@pytest.mark.parametrize("stem", sorted(LISTED))
def test_chapters_show_the_librarys_own_code_never_a_copy(stem: str) -> None:
    """The chapters show the forms, the tiled loop, the cache's step and the tiled backward as
    the library's source, read with ``inspect.getsource`` (``mha.display.formatting.listing``)
    when the chapter runs; no chapter defines a function of a listed one's name."""
    from mha.display import formatting

    text = (BOOK / f"{stem}.md").read_text(encoding="utf8")
    shown = set(LISTING.findall(text))
    assert LISTED[stem] <= shown
    assert "inspect.getsource(" in inspect.getsource(formatting.listing)
    for function in shown:
        name = function.rsplit(".", 1)[-1]
        assert re.search(rf"^\s*def {name}\(", text, re.M) is None, function
    copies = r"^\s*def (attention_|attend_one_query|counted_backward)"  # copies once shown
    assert re.search(copies, text, re.M) is None


def test_the_reference_part_comes_last_and_holds_the_notation() -> None:
    """The book starts with attention: the pages looked up (the notation, how to run the book)
    follow the chapters, and the first page after the preface is a chapter."""
    pages, reference = chapters(), toc_part("Reference")
    assert pages[-len(reference) :] == reference
    assert {"book/notation", "book/how-to-run"} <= set(reference)
    assert pages[1] == "book/one-head-to-many"


def test_later_results_catch_a_call_before_the_introducing_page_only_in_code() -> None:
    sources = {"train_runs": "book/b"}
    call = "```{code-cell} ipython3\nruns = tr.train_runs(configs)\n```"
    assert len(later_results(with_a(call), sources)) == 1
    prose = "The runs of `mha.training.runs.train_runs` come later."
    assert later_results(with_a(prose), sources) == []
    late = {"book/a": SYNTHETIC["book/a"], "book/b": SYNTHETIC["book/b"] + call}
    assert later_results(late, sources) == []  # the introducing page itself


def test_no_chapter_links_forward_to_a_later_chapters_section() -> None:
    assert forward_links(book_pages(), frozenset(toc_part("Reference"))) == []


def test_no_chapter_loads_what_a_later_chapter_introduces() -> None:
    pages = book_pages()
    for name, home in RESULT_SOURCES.items():  # the table says where each is introduced
        code = "".join(cell["code"] for cell in CODE_CELL.finditer(pages[home]))
        assert re.search(rf"\b{name}\(", code), f"{home} does not call {name}"
        assert f"{name}`" in pages[home], f"{home} does not name {name} in its prose"
    assert later_results(pages) == []


def test_config_executes_no_chapter_ahead_of_its_turn() -> None:
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf8"))
    assert not [key for key in config["sphinx"]["config"] if "execute_first" in key]
