"""The modules of ``mha``, found from its source files (a helper of the tests, not a test).

A package's ``__init__.py`` is the package's module; a module or package whose name starts
with ``_`` is private, and so is everything inside a private package.
"""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "mha"


def module_files(src: Path = SRC) -> dict[str, Path]:
    """Every module of the package at ``src``, by dotted name, to its file."""
    out = {}
    for path in sorted(src.rglob("*.py")):
        parts = (src.name, *path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def public_modules(src: Path = SRC) -> list[str]:
    """The dotted names of the public modules and packages of the package at ``src``."""
    return [
        name
        for name in module_files(src)
        if not any(part.startswith("_") for part in name.split("."))
    ]
