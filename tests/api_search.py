"""The machinery of the search over the public API (a helper of the tests, not a test).

``tests/api_cases.py`` gives one valid call per public callable of the modules that measure
heads, and a check of its result. This module derives, from each callable's signature and
docstring, how each argument may go wrong (:func:`mutations`), runs a call and says what
happened (:func:`outcome`), and judges it (:func:`judge`):

- a *bad* argument (a wrong type, NaN or infinity, ``True`` for a size, ``None`` where the
  signature does not allow it) must be refused by mha's own ``ValueError`` or ``TypeError``,
  raised on a ``raise`` line of the package, whose message names the argument;
- the *same* argument in another form (a NumPy integer for an int, a tensor or a list for an
  array) must give exactly the valid call's result, or (where the docstring does not promise
  that form) mha's own error naming it;
- an *unusual* argument (zero, negative or huge sizes, an empty batch, float32) must give
  mha's own error naming it, or a result that the case's check confirms;
- *grouped-query* parameters (``num_kv_heads < num_heads``) must give the result of the
  per-head computation, the same call on :func:`mha.core.params.repeat_kv_heads` of them;

and a refused call must leave the state it could change (a cache, a store) as it was.
"""

from __future__ import annotations

import dataclasses
import inspect
import linecache
import math
import re
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import torch

import mha
from mha.core.params import MHAParams, init_params

MHA_DIR = Path(mha.__file__).parent

# Parameters whose integers may be negative (offsets); every other int is a size, a count,
# an index or a seed, which a negative value breaks.
SIGNED = {"offset", "offsets"}
# Counts of repeated work (rounds, steps, calls): a huge one is valid and runs for ever, so
# the search does not try it.
WORK = {"repeat", "number", "warmup", "steps", "calls", "rounds", "num_blocks", "min_time"}


@dataclasses.dataclass
class Case:
    """One public callable: a valid call, and how to check a result.

    Attributes:
        fn: the callable (a method as its function; the object is the argument ``self``).
        build: ``build(rng)`` -> the valid arguments by name (``self`` for a method).
        check: ``check(args, result)`` asserts that ``result`` is right for ``args``; with
            ``any_args`` it can judge any accepted arguments, not only the valid ones.
        run: whether calls that may be accepted run here (False for timings, training in
            worker processes and files written: only refusals are tried).
        any_args: see ``check``.
        kinds: argument -> kind, where the value's type does not say it.
        fixed: arguments never changed (objects built for the call).
        gqa: for ``params``: ``"per_head"`` (the default: grouped-query parameters give the
            per-head computation's result) or ``"refuse"`` (refused, naming ``num_kv_heads``
            or ``params``); ``gqa_tol`` the tolerance of that comparison.
        nan_params: the expectation for parameters holding NaN (``"bad"`` unless the callable
            only moves blocks around).
        state: ``state(args)`` -> what a refused call must leave unchanged.
        names: other names a message may give an argument (``{"x": ["query"]}``).
        moves: the callable moves values without computing with them (a transpose, a
            container): NaN and infinity in, NaN and infinity out, is its right answer.
        deterministic: False for timings, whose results differ from call to call (then
            results are compared by their structure only).
        allow: ``"arg:label"`` -> why a mutation the rules call bad is accepted here
            (documented by the callable); it is then judged as unusual.
        documented: other exceptions the callable's ``Raises:`` names (a package that is
            not installed), accepted like mha's ValueError and TypeError.
    """

    fn: Callable[..., Any]
    build: Callable[[np.random.Generator], dict[str, Any]]
    check: Callable[[dict[str, Any], Any], None] | None = None
    run: bool = True
    any_args: bool = False
    kinds: dict[str, str] = dataclasses.field(default_factory=dict)
    fixed: tuple[str, ...] = ()
    gqa: str = "per_head"
    gqa_tol: float = 0.0
    nan_params: str = "bad"
    state: Callable[[dict[str, Any]], Any] | None = None
    names: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    moves: bool = False
    deterministic: bool = True
    allow: dict[str, str] = dataclasses.field(default_factory=dict)
    documented: tuple[type[BaseException], ...] = ()


@dataclasses.dataclass(frozen=True)
class Mutation:
    """One argument replaced: its name, a label, the change, and what must happen.

    ``error`` is the class a refusal must have: ``TypeError`` for a value of the wrong kind
    (a string, a bool, a float for an int), ``ValueError`` for a wrong value of the right
    kind (NaN, infinity, a negative size); ``None`` when either fits.
    """

    arg: str
    label: str
    change: Callable[[Any], Any]
    expect: str  # "bad", "same", "same_or_error", "either", "gqa"
    error: type[Exception] | None = None


