"""Every head the chapters' prose names exists, and is named one way: "layer.head" from 1.

The book names a head by its layer and its number in that layer, both counted from 1:
head 1.3 is head 3 of layer 1, ``weights[0, 2]`` in code (``mha.display.formatting.head_name``). The
check reads the Markdown text of the chapters (not inline code or math) and the strings
their code cells print (computed sentences and tables), finds every head name in them
("head 1.3", "heads 1.3 and 3.9", "**2.9**"), and checks it against the model the chapter
discusses: layer and head within range, counted from 1. It also finds a head named
another way ("head 3 of layer 1", "layer 1, head 3"), which gives the same head a second
name. In the code cells, a string that prints a head ("head {...}") gets the name from
``head_name``, the one function that makes it.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from mha.display import formatting
from mha.models import smollm2
from mha.models.minilm import model_dir
from mha.training import runs

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"

NAME = r"\**\d+\.\d+\**"  # "1.3", or "**1.3**" in bold
NAME_LIST = re.compile(  # "head 1.3", "heads 1.3 and 3.9", "heads 1.3, 2.9 or 3.10"
    r"\b[Hh]eads?\s+(" + NAME + r"(?:(?:,\s*|,?\s+and\s+|,?\s+or\s+)" + NAME + r")*)"
)
BOLD_NAME = re.compile(r"\*\*(\d+)\.(\d+)\*\*")  # a bold "layer.head" names a head
OTHER_FORMS = [  # the same head, named another way
    re.compile(r"\b[Hh]ead\s+\d+\s+(?:of|in)\s+layer\s+\d+"),  # head 3 of layer 1
    re.compile(r"\b[Ll]ayer\s+\d+,?\s+head\s+\d+"),  # layer 1, head 3
]


def _minilm() -> tuple[int, int]:
    config = json.loads((model_dir() / "config.json").read_text(encoding="utf8"))
    return config["num_hidden_layers"], config["num_attention_heads"]


def _smollm2() -> tuple[int, int]:
    import gguf

    fields = gguf.GGUFReader(str(smollm2.gguf_path())).fields
    return (
        int(fields["llama.block_count"].contents()),
        int(fields["llama.attention.head_count"].contents()),
    )


def _trained() -> tuple[int, int]:
    cfg = runs.TrainConfig()
    return cfg.num_layers, cfg.num_heads


# the model whose heads each chapter names: (layers, heads per layer)
MODELS = {
    "one-head-to-many": _minilm,  # a first look at all-MiniLM-L6-v2's heads
    "planted-heads": lambda: (1, 4),  # one layer of four planted heads
    "rank-and-subspaces": _minilm,  # all-MiniLM-L6-v2
    "pretrained-heads": _minilm,
    "decoder-heads": _smollm2,  # SmolLM2-135M-Instruct
    "trained-heads": _trained,  # the two-layer attention-only transformer
}


def prose(text: str) -> str:
    """The Markdown text of a chapter: no front matter, code cells, inline code or math."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)  # jupytext front matter
    text = re.sub(r"^(`{3,}).*?^\1\s*$", "", text, flags=re.S | re.M)  # fenced cells
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code
    text = re.sub(r"\$\$.*?\$\$", "", text, flags=re.S)  # display math
    return re.sub(r"\$[^$\n]*\$", "", text)  # inline math


def head_names(text: str) -> list[tuple[int, int]]:
    """Every (layer, head), counted from 1, that the prose names as "layer.head"."""
    found = []
    for m in NAME_LIST.finditer(text):
        found += [(int(a), int(b)) for a, b in re.findall(r"(\d+)\.(\d+)", m.group(1))]
    found += [(int(a), int(b)) for a, b in BOLD_NAME.findall(text)]
    return found


def other_names(text: str) -> list[str]:
    """Heads named otherwise than "layer.head", except beside the name they explain.

    "head 1.3 is layer 1, head 3" explains the name; "head 3 of layer 1" alone is a second
    name for the head (a reader of another chapter meets it as 1.3).
    """
    found = []
    for form in OTHER_FORMS:
        for m in form.finditer(text):
            numbers = [int(n) for n in re.findall(r"\d+", m.group(0))]
            layer, head = (
                (numbers[1], numbers[0])
                if "of" in m.group(0) or " in " in m.group(0)
                else (numbers[0], numbers[1])
            )
            near = text[max(m.start() - 80, 0) : m.end() + 80]
            if (layer, head) not in head_names(near):
                found.append(m.group(0))
    return found


def cell_trees(text: str) -> Iterator[ast.AST]:
    """The syntax tree of each code cell of a chapter that parses as Python."""
    for cell in CODE_CELL.finditer(text):
        try:
            yield ast.parse(cell["code"])
        except SyntaxError:
            continue


def cell_strings(text: str) -> str:
    """The text that the code cells of a chapter print: their string literals, one per line,
    an f-string's fields as ``{}`` (``f"head {head_name(0, 2)}"`` reads ``head {}``), so that
    a head name typed into a computed sentence is read as the prose's own."""
    found = []
    for tree in cell_trees(text):
        inside = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                parts = [v.value if isinstance(v, ast.Constant) else "{}" for v in node.values]
                found.append("".join(parts))
                inside |= {id(v) for v in node.values}
        found += [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in inside
        ]
    return "\n".join(found)


def printed(text: str) -> str:
    """What a chapter's reader reads: its prose and the strings its code cells print."""
    return prose(text) + "\n\n" + cell_strings(text)


