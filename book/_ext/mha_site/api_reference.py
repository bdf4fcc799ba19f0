"""The API reference pages: a ``{mha-api}`` block becomes one section per module, by autodoc.

A page lists modules in a ``{mha-api}`` block, one per line; before the page is parsed,
each becomes a section with the module's name as its heading (label ``api-<module>``) and
autodoc's documentation of its public members. Docstrings are read as the library writes
them: a parameter described as just ``B.`` stays text. A class's "Bases" line names public
classes only: a private base (a shared private helper of the library) is replaced by its own
public bases.
"""

from __future__ import annotations

import re
from typing import Any

from sphinx.application import Sphinx

# A ``{mha-api}`` fence of MyST source, its body one module per line.
API_BLOCK = re.compile(r"^```\{mha-api\}[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
# In a docstring's reST: a field (``:param x:``) and a body that starts as a lettered list.
_LETTER_ITEM = re.compile(r"^(\s*)([A-Za-z]{1,2})\.(?=\s|$)")
_FIELD = re.compile(r"^:(param|returns?|raises?)\b[^:]*:\s*")


def api_markdown(modules: list[str]) -> str:
    """MyST text documenting each module: a heading, then autodoc of its public members.

    The top-level package shows only its docstring (its members are documented in the
    submodules that define them).
    """
    parts = []
    for name in modules:
        members = "" if "." not in name else "   :members:\n"
        label = "api-" + name.replace(".", "-").replace("_", "-")
        parts.append(
            f"({label})=\n## `{name}`\n\n```{{eval-rst}}\n.. automodule:: {name}\n{members}```\n"
        )
    return "\n".join(parts)


def api_modules(text: str) -> list[str]:
    """The module names listed in the ``{mha-api}`` blocks of a page, in order."""
    names = []
    for match in API_BLOCK.finditer(text):
        for line in match.group("body").splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith(":"):
                names.append(line)
    return names


def expand_api_blocks(app: Sphinx, docname: str, source: list[str]) -> None:
    """Replace each ``{mha-api}`` block by the generated module sections."""
    if "{mha-api}" not in source[0]:
        return

    def expand(match: re.Match[str]) -> str:
        return api_markdown(api_modules(match.group(0)))

    source[0] = API_BLOCK.sub(expand, source[0])


def keep_letters_as_text(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """A parameter described as just ``B.`` reads "B.", not as a list item lettered B.

    docutils takes a field body that starts with one or two letters and a period for an
    enumerated list (napoleon writes ``:param batch_size:`` and ``B.`` on the next line);
    a backslash keeps the period literal.
    """
    for index, line in enumerate(lines):
        field = _FIELD.match(line)
        if field and line[field.end() :].strip():
            head, rest = line[: field.end()], line[field.end() :]
            lines[index] = head + _LETTER_ITEM.sub(r"\1\2\\.", rest)
        elif index and _FIELD.match(lines[index - 1]) and lines[index - 1].rstrip().endswith(":"):
            lines[index] = _LETTER_ITEM.sub(r"\1\2\\.", line)


def is_private(cls: type) -> bool:
    """Whether ``cls`` is private: its name, or a part of its module's, starts with ``_``."""
    return any(part.startswith("_") for part in (*cls.__module__.split("."), cls.__name__))


def public_bases(bases: tuple[type, ...] | list[type]) -> list[type]:
    """``bases`` with each private class replaced by its public bases, in order, once each."""
    found: list[type] = []
    for base in bases:
        for public in public_bases(base.__bases__) if is_private(base) else [base]:
            if public not in found:
                found.append(public)
    return found


def show_public_bases(app: Sphinx, name: str, obj: type, options: Any, bases: list[type]) -> None:
    """autodoc's "Bases" line of class ``obj``: its public bases only (:func:`public_bases`)."""
    bases[:] = public_bases(bases) or [object]


def setup(app: Sphinx) -> None:
    app.connect("source-read", expand_api_blocks)
    app.connect("autodoc-process-bases", show_public_bases)
    # After napoleon (priority 500) has turned the Google sections into fields.
    app.connect("autodoc-process-docstring", keep_letters_as_text, priority=600)
