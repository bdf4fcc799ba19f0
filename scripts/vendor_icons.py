"""Vendor the site's icons from npm ``@fontawesome/fontawesome-free`` (scripts/node).

Writes ``book/_ext/mha_site/icons.json``: for each icon the site shows (the theme's header and
buttons, drawn inline by ``book/_ext/mha_site/icons.py``, and the theme's pseudo-element icons),
its SVG's ``viewBox`` and path, with the icons' licence line; and, between two marker
comments in ``book/_static/mha-site.css``, the pseudo-element icons as CSS custom properties
(``--mha-icon-NAME``, SVG data URLs that the stylesheet uses as masks). Both are committed,
so a build without Node has the icons; ``tests/test_site_build.py`` checks that they equal
what this script writes from the installed package. Run after changing the icon list or
the package's version:

    python scripts/vendor_icons.py
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "scripts" / "node" / "node_modules" / "@fortawesome" / "fontawesome-free"
OUTPUT = ROOT / "book" / "_ext" / "mha_site" / "icons.json"
STYLESHEET = ROOT / "book" / "_static" / "mha-site.css"
ABOUT = (
    "The site's icons as inline SVG (book/_ext/mha_site/icons.py draws the theme's Font Awesome "
    "elements with them): each icon's viewBox and path, written by scripts/vendor_icons.py."
)
BEGIN, END = "/* Icons as masks: begin (scripts/vendor_icons.py) */", "/* Icons as masks: end */"
# Name as the theme's HTML or CSS asks for it -> Font Awesome 6 style. Names of Font
# Awesome 5 (pencil-alt) are vendored under that name, from the icon they alias.
ICONS = {
    # The theme's header, sidebars and buttons (``<i class="fa-solid fa-...">``).
    "angle-left": "solid",
    "angle-right": "solid",
    "arrow-up": "solid",
    "bars": "solid",
    "book": "solid",
    "chevron-down": "solid",
    "circle-half-stroke": "solid",
    "code": "solid",
    "download": "solid",
    "expand": "solid",
    "file": "solid",
    "file-pdf": "solid",
    "github": "brands",
    "lightbulb": "solid",
    "list": "solid",
    "magnifying-glass": "solid",
    "moon": "solid",
    "outdent": "solid",
    "pencil-alt": "solid",
    "sun": "solid",
    # The theme's CSS icons (``--pst-icon-*``), drawn as masks (CSS_ICONS): admonitions,
    # version notes, search highlights, external links, downloads, the sidebar's title.
    "angle-down": "solid",
    "bell": "solid",
    "circle-exclamation": "solid",
    "circle-info": "solid",
    "circle-xmark": "solid",
    "magnifying-glass-minus": "solid",
    "pencil": "solid",
    "share": "solid",
    "triangle-exclamation": "solid",
    "up-right-from-square": "solid",
}
CSS_ICONS = (
    "angle-down",
    "angle-right",
    "bell",
    "circle-exclamation",
    "circle-info",
    "circle-xmark",
    "download",
    "github",
    "lightbulb",
    "magnifying-glass-minus",
    "pencil",
    "share",
    "triangle-exclamation",
    "up-right-from-square",
)
_SVG = re.compile(
    r'<svg xmlns="http://www.w3.org/2000/svg" viewBox="(?P<viewBox>[0-9 ]+)">'
    r"<!--! (?P<licence>.*?) --><path d=\"(?P<path>[^\"]+)\"/></svg>"
)


def icon_file(name: str, style: str, package: Path) -> Path:
    """The SVG file of ``name`` (a Font Awesome 6 name or an alias of one)."""
    families = json.loads((package / "metadata" / "icon-families.json").read_text("utf8"))
    for icon, data in families.items():
        if name == icon or name in (data.get("aliases") or {}).get("names", []):
            return package / "svgs" / style / f"{icon}.svg"
    raise ValueError(f"no Font Awesome icon is named {name!r}")


def vendored_icons(package: Path = PACKAGE) -> dict:
    """The vendored file's content: the package's version, the licence line and the icons."""
    version = json.loads((package / "package.json").read_text("utf8"))["version"]
    icons, licences = {}, set()
    for name, style in sorted(ICONS.items()):
        svg = icon_file(name, style, package).read_text("utf8").strip()
        found = _SVG.fullmatch(svg)
        if found is None:
            raise ValueError(f"unexpected SVG for {name}: {svg[:200]}")
        licences.add(found["licence"])
        icons[name] = {"style": style, "viewBox": found["viewBox"], "path": found["path"]}
    if len(licences) != 1:
        raise ValueError(f"the icons carry different licence lines: {sorted(licences)}")
    return {
        # The file's first key (the keys are sorted) says what it is, as a comment would.
        "about": ABOUT,
        "source": f"npm @fortawesome/fontawesome-free@{version}, svgs/",
        "licence": licences.pop(),
        "icons": icons,
    }


def icons_json(package: Path = PACKAGE) -> str:
    return json.dumps(vendored_icons(package), indent=1, sort_keys=True) + "\n"


def svg_data_url(icon: dict) -> str:
    """An icon as a ``data:`` URL (its shape only: a mask takes no colour)."""
    svg = (
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='{icon['viewBox']}'>"
        f"<path d='{icon['path']}'/></svg>"
    )
    return "data:image/svg+xml," + svg.replace("<", "%3C").replace(">", "%3E")


def mask_block(vendored: dict) -> str:
    """The stylesheet's block of icon custom properties, between the markers."""
    lines = [BEGIN, f"/* {vendored['licence']} */", ":root {"]
    for name in CSS_ICONS:
        lines.append(f'  --mha-icon-{name}: url("{svg_data_url(vendored["icons"][name])}");')
    return "\n".join([*lines, "}", END])


def stylesheet_with_masks(stylesheet: str, vendored: dict) -> str:
    """``stylesheet`` with its block of icon custom properties replaced (or appended)."""
    block = mask_block(vendored)
    found = re.search(re.escape(BEGIN) + ".*?" + re.escape(END), stylesheet, re.S)
    if found is None:
        return stylesheet.rstrip("\n") + "\n" + block + "\n"
    return stylesheet[: found.start()] + block + stylesheet[found.end() :]


def main() -> int:
    if not PACKAGE.is_dir():
        print(f"{PACKAGE} is missing: run `make node`", file=sys.stderr)
        return 1
    OUTPUT.write_text(icons_json(), encoding="utf8")
    css = STYLESHEET.read_text(encoding="utf8")
    STYLESHEET.write_text(stylesheet_with_masks(css, vendored_icons()), encoding="utf8")
    print(
        f"wrote {OUTPUT.relative_to(ROOT)} ({len(ICONS)} icons) and the masks in {STYLESHEET.name}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
