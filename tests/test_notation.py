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

import ast
import re
import warnings
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
            if index == "i" and m.group(0).startswith("A"):
                continue  # A_i: row i of the weights, as A_{i\cdot}
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
INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\$)([^$]+?)(?<![\\$])\$(?!\$)")
INLINE_CODE = re.compile(r"`[^`\n]*`")


@dataclass(frozen=True)
class Math:
    line: int
    text: str
    paragraph: str


def strings_of(code: str) -> list[tuple[int, str]]:
    """The string literals of a code cell with their line, an f-string's fields as ``1``
    (a computed number), so ``f"$H = {H}$"`` reads as ``$H = 1$``. Implicitly joined
    literals are one string."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an invalid escape is not this test's business
            tree = ast.parse(code)
    except SyntaxError:
        return list(enumerate(code.splitlines(), start=1))
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) else "1" for v in node.values]
            found.append((node.lineno, "".join(parts)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append((node.lineno, node.value))
        else:
            for child in ast.iter_child_nodes(node):
                visit(child)

    visit(tree)
    return found


def _cell_code(lines: list[str]) -> str:
    """A code cell's Python: its options (a ``---`` block, ``:tags:`` lines) blanked."""
    body = list(lines)
    if body and body[0].strip() == "---":
        end = next((k for k in range(1, len(body)) if body[k].strip() == "---"), 0)
        body[: end + 1] = [""] * (end + 1)
    for k, line in enumerate(body):
        if line.startswith(":"):
            body[k] = ""
        elif line.strip():
            break
    return "\n".join(body)


def _math_in(text: str, line: int, paragraph: str) -> list[Math]:
    found = [
        Math(line + text[: m.start()].count("\n"), m.group(1), paragraph)
        for m in DISPLAY_MATH.finditer(text)
    ]
    rest = DISPLAY_MATH.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    found += [
        Math(line + rest[: m.start()].count("\n"), m.group(1), paragraph)
        for m in INLINE_MATH.finditer(rest)
    ]
    return found


def math_of(source: str) -> list[Math]:
    """The math of a MyST chapter, with the line it starts on and its paragraph: ``$...$``
    and ``$$...$$`` in the text (a pair may span the lines of one paragraph), ``{math}``
    blocks, and the math of the Markdown that code cells display (their string literals)."""
    found: list[Math] = []
    text_lines: list[tuple[int, str]] = []
    fence: str | None = None
    code = False
    cell: list[str] = []
    cell_start = 0
    for number, line in enumerate(source.splitlines(), start=1):
        marker = FENCE.match(line)
        if fence is None and marker:
            fence, code, cell, cell_start = marker.group(1), "{math}" not in line, [], number
            if not code:
                text_lines.append((number, "$$"))
            continue
        if fence is not None and line.startswith(fence) and line.strip() == fence:
            if not code:
                text_lines.append((number, "$$"))
            else:
                for lineno, text in strings_of(_cell_code(cell)):
                    found += _math_in(text, cell_start + lineno, text)
            fence = None
            continue
        if fence is not None and code:
            cell.append(line)
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
        if para:
            text = "\n".join(INLINE_CODE.sub("", line) for _, line in para)
            found += _math_in(text, para[0][0], text)
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
        "```{code-cell} ipython3\nw = x @ W  # $W_c^Q$ in a comment\n"
        'Markdown(f"$W_m^Q$ and ${h}$ in a displayed " "string, $W_n^Q$ one line on")\n```\n'
        "```{code-cell} ipython3\ncost = 5$\n```\n"
        "A pair over two lines, $W_p^Q +\nb^Q_h$.\n"
    )
    texts = sorted(m.text.strip() for m in math_of(source))
    assert texts == ["1", "W_i^Q", "W_k^Q", "W_m^Q", "W_n^Q", "W_p^Q +\nb^Q_h"]


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


# ---- every symbol listed, with one meaning -------------------------------------------------
#
# ``book/notation.md`` ends with a table of every symbol of the book's math: its one meaning,
# its kind, and where it may appear (``all``, or the chapters it is local to). A symbol is
# a letter (``D``), a Greek letter (``\alpha``), a letter in another font (``\mathbb{R}``,
# ``\mathcal{L}``) or with an accent (``\tilde{o}``), or a name (``\mathrm{softmax}``,
# ``\operatorname{softmax}`` and a bare ``softmax`` are one name), with the superscripts and
# subscripts that are part of its name (``W^Q``, ``D_h``, ``H_{kv}``, ``N_{\mathrm{vocab}}``).
# Any other subscript is an index (``Q_h``, ``A_{ij}``, ``\xi_1``): its letters are symbols
# too, and a size takes none (``S_i`` is not "S of row i"). Any other superscript is an
# exponent or a transpose. A bare run of letters is a listed name or a product (``BLD``).

