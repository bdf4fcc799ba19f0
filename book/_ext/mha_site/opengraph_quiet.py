"""sphinxext-opengraph without its note about matplotlib while social cards are off.

sphinxext-opengraph prints "matplotlib is not installed, social cards will not be generated"
when it is imported without matplotlib, whether or not social cards are on. The book has them
off (``ogp_social_cards`` in ``_config.yml``) and no matplotlib. Listed before
``sphinxext.opengraph`` among the extensions, this module imports it with that one line held
back, and warns as Sphinx does, with the same words, only if social cards are switched on
without matplotlib.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import sys
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

logger = logging.getLogger(__name__)

OPENGRAPH = "sphinxext.opengraph"
NOTE = "matplotlib is not installed, social cards will not be generated"


def import_quietly(module: str = OPENGRAPH, note: str = NOTE) -> str:
    """Import ``module`` with the lines it prints that are ``note`` held back.

    Returns:
        What else it printed (also printed, as it was).
    """
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        importlib.import_module(module)
    rest = "".join(
        line for line in printed.getvalue().splitlines(keepends=True) if line.strip() != note
    )
    sys.stdout.write(rest)
    return rest


def social_cards_wanted(app: Sphinx, config: Config) -> None:
    """Warn, as sphinxext-opengraph would have, if social cards are on without matplotlib."""
    cards = getattr(config, "ogp_social_cards", None) or {}
    if cards.get("enable", True) is not False and importlib.util.find_spec("matplotlib") is None:
        logger.warning(NOTE)


def setup(app: Sphinx) -> dict[str, Any]:
    import_quietly()
    app.connect("config-inited", social_cards_wanted)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
