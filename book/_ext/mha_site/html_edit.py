"""Find the elements of a written HTML page with Python's html.parser and splice edits into it.

The site's steps that change pages after Sphinx and the theme wrote them (icons, stylesheets,
formulas, hidden code) find the elements they change with :func:`parse`, which gives each
element its tag, its attributes and its place in the page's text, and write their changes
with :func:`splice`. Every byte they do not change stays as it was written: nothing is
serialised again.

The elements nest as their tags do: an element left open (a ``<p>`` that a browser would
close at the next block) ends where its parent's end tag is. Sphinx, the theme and MathJax
close what they open, so on the site's pages the two readings agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

# HTML's void elements: they have no end tag and no content.
VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}
    | {"track", "wbr"}
)


@dataclass(eq=False, slots=True)
class Element:
    """One element of a page, with the places of its tags in the page's text.

    ``start``: its ``<``; ``open_end``: just past its start tag; ``close_start``: the ``<`` of
    its end tag; ``end``: just past its end tag. An element without an end tag (void,
    self-closing, or closed by its parent's end tag) has ``close_start == end``.
    """

    tag: str
    attrs: dict[str, str | None]
    start: int
    open_end: int
    close_start: int = -1
    end: int = -1
    parent: Element | None = None
    children: list[Element] = field(default_factory=list)

    @property
    def classes(self) -> list[str]:
        return (self.attrs.get("class") or "").split()

    @property
    def has_end_tag(self) -> bool:
        return self.end > self.close_start

    def inner(self, page: str) -> str:
        return page[self.open_end : self.close_start]

    def outer(self, page: str) -> str:
        return page[self.start : self.end]

    def start_tag(self, page: str) -> str:
        return page[self.start : self.open_end]

    def text_between_children(self, page: str) -> str:
        """The element's content without its children's: its own text (and comments)."""
        parts, pos = [], self.open_end
        for child in self.children:
            parts.append(page[pos : child.start])
            pos = child.end
        parts.append(page[pos : self.close_start])
        return "".join(parts)

    def descendants(self) -> Iterator[Element]:
        """Every element inside this one, in the order of the page."""
        for child in self.children:
            yield child
            yield from child.descendants()


class _Parser(HTMLParser):
    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.page = page
        self.line_starts = [0]
        at = page.find("\n")
        while at != -1:
            self.line_starts.append(at + 1)
            at = page.find("\n", at + 1)
        self.elements: list[Element] = []
        self.open: list[Element] = []

    def _here(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def _element(self, tag: str, attrs: list[tuple[str, str | None]]) -> Element:
        start = self._here()
        opening = self.get_starttag_text() or ""
        parent = self.open[-1] if self.open else None
        element = Element(tag, dict(attrs), start, start + len(opening), parent=parent)
        if parent is not None:
            parent.children.append(element)
        self.elements.append(element)
        return element

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = self._element(tag, attrs)
        if tag in VOID:
            element.close_start = element.end = element.open_end
        else:
            self.open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = self._element(tag, attrs)
        element.close_start = element.end = element.open_end

    def handle_endtag(self, tag: str) -> None:
        at = self._here()
        for depth in range(len(self.open) - 1, -1, -1):
            if self.open[depth].tag == tag:
                break
        else:
            return  # an end tag with no open element: ignored, as browsers do
        for unclosed in self.open[depth + 1 :]:  # closed by this end tag, as browsers do
            unclosed.close_start = unclosed.end = at
        element = self.open[depth]
        del self.open[depth:]
        element.close_start, element.end = at, self.page.index(">", at) + 1

    def close(self) -> None:
        super().close()
        for unclosed in self.open:
            unclosed.close_start = unclosed.end = len(self.page)
        self.open = []


def parse(page: str) -> list[Element]:
    """Every element of ``page`` in the order of their start tags (the contents of
    ``<script>`` and ``<style>`` are text)."""
    parser = _Parser(page)
    parser.feed(page)
    parser.close()
    return parser.elements


def find(elements: Iterable[Element], tag: str, **attrs: str) -> Iterator[Element]:
    """The elements named ``tag`` whose attributes have the given values (``class_`` for
    ``class``)."""
    wanted = {name.rstrip("_").replace("_", "-"): value for name, value in attrs.items()}
    for element in elements:
        if element.tag == tag and all(element.attrs.get(k) == v for k, v in wanted.items()):
            yield element


def splice(page: str, edits: Iterable[tuple[int, int, str]]) -> str:
    """``page`` with each ``(start, end, text)`` edit made: ``page[start:end]`` becomes ``text``.

    Raises:
        ValueError: if two edits overlap.
    """
    out, pos = [], 0
    for start, end, text in sorted(edits, key=lambda edit: edit[:2]):
        if start < pos:
            raise ValueError(f"edits overlap at {start} (the previous one ends at {pos})")
        out += [page[pos:start], text]
        pos = end
    out.append(page[pos:])
    return "".join(out)


def removal(page: str, element: Element) -> tuple[int, int, str]:
    """The edit that removes ``element``, with the line break that follows it."""
    end = element.end + (page.startswith("\n", element.end))
    return element.start, end, ""


def attribute_value(value: str) -> str:
    """``value`` escaped for a double-quoted attribute, as docutils escapes it."""
    return (
        value.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;").replace(">", "&gt;")
    )


def start_tag(tag: str, attrs: dict[str, str | None]) -> str:
    """A start tag with these attributes in this order (``None``: an attribute without value)."""
    parts = [tag]
    parts += [name if v is None else f'{name}="{attribute_value(v)}"' for name, v in attrs.items()]
    return "<" + " ".join(parts) + ">"
