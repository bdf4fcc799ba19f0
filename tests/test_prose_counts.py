"""What a student meets, held to its targets: ``scripts/count_prose.py`` on the built book.

The unmarked tests check the counter on small notebooks. The test marked ``site`` counts
the chapters that ``make book`` executed (the ``built_site`` fixture builds the book once per
session, as every test of the built site does) and holds the book to ``count_prose.TARGETS``:
words before the chapter that writes the MHA equation, sentence lengths, and visible asserts,
with the asserts of all cells kept.
"""

from __future__ import annotations

from pathlib import Path

import count_prose
import pytest

# Issue 32 counted 566 assert lines in the book's cells before the checks were folded; the
# checks move behind folds, none is dropped, so the count never falls below it.
ASSERTS_BEFORE_FOLDING = 566


def notebook(*cells: dict) -> dict:
    return {"cells": list(cells)}


def markdown(text: str) -> dict:
    return {"cell_type": "markdown", "source": text}


def code(source: str, tags: tuple[str, ...] = (), printed: str | None = None) -> dict:
    outputs = [] if printed is None else [{"data": {"text/markdown": printed}}]
    return {"cell_type": "code", "source": source, "metadata": {"tags": list(tags)},
            "outputs": outputs}  # fmt: skip


def test_sentences_end_before_a_capital_a_digit_or_math_and_math_is_one_word() -> None:
    count = count_prose.count_notebook(
        "book/x",
        notebook(markdown("# A heading\n\nWe compute $QK^\\top$ here. Then it ends. 3 heads "
                          "follow! $D$ is wide, e.g. here.\n\n| a | b |\n|---|---|\n| c | d |")),
    )  # fmt: skip
    assert count.sentences == [4, 3, 3, 5]  # the heading and the table are not sentences
    assert count.words == 2 + 4 + 3 + 3 + 5


def test_visible_and_folded_asserts_and_printed_prose_are_counted_apart() -> None:
    count = count_prose.count_notebook(
        "book/x",
        notebook(
            code("x = 1\nfor i in range(2):\n    assert i < 2\n\ny = 2"),
            code("assert y == 2  # a check of the arithmetic", tags=("hide-cell",)),
            code("show(x)", tags=("hide-input",), printed="The value is one. It is small."),
            code("show(y)", tags=("remove-output",), printed="Never seen by a reader."),
        ),
    )
    assert (count.visible_code_lines, count.visible_asserts, count.all_asserts) == (4, 1, 2)
    assert (count.generated_words, count.sentences) == (7, [4, 3])


def test_check_targets_names_each_target_the_book_misses() -> None:
    long = " ".join(["word"] * 40) + "."
    counts = [
        count_prose.count_notebook("book/preface", notebook(markdown(long))),
        count_prose.count_notebook(
            "book/chapter",
            notebook(markdown("$$\n\\mathrm{MultiHead}(X) = \\mathrm{Concat}(h) W\n$$\n\nShort."),
                     code("assert True\nx = 1")),
        ),
    ]  # fmt: skip
    totals = count_prose.summary(counts)
    assert totals["first_mha_chapter"] == "book/chapter"
    assert totals["words_before_mha_chapter"] == 40
    missed = count_prose.check_targets(totals)
    names = [line.split(" = ")[0] for line in missed]
    assert names == [
        "mean_sentence_words",
        "share_over_35",
        "chapter_mean_sentence_words",
        "visible_assert_share",
    ]
    assert count_prose.check_targets(count_prose.summary(counts[1:2])) == missed[-1:]


@pytest.mark.site
def test_the_built_book_meets_the_prose_targets(built_site: Path) -> None:
    counts = count_prose.count_book(executed=built_site.parent / "jupyter_execute")
    totals = count_prose.summary(counts)
    table = count_prose.table(counts)
    assert totals["first_mha_chapter"] == "book/one-head-to-many", table
    assert count_prose.check_targets(totals) == [], table
    assert totals["all_asserts"] >= ASSERTS_BEFORE_FOLDING, table