# The kinds whose wrong values have one class of error: a number, a flag, an array, a list.
# (A string option refused may say "must be one of", a ValueError, whatever its type.)
STRICT = {"int", "float", "bool", "array", "tensor", "params", "seq"}
KIND_ERRORS = {"str": TypeError, "bytes": TypeError, "bool": TypeError, "np.bool_": TypeError,
               "dict": TypeError, "nan": ValueError, "inf": ValueError}  # fmt: skip


# ---- reading signatures and docstrings -----------------------------------------------------


def parameters(fn: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    """The parameters of ``fn`` (a class: of its constructor), ``self`` included for methods."""
    target = fn.__init__ if inspect.isclass(fn) else fn
    params = dict(inspect.signature(target).parameters)
    if inspect.isclass(fn):
        params.pop("self", None)
    return params


def doc_args(fn: Callable[..., Any]) -> dict[str, str]:
    """The entries of the docstring's ``Args:`` (or ``Attributes:``) section, by name."""
    doc = inspect.getdoc(fn) or ""
    match = re.search(r"^(Args|Attributes):\n(.*?)(?=^\S|\Z)", doc, re.M | re.S)
    if not match:
        return {}
    out: dict[str, str] = {}
    for m in re.finditer(
        r"^    ([\w, ]+?): (.*?)(?=^    [\w, ]+?: |\Z)", match.group(2), re.M | re.S
    ):
        for name in m.group(1).split(","):
            out[name.strip()] = " ".join(m.group(2).split())
    return out


def shape_layout(fn: Callable[..., Any], arg: str) -> str | None:
    """The layout the docstring's ``Shape:`` section gives ``arg`` (``"B, L, D"``), if any."""
    doc = inspect.getdoc(fn) or ""
    section = re.search(r"^Shape:\n(.*?)(?=^\S|\Z)", doc, re.M | re.S)
    if not section:
        return None
    found = re.search(rf"\b{re.escape(arg)}\b[^`]*``\(([^`]*)\)``", section.group(1))
    return found.group(1) if found else None


def optional(param: inspect.Parameter) -> bool:
    """Whether ``None`` is a valid value: the annotation says so or the default is None."""
    return "None" in str(param.annotation) or param.default is None


def kind_of(name: str, value: Any, param: inspect.Parameter, doc: str) -> str:
    """How an argument can go wrong, from its value's type, annotation and docstring entry."""
    note = str(param.annotation)
    if name == "dtype":
        return "dtype"
    if "Callable" in note or (callable(value) and not isinstance(value, type | torch.nn.Module)):
        return "callable"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        if "Path" in note or "PathLike" in note:
            return "path"
        return "choice" if re.search(r'``"[^"]*"``|``\'[^\']*\'``', doc) else "text"
    if isinstance(value, Path):
        return "path"
    if isinstance(value, MHAParams):
        return "params"
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, np.ndarray):
        return "array"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list | tuple):
        return "seq"
    return "object"


# ---- the mutations ----------------------------------------------------------------------