GREEK = {
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "varepsilon",
    "zeta",
    "eta",
    "theta",
    "vartheta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "pi",
    "varpi",
    "rho",
    "varrho",
    "sigma",
    "varsigma",
    "tau",
    "upsilon",
    "phi",
    "varphi",
    "chi",
    "psi",
    "omega",
    "Gamma",
    "Delta",
    "Theta",
    "Lambda",
    "Xi",
    "Pi",
    "Sigma",
    "Upsilon",
    "Phi",
    "Psi",
    "Omega",
    "ell",
}
NAME_COMMANDS = {"mathrm", "operatorname", "mathit", "mathsf"}
FONT_COMMANDS = {"mathbb", "mathcal", "mathbf", "boldsymbol", "bm", "mathscr", "mathfrak"}
ACCENTS = {"hat", "tilde", "bar", "widehat", "widetilde", "overline", "vec", "check"}
SKIPPED = {"text", "textrm", "textit", "textbf", "texttt", "mbox", "label", "tag"}
SKIPPED |= {"begin", "end", "color"}  # their argument is prose or an environment's name
KINDS = {"size", "index", "matrix", "vector", "scalar", "function", "set", "constant"}


@dataclass
class Atom:
    """One symbol as written: its base and the raw scripts attached to it."""

    base: str
    sub: str | None = None
    sup: str | None = None
    run: str | None = None  # the bare run of letters it came from, if any


def _group(s: str, i: int) -> tuple[str, int]:
    """The balanced ``{...}`` at ``s[i]``: its content and the index after it."""
    depth = 0
    for k in range(i, len(s)):
        if s[k] in "{}" and (k == 0 or s[k - 1] != "\\"):
            depth += 1 if s[k] == "{" else -1
            if depth == 0:
                return s[i + 1 : k], k + 1
    return s[i + 1 :], len(s)


