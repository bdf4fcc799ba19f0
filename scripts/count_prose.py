"""What a student meets in the book: words, sentences and visible asserts, page by page.

Counts the executed chapters (``_build/jupyter_execute/book/<page>.ipynb``, written by
``make book``) in ``_toc.yml`` order, as a reader sees the built page:

- **Prose** is the Markdown outside code cells, tables, display math and raw HTML, plus the
  Markdown that code cells print (a computed paragraph counts where it appears). Inline math
  and inline code are one word each; a role (``{ref}``, ``{cite}``, ``{eq}``) is one word,
  or the words of its explicit title. Headings count as words, not as sentences.
- **A sentence** ends at ``.``, ``!`` or ``?`` (closing quotes or brackets may follow) before
  a capital letter, a digit or inline math, and at the end of a paragraph, list item or table
  cell of prose.
- **Visible code** is the code cells without a ``hide-`` or ``remove-`` tag; its lines are
  the non-blank ones, and an assert line is one that starts with ``assert``.

The API reference pages (generated from docstrings) and the bibliography are left out.
``python scripts/count_prose.py`` prints the table; ``--json`` prints the numbers.
:func:`check_targets` holds the book to the targets in :data:`TARGETS`, and
``tests/test_prose_counts.py`` runs it on the built book.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml
from markdown_it.renderer import RendererHTML
from myst_parser.config.main import MdParserConfig
from myst_parser.parsers.mdit import create_md_parser

ROOT = Path(__file__).resolve().parents[1]
EXECUTED = ROOT / "_build" / "jupyter_execute"

TARGETS = {
    "words_before_mha_chapter": 1500,  # prose before the chapter that first writes MHA
    "mean_sentence_words": 20.0,  # book-wide
    "share_over_35": 0.06,  # book-wide share of sentences over 35 words
    "chapter_mean_sentence_words": 22.0,  # every page
    "visible_assert_share": 0.05,  # visible assert lines / visible code lines, book-wide
}
LONG_SENTENCE = 35
SKIPPED_PAGES = re.compile(r"^book/(api(-.*)?|bibliography)$")
# Directives whose body is prose a reader reads; every other fenced block is code, math or HTML.
PROSE_DIRECTIVES = {
    "admonition", "attention", "caution", "danger", "dropdown", "epigraph", "error",
    "exercise", "figure", "hint", "important", "margin", "note", "seealso", "sidebar",
    "solution", "tip", "topic", "warning",
}  # fmt: skip
MHA_EQUATION = re.compile(r"\\(?:mathrm|operatorname)\{MultiHead\}.*=.*Concat", re.S)

MATH, CODE = "\x00math", "\x00code"  # one word each
SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*\s+(?=[A-Z0-9]|\x00math)")

_PARSER = create_md_parser(
    MdParserConfig(enable_extensions={"dollarmath", "amsmath", "colon_fence", "deflist"}),
    RendererHTML,
)


@dataclass
class PageCount:
    """The counts of one page."""

    page: str
    words: int = 0
    sentences: list[int] = field(default_factory=list)  # words per sentence
    visible_code_lines: int = 0
    visible_asserts: int = 0
    all_asserts: int = 0
    generated_words: int = 0
    writes_mha_equation: bool = False

    @property
    def mean_sentence(self) -> float:
        return sum(self.sentences) / len(self.sentences) if self.sentences else 0.0

    @property
    def share_over(self) -> float:
        long = sum(1 for n in self.sentences if n > LONG_SENTENCE)
        return long / len(self.sentences) if self.sentences else 0.0


def toc_pages(root: Path = ROOT) -> list[str]:
    """The pages of ``_toc.yml`` in reading order (``book/<stem>``)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            if "file" in entry:
                pages.append(entry["file"])
            walk(entry.get("sections", []))
            walk(entry.get("chapters", []))

    walk(toc.get("parts", []))
    return pages


def _inline_text(token) -> str:
    """The words of an inline token, math and code as one placeholder word each."""
    parts = []
    for child in token.children or []:
        if child.type in ("text", "text_special"):
            parts.append(child.content)
        elif child.type == "math_inline":
            parts.append(f" {MATH} ")
        elif child.type == "code_inline":
            parts.append(f" {CODE} ")
        elif child.type == "myst_role":
            title = re.match(r"(.*?)\s*<[^>]*>$", child.content, re.S)
            parts.append(f" {title.group(1)} " if title else " ROLE ")
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
    return "".join(parts)


def _words(text: str) -> int:
    return sum(1 for w in text.split() if re.search(r"\w|\x00", w))


def _sentences(text: str) -> list[int]:
    return [n for n in (_words(s) for s in SENTENCE_END.split(text)) if n]


