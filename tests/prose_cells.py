"""Code cells whose output is prose (a paragraph or a table computed as Markdown).

A reader meets such a cell's output as text, so its input (the f-strings that write the
sentence) is folded behind the toggle (``hide-input``): the page does not say everything
twice. A cell that displays prose does only that; the code that teaches the library's use
stays in view in the cell before it.

Found two ways: in a chapter's source (the cell's last statement displays Markdown, or
it calls ``display(Markdown(...))``) and in its built page (the cell's output holds
paragraphs, lists or tables rather than a code block, a figure or plain text).
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from html.parser import HTMLParser

import jupytext

FOLDED_TAGS = {"hide-input", "hide-cell", "remove-input", "remove-cell"}
PROSE_TAGS = {"p", "table", "math", "ul", "ol", "dl", "blockquote", "h2", "h3", "h4"}


@dataclass(frozen=True)
class Cell:
    index: int  # position among the notebook's cells
    first_line: str  # the cell's first line of code, to find it in the source
    tags: tuple[str, ...]


def _code(source: str) -> str:
    """The cell's Python, with IPython magics and shell lines blanked."""
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n")
    )


def _callee(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            return func.id
        if isinstance(func, ast.Attribute):
            return func.attr
    return None


def _is_error_message(node: ast.AST) -> bool:
    """``Markdown(error_message(...))``: a refused call shown as a code block
    (``mha.display.formatting.error_message``)."""
    return (
        isinstance(node, ast.Call) and bool(node.args) and _callee(node.args[0]) == "error_message"
    )


def _returning_markdown(defs: dict[str, ast.FunctionDef], helpers: set[str]) -> set[str]:
    """``helpers`` and every function of ``defs`` whose every ``return`` calls one of them."""
    helpers = set(helpers)
    grew = True
    while grew:
        grew = False
        for name, fn in defs.items():
            returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value]
            if name not in helpers and returns and all(_callee(r) in helpers for r in returns):
                helpers.add(name)
                grew = True
    return helpers


def library_helpers() -> set[str]:
    """The public functions of ``mha.display.formatting`` that return ``Markdown(...)``
    (``table``), read from the module's source: the chapters import them."""
    from mha.display import formatting

    tree = ast.parse(inspect.getsource(formatting))
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    return {name for name in _returning_markdown(defs, {"Markdown"}) if name[0] != "_"} - {
        "Markdown"
    }


def markdown_helpers(cells: list[str]) -> set[str]:
    """Names of functions that return Markdown: ``Markdown``, the library's helpers
    (:func:`library_helpers`) and the functions defined in the cells that return one of
    them, so that ``table(...)`` or a chapter's own ``seed_table(...)`` counts as
    displaying Markdown."""
    defs: dict[str, ast.FunctionDef] = {}
    for source in cells:
        try:
            tree = ast.parse(_code(source))
        except SyntaxError:
            continue
        defs.update({n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)})
    return _returning_markdown(defs, {"Markdown"} | library_helpers())


def shows_prose(source: str, helpers: set[str]) -> bool:
    """Whether the cell displays Markdown other than an error message."""
    try:
        body = ast.parse(_code(source)).body
    except SyntaxError:
        return False
    shown = []
    if body and isinstance(body[-1], ast.Expr) and _callee(body[-1].value) in helpers:
        shown.append(body[-1].value)
    for stmt in body:
        for node in ast.walk(stmt):
            if _callee(node) == "display" and node.args and _callee(node.args[0]) in helpers:
                shown.append(node.args[0])
    return any(not _is_error_message(node) for node in shown)


def prose_cells(text: str) -> list[Cell]:
    """The code cells of a MyST notebook's ``text`` that display prose."""
    notebook = jupytext.reads(text, fmt="md:myst")
    code = [c for c in notebook.cells if c.cell_type == "code"]
    helpers = markdown_helpers([c.source for c in code])
    found = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code" and shows_prose(cell.source, helpers):
            first = next((line for line in cell.source.split("\n") if line.strip()), "")
            found.append(Cell(index, first, tuple(cell.metadata.get("tags", []))))
    return found


class _CellOutputs(HTMLParser):
    """Per built cell (``div.cell``): its classes and the tags directly inside its output."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.cells: list[tuple[set[str], list[str]]] = []
        self.stack: list[str] = []  # role of each open div: "cell", "output", or ""
        self.depth_in_output: int | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = set((dict(attrs).get("class") or "").split())
        if self.depth_in_output is not None:
            if self.depth_in_output == 0:
                kind = tag if tag != "div" else _div_kind(classes)
                self.cells[-1][1].append(f"{kind}.{'.'.join(sorted(classes))}")
            if tag not in _VOID:
                self.depth_in_output += 1
            return
        if tag != "div":
            return
        if "cell" in classes and "docutils" in classes:
            self.cells.append((classes, []))
            self.stack.append("cell")
        elif "cell_output" in classes and self.stack and "cell" in self.stack:
            self.depth_in_output = 0
            self.stack.append("output")
        else:
            self.stack.append("")

    def handle_endtag(self, tag: str) -> None:
        if self.depth_in_output is not None:
            if self.depth_in_output == 0 and tag == "div":
                self.depth_in_output = None
                self.stack.pop()
            elif tag not in _VOID:
                self.depth_in_output -= 1
            return
        if tag == "div" and self.stack:
            self.stack.pop()


def _div_kind(classes: set[str]) -> str:
    """What a div directly inside a cell's output holds: a rendered output (plain text,
    HTML, a figure), a table (the theme wraps tables to scroll) or display math."""
    if "output" in classes:
        return "output"
    if "pst-scrollable-table-container" in classes:
        return "table"
    return "math" if "math" in classes else "div"


_VOID = {"br", "hr", "img", "input", "meta", "link", "wbr", "source", "col", "area", "embed"}


def built_prose_cells(html: str) -> list[tuple[set[str], list[str]]]:
    """The built cells of a page whose output holds prose: (cell classes, output children)."""
    parser = _CellOutputs()
    parser.feed(html)
    return [
        (classes, children)
        for classes, children in parser.cells
        if any(child.split(".")[0] in PROSE_TAGS for child in children)
    ]
