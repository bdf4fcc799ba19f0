"""The book's structure: table of contents, chapter headers, configuration, references.

Fast checks on the source files (no build): they fail before a slow build would.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from booktoc import toc_entries, toc_pages, toc_sections

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


def load_site_extension():
    """``book/_ext/mha_site.py`` as a module (it is a Sphinx extension, not a package)."""
    spec = importlib.util.spec_from_file_location("mha_site", BOOK / "_ext" / "mha_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def public_modules() -> set[str]:
    src = ROOT / "src" / "mha"
    return {"mha"} | {f"mha.{p.stem}" for p in src.glob("*.py") if not p.stem.startswith("_")}


def api_page_modules() -> dict[str, list[str]]:
    """Page -> the modules its ``{mha-api}`` blocks list, for every page of ``_toc.yml``
    that has one."""
    api_modules = load_site_extension().api_modules
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
    assert set(listed) == public_modules()


API_INDEX_ROW = re.compile(r"^\| \{ref\}`sec-(?P<stem>[a-z-]+)` \| (?P<modules>.*) \|$", re.M)


def test_api_index_names_each_page_and_the_modules_it_holds() -> None:
    text = (BOOK / "api.md").read_text(encoding="utf8")
    rows = {
        f"book/{row['stem']}": re.findall(r"\{py:mod\}`([\w.]+)`", row["modules"])
        for row in API_INDEX_ROW.finditer(text)
    }
    assert rows == api_page_modules()