def count_markdown(markdown: str, count: PageCount) -> tuple[int, list[int]]:
    """Add a Markdown text's prose to ``count``; return its words and sentence lengths."""
    words, sentences = 0, []
    tokens = _PARSER.parse(markdown)
    skip_until: str | None = None
    heading = False
    for token in tokens:
        if skip_until:
            if token.type == skip_until:
                skip_until = None
            continue
        if token.type == "table_open":
            skip_until = "table_close"
        elif token.type == "heading_open":
            heading = True
        elif token.type == "heading_close":
            heading = False
        elif token.type in ("math_block", "math_block_label", "amsmath", "html_block"):
            if token.type != "html_block" and MHA_EQUATION.search(token.content):
                count.writes_mha_equation = True
        elif token.type in ("fence", "colon_fence"):
            name = token.info.strip().split()[0] if token.info.strip() else ""
            name = name.strip("{}")
            if name in PROSE_DIRECTIVES:
                body = "\n".join(
                    line for line in token.content.splitlines() if not line.startswith(":")
                )
                w, s = count_markdown(body, count)
                words, sentences = words + w, sentences + s
            elif name == "math" and MHA_EQUATION.search(token.content):
                count.writes_mha_equation = True
        elif token.type == "inline":
            text = _inline_text(token)
            words += _words(text)
            if not heading:
                sentences += _sentences(text)
    return words, sentences


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def count_notebook(page: str, notebook: dict) -> PageCount:
    """The counts of one executed chapter."""
    count = PageCount(page)
    for cell in notebook["cells"]:
        source = _source(cell)
        if cell["cell_type"] == "markdown":
            w, s = count_markdown(source, count)
            count.words += w
            count.sentences += s
            continue
        if cell["cell_type"] != "code":
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        lines = [line for line in source.splitlines() if line.strip()]
        asserts = sum(1 for line in lines if line.lstrip().startswith("assert "))
        count.all_asserts += asserts
        if not any(t.startswith(("hide-", "remove-")) for t in tags):
            count.visible_code_lines += len(lines)
            count.visible_asserts += asserts
        if any(t in ("remove-output", "remove-cell") for t in tags):
            continue
        for output in cell.get("outputs", []):
            text = output.get("data", {}).get("text/markdown")
            if text is None:
                continue
            w, s = count_markdown("".join(text) if isinstance(text, list) else text, count)
            count.words += w
            count.generated_words += w
            count.sentences += s
    return count


def count_book(executed: Path = EXECUTED, root: Path = ROOT) -> list[PageCount]:
    """Every counted page of the book, in ``_toc.yml`` order."""
    counts = []
    for page in toc_pages(root):
        if SKIPPED_PAGES.match(page):
            continue
        path = executed / f"{page}.ipynb"
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: build the book first (make book)")
        counts.append(count_notebook(page, json.loads(path.read_text())))
    return counts


def summary(counts: list[PageCount]) -> dict[str, float]:
    """The book-wide figures that :data:`TARGETS` holds."""
    sentences = [n for c in counts for n in c.sentences]
    first_mha = next((i for i, c in enumerate(counts) if c.writes_mha_equation), len(counts))
    code = sum(c.visible_code_lines for c in counts)
    return {
        "words_before_mha_chapter": sum(c.words for c in counts[:first_mha]),
        "first_mha_chapter": counts[first_mha].page if first_mha < len(counts) else None,
        "mean_sentence_words": sum(sentences) / len(sentences),
        "share_over_35": sum(1 for n in sentences if n > LONG_SENTENCE) / len(sentences),
        "chapter_mean_sentence_words": max(c.mean_sentence for c in counts),
        "visible_assert_share": sum(c.visible_asserts for c in counts) / max(code, 1),
        "visible_asserts": sum(c.visible_asserts for c in counts),
        "visible_code_lines": code,
        "all_asserts": sum(c.all_asserts for c in counts),
        "words": sum(c.words for c in counts),
        "generated_words": sum(c.generated_words for c in counts),
        "sentences": len(sentences),
    }


def check_targets(totals: dict[str, float]) -> list[str]:
    """The targets the book misses, one line each (empty when it meets them all)."""
    return [
        f"{name} = {totals[name]:.3g}, target at most {limit}"
        for name, limit in TARGETS.items()
        if totals[name] > limit
    ]


def table(counts: list[PageCount]) -> str:
    rows = [
        "| page | words | generated | sentences | mean | over 35 | visible asserts / lines | "
        "all asserts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in counts:
        rows.append(
            f"| {c.page.removeprefix('book/')} | {c.words} | {c.generated_words} | "
            f"{len(c.sentences)} | {c.mean_sentence:.1f} | {c.share_over:.1%} | "
            f"{c.visible_asserts} / {c.visible_code_lines} | {c.all_asserts} |"
        )
    t = summary(counts)
    rows.append(
        f"| **book** | {t['words']} | {t['generated_words']} | {t['sentences']} | "
        f"{t['mean_sentence_words']:.1f} | {t['share_over_35']:.1%} | "
        f"{t['visible_asserts']} / {t['visible_code_lines']} "
        f"({t['visible_assert_share']:.1%}) | {t['all_asserts']} |"
    )
    rows.append("")
    rows.append(
        f"Words of prose before {t['first_mha_chapter']} (the first page that writes the "
        f"MHA equation): {t['words_before_mha_chapter']}; the longest chapter mean: "
        f"{t['chapter_mean_sentence_words']:.1f} words."
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    counts = count_book()
    if args.json:
        print(json.dumps({"pages": [asdict(c) for c in counts], "book": summary(counts)}))
    else:
        print(table(counts))
    missed = check_targets(summary(counts))
    for line in missed:
        print(f"over target: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
