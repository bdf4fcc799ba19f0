"""Every public function, method and class of ``mha`` documents what book/api.md promises.

book/api.md says the docstrings follow the PyTorch/Google layout (Args, Shape, Returns,
Raises). This walks the public API of every public module (its own functions and classes,
and their public methods) and fails on a missing section:

- ``Args:`` when the callable takes arguments (for a class: its constructor's; a dataclass
  may say ``Attributes:`` instead);
- ``Returns:`` when it returns a value (``Yields:`` for a generator or context manager);
- ``Raises:`` when its own body raises or calls a ``check...`` function;
- ``Shape:`` when an argument or the result is annotated as an array or tensor;

and on a section given twice.

Properties are documented as attributes (one line) and are not walked.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from package import public_modules

SRC = Path(__file__).resolve().parents[1] / "src" / "mha"
ARRAY_ANNOTATION = re.compile(r"\b(ndarray|Tensor|Array)\b")
SECTION = re.compile(r"^\s*(Args|Attributes|Shape|Returns|Yields|Raises):", re.M)


def public_callables() -> Iterator[tuple[str, Any]]:
    """``(qualified name, object)`` for every public function, class and method of mha."""
    for name in public_modules():
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if attr.startswith("_") or getattr(obj, "__module__", None) != name:
                continue
            if inspect.isfunction(obj):
                yield f"{name}.{attr}", obj
            elif inspect.isclass(obj):
                yield f"{name}.{attr}", obj
                for meth_name, meth in vars(obj).items():
                    if meth_name.startswith("_") or isinstance(meth, property):
                        continue
                    func = meth.__func__ if isinstance(meth, classmethod | staticmethod) else meth
                    if inspect.isfunction(func):
                        yield f"{name}.{attr}.{meth_name}", func


def _body(func: Callable[..., Any]) -> ast.FunctionDef | None:
    """The function's own AST (decorators unwrapped), or None without source."""
    func = inspect.unwrap(func)
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None
    node = ast.parse(source).body[0]
    return node if isinstance(node, ast.FunctionDef) else None


def _own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function body, not descending into nested functions or classes."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        yield child
        yield from _own_nodes(child)


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")


def required_sections(obj: Any) -> set[str]:
    """The sections ``obj``'s docstring must have."""
    func = obj.__init__ if inspect.isclass(obj) else obj
    if inspect.isclass(obj) and func is object.__init__:
        return set()
    sig = inspect.signature(func)
    params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
    needed = {"Args"} if params else set()
    if inspect.isclass(obj):
        return needed
    node = _body(obj)
    own = list(_own_nodes(node)) if node is not None else []
    annotation = str(sig.return_annotation)
    if any(isinstance(n, ast.Yield | ast.YieldFrom) for n in own):
        needed.add("Yields")
    elif any(isinstance(n, ast.Return) and n.value is not None for n in own) or annotation not in (
        "None",
        str(inspect.Signature.empty),
    ):
        needed.add("Returns")
    checks = any(
        isinstance(n, ast.Call) and _call_name(n).lstrip("_").startswith("check") for n in own
    )
    if checks or any(isinstance(n, ast.Raise) for n in own):
        needed.add("Raises")
    annotations = [str(p.annotation) for p in params] + [annotation]
    if any(ARRAY_ANNOTATION.search(a) for a in annotations):
        needed.add("Shape")
    return needed


def present_sections(obj: Any) -> set[str]:
    sections = set(SECTION.findall(inspect.getdoc(obj) or ""))
    if "Attributes" in sections:
        sections.add("Args")  # a dataclass lists its fields as attributes
    return sections


CALLABLES = dict(public_callables())


def test_the_walk_finds_the_public_api() -> None:
    """Guard the walk itself: it must see functions, classes and methods of every kind."""
    assert len(CALLABLES) > 120
    for name in (
        "mha.backends.torch_backend.multi_head_attention",
        "mha.core.params.MHAParams",
        "mha.core.params.MHAParams.from_qkv",
        "mha.backends.module.MultiHeadAttention.forward",
        "mha.backends.cpu_shortcuts.use",
    ):
        assert name in CALLABLES, name
    assert "mha.core.params.MHAParams.d_model" not in CALLABLES  # a property
    assert required_sections(CALLABLES["mha.backends.cpu_shortcuts.use"]) >= {
        "Args",
        "Yields",
    }
    assert required_sections(CALLABLES["mha.backends.np_backend.softmax"]) == {
        "Args",
        "Returns",
        "Raises",
        "Shape",
    }


@pytest.mark.parametrize("name", sorted(CALLABLES))
def test_public_docstring_has_the_promised_sections(name: str) -> None:
    obj = CALLABLES[name]
    assert inspect.getdoc(obj), f"{name} has no docstring"
    missing = required_sections(obj) - present_sections(obj)
    assert not missing, f"{name} docstring lacks {sorted(missing)}"
    found = SECTION.findall(inspect.getdoc(obj))
    repeated = sorted({section for section in found if found.count(section) > 1})
    assert not repeated, f"{name} docstring has more than one {repeated} section"
