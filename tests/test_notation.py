"""One notation in every chapter: the forms that ``book/notation.md`` rules out never appear.

The book's system (``sec-notation``): row vectors and weights on the right (``X W^Q_h``);
heads numbered ``h = 1, ..., H`` in the math; per-head weights ``W^Q_h, W^K_h, W^V_h`` and
``W^O_h`` (superscript Q/K/V/O, then the head index ``h`` or a head number); full
matrices ``W^Q, W^K, W^V, W^O``; per-head ``Q_h, K_h, V_h, A_h`` and ``\\mathrm{head}_h``;
``MultiHead(X, Y)``, never ``MultiHead(Q, K, V)`` except where Vaswani et al.'s own
notation is quoted and said to be theirs. Grouped-query attention's key/value heads are
numbered ``g = 1, ..., H_kv``: ``K_g``, ``V_g``, ``W^K_g``, ``W^V_g``, and ``K_{g(h)}`` for the
key head that query head ``h`` reads.

The check reads the math of every chapter: ``$...$`` and ``$$...$$`` in the text, and in
the Markdown that code cells display (``$`` pairs on one line of a code cell).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"

HEAD_INDEX = re.compile(r"^(h|H|h'|\d+)$")  # the index of a head in the math
KV_INDEX = re.compile(r"^(g|g\(h\)|H_\{?kv\}?)$")  # a key/value head (grouped-query attention)
KV_TENSOR = re.compile(r"^(?:[KV]|W\s*\^\s*\{?[KV]\}?)")  # keys, values and their weights


def _sub(name: str) -> str:
    """A subscript, ``_x`` or ``_{...}``, captured in the groups ``name`` and ``name1``."""
    return r"_(?:\{(?P<" + name + r">[^{}]*)\}|(?P<" + name + r"1>\\?[A-Za-z0-9']))"


@dataclass(frozen=True)
class Rule:
    """A forbidden form. With an ``index`` group, only indices other than a head's count;
    with ``letters_only``, only a one-letter index (``A_{ij}`` is an entry, not a head)."""

    name: str
    pattern: re.Pattern[str]
    message: str
    letters_only: bool = False

    def violations(self, math: str) -> list[str]:
        found = []
        for m in self.pattern.finditer(math):
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            index = next((v.strip() for k, v in groups.items() if k.startswith("index")), None)
            if index is not None and HEAD_INDEX.match(index):
                continue  # a head index from the book's system
            if index is not None and KV_INDEX.match(index) and KV_TENSOR.match(m.group(0)):
                continue  # a key/value head of grouped-query attention
            if index is not None and self.letters_only and not re.fullmatch(r"[A-Za-z]", index):
                continue
            found.append(m.group(0))
        return found


RULES = [
    Rule(
        "subscript before superscript",
        re.compile(r"W_(?:\{[^{}]*\}|\\?\w)\s*\^\s*(?:\{[^{}]*\}|\\?\w)"),
        "write the head index after the superscript: W^Q_h, not W_h^Q or W_q^h",
    ),
    Rule(
        "lower-case weight name",
        re.compile(r"W_\{?[qkvo](?![A-Za-z])"),
        "full matrices are W^Q, W^K, W^V, W^O (upper-case superscripts), not W_q",
    ),
    Rule(
        "head index letter",
        re.compile(r"W\s*\^\s*\{?[QKVO]\}?\s*" + _sub("index")),
        "per-head weights are indexed by h (or a head number): W^Q_h",
    ),
    Rule(
        "head output index",
        re.compile(
            r"(?:\\(?:text|mathrm|operatorname)\{head\}|(?<![A-Za-z\\])head)" + _sub("index")
        ),
        "a head's output is \\mathrm{head}_h (or a head number)",
    ),
    Rule(
        "per-head tensor index",
        re.compile(r"(?<![A-Za-z\\])[QKVA]" + _sub("index") + r"(?![A-Za-z0-9{])"),
        "per-head queries, keys, values and weights are Q_h, K_h, V_h, A_h",
        letters_only=True,
    ),
    Rule(
        "heads from zero",
        re.compile(r"(?<![A-Za-z])h\s*=\s*0(?![0-9.])"),
        "heads are numbered h = 1, ..., H in the math (the code's params.head(h - 1))",
    ),
    Rule(
        "column vector",
        re.compile(
            r"(?<![A-Za-z\\])W(?:\s*[\^_]\s*(?:\{[^{}]*\}|\\top|\\?\w))*"
            r"(?:\s|\\[,;!])*(?<![A-Za-z])[xyqkv](?![A-Za-z])"
        ),
        "vectors are rows and weights act on the right: x W, not W x",
    ),
]
QKV_MULTIHEAD = re.compile(r"MultiHead\}?\s*\(\s*Q\s*,\s*K\s*,\s*V\s*\)")

FENCE = re.compile(r"^(```+|~~~+)")
DISPLAY_MATH = re.compile(r"\$\$(.+?)\$\$", re.S)
INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\$)([^$\n]+?)(?<![\\$])\$(?!\$)")
INLINE_CODE = re.compile(r"`[^`\n]*`")


@dataclass(frozen=True)
class Math:
    line: int
    text: str
    paragraph: str


def math_of(source: str) -> list[Math]:
    """The math of a MyST chapter, with the line it starts on and its paragraph."""
    found: list[Math] = []
    lines = source.splitlines()
    text_lines: list[tuple[int, str]] = []
    fence: str | None = None
    code = False
    for number, line in enumerate(lines, start=1):
        marker = FENCE.match(line)
        if fence is None and marker:
            fence = marker.group(1)
            code = "{math}" not in line
            if not code:
                text_lines.append((number, "$$"))
            continue
        if fence is not None and line.startswith(fence) and line.strip() == fence:
            if not code:
                text_lines.append((number, "$$"))
            fence = None
            continue
        if fence is not None and code:  # a code cell: only $...$ on one line (displayed Markdown)
            for m in INLINE_MATH.finditer(line):
                found.append(Math(number, m.group(1), line))
            continue
        text_lines.append((number, line))
    # The text, paragraph by paragraph, without inline code.
    paragraphs: list[list[tuple[int, str]]] = [[]]
    for number, line in text_lines:
        if line.strip() == "" and paragraphs[-1]:
            paragraphs.append([])
        elif line.strip():
            paragraphs[-1].append((number, line))
    for para in paragraphs:
        if not para:
            continue
        start = para[0][0]
        text = "\n".join(INLINE_CODE.sub("", line) for _, line in para)
        for m in DISPLAY_MATH.finditer(text):
            found.append(Math(start + text[: m.start()].count("\n"), m.group(1), text))
        rest = DISPLAY_MATH.sub(" ", text)
        for m in INLINE_MATH.finditer(rest):
            found.append(Math(start, m.group(1), text))
    return found


def notation_errors(source: str) -> list[str]:
    """Each use of a form outside the book's notation, as ``line N: form (rule)``."""
    errors = []
    for math in math_of(source):
        for rule in RULES:
            for form in rule.violations(math.text):
                errors.append(f"line {math.line}: {form!r}: {rule.message}")
        if QKV_MULTIHEAD.search(math.text):
            quoted = "notation" in math.paragraph and (
                "Vaswani" in math.paragraph or "vaswani2017attention" in math.paragraph
            )
            if not quoted:
                errors.append(
                    f"line {math.line}: MultiHead(Q, K, V): write MultiHead(X, Y), or say "
                    "that it is Vaswani et al.'s notation where it is quoted"
                )
    return errors


