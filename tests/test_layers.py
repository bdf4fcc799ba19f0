"""The package's groups are layers: no import cycle, and no module imports a higher group.

Walks the source of every module of ``mha`` (an AST walk: imports inside functions count,
as they run as surely as the others, only later) and builds the graph of which module
imports which. Two checks hold on it:

- it has no cycle, so every module can be read, tested and imported after the ones it uses;
- a module of a group imports only modules of its own group or of a group listed before it
  in :data:`LAYERS`, the order the package docstring gives.

The checker itself is tested on a small package written to ``tmp_path``, with a planted
cycle through a function-level import and a planted upward import.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from package import SRC, module_files

import mha

LAYERS = (
    "core",
    "backends",
    "numerics",
    "cost",
    "detectors",
    "analysis",
    "models",
    "training",
    "display",
)


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement of ``module`` names (modules or attributes)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the package of ``module``
        parts = module.split(".")
        anchor = parts if is_package else parts[:-1]
        anchor = anchor[: len(anchor) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def import_graph(src: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, at any depth of its code."""
    files = module_files(src)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for name in _imported(node, module, is_package):
                    if name in files and name != module:
                        targets.add(name)
        # ``from pkg.group import module`` names the module, not (only) the package
        graph[module] = {t for t in targets if not any(o.startswith(t + ".") for o in targets)}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """A cycle of imports ``[a, b, ..., a]``, or ``[]`` if there is none."""
    state: dict[str, str] = {}  # "open" while on the path, "done" after

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, nxt])):
                return cycle
        state[node] = "done"
        return []

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return []


def group_of(module: str) -> str | None:
    """The group (the subpackage under the top package) of a module; None for the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def upward_imports(graph: dict[str, set[str]], layers: tuple[str, ...]) -> list[str]:
    """Every import of a module of a group listed after the importer's group."""
    rank = {group: i for i, group in enumerate(layers)}
    found = []
    for module, targets in sorted(graph.items()):
        low = group_of(module)
        for target in sorted(targets):
            high = group_of(target)
            if low is not None and high is not None and rank[high] > rank[low]:
                found.append(f"{module} ({low}) imports {target} ({high})")
    return found


def test_every_module_of_mha_is_in_one_of_the_layers() -> None:
    groups = {group_of(module) for module in module_files(SRC)} - {None}
    assert groups == set(LAYERS)


def test_mha_has_no_import_cycle_even_through_function_level_imports() -> None:
    assert find_cycle(import_graph(SRC)) == []


def test_no_module_of_mha_imports_a_module_of_a_higher_group() -> None:
    assert upward_imports(import_graph(SRC), LAYERS) == []


def test_the_package_docstring_lists_the_layers_in_their_order() -> None:
    listed = re.findall(r"^\d\. :mod:`mha\.(\w+)`", mha.__doc__, re.M)
    assert tuple(listed) == LAYERS


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf8")
    return root / "pkg"


def test_the_checker_finds_a_cycle_through_a_function_level_import(tmp_path) -> None:
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "",
            "pkg/low/a.py": "def f():\n    from pkg.high import b\n    return b\n",
            "pkg/low/c.py": "from . import a\n",
            "pkg/high/__init__.py": "",
            "pkg/high/b.py": "from pkg.low.a import f\n",
        },
    )
    graph = import_graph(src)
    assert graph["pkg.low.a"] == {"pkg.high.b"}
    assert graph["pkg.low.c"] == {"pkg.low.a"}  # a relative import resolves too
    assert find_cycle(graph) == ["pkg.high.b", "pkg.low.a", "pkg.high.b"]
    assert upward_imports(graph, ("low", "high")) == ["pkg.low.a (low) imports pkg.high.b (high)"]


def test_the_checker_passes_a_package_without_cycles_or_upward_imports(tmp_path) -> None:
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.low import a\n",
            "pkg/low/__init__.py": "",
            "pkg/low/a.py": "import math\n",
            "pkg/high/__init__.py": "",
            "pkg/high/b.py": "def f():\n    import pkg.low.a\n",
        },
    )
    graph = import_graph(src)
    assert graph["pkg.high.b"] == {"pkg.low.a"}
    assert find_cycle(graph) == []
    assert upward_imports(graph, ("low", "high")) == []
