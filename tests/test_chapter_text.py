"""What a chapter says to its reader: about its subject, with no tracebacks or broken strings.

Fast checks on the chapters' sources, one per kind of defect an editorial read found:
sentences about the book's build, its tests or the machine it ran on; expected errors shown
as tracebacks; string literals whose backslashes Python reads as invalid escapes (a TeX
command in a non-raw f-string).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import jupytext
import pytest
from booktoc import toc_pages

ROOT = Path(__file__).resolve().parents[1]
# How to run the book is the one page whose subject is its build and its commands.
ABOUT_THE_BOOK = {"how-to-run", "changelog", "bibliography"}
CHAPTERS = [
    ROOT / f"{page}.md"
    for page in toc_pages()
    if Path(page).name not in ABOUT_THE_BOOK and not Path(page).name.startswith("api")
]

SELF_REFERENCE = re.compile(
    r"this (?:machine|computer|CPU|laptop)|the (?:book's |package's )?(?:build|tests|test suite)\b"
    r"|\bbuild budget|\bscripts/|\bCI\b|\.venv\b|\bmake (?:book|test)\b|\bpytest\b",
    re.IGNORECASE,
)
FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1\s*$", re.M | re.S)


def prose(text: str) -> str:
    """The chapter's Markdown with code cells and fenced blocks blanked (lines kept)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def self_references(text: str) -> list[str]:
    lines = prose(text).split("\n")
    return [
        f"line {n}: {line.strip()}"
        for n, line in enumerate(lines, 1)
        if SELF_REFERENCE.search(line)
    ]


def test_self_references_finds_sentences_about_the_build_but_not_code() -> None:
    text = (
        "Attention is a weighted average.\n"
        "On this machine the step took 3 ms.\n"
        "The tests check this identity.\n"
        "```{code-cell} ipython3\n# this machine\n```\n"
        "A sentence about the build budget.\n"
    )
    assert [hit.split(":")[0] for hit in self_references(text)] == ["line 2", "line 3", "line 7"]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.stem)
def test_chapter_speaks_of_its_subject(path: Path) -> None:
    found = self_references(path.read_text(encoding="utf8"))
    assert found == [], f"{path.name} speaks of its build, tests or machine: {found}"


def code_cells(path: Path) -> list[tuple[list[str], str]]:
    notebook = jupytext.reads(path.read_text(encoding="utf8"), fmt="md:myst")
    return [(c.metadata.get("tags", []), c.source) for c in notebook.cells if c.cell_type == "code"]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.stem)
def test_expected_errors_are_shown_without_a_traceback(path: Path) -> None:
    """A cell tagged ``raises-exception`` prints a traceback with the library's internals;
    the book shows an expected error with ``display.error_message`` instead."""
    tagged = [src.split("\n")[0] for tags, src in code_cells(path) if "raises-exception" in tags]
    assert tagged == [], f"{path.name}: cells that show a traceback: {tagged}"


def invalid_escapes(source: str) -> list[str]:
    """Warnings Python gives when compiling ``source`` (an invalid escape such as ``"\\l"``)."""
    code = "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n")
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compile(code, "<cell>", "exec")
    return [str(w.message) for w in caught]


def test_invalid_escapes_sees_a_tex_command_in_a_plain_string() -> None:
    assert invalid_escapes('x = f"$\\log 64$"')
    assert invalid_escapes('x = rf"$\\log 64$"') == []


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.stem)
def test_chapter_code_has_no_invalid_escape(path: Path) -> None:
    found = [msg for _, src in code_cells(path) for msg in invalid_escapes(src)]
    assert found == [], f"{path.name}: {found}"