def _arg(s: str, i: int) -> tuple[str, int]:
    """One argument at ``s[i]``: a group, a command (with its group) or one character."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        return "", i
    if s[i] == "{":
        return _group(s, i)
    if s[i] == "\\":
        m = re.match(r"\\([A-Za-z]+|.)", s[i:])
        end = i + len(m.group(0))
        if m.group(1) in SKIPPED | NAME_COMMANDS | FONT_COMMANDS:
            _, end = _arg(s, end)
        return s[i:end], end
    return s[i], i + 1


def plain(text: str) -> str:
    """A script or a name as plain text: ``{\\text{kv}}`` -> ``kv``."""
    text = re.sub(r"\\(?:text|mathrm|operatorname|textrm|mathit)\b\s*", "", text)
    return re.sub(r"\\[,;:! ]|[{}\s]", "", text)


def atoms(math: str) -> list[Atom]:
    """The symbols of a piece of math, in order, before they are looked up."""
    found: list[Atom] = []
    last: Atom | None = None  # the atom a script attaches to
    i = 0
    while i < len(math):
        c = math[i]
        if c == "\\":
            m = re.match(r"\\([A-Za-z]+|.)", math[i:])
            cmd, i = m.group(1), i + len(m.group(0))
            last = None
            if cmd in SKIPPED:
                _, i = _arg(math, i)
            elif cmd in NAME_COMMANDS:
                name, i = _arg(math, i)
                name = plain(name)
                last = Atom(name if len(name) > 1 else f"\\mathrm{{{name}}}")
            elif cmd in FONT_COMMANDS or cmd in ACCENTS:
                arg, i = _arg(math, i)
                last = Atom(f"\\{cmd}{{{plain(arg)}}}")
            elif cmd in GREEK:
                last = Atom(f"\\{cmd}")
            if last is not None:
                found.append(last)
        elif c in "_^":
            arg, i = _arg(math, i + 1)
            slot = "sub" if c == "_" else "sup"
            if last is not None and getattr(last, slot) is None:
                setattr(last, slot, arg)
            else:
                found.extend(atoms(arg))  # a script of a bracket or of a group
        elif c.isalpha():
            run = re.match(r"[A-Za-z]+", math[i:]).group(0)
            i += len(run)
            if run == "O" and math[i:].lstrip().startswith("("):
                last = Atom("\\mathcal{O}")  # O(N^2) is the order of growth
            else:
                last = Atom(run, run=run if len(run) > 1 else None)
            found.append(last)
        elif c == "'" and last is not None:
            i += 1  # a prime: j' is another j
        else:
            last = None if c not in " " else last
            i += 1
    return found


def key(base: str, sup: str | None = None, sub: str | None = None) -> str:
    """The canonical spelling of a symbol: ``W^Q``, ``D_h``, ``H_kv``."""
    return base + (f"^{plain(sup)}" if sup else "") + (f"_{plain(sub)}" if sub else "")


@dataclass(frozen=True)
class Entry:
    symbol: str
    meaning: str
    kind: str
    chapters: frozenset[str] | None  # None: every chapter


SYMBOLS_HEADING = "## Every symbol, one meaning"
ROW = re.compile(
    r"^\|\s*\$(?P<math>[^$]+)\$\s*\|(?P<meaning>[^|]+)\|(?P<kind>[^|]+)\|(?P<where>[^|]+)\|"
)


def parse_symbol_table(source: str) -> dict[str, Entry]:
    """The table under ``SYMBOLS_HEADING``: ``| $symbol$ | meaning | kind | where |``."""
    section = source.split(SYMBOLS_HEADING, 1)[1].split("\n## ", 1)[0]
    table: dict[str, Entry] = {}
    for line in section.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        found = atoms(m["math"])
        if len(found) != 1:
            raise ValueError(f"one symbol per row: {line}")
        a = found[0]
        symbol = key(a.base, a.sup, a.sub)
        if symbol in table:
            raise ValueError(f"{symbol} is listed twice: one symbol, one meaning")
        kind, where = m["kind"].strip(), m["where"].strip()
        if kind not in KINDS:
            raise ValueError(f"{symbol}: kind {kind!r} is not one of {sorted(KINDS)}")
        chapters = None if where == "all" else frozenset(re.findall(r"sec-([\w-]+)", where))
        table[symbol] = Entry(symbol, m["meaning"].strip(), kind, chapters)
    return table


def _is_index_word(word: str, table: dict[str, Entry]) -> bool:
    """``ij``, ``bl``: a word whose letters are all listed indices."""
    return all(table.get(ch) is not None and table[ch].kind == "index" for ch in word)


def resolve(math: str, table: dict[str, Entry]) -> list[tuple[str, str | None]]:
    """Each symbol of ``math`` as ``(symbol, problem)``; ``problem`` is None when it is fine.

    The symbol is looked up with the scripts that belong to its name, longest first
    (``W^Q_h`` is ``W^Q`` with index ``h``); a bare run of letters that is not a listed
    name is the product of its letters."""
    out: list[tuple[str, str | None]] = []
    for a in atoms(math):
        if a.run is not None and a.run not in table:
            letters = [Atom(ch) for ch in a.run]
            letters[-1].sub, letters[-1].sup = a.sub, a.sup
            for atom in letters:
                out += _resolve_atom(atom, table)
        else:
            out += _resolve_atom(a, table)
    return out


def _resolve_atom(a: Atom, table: dict[str, Entry]) -> list[tuple[str, str | None]]:
    if key(a.base, a.sup, a.sub) in QUOTED:
        return [(key(a.base, a.sup, a.sub), None)]
    candidates = []
    if a.sup and a.sub:
        candidates.append((key(a.base, a.sup, a.sub), None, None))
    if a.sup:
        candidates.append((key(a.base, a.sup), a.sub, None))
    if a.sub:
        candidates.append((key(a.base, None, a.sub), None, a.sup))
    candidates.append((a.base, a.sub, a.sup))
    for symbol, index, exponent in candidates:
        if symbol not in table:
            continue
        out: list[tuple[str, str | None]] = [(symbol, None)]
        if symbol == "e" and index is not None:
            return [(key(symbol, None, index), "e is Euler's number; a one-hot is \\mathbf{e}")]
        if index is not None:
            word = plain(index)
            if re.fullmatch(r"[A-Za-z]{2,}", word) and not _is_index_word(word, table):
                return [(key(symbol, None, index), "not listed")]  # a name, not an index
            if table[symbol].kind == "size":
                out[0] = (key(symbol, None, index), f"{symbol} is a size and takes no index")
            for sym, problem in resolve(index.replace(",", " "), table):
                if problem is None and len(sym) == 1 and table[sym].kind in {"vector", "matrix"}:
                    problem = f"{sym} is a {table[sym].kind} ({table[sym].meaning}), not an index"
                out.append((sym, problem))
        if exponent is not None:
            out += resolve(exponent, table)
        return out
    return [(key(a.base, a.sup, a.sub), "not listed")]


# Other authors' letters, allowed only in a paragraph that quotes them (names or cites them).
VASWANI = ("Vaswani", "vaswani2017attention")
BHOJANAPALLI = ("Bhojanapalli", "bhojanapalli2020lowrank")
DAO = ("Dao", "dao2022flashattention", "their Theorem")
QUOTED = {
    "d_k": VASWANI + BHOJANAPALLI,
    "d_v": VASWANI,
    "d_model": VASWANI,
    "d_q": BHOJANAPALLI,
    "d": DAO + BHOJANAPALLI,  # also the book's feature index in backward-pass
}
CLASH_RULES = [
    (
        re.compile(r"\$N\$\s+(?:attention\s+)?heads?\b|number of heads,?\s+\$N\$"),
        "N is the length N = L = S; the number of heads is H",
    ),
    (
        re.compile(r"\bN\s*=\s*S\s*[+-]|\bS\s*[+-]\s*1\s*=\s*N\b"),
        "N = L = S: N is never S plus or minus anything",
    ),
    (
        re.compile(
            r"(?:[Ff]rom here on|[Ii]n this (?:section|chapter)|[Hh]ereafter),?\s+"
            r"\$[^$]+\$\s+(?:counts|means|stands for|denotes|is now)"
        ),
        "a symbol keeps its one meaning of notation.md: no redefinition for a section",
    ),
]
PLAIN_BIG_O = re.compile(r"(?<![A-Za-z\\{])O\s*\(")  # O(N^2): the order of growth in plain O
COUNT_NOUNS = (
    r"positions?|tokens?|heads?|keys?|queries|query|steps?|layers?|sequences?|features?|"
    r"blocks?|values?|entries|rows?|columns?"
)
COUNTED = re.compile(
    r"\$(?P<math>\\?[A-Za-z]+(?:_\{?[^${}]*\}?)?)\$\s+(?:(?:new|cached|last|allowed|more)\s+)?"
    r"(?P<noun>" + COUNT_NOUNS + r")\b"
)


# A vector or matrix written where only a number fits: alone as the exponent of e
# ($e^{x}$ with x a row of X). ($|X|$ is the element-wise absolute value, so bars pass.)
AS_NUMBER = [
    re.compile(r"(?<![\\A-Za-z])e\s*\^\s*(?:\{\s*(?P<a>\\?[A-Za-z]+)\s*\}|(?P<b>[A-Za-z]))"),
]


def number_errors(math: Math, table: dict[str, Entry]) -> list[str]:
    """A vector or matrix of the table used as a plain number (see ``AS_NUMBER``)."""
    errors = []
    for pattern in AS_NUMBER:
        for m in pattern.finditer(math.text):
            symbol = m["a"] or m["b"]
            entry = table.get(symbol)
            if entry is not None and entry.kind in {"vector", "matrix"}:
                errors.append(
                    f"line {math.line}: {m.group(0)!r}: {symbol} is a {entry.kind} "
                    f"({entry.meaning}), not a number"
                )
    return errors


# A row of the symbol table gives one meaning: no "the token or position", no list of
# several things in parentheses, and a deliberately local name says that it is one.
TWO_MEANINGS = [
    (re.compile(r"^(?:the|an?) \w+ or (?:the |an? )?\w+\b"), "two meanings joined by 'or'"),
    (re.compile(r"\((?:an? [^,;()]+, )+an? [^,;()]+\)"), "a list of several meanings"),
    (re.compile(r"named where it is used"), "a local name says so: 'a local name: ...'"),
]


def row_meaning_errors(table: dict[str, Entry]) -> list[str]:
    return [
        f"{entry.symbol}: {message}: {entry.meaning!r}"
        for entry in table.values()
        for pattern, message in TWO_MEANINGS
        if pattern.search(entry.meaning)
    ]


def symbol_errors(source: str, stem: str, table: dict[str, Entry]) -> list[str]:
    """Each symbol of a chapter that is not listed, listed for other chapters only, a
    size with an index, a matrix that counts, or a known wrong form."""
    errors = []
    for math in math_of(source):
        for symbol, problem in resolve(math.text, table):
            if symbol in QUOTED and any(name in math.paragraph for name in QUOTED[symbol]):
                continue  # quoted where its author is named
            if symbol in QUOTED and symbol not in table:
                errors.append(
                    f"line {math.line}: {symbol!r} is {QUOTED[symbol][0]} et al.'s notation, "
                    "not the book's (D_h is the head width, D the model width): quote it as theirs"
                )
                continue
            if problem is not None:
                errors.append(f"line {math.line}: {symbol!r}: {problem}")
                continue
            chapters = table[symbol].chapters
            if chapters is not None and stem not in chapters:
                errors.append(
                    f"line {math.line}: {symbol!r} means {table[symbol].meaning!r} in "
                    f"{', '.join(sorted(chapters))} only"
                )
        errors += number_errors(math, table)
        for m in PLAIN_BIG_O.finditer(math.text):
            errors.append(
                f"line {math.line}: {m.group(0)!r}: plain O is the attention output; "
                "write the order of growth as \\mathcal{O}(...)"
            )
    paragraphs = {m.paragraph: m.line for m in reversed(math_of(source))}
    for text, line in paragraphs.items():  # the prose around the math: known wrong forms
        math = Math(line, "", text)
        for pattern, message in CLASH_RULES:
            for m in pattern.finditer(text):
                errors.append(f"line {math.line}: {m.group(0)!r}: {message}")
        for m in COUNTED.finditer(text):
            found = resolve(m["math"], table)
            if len(found) == 1 and found[0][1] is None:
                entry = table[found[0][0]]
                if entry.kind not in {"size", "scalar", "constant"}:
                    errors.append(
                        f"line {math.line}: {m.group(0)!r}: {entry.symbol} is a {entry.kind} "
                        f"({entry.meaning}), not a count"
                    )
    return sorted(set(errors), key=lambda e: int(e.split(":")[0].split()[1]))


def symbol_table() -> dict[str, Entry]:
    return parse_symbol_table((BOOK / "notation.md").read_text(encoding="utf8"))


def checked_source(path: Path) -> str:
    """A chapter's source; for notation.md, without the table that defines the symbols."""
    source = path.read_text(encoding="utf8")
    if SYMBOLS_HEADING in source:
        before, after = source.split(SYMBOLS_HEADING, 1)
        source = (
            before
            + "\n" * after.split("\n## ", 1)[0].count("\n")
            + "\n## "
            + after.split("\n## ", 1)[1]
        )
    return source


