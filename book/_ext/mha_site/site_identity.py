"""Where the site lives and how it is named: its address for Open Graph, its icon at the root.

The address comes from ``repository.url`` in ``_config.yml`` (the one place that names the
repository): ``https://github.com/OWNER/REPO`` is published at ``https://OWNER.github.io/REPO/``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

from .files import copy_if_changed


def pages_url(repository_url: str) -> str:
    """The GitHub Pages address of a GitHub repository: ``https://OWNER.github.io/REPO/``.

    Raises:
        ValueError: if ``repository_url`` is not ``https://github.com/OWNER/REPO``.
    """
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?", repository_url)
    if not match:
        raise ValueError(
            f"repository.url must be https://github.com/OWNER/REPO; got {repository_url!r}"
        )
    owner, repo = match.groups()
    if repo.lower() == f"{owner.lower()}.github.io":
        return f"https://{owner.lower()}.github.io/"
    return f"https://{owner.lower()}.github.io/{repo}/"


def set_site_url(app: Sphinx, config: Any) -> None:
    """Derive the site's address (Open Graph) from ``repository.url`` unless it is set."""
    url = (config.html_theme_options or {}).get("repository_url", "")
    if url and not getattr(config, "ogp_site_url", ""):
        config.ogp_site_url = pages_url(url)
    if getattr(config, "ogp_site_name", False) is None:
        config.ogp_site_name = config.html_title


def favicon_at_the_root(app: Sphinx, exception: Exception | None) -> None:
    """Copy the site's icon (``html_favicon``, linked in every page's head) to the site's root
    as ``favicon.ico``, where browsers look for it on pages that do not name one."""
    if exception is not None or app.builder.name != "html" or not app.config.html_favicon:
        return
    icon = Path(app.outdir) / "_static" / Path(app.config.html_favicon).name
    if icon.is_file():
        copy_if_changed(icon, Path(app.outdir) / "favicon.ico")


def setup(app: Sphinx) -> None:
    app.connect("config-inited", set_site_url)
    app.connect("build-finished", favicon_at_the_root)
