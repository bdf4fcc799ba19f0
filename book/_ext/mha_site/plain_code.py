"""Highlighted code without the markup of tokens that both code styles draw as plain text.

Names, punctuation and whitespace make up a third of a chapter page's HTML when each is a
``<span class="n">``, and neither of the theme's code styles (light and dark) draws them in
another colour than the code's own. The HTML builders highlight code with
:class:`PlainTokensFormatter`, which writes those tokens as plain text: the page shows the
same code with fewer nodes to parse and lay out.
"""

from __future__ import annotations

import functools
from typing import Any

from pygments.formatters import HtmlFormatter
from pygments.token import STANDARD_TYPES, Token
from sphinx.application import Sphinx

# Pygments token classes that may be drawn as plain text (names, punctuation, whitespace),
# when both of the theme's code styles (light and dark) draw them in the code's own colour.
PLAIN_TOKEN_CANDIDATES = frozenset({"n", "nn", "nx", "p", "pm", "w"})
STYLE_OPTIONS = ("pygments_light_style", "pygments_dark_style")  # the theme's two code styles


@functools.lru_cache
def plain_token_classes(style_names: tuple[str, ...]) -> frozenset[str]:
    """The candidate token classes that every one of the pygments styles draws as plain text:
    in the style's text colour, not bold, italic, underlined, boxed or on a background."""
    from pygments.styles import get_style_by_name
    from pygments.util import ClassNotFound

    plain = set(PLAIN_TOKEN_CANDIDATES)
    types = {name: ttype for ttype, name in STANDARD_TYPES.items()}
    for name in style_names:
        try:
            style = get_style_by_name(name)
        except ClassNotFound:
            return frozenset()
        text = style.style_for_token(Token.Text)
        for cls in list(plain):
            token = style.style_for_token(types[cls])
            marks = ("bold", "italic", "underline", "bgcolor", "border")
            if token["color"] != text["color"] or any(token[mark] for mark in marks):
                plain.discard(cls)
    return frozenset(plain)


class PlainTokensFormatter(HtmlFormatter):
    """Pygments' HTML formatter, with the tokens of the types ``plain_types`` written as
    text (as ``Token.Text``, which has no class and so no ``<span>``)."""

    plain_types: frozenset[Any] = frozenset()

    def format(self, tokensource: Any, outfile: Any) -> Any:
        plain = self.plain_types
        tokens = ((Token.Text if kind in plain else kind, text) for kind, text in tokensource)
        return super().format(tokens, outfile)


def plain_tokens_formatter(classes: frozenset[str]) -> type[PlainTokensFormatter]:
    """A :class:`PlainTokensFormatter` that writes the tokens of these classes as text."""
    types = frozenset(ttype for ttype, name in STANDARD_TYPES.items() if name in classes)
    return type("PlainTokensFormatter", (PlainTokensFormatter,), {"plain_types": types})


def theme_code_styles(app: Sphinx) -> tuple[str, ...] | None:
    """The theme's light and dark code styles (its options ``pygments_light_style`` and
    ``pygments_dark_style``, as the pages' context has them), or None if it has not both."""
    theme = getattr(app.builder, "theme", None)
    if theme is None:
        return None
    defaults = theme.get_options()
    chosen = getattr(app.builder, "theme_options", None) or {}
    styles = tuple(chosen.get(key) or defaults.get(key) for key in STYLE_OPTIONS)
    return styles if all(styles) else None


def highlight_plain_tokens(app: Sphinx) -> None:
    """Make the HTML builders' highlighters write plain tokens as text (see the module)."""
    styles = theme_code_styles(app)
    plain = plain_token_classes(styles) if styles else frozenset()
    if not plain:
        return
    formatter = plain_tokens_formatter(plain)
    for name in ("highlighter", "dark_highlighter"):
        bridge = getattr(app.builder, name, None)
        if bridge is not None and getattr(bridge, "formatter", None) is HtmlFormatter:
            bridge.formatter = formatter


def setup(app: Sphinx) -> None:
    app.connect("builder-inited", highlight_plain_tokens)