SYNTHETIC = {
    "B": Entry("B", "batch size", "size", None),
    "L": Entry("L", "query length", "size", None),
    "S": Entry("S", "key/value length", "size", None),
    "N": Entry("N", "the one length", "size", None),
    "H": Entry("H", "number of heads", "size", None),
    "D": Entry("D", "model width", "size", None),
    "D_h": Entry("D_h", "head width", "size", None),
    "H_kv": Entry("H_kv", "key/value heads", "size", None),
    "i": Entry("i", "a query", "index", None),
    "j": Entry("j", "a key", "index", None),
    "h": Entry("h", "a head", "index", None),
    "A": Entry("A", "weights", "matrix", None),
    "Q": Entry("Q", "queries", "matrix", None),
    "K": Entry("K", "keys", "matrix", None),
    "W": Entry("W", "a weight matrix", "matrix", None),
    "W^Q": Entry("W^Q", "query projection", "matrix", None),
    "\\xi": Entry("\\xi", "a gate", "scalar", frozenset({"trained-heads"})),
    "e": Entry("e", "Euler's number", "constant", None),
    "p": Entry("p", "a probability row", "vector", None),
    "x": Entry("x", "one position's row of X", "vector", None),
    "\\mu": Entry("\\mu", "a real exponent", "scalar", None),
    "softmax": Entry("softmax", "softmax", "function", None),
    "\\mathcal{O}": Entry("\\mathcal{O}", "order of growth", "function", None),
}


