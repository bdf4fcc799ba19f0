"""The pages of the book's ``_toc.yml``, shared by the structure, chapter, site and
browser tests."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def toc_entries(toc: dict) -> list[str]:
    """Every ``file`` of a Jupyter Book table of contents (root first), in reading order.

    Entries are returned without a ``.md`` suffix, as ``book/<stem>``.
    """
    entries = [toc["root"]]

    def walk(items: list[dict]) -> None:
        for item in items:
            if "file" in item:
                entries.append(item["file"])
            for key in ("chapters", "sections", "parts"):
                walk(item.get(key, []))

    walk(toc.get("parts", []))
    walk(toc.get("chapters", []))
    return [entry.removesuffix(".md") for entry in entries]


def toc_pages(root: Path = ROOT) -> list[str]:
    """The pages of ``root/_toc.yml`` as ``book/<stem>`` paths, root first."""
    return toc_entries(yaml.safe_load((root / "_toc.yml").read_text(encoding="utf8")))


def toc_sections(page: str, root: Path = ROOT) -> list[str]:
    """The pages listed as ``sections`` of the ``_toc.yml`` entry ``page`` (``book/<stem>``),
    in reading order, as ``book/<stem>`` paths (nested sections included)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf8"))

    def find(items: list[dict]) -> dict | None:
        for item in items:
            if item.get("file", "").removesuffix(".md") == page:
                return item
            for key in ("chapters", "sections", "parts"):
                found = find(item.get(key, []))
                if found is not None:
                    return found
        return None

    entry = find(toc.get("parts", []) + toc.get("chapters", []))
    if entry is None:
        raise ValueError(f"_toc.yml has no entry {page!r}")
    return toc_entries({"root": page, "chapters": entry.get("sections", [])})[1:]


def toc_part(caption: str, root: Path = ROOT) -> list[str]:
    """The pages of the ``_toc.yml`` part captioned ``caption``, as ``book/<stem>`` paths, in
    reading order (sections included)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf8"))
    for part in toc.get("parts", []):
        if part.get("caption") == caption:
            return toc_entries({"root": "", "chapters": part.get("chapters", [])})[1:]
    raise ValueError(f"_toc.yml has no part captioned {caption!r}")