# ---- the check itself ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("math", "rule"),
    [
        ("W_i^Q", "subscript before superscript"),
        ("W_{h}^{K}", "subscript before superscript"),
        ("W_q^i", "subscript before superscript"),
        ("W_q W_k^\\top", "lower-case weight name"),
        ("W^Q_i", "head index letter"),
        ("W^{O}_{j}", "head index letter"),
        ("\\text{head}_i", "head output index"),
        ("\\mathrm{head}_{c}", "head output index"),
        ("Q_i = X W^Q_h", "per-head tensor index"),
        ("Q_g", "per-head tensor index"),  # g numbers key/value heads only
        ("W^Q_g", "head index letter"),
        ("h = 0, \\dots, H - 1", "heads from zero"),
        ("W x", "column vector"),
        ("W^Q_h x_i", "column vector"),
        ("W^\\top\\, q", "column vector"),
    ],
)
def test_each_rule_finds_its_forbidden_form(math: str, rule: str) -> None:
    hits = [r.name for r in RULES if r.violations(math)]
    assert rule in hits, f"{math!r}: {hits}"


@pytest.mark.parametrize(
    "math",
    [
        "W^Q_h \\in \\mathbb{R}^{D \\times D_h}",
        "W^O_{h}",
        "W^Q_1, W^K_2, W^V_H",
        "Q_h = X W^Q_h, \\; K_h = Y W^K_h, \\; V_h = Y W^V_h",
        "\\mathrm{head}_h = \\mathrm{softmax}(Q_h K_h^\\top / \\sqrt{D_h}) V_h",
        "\\mathrm{Concat}(\\mathrm{head}_1, \\dots, \\mathrm{head}_H) W^O",
        "A_{ij}, A_{i,i-1}, A_{h, ij}",
        "h = 1, \\dots, H",
        "x W^Q",
        "x_i W^Q_h + b^Q_h",
        "W^O \\in \\mathbb{R}^{H D_h \\times D}",
        "q_i \\cdot k_j",
        "K_g = Y W^K_g, \\; V_g = Y W^V_g",  # grouped-query attention's key/value heads
        "Q_h K_{g(h)}^\\top",
    ],
)
def test_the_books_own_forms_pass(math: str) -> None:
    assert [r.name for r in RULES if r.violations(math)] == []


