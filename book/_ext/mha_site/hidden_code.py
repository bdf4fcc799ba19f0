"""The code of a page's hidden cell inputs, loaded only when the reader opens one.

A chapter's hidden inputs (``hide-input``: the code behind a figure or a computed paragraph)
are closed until the reader opens them, yet they can make up half of the page's HTML. On the
site (the ``html`` builder) their code moves to ``_static/hidden-code/<page>.js``, and
``_static/mha-hidden-code.js`` puts each block back when its toggle is first opened.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

from . import html_edit

HIDDEN_CODE_DIR = "_static/hidden-code"  # one script with the list of code blocks per page
HIDDEN_INPUT_CLASS = "admonition hide above-input"  # myst-nb's <details> of a hidden input
CELL_INPUT_CLASS = "cell_input docutils container"  # a code cell's input, in that <details>


def take_hidden_code(body: str, url: str) -> tuple[str, list[str]]:
    """``body`` with the code of every hidden cell input moved out, and that code.

    Each hidden input's code is replaced by an empty placeholder that names ``url`` (a script
    with the list of the code blocks) and its index there; ``mha-hidden-code.js`` fills it in
    when its toggle is first opened.
    """
    codes: list[str] = []
    if HIDDEN_INPUT_CLASS not in body:
        return body, codes  # (without parsing the page)
    edits = []
    for hidden in html_edit.find(html_edit.parse(body), "details", class_=HIDDEN_INPUT_CLASS):
        cell = next(html_edit.find(hidden.descendants(), "div", class_=CELL_INPUT_CLASS), None)
        if cell is None:
            continue
        codes.append(cell.inner(body))
        placeholder = (
            f'<div class="{CELL_INPUT_CLASS}" data-mha-code="{html.escape(url)}" '
            f'data-mha-index="{len(codes) - 1}"></div>'
        )
        edits.append((cell.start, cell.end, placeholder))
    return html_edit.splice(body, edits), codes


def hidden_code_script(url: str, codes: list[str]) -> str:
    """The file of a page's hidden code: a script that hands the list to mha-hidden-code.js
    under the ``url`` the page names it by. A script (not JSON fetched by the page) so that it
    also loads from ``file://``."""
    payload = json.dumps(codes, separators=(",", ":")).replace("</", "<\\/")
    return f"window.mhaHiddenCode({json.dumps(url)},{payload});\n"


def hidden_code_loaded_when_shown(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:
    """Write the page's hidden code to ``_static/hidden-code/<page>.js`` (see
    :func:`take_hidden_code`) and give the page the script that loads it (site only)."""
    if app.builder.name != "html" or "body" not in context:
        return
    name = pagename.replace("/", "__") + ".js"
    url = "../" * pagename.count("/") + f"{HIDDEN_CODE_DIR}/{name}"
    context["body"], codes = take_hidden_code(context["body"], url)
    if codes:
        folder = Path(app.outdir) / HIDDEN_CODE_DIR
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(hidden_code_script(url, codes), encoding="utf8")
        app.add_js_file("mha-hidden-code.js", loading_method="defer")


def setup(app: Sphinx) -> None:
    app.connect("html-page-context", hidden_code_loaded_when_shown)
