"""Valid, named HTML where the stack writes otherwise: code toggles, bibliography, sidebar.

Each element is written right in the first place, by the HTML writer of its node or by the
theme's own code:

- myst-nb's "Show code cell source" toggles: ``<span>``\\s in the ``<summary>`` (HTML allows
  no paragraphs there; the Nu HTML checker reports them), and no ``aria-label`` "Toggle
  hidden content", a name that does not contain the visible label (WCAG 2.5.3).
- Bibliography entries: ``role="listitem"`` of their ``role="list"``, not docutils'
  ``doc-biblioentry``, a role DPUB-ARIA 1.1 deprecates (a list without items to assistive
  technology).
- The sidebar's sub-page toggles, a ``<summary>`` holding only a chevron: named after the
  page whose sub-pages they show.
"""

from __future__ import annotations

import functools
from html import escape
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError


def visit_code_toggle(translator: Any, node: nodes.Element) -> None:
    """Open a hidden code cell's ``<details>`` and write its ``<summary>`` (myst-nb's
    ``HideCodeCellNode``) with the show and hide labels as spans, named by their text."""
    classes = " ".join(node["classes"])
    translator.body.append(f'<details class="admonition hide {classes}">\n')
    translator.body.append("<summary>\n")
    for state, prompt in (("collapsed", "prompt_show"), ("expanded", "prompt_hide")):
        label = escape(node[prompt])
        translator.body.append(f'<span class="{state} admonition-title">{label}</span>\n')
    translator.body.append("</summary>\n")


def depart_code_toggle(translator: Any, node: nodes.Element) -> None:
    translator.body.append("</details>\n")


def visit_citation(translator: Any, node: nodes.citation) -> None:
    """A bibliography entry as docutils writes it, with ``role="listitem"``; a run of them is
    one ``role="list"`` (docutils' ``depart_citation`` closes it)."""
    if not isinstance(node.previous_sibling(), type(node)):
        translator.body.append('<div role="list" class="citation-list">\n')
    translator.body.append(
        translator.starttag(node, "div", classes=[node.tagname], role="listitem")
    )


def named_toggles(add_toggles: Any) -> Any:
    """``add_toggles`` (the theme's ``add_collapse_checkboxes``), then name every toggle.

    The theme puts a page's sub-pages in the sidebar under a ``<summary>`` holding only a
    chevron, which a screen reader announces without a name (axe's ``summary-name``). Each
    such toggle is named after the page whose sub-pages it shows.
    """

    @functools.wraps(add_toggles)
    def add_and_name(soup: Any) -> None:
        add_toggles(soup)
        for summary in soup.select("li.has-children > details > summary"):
            if not summary.get_text(strip=True) and not summary.get("aria-label"):
                link = summary.find_parent("li").find("a", recursive=False)
                title = link.get_text(" ", strip=True) if link else "this section"
                summary["aria-label"] = f"Pages of {title}"

    return add_and_name


def name_sidebar_toggles(app: Sphinx) -> None:
    """Name the sidebar's sub-page toggles (see :func:`named_toggles`).

    Raises:
        ExtensionError: if the theme no longer has the function that writes them.
    """
    try:
        from pydata_sphinx_theme import toctree
    except ImportError:
        return
    if not hasattr(toctree, "add_collapse_checkboxes"):
        raise ExtensionError("pydata_sphinx_theme.toctree has no add_collapse_checkboxes")
    if not getattr(toctree.add_collapse_checkboxes, "__wrapped__", None):
        toctree.add_collapse_checkboxes = named_toggles(toctree.add_collapse_checkboxes)


def setup(app: Sphinx) -> None:
    from myst_nb.sphinx_ import HideCodeCellNode

    app.add_node(HideCodeCellNode, override=True, html=(visit_code_toggle, depart_code_toggle))
    # None: docutils' own depart_citation, which closes the list after the last entry.
    app.add_node(nodes.citation, override=True, html=(visit_citation, None))
    app.connect("builder-inited", name_sidebar_toggles)