def _with(value: np.ndarray, fill: float) -> np.ndarray:
    out = value.astype(np.float64 if value.dtype.kind != "f" else value.dtype, copy=True)
    out.flat[out.size // 2] = fill
    return out


def _twith(value: torch.Tensor, fill: float) -> torch.Tensor:
    out = value.detach().clone()
    out.view(-1)[out.numel() // 2] = fill
    return out


def _grouped(params: MHAParams) -> MHAParams | None:
    """Grouped-query parameters of the same sizes (H_kv = H / 2, or 1), or None for H = 1."""
    H = params.num_heads
    if H < 2 or params.num_kv_heads < H:
        return None
    kv = H // 2 if H % 2 == 0 else 1
    library = "torch" if isinstance(params.w_qkv, torch.Tensor) else "numpy"
    g = init_params(
        params.d_model, H, num_kv_heads=kv, bias=params.b_qkv is not None, seed=7
    ).to_numpy(np.dtype(str(params.dtype).replace("torch.", "")))
    return g.to_torch() if library == "torch" else g


def mutations(case_name: str, case: Case, args: dict[str, Any]) -> list[Mutation]:
    """Every mutation of every argument of ``case``'s valid call, from its signature."""
    params = parameters(case.fn)
    docs = doc_args(case.fn)
    out: list[Mutation] = []
    for name, value in args.items():
        if name == "self" or name in case.fixed or name not in params:
            continue
        param = params[name]
        kind = case.kinds.get(name) or kind_of(name, value, param, docs.get(name, ""))
        none = "either" if optional(param) else "bad"
        if value is None:  # an optional argument left out: nothing to vary
            continue

        def add(
            label: str, change: Callable[[Any], Any], expect: str, arg: str = name, kind=kind
        ) -> None:
            if f"{arg}:{label}" in case.allow or (case.moves and label in ("nan", "inf")):
                expect = "either"
            error = KIND_ERRORS.get(label) if kind in STRICT else None
            if kind == "int" and label == "float":
                error = TypeError
            out.append(Mutation(arg, label, change, expect, error))

        add("None", lambda v: None, none)
        if kind == "int":
            add("bool", lambda v: True, "bad")
            add("float", lambda v: v + 0.5, "bad")
            add("str", lambda v: str(v), "bad")
            add("np.int64", lambda v: np.int64(v), "same")
            if abs(value) < 2**31:
                add("np.int32", lambda v: np.int32(v), "same")
            add("zero", lambda v: 0, "either")
            add("negative", lambda v: -1 if v != -1 else -2, "either" if name in SIGNED else "bad")
            if name not in WORK:
                add("huge", lambda v: v + 2**64, "either")
        elif kind == "float":
            add("nan", lambda v: math.nan, "bad")
            add("inf", lambda v: math.inf, "bad")
            add("str", lambda v: str(v), "bad")
            add("bool", lambda v: True, "bad")
            add("np.float64", lambda v: np.float64(v), "same")
            add("zero", lambda v: 0.0, "either")
            add("negative", lambda v: -abs(v) - 1.0, "either")
            if name not in WORK:
                add("huge", lambda v: 1e300, "either")
        elif kind == "bool":
            add("str", lambda v: "yes", "bad")
            add("int", lambda v: int(v), "bad")
            add("np.bool_", lambda v: np.bool_(v), "bad")
        elif kind == "choice":
            add("unknown", lambda v: "bogus", "bad")
            add("int", lambda v: 3, "bad")
        elif kind == "text":
            add("int", lambda v: 3, "bad")
            add("bytes", lambda v: b"abc", "bad")
            add("empty", lambda v: "", "either")
        elif kind in ("path", "dtype", "callable", "object"):
            add("int", lambda v: 3, "bad")
            if kind != "path":
                add("str", lambda v: "bogus", "bad")
        elif kind == "mapping":
            add("list", lambda v: [], "bad")
            add("str", lambda v: "bogus", "bad")
        elif kind == "seq":
            if "str" not in str(param.annotation).split("|")[0]:
                add("str", lambda v: "ab", "bad")
            add("int", lambda v: 3, "bad")
            add("empty", lambda v: type(v)(), "either")
            add("other container", lambda v: tuple(v) if isinstance(v, list) else list(v), "same")
        elif kind == "array":
            add("str", lambda v: "abc", "bad")
            if value.dtype.kind == "f" and value.size:
                add("nan", lambda v: _with(v, math.nan), "bad")
                add("inf", lambda v: _with(v, math.inf), "bad")
            add("list", lambda v: v.tolist(), "same_or_error")
            add("tensor", lambda v: torch.from_numpy(np.ascontiguousarray(v)), "same_or_error")
            if value.dtype == np.float64:
                add("float32", lambda v: v.astype(np.float32), "either")
            if value.dtype.kind in "iub":
                add("float", lambda v: v.astype(np.float64), "either")
            layout = shape_layout(case.fn, name)
            if layout and layout.split(",")[0].strip() == "B" and value.ndim >= 2:
                add("empty batch", lambda v: v[:0], "either")
        elif kind == "tensor":
            add("str", lambda v: "abc", "bad")
            if value.dtype.is_floating_point and value.numel():
                add("nan", lambda v: _twith(v, math.nan), "bad")
                add("inf", lambda v: _twith(v, math.inf), "bad")
            else:
                add("float", lambda v: v.double(), "bad" if value.dtype != torch.bool else "either")
            add("numpy", lambda v: v.detach().numpy(), "same_or_error")
            layout = shape_layout(case.fn, name)
            if layout and layout.split(",")[0].strip() == "B" and value.ndim >= 2:
                add("empty batch", lambda v: v[:0], "either")
        elif kind == "params":
            add("dict", lambda v: {"w_qkv": v.w_qkv, "w_o": v.w_o}, "bad")
            add("nan", lambda v: v.map(lambda t: t * math.nan), case.nan_params)
            add("other library", lambda v: v.to_numpy() if isinstance(v.w_qkv, torch.Tensor)
                else v.to_torch(), "same_or_error")  # fmt: skip
            if _grouped(value) is not None:
                add("grouped-query", lambda v: _grouped(v), "gqa")
    return out


# ---- running a call and judging it -----------------------------------------------------


def raised_by_mha(error: BaseException) -> bool:
    """Whether a ``raise`` line of the ``mha`` package raised ``error`` (its innermost frame)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    path = tb.tb_frame.f_code.co_filename
    line = linecache.getline(path, tb.tb_lineno).strip()
    return MHA_DIR in Path(path).parents and line.startswith("raise ")


def call(case: Case, args: dict[str, Any]) -> Any:
    """``case.fn`` on ``args`` (``self`` first for a method); a context manager is entered."""
    kwargs = {k: v for k, v in args.items() if k != "self"}
    result = case.fn(args["self"], **kwargs) if "self" in args else case.fn(**kwargs)
    if (
        hasattr(result, "__enter__")
        and hasattr(result, "__exit__")
        and not isinstance(result, torch.nn.Module)
    ):
        with result as inside:
            return inside
    return result


def outcome(case: Case, args: dict[str, Any]) -> tuple[str, Any]:
    """``("ok", result)`` or ``("error", exception)`` for mha's own ValueError or TypeError;
    any other exception is raised again, as a failure of the contract."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return "ok", call(case, args)
    except (ValueError, TypeError, *case.documented) as error:
        if not raised_by_mha(error):
            raise AssertionError(f"{type(error).__name__} from outside mha: {error}") from error
        return "error", error


def names_the_argument(error: BaseException, arg: str, case: Case) -> bool:
    """Whether the message names ``arg`` (or one of the names the case gives it)."""
    text = str(error)
    return any(
        re.search(rf"(?<![\w.]){re.escape(n)}\b", text) for n in [arg, *case.names.get(arg, [])]
    )


def _leaves(x: Any) -> Any:
    """``x`` as nested lists, dicts and NumPy arrays, for comparing results of any kind."""
    from mha.core.kv_cache import KVCache, LatentCache
    from mha.models.minilm import MiniLM
    from mha.models.smollm2 import SmolLM2

    if isinstance(x, MiniLM):
        return _leaves([x.config, x.embeddings, x.layers])
    if isinstance(x, KVCache):
        return _leaves([x.batch_size, x.num_kv_heads, x.d_head, x.capacity, str(x.dtype),
                        x.length, x.max_abs, x.keys, x.values])  # fmt: skip
    if isinstance(x, SmolLM2):
        return _leaves([x.embed, x.layers, x.final_norm])
    if isinstance(x, LatentCache):
        return _leaves([x.batch_size, x.d_latent, x.d_rope, x.capacity, str(x.dtype),
                        x.length, x.max_abs, x.latents, x.rotary_keys])  # fmt: skip
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy() if x.dtype.is_floating_point else x.numpy()
    if isinstance(x, go.Figure):
        return _leaves(x.to_plotly_json())
    if isinstance(x, torch.nn.Module):
        return _leaves(dict(x.state_dict()))
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _leaves(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, Mapping):
        return {k: _leaves(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_leaves(v) for v in x]
    if hasattr(x, "data") and type(x).__name__ == "Markdown":
        return x.data
    return x


def assert_same(got: Any, want: Any, tol: float = 0.0, where: str = "result") -> None:
    """``got`` equals ``want`` (exactly with ``tol=0``: the same arithmetic on the same
    numbers; else within ``tol``), through lists, dicts, dataclasses, tensors and figures."""
    got, want = _leaves(got), _leaves(want)
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), f"{where}: keys differ"
        for k in want:
            assert_same(got[k], want[k], tol, f"{where}[{k!r}]")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: lengths differ"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, tol, f"{where}[{i}]")
    elif isinstance(want, np.ndarray | np.generic | float | int) and not isinstance(want, bool):
        g, w = np.asarray(got), np.asarray(want)
        assert g.shape == w.shape, f"{where}: shape {g.shape} != {w.shape}"
        if w.dtype.kind in "fc" or g.dtype.kind in "fc":
            same = np.isclose(g, w, rtol=0, atol=tol, equal_nan=True)  # exact: tol=0 is equality
            assert same.all(), f"{where}: differs by {np.nanmax(np.abs(g - w))} > {tol}"
        else:
            assert np.array_equal(g, w), f"{where}: {g} != {w}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def structure(x: Any) -> Any:
    """The shape of a result (types, keys, lengths and array shapes), for results that differ
    from call to call (timings)."""
    x = _leaves(x)
    if isinstance(x, dict):
        return {k: structure(v) for k, v in x.items()}
    if isinstance(x, list):
        return [structure(v) for v in x]
    if isinstance(x, np.ndarray):
        return ("array", x.shape, x.dtype.kind)
    return type(x).__name__


def finite(x: Any) -> bool:
    """Whether every number in a result is finite (a silent NaN is the failure looked for)."""
    x = _leaves(x)
    if isinstance(x, dict):
        return all(finite(v) for v in x.values())
    if isinstance(x, list):
        return all(finite(v) for v in x)
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return bool(np.isfinite(x).all())
    if isinstance(x, float | np.floating):
        return math.isfinite(x)
    return True