def problems(text: str, layers: int, heads: int) -> list[str]:
    """What is wrong with the head names of one chapter's text (its prose and the strings
    its code cells print), for a model of that size."""
    body = printed(text)
    bad = [
        f"head {a}.{b} is not a head of a model of {layers} layers x {heads} heads "
        f"(layer.head, both counted from 1)"
        for a, b in head_names(body)
        if not (1 <= a <= layers and 1 <= b <= heads)
    ]
    return bad + [f"{t!r} names a head otherwise than 'layer.head'" for t in other_names(body)]


def test_the_prose_is_read_and_code_math_and_inline_code_are_not() -> None:
    text = (
        "---\nkernelspec: x\n---\nHead **1.3** and heads 2.9, 3.10 and 5.8 look; head 4.1 too."
        "\n\n```{code-cell} ipython3\nprint('head 9.9')\n```\n`head 9.9` and $0.2$, 0.95.\n"
    )
    assert head_names(prose(text)) == [(1, 3), (2, 9), (3, 10), (5, 8), (4, 1), (1, 3)]


def test_head_names_typed_into_a_computed_sentence_are_read() -> None:
    text = (
        "```{code-cell} ipython3\n:tags: [hide-input]\n"
        'Markdown(f"Head 0.2 puts {w:.2f} on the token before; head {head_name(0, 2)} too. "\n'
        '         "So does **1.13**.")\n```\n'
    )
    assert head_names(printed(text)) == [(0, 2), (1, 13)]
    assert len(problems(text, 6, 12)) == 2


def test_a_head_out_of_range_or_counted_from_zero_is_found() -> None:
    assert problems("Here head 1.3 looks back (as head 0.2, its code indices).", 6, 12) == [
        "head 0.2 is not a head of a model of 6 layers x 12 heads (layer.head, both counted from 1)"
    ]
    assert problems("heads 2.4 and 3.1", 2, 4)[0].startswith("head 3.1 is not a head")
    assert problems("head 1.5", 2, 4) and not problems("head 2.4", 2, 4)


def test_a_head_named_another_way_is_found() -> None:
    assert problems("Its head 3 of layer 1 looks back.", 6, 12) == [
        "'head 3 of layer 1' names a head otherwise than 'layer.head'"
    ]
    assert problems("the largest share (layer 1, head 5)", 6, 12)
    assert not problems("Head **1.3** is layer 1, head 3, in code `weights[0, 2]`.", 6, 12)
    assert problems("Head **1.3** is layer 3, head 1.", 6, 12)  # the explanation is wrong


def test_the_names_are_the_ones_head_name_gives() -> None:
    named = {(layer + 1, head + 1): formatting.head_name(layer, head) for layer in range(6)
             for head in range(12)}  # fmt: skip
    text = " ".join(f"head {name}" for name in named.values())
    assert head_names(prose(text)) == list(named)


@pytest.mark.parametrize("stem", sorted(MODELS))
def test_every_head_the_prose_names_exists_in_its_model(stem: str) -> None:
    layers, heads = MODELS[stem]()
    text = (BOOK / f"{stem}.md").read_text(encoding="utf8")
    assert problems(text, layers, heads) == []


def test_no_other_chapter_names_a_head_of_a_model_it_does_not_declare() -> None:
    named = {
        path.stem: head_names(printed(path.read_text(encoding="utf8")))
        for path in sorted(BOOK.glob("*.md"))
        if path.stem not in MODELS
    }
    assert {stem: found for stem, found in named.items() if found} == {}


CODE_CELL = re.compile(  # a code cell, after its options (":tags:" lines or a YAML block)
    r"^```\{code-cell\}[^\n]*\n(?:---\n.*?^---\n|(?::[^\n]*\n)+)?(?P<code>.*?)^```\s*$",
    re.M | re.S,
)
HEAD_BEFORE = re.compile(r"\b[Hh]eads?\s*$")


def self_made_names(text: str) -> list[str]:
    """f-string fields of the code cells that print a head ("head {...}") without
    ``head_name``: a name made by hand, which may count from 0 or differ from the book's."""
    found = []
    for tree in cell_trees(text):
        for node in ast.walk(tree):
            if not isinstance(node, ast.JoinedStr):
                continue
            for before, field in zip(node.values, node.values[1:], strict=False):
                if not (
                    isinstance(before, ast.Constant)
                    and isinstance(field, ast.FormattedValue)
                    and field.format_spec is None  # "head {x:.2f}" prints a number
                    and HEAD_BEFORE.search(str(before.value))
                ):
                    continue
                call = field.value
                name = getattr(getattr(call, "func", None), "id", None) or getattr(
                    getattr(call, "func", None), "attr", None
                )
                if not (isinstance(call, ast.Call) and name == "head_name"):
                    found.append(f"head {{{ast.unparse(call)}}}")
    return found


def test_self_made_names_finds_a_head_printed_without_head_name() -> None:
    text = (
        "```{code-cell} ipython3\n:tags: [hide-input]\n"
        'a = f"head {layer}.{h + 1} and head {head_name(0, 2)}"\n'
        'b = f"heads {formatting.head_name(1, h)}; {n} heads {m}; one head {c:.2f}"\n```\n'
    )
    assert self_made_names(text) == ["head {layer}", "head {m}"]


@pytest.mark.parametrize("path", sorted(BOOK.glob("*.md")), ids=lambda path: path.stem)
def test_code_prints_head_names_with_head_name(path: Path) -> None:
    assert self_made_names(path.read_text(encoding="utf8")) == []