@pytest.mark.parametrize(
    ("source", "stem", "found"),
    [
        ("the $N$ heads one at a time", "x", "the number of heads is H"),
        ("with $G$ the diagonal matrix", "x", "'G': not listed"),
        ("the last $W$ positions", "x", "W is a matrix"),
        ("$d_k$ for the head width", "x", "'d_k' is Vaswani et al.'s notation"),
        ("$(H, d_k, D) = (4, 8, 32)$", "x", "'d_k' is Vaswani et al.'s notation"),
        ("$H(A_{i\\cdot}) / \\log S_i$", "x", "S is a size and takes no index"),
        ("From here on $S$ counts the positions cached before a step.", "x", "no redefinition"),
        ("with $N = S + 1$ positions", "x", "N is never S plus"),
        ("gates $\\xi_h$", "other-chapter", "in trained-heads only"),
        ("$\\mathrm{LayerNorm}(X)$", "x", "'LayerNorm': not listed"),
        ("$X_{\\text{out}}$", "x", "'X_out': not listed"),
        ("moves $O(N^2)$ elements", "x", "write the order of growth as"),
        ("one-hot rows $x_i = e_i$", "x", "a one-hot is"),
        ("$\\sum_p A_{h, p}$", "x", "p is a vector"),
        ("but $|x|\\, e^{x} \\le 1/e$ for $x \\le 0$", "x", "'e^{x}': x is a vector"),
        ("$e^x$ finite up to", "x", "'e^x': x is a vector"),
    ],
)
def test_each_symbol_rule_finds_its_wrong_form(source: str, stem: str, found: str) -> None:
    errors = symbol_errors(source + "\n", stem, SYNTHETIC)
    assert any(found in e for e in errors), errors


