"""Computed paragraphs: a cell whose output is prose has its input folded.

The rule (CONTRIBUTING.md, "Sentences are written; cells compute their numbers"): a cell
that displays prose or a table computed as Markdown is folded. With ``hide-input`` it does
only that, and the code before it, which computes the numbers and shows the library's use,
stays in view in its own cell; a folded Checks cell or solution (``hide-cell``) may end by
displaying what it checked. Checked in each chapter's source and again in its built page.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jupytext
import pytest
from booktoc import toc_pages
from prose_cells import (
    FOLDED_TAGS,
    built_prose_cells,
    library_helpers,
    markdown_helpers,
    prose_cells,
    shows_prose,
)

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = [ROOT / f"{page}.md" for page in toc_pages()]


def test_shows_prose_sees_markdown_helpers_and_display_but_not_errors_or_figures() -> None:
    helpers = markdown_helpers(
        ["def table(c, r):\n    return Markdown(str(c))", "def seeds(r):\n    return table(1, r)"]
    )
    assert {"Markdown", "table", "seeds"} <= helpers
    assert shows_prose('x = 1\nMarkdown(f"x is {x}")', helpers)
    assert shows_prose("seeds([1])", helpers)
    assert shows_prose("for i in range(2):\n    display(Markdown(str(i)))", helpers)
    assert not shows_prose("Markdown(error_message(lambda: f(), ValueError))", helpers)
    assert not shows_prose("fig = make()\nfig", helpers)
    assert not shows_prose('Markdown("x")\ny = 2', helpers)  # displays nothing: not last
    assert not shows_prose("%time f()", helpers)


def test_the_library_helpers_that_return_markdown_count_as_displaying_it() -> None:
    # ``table`` and ``listing`` (a code block of the library's source, shown with its input
    # folded) return Markdown; ``markdown_table`` and ``error_message`` return text
    assert library_helpers() == {"listing", "table"}
    helpers = markdown_helpers(["def seed_table(r):\n    return table(['seed'], r)"])
    assert {"Markdown", "table", "seed_table"} <= helpers
    assert shows_prose("table(['a'], [[1]])", helpers)
    assert shows_prose("seed_table([[1]])", helpers)
    assert not shows_prose("markdown_table(['a'], [[1]])", helpers)


# prose cells found in each chapter's source when the library's ``table`` is counted; losing
# them means a helper is no longer recognised. (Issue 32 turned most computed paragraphs of
# these chapters into written text with glued numbers, so the counts are their tables now.)
PROSE_CELLS_AT_LEAST = {"planted-heads": 4, "pretrained-heads": 9, "trained-heads": 15}


@pytest.mark.parametrize("stem", sorted(PROSE_CELLS_AT_LEAST))
def test_the_chapters_prose_cells_are_found(stem: str) -> None:
    cells = prose_cells((ROOT / "book" / f"{stem}.md").read_text(encoding="utf8"))
    assert len(cells) >= PROSE_CELLS_AT_LEAST[stem]


def test_prose_cells_reads_tags_of_a_myst_notebook() -> None:
    text = (
        "```{code-cell} ipython3\nfrom IPython.display import Markdown\n```\n\n"
        '```{code-cell} ipython3\n:tags: [hide-input]\nMarkdown("folded")\n```\n\n'
        '```{code-cell} ipython3\nx = 1\nMarkdown(f"open {x}")\n```\n'
    )
    cells = prose_cells(text)
    assert [(c.first_line, c.tags) for c in cells] == [
        ('Markdown("folded")', ("hide-input",)),
        ("x = 1", ()),
    ]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.stem)
def test_cells_that_display_prose_are_folded(path: Path) -> None:
    open_cells = [
        c.first_line
        for c in prose_cells(path.read_text(encoding="utf8"))
        if not set(c.tags) & FOLDED_TAGS
    ]
    assert open_cells == [], (
        f"{path.name}: these cells display prose with their input open; move the "
        f"Markdown into a cell of its own tagged hide-input: {open_cells}"
    )


def asserts_behind_the_fold(text: str) -> list[str]:
    """First lines of the cells of ``text`` that display prose with their input folded
    (``hide-input``, ``remove-input``) and also assert: the checks of a sentence stay in view,
    in the cell before it. (An exercise's solution, ``hide-cell``, is folded whole.)"""
    notebook = jupytext.reads(text, fmt="md:myst")
    found = []
    for cell in prose_cells(text):
        if not set(cell.tags) & {"hide-input", "remove-input"} or "hide-cell" in cell.tags:
            continue
        source = notebook.cells[cell.index].source
        lines = ["" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.split("\n")]
        if any(isinstance(node, ast.Assert) for node in ast.walk(ast.parse("\n".join(lines)))):
            found.append(cell.first_line)
    return found


def test_asserts_behind_the_fold_finds_a_folded_prose_cell_that_asserts() -> None:
    text = (
        '```{code-cell} ipython3\n:tags: [hide-input]\nassert x > 0\nMarkdown(f"{x}")\n```\n\n'
        "```{code-cell} ipython3\nassert x > 0\n```\n\n"
        '```{code-cell} ipython3\n:tags: [hide-input]\nMarkdown(f"{x}")\n```\n\n'
        '```{code-cell} ipython3\n:tags: [hide-cell]\nassert x > 0\nMarkdown(f"{x}")\n```\n'
    )
    assert asserts_behind_the_fold(text) == ["assert x > 0"]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.stem)
def test_folded_prose_cells_only_display(path: Path) -> None:
    found = asserts_behind_the_fold(path.read_text(encoding="utf8"))
    assert found == [], (
        f"{path.name}: these cells assert behind the fold of a computed paragraph; move the "
        f"code before the Markdown into a cell of its own, in view: {found}"
    )


def test_built_prose_cells_finds_paragraph_and_table_outputs_only() -> None:
    page = (
        '<div class="cell tag_hide-input docutils container">'
        '<div class="cell_output docutils container"><p>prose</p></div></div>'
        '<div class="cell docutils container"><div class="cell_input docutils container">'
        '<div class="highlight"><pre>x</pre></div></div>'
        '<div class="cell_output docutils container">'
        '<div class="pst-scrollable-table-container"><table><tr><td>1</td></tr></table></div>'
        "</div></div>"
        '<div class="cell docutils container"><div class="cell_output docutils container">'
        '<div class="output text_plain"><pre>3</pre></div></div></div>'
        '<div class="cell docutils container"><div class="cell_output docutils container">'
        '<div class="highlight-text notranslate"><pre>ValueError: x</pre></div></div></div>'
    )
    found = built_prose_cells(page)
    assert [children for _, children in found] == [["p."], ["table.pst-scrollable-table-container"]]
    assert "tag_hide-input" in found[0][0] and "tag_hide-input" not in found[1][0]


@pytest.mark.site
def test_built_pages_fold_every_cell_whose_output_is_prose(built_site: Path) -> None:
    checked = 0
    for page in toc_pages():
        html = (built_site / f"{page}.html").read_text(encoding="utf8")
        for classes, children in built_prose_cells(html):
            checked += 1
            tags = {c.removeprefix("tag_") for c in classes if c.startswith("tag_")}
            assert tags & FOLDED_TAGS, f"{page}: a cell shows prose with its input open: {children}"
    assert checked > 100  # the book computes well over a hundred of its paragraphs
