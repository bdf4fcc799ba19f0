"""What a chapter says to its reader: about its subject, with no tracebacks or broken strings.

Fast checks on the chapters' sources, one per kind of defect an editorial read found:
sentences about the book's build, its tests or the machine it ran on (in the prose, in
the strings its code cells display, and in their comments); claims attributed to unnamed
others ("sometimes used", "usually given") without a citation; expected errors shown as
tracebacks; string literals whose backslashes Python reads as invalid escapes (a TeX
command in a non-raw f-string); asserts on literals alone, which cannot fail.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
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
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)


def prose(text: str) -> str:
    """The chapter's Markdown with code cells and fenced blocks blanked (lines kept)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


CELL_OPTIONS = re.compile(r"\A(?:---\n.*?^---[ \t]*\n|(?::[^\n]*\n)+)", re.M | re.S)


def cell_strings(text: str) -> list[tuple[int, str]]:
    """(line, text) of every string literal in the code cells of ``text`` (f-strings' literal
    parts included): the sentences a cell displays. Comments are not read."""
    found = []
    for cell in CODE_CELL.finditer(text):
        tree = _parse(CELL_OPTIONS.sub(lambda m: "\n" * m.group(0).count("\n"), cell["code"]))
        if tree is None:
            continue
        first = text.count("\n", 0, cell.start("code")) + 1
        found += [
            (first + node.lineno - 1, node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        ]
    return found


def cell_comments(text: str) -> list[tuple[int, str]]:
    """(line, text) of every comment in the code cells of ``text``: a reader reads the
    comments of a cell as they read its code."""
    found = []
    for cell in CODE_CELL.finditer(text):
        first = text.count("\n", 0, cell.start("code")) + 1
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(cell["code"]).readline))
        except (tokenize.TokenError, SyntaxError):
            continue
        found += [(first + t.start[0] - 1, t.string) for t in tokens if t.type == tokenize.COMMENT]
    return found


def self_references(text: str) -> list[str]:
    lines = prose(text).split("\n")
    found = [
        f"line {n}: {line.strip()}"
        for n, line in enumerate(lines, 1)
        if SELF_REFERENCE.search(line)
    ]
    return found + [
        f"line {n}: {string.strip()}"
        for n, string in cell_strings(text) + cell_comments(text)
        if SELF_REFERENCE.search(string)
    ]


def test_self_references_finds_sentences_about_the_build_in_text_strings_and_comments() -> None:
    text = (
        "Attention is a weighted average.\n"
        "On this machine the step took 3 ms.\n"
        "The tests check this identity.\n"
        "```{code-cell} ipython3\n# this machine\nbuild = 3\n```\n"
        "A sentence about the build budget.\n"
        "```{code-cell} ipython3\n:tags: [hide-input]\n"
        'Markdown(f"{t:.1f} ms on this CPU.")\n```\n'
        '```{code-cell} ipython3\n---\nmystnb:\n  x: 1\n---\nMarkdown("The tests pass.")\n```\n'
        "```{code-cell} ipython3\nassert t < 3  # the target of scripts/bench_tiled.py\n```\n"
    )
    hits = sorted(int(hit.split(":")[0].removeprefix("line ")) for hit in self_references(text))
    assert hits == [2, 3, 5, 8, 11, 18, 21]  # not line 6's code, only what it says


# A claim of the field, said to be made by unnamed others: it needs its source, a citation
# after the phrase in the same sentence (or it is the book's own claim, said as such). A
# citation before the phrase, or in the next sentence, is another claim's source.
HEARSAY = re.compile(
    r"\b(?:sometimes|often|commonly|widely|usually|generally) (?:used|given|said|claimed|stated"
    r"|believed|described|assumed|cited)\b|\b(?:common|popular) (?:claim|belief|wisdom)\b"
    r"|\bit is (?:often |commonly |widely )?(?:said|claimed|believed)\b|\bfolklore\b"
    r"|\b(?:most|many) (?:implementations|libraries|frameworks|tutorials|textbooks|explanations)\b",
    re.IGNORECASE,
)
CITATION = re.compile(r"\{cite(?::[a-z]+)?\}`|\]\(https?://")
SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z(])")  # not "et al. {cite}" or "e.g. the"


def unsourced_claims(text: str) -> list[str]:
    """Phrases of the prose that attribute a claim to unnamed others with no citation after
    them in their sentence."""
    found, line = [], 1
    for paragraph in re.split(r"(\n[ \t]*\n)", prose(text)):
        for hearsay in HEARSAY.finditer(paragraph):
            end = SENTENCE_END.search(paragraph, hearsay.end())
            if not CITATION.search(paragraph, hearsay.end(), end.end() if end else len(paragraph)):
                at = line + paragraph.count("\n", 0, hearsay.start())
                found.append(f"line {at}: {hearsay.group(0)!r} without a citation")
        line += paragraph.count("\n")
    return found