@pytest.mark.parametrize(
    "source",
    [
        "$\\operatorname{softmax}(Q K^\\top / \\sqrt{D_h})$ and $\\mathrm{softmax}$, softmax",
        "$W^Q_h$, $A_{ij}$, $A_{h, ij}$, $Q_{i}$ with $H_{kv}$ and $H_\\text{kv}$",
        "$2BLD^2 + 4 B L S D$ FLOPs, $\\mathcal{O}(N^2)$",  # products, the order of growth
        "gates $\\xi_h$",
        "their $d_k = d_{\\text{model}}/h$ (Vaswani et al.)",
        "$H$ heads of $D_h$ features, $L$ queries against $S$ keys",
        "$|\\mu|\\, e^{\\mu} \\le 1/e$, $e^{x_i}$",
    ],
)
def test_the_books_symbols_pass(source: str) -> None:
    assert symbol_errors(source + "\n", "trained-heads", SYNTHETIC) == []


def test_equivalent_spellings_are_one_symbol() -> None:
    spellings = [
        "\\mathrm{softmax}",
        "\\operatorname{softmax}",
        "softmax",
        "\\text{softmax}",
    ]
    assert {s for sp in spellings[:3] for s, _ in resolve(sp, SYNTHETIC)} == {"softmax"}
    assert resolve(spellings[3], SYNTHETIC) == []  # \\text is prose, not a symbol
    assert {s for s, _ in resolve("H_{kv} + H_{\\mathrm{kv}} + H_\\text{kv}", SYNTHETIC)} == {
        "H_kv"
    }


def test_the_table_lists_each_symbol_once_with_a_known_kind() -> None:
    table = symbol_table()
    assert {"B", "L", "S", "N", "D", "H", "D_h", "H_kv", "W^Q", "softmax"} <= set(table)
    stems = {p.stem for p in BOOK.glob("*.md")}
    for entry in table.values():
        assert entry.chapters is None or entry.chapters <= stems, entry


@pytest.mark.parametrize(
    ("row", "found"),
    [  # rows of an earlier table, each listing two meanings
        ("| $t$ | the token or position a query targets ($t_h(i)$) | index | all |", "'or'"),
        (
            "| $p$ | a further index, named where it is used (a second key, a feature, "
            "a singular value) | index | all |",
            "a list of several meanings",
        ),
        ("| $n$ | a count, named where it is used | scalar | all |", "a local name says so"),
    ],
)
def test_a_row_with_two_meanings_is_found(row: str, found: str) -> None:
    table = parse_symbol_table(f"{SYMBOLS_HEADING}\n\n{row}\n")
    assert any(found in e for e in row_meaning_errors(table)), row_meaning_errors(table)


def test_each_row_of_the_table_gives_one_meaning() -> None:
    assert row_meaning_errors(symbol_table()) == []


def test_every_listed_symbol_is_used() -> None:
    """The table holds the book's symbols and no others."""
    table, used = symbol_table(), set()
    for path in BOOK.glob("*.md"):
        for math in math_of(checked_source(path)):
            used |= {symbol for symbol, problem in resolve(math.text, table) if problem is None}
    assert sorted(set(table) - used) == []


@pytest.mark.parametrize("path", chapter_params())
def test_chapter_math_uses_only_listed_symbols(path: Path) -> None:
    errors = symbol_errors(checked_source(path), path.stem, symbol_table())
    assert errors == [], f"{path.name}:\n" + "\n".join(errors)