def test_multihead_of_q_k_v_passes_only_where_vaswanis_notation_is_quoted() -> None:
    bad = "So $\\operatorname{MultiHead}(Q, K, V) = \\mathrm{Concat}(\\dots) W^O$.\n"
    good = (
        "In the notation of Vaswani et al. {cite}`vaswani2017attention`, "
        "$\\operatorname{MultiHead}(Q, K, V)$ takes the layer's inputs.\n"
    )
    assert len(notation_errors(bad)) == 1 and notation_errors(good) == []


def test_math_of_reads_text_and_displayed_markdown_but_not_code() -> None:
    source = (
        "Text $W_i^Q$ and `$W_j^Q$` in code.\n\n"
        "$$\nW_k^Q\n$$\n\n"
        "```{code-cell} ipython3\nw = x @ W  # $W_m^Q$ in a displayed string\n```\n"
        "```{code-cell} ipython3\ncost = 5$\n```\n"
    )
    texts = sorted(m.text.strip() for m in math_of(source))
    assert texts == ["W_i^Q", "W_k^Q", "W_m^Q"]


# ---- every chapter -------------------------------------------------------------------

# Chapters whose math still uses an older notation while they are rewritten to the book's.
# Strict: once a chapter passes, its entry here makes the test fail until it is removed.
NOT_YET_CONVERTED: set[str] = set()  # every chapter is in the notation


def chapter_params() -> list:
    params = []
    for path in sorted(BOOK.glob("*.md")):
        marks = []
        if path.stem in NOT_YET_CONVERTED:
            marks = [pytest.mark.xfail(strict=True, reason="math not yet in the book's notation")]
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params


@pytest.mark.parametrize("path", chapter_params())
def test_chapter_math_uses_the_books_notation(path: Path) -> None:
    errors = notation_errors(path.read_text(encoding="utf8"))
    assert errors == [], f"{path.name}:\n" + "\n".join(errors)