def test_unsourced_claims_finds_hearsay_only_without_a_citation() -> None:
    text = (
        "One head.\n\nA test that is sometimes used for the purpose.\n\n"
        "The bound usually given\n{cite}`bhojanapalli2020lowrank` holds.\n\n"
        "It is often said [here](https://example.org) that heads specialise.\n\n"
        "Two heads are used; the mask is given.\n\n"
        "Principal angles {cite}`bjorck1973numerical` rather than a cosine, a test\n"
        "that is sometimes used for the purpose.\n\n"
        "A convention of this library (and of most implementations). Vaswani et al.\n"
        "{cite}`vaswani2017attention` size their heads otherwise. As e.g. libraries sometimes\n"
        "used do {cite}`rush2018annotated`.\n"
    )
    assert unsourced_claims(text) == [
        "line 3: 'sometimes used' without a citation",
        "line 13: 'sometimes used' without a citation",
        "line 15: 'most implementations' without a citation",
    ]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.stem)
def test_claims_of_the_field_name_their_source(path: Path) -> None:
    found = unsourced_claims(path.read_text(encoding="utf8"))
    assert found == [], f"{path.name}: {found}"


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
    the book shows an expected error with ``mha.display.formatting.error_message`` instead."""
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


def _parse(source: str) -> ast.Module | None:
    lines = source.split("\n")
    try:
        return ast.parse(
            "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in lines)
        )
    except SyntaxError:
        return None


def constant_names(sources: list[str]) -> set[str]:
    """Names that every assignment in the cells binds to literals (or to such names)."""
    values: dict[str, list[ast.AST]] = {}
    for tree in filter(None, map(_parse, sources)):
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                targets, value = [node.target], node.value
            elif isinstance(node, (ast.For, ast.comprehension, ast.With, ast.FunctionDef)):
                for t in ast.walk(getattr(node, "target", node)):
                    if isinstance(t, ast.Name):
                        values.setdefault(t.id, []).append(node)  # bound by a loop or call
            for target in targets:
                if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                    pairs = zip(target.elts, value.elts, strict=False)
                else:
                    pairs = [(target, value)]
                for t, v in pairs:
                    for name in ast.walk(t):
                        if isinstance(name, ast.Name):
                            values.setdefault(name.id, []).append(v if t is name else node)
    known: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, bound in values.items():
            if name not in known and all(_literal(v, known) for v in bound):
                known.add(name)
                grew = True
    return known


def _literal(node: ast.AST, known: set[str]) -> bool:
    """Whether ``node`` is built of literals and ``known`` names by arithmetic alone."""
    allowed = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Tuple)
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            if n.id not in known:
                return False
        elif not isinstance(
            n, (*allowed, ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.expr_context)
        ):
            return False
    return True


def literal_asserts(source: str, known: frozenset[str] = frozenset()) -> list[str]:
    """Asserts (or parts of an ``and``) built of literals and names bound to literals alone:
    arithmetic on literals cannot fail. An assert whose line says ``# a check of ...``
    (the arithmetic, the code) is marked as what it is, and passes."""
    tree = _parse(source)
    if tree is None:
        return []
    lines = source.split("\n")
    found = []
    for node in ast.walk(tree):
        # An assert marked "a check of the arithmetic/code" says it checks a derivation.
        if isinstance(node, ast.Assert) and "# a check of" not in lines[node.lineno - 1]:
            test = node.test
            parts = (
                test.values
                if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)
                else [test]
            )
            found += [ast.unparse(p) for p in parts if _literal(p, set(known))]
    return found


def test_literal_asserts_finds_arithmetic_on_literals_only() -> None:
    cells = ["D, H, Dh = 24, 3, 5\nout = f(D)", "assert H * Dh != D and out.shape == (4, D)"]
    known = frozenset(constant_names(cells))
    assert known == {"D", "H", "Dh"}
    assert literal_asserts(cells[1], known) == ["H * Dh != D"]
    assert literal_asserts("assert 3 * 5 != 24\nassert x == 2\nassert f(1) == 1") == ["3 * 5 != 24"]
    assert literal_asserts("assert 3 * 5 != 24  # a check of the arithmetic") == []
    assert (
        literal_asserts(
            "for k in (1, 2):\n    assert k > 0",
            frozenset(constant_names(["for k in (1, 2):\n    pass"])),
        )
        == []
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.stem)
def test_chapter_asserts_can_fail(path: Path) -> None:
    sources = [src for _, src in code_cells(path)]
    known = frozenset(constant_names(sources))
    found = [test for src in sources for test in literal_asserts(src, known)]
    assert found == [], f"{path.name}: asserts on literals alone: {found}"
