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


def _imported(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: set[str]
) -> set[str]:
    """The modules of ``modules`` one import statement of ``module`` loads.

    Each name the statement imports resolves to the most specific module that exists:
    ``import a.b`` and ``from a import b`` name the module ``a.b`` if there is one, else
    the package ``a`` (``b`` is then one of its attributes). The filter is per name of one
    statement, so ``from a import B`` is an edge to ``a`` even where another statement of
    the module imports ``a.c``.
    """
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the package of ``module``
            parts = module.split(".")
            anchor = parts if is_package else parts[:-1]
            anchor = anchor[: len(anchor) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        names = [f"{base}.{alias.name}" if base else alias.name for alias in node.names]
    found = set()
    for name in names:
        parts = name.split(".")
        prefixes = (".".join(parts[:n]) for n in range(len(parts), 0, -1))
        if (target := next((p for p in prefixes if p in modules), None)) is not None:
            found.add(target)
    return found


LAZY = "_NEEDS_TORCH"  # name -> (module, attribute), imported with importlib on first use


def _lazy_imports(tree: ast.Module) -> set[str]:
    """The modules a module-level ``_NEEDS_TORCH`` dict names: imports an AST walk of
    ``import`` statements cannot see, as ``importlib.import_module`` takes them as strings."""
    found = set()
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == LAZY for t in targets):
                found |= {module for module, _ in ast.literal_eval(node.value).values()}
    return found


def import_graph(src: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, at any depth of its code."""
    files = module_files(src)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf8"))
        targets = {name for name in _lazy_imports(tree) if name in files}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets |= _imported(node, module, is_package, set(files))
        graph[module] = targets - {module}
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


def test_no_module_of_mha_imports_the_top_package() -> None:
    # ``mha`` re-exports names of its modules; a module that imports them back from
    # ``mha`` closes a cycle through the package's ``__init__``
    graph = import_graph(SRC)
    top = SRC.name
    assert sorted(module for module, targets in graph.items() if top in targets) == []


def test_the_top_package_imports_its_lazy_names_modules() -> None:
    graph = import_graph(SRC)
    assert "mha.core.params" in graph["mha"]
    assert "mha.backends.module" in graph["mha"]  # through importlib, on first use


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


def test_the_checker_finds_a_cycle_through_the_top_package(tmp_path) -> None:
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.low.a import f\nX = 1\n",
            "pkg/low/__init__.py": "",
            "pkg/low/a.py": (
                "import math\nfrom pkg.low import b\n\n\n"
                "def f():\n    from pkg import X\n    return X\n"
            ),
            "pkg/low/b.py": "",
        },
    )
    graph = import_graph(src)
    assert graph["pkg.low.a"] == {"pkg", "pkg.low.b"}  # the edge to ``pkg`` is kept
    assert find_cycle(graph) == ["pkg", "pkg.low.a", "pkg"]


def test_the_checker_sees_modules_named_in_a_lazy_import_table(tmp_path) -> None:
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": f"{LAZY} = {{'F': ('pkg.low.a', 'f')}}\n",
            "pkg/low/__init__.py": "",
            "pkg/low/a.py": "def f():\n    import pkg\n",
        },
    )
    graph = import_graph(src)
    assert graph["pkg"] == {"pkg.low.a"}
    assert find_cycle(graph) == ["pkg", "pkg.low.a", "pkg"]
