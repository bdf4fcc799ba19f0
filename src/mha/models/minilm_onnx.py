"""MiniLM's attention as an ONNX graph, for a runtime in the reader's browser.

:func:`export_attention_onnx` traces :meth:`mha.models.minilm.MiniLM.forward` (this package's
attention, run on the published weights) into an ONNX graph with one input and two outputs:

- ``input_ids`` ``(1, L)`` int64, the tokens of one text ([CLS] first, [SEP] last);
- ``weights`` ``(num_layers, H, L, L)`` float32, every layer's attention weights;
- ``value_norms`` ``(num_layers, H, L)`` float32, :func:`mha.detectors.circuits.value_norms`
  of every layer on the same text: what each head writes per unit of weight on each key.

The feed-forward blocks of the last layer, and the pooling, are not needed for these and are
left out. :func:`build_cached` writes the graph under a key of every input (the weights'
hash, the package's source, the versions of torch, onnx and onnxruntime), so that builds of
the book export once, and stores the weights as float16 or int8 on request
(:mod:`mha.models.onnx_weights`: the graph still computes in float32; the site serves the
float16 graph, measured by ``scripts/live_model_sizes.py``). :func:`quantize_weights` makes a
copy with ONNX Runtime's dynamic int8 quantisation, which also rounds the activations; it moves
the attention weights by tenths (see ``tests/test_minilm_onnx.py``), so the site does not use it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
from pathlib import Path

import numpy as np
import torch

from mha.backends import torch_backend
from mha.core._checks import arguments, numpy_arrays
from mha.detectors import circuits
from mha.models import onnx_weights
from mha.models.minilm import MODEL_SHA256, MiniLM, load_minilm, model_dir

OPSET = 18
"""The ONNX opset of the export: the exporter's own (no conversion); ONNX Runtime Web runs it."""

FLOAT32_NAME = "minilm-attention-f32.onnx"
"""File name of the float32 graph."""

INT8_NAME = "minilm-attention-int8.onnx"
"""File name of the graph with int8 matrix weights."""


class AttentionGraph(torch.nn.Module):
    """The module that :func:`export_attention_onnx` traces: ids -> (weights, value norms).

    Args:
        model: a float32 :class:`MiniLM` from :func:`load_minilm`.

    Raises:
        TypeError: if ``model`` is not a :class:`MiniLM`.
    """

    def __init__(self, model: MiniLM) -> None:
        super().__init__()
        arguments.instance("model", model, MiniLM, "a MiniLM")
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every layer's attention weights and value norms on one text.

        Args:
            input_ids: the token ids of one text.

        Shape:
            input_ids ``(1, L)``. Returns ``(num_layers, H, L, L)`` and ``(num_layers, H, L)``.

        Returns:
            ``(weights, value_norms)``.

        Raises:
            ValueError, TypeError: as :meth:`mha.models.minilm.MiniLM.forward`.
        """
        out = self.model.forward(input_ids)
        weights = torch.cat(out.attentions)  # num_layers x (1, H, L, L) -> (num_layers, H, L, L)
        norms = []
        for x, layer in zip(out.hidden_states, self.model.layers, strict=False):
            p = layer.attn
            H, D, Dh = p.num_heads, p.d_model, p.d_head
            v = torch_backend.split_heads(x @ p.w_v + p.b_v, H)  # (1, L, D) -> (1, H, L, Dh)
            out_h = torch.einsum("bhsd,hde->bhse", v, p.w_o.reshape(H, Dh, D))  # (1, H, L, D)
            norms.append(torch.linalg.vector_norm(out_h, dim=-1))  # (1, H, L)
        return weights, torch.cat(norms)  # (num_layers, H, L, L), (num_layers, H, L)


def export_attention_onnx(path: str | Path, model: MiniLM | None = None) -> Path:
    """Write MiniLM's attention weights and value norms as a float32 ONNX graph.

    The trace runs the package's own forward. While a graph is traced its tensors hold no
    values, so the checks that read values and the CPU shortcuts step aside by themselves
    (:mod:`mha.backends.torch_checks`, :mod:`mha.backends.cpu_shortcuts`), and the graph holds
    the plain path: projections, scores, softmax, layer norms. L is a dynamic axis.

    Args:
        path: the ``.onnx`` file to write.
        model: a float32 model (``None``: :func:`load_minilm`).

    Returns:
        ``path``.

    Raises:
        TypeError: if ``path`` is not a path, or ``model`` not a float32 :class:`MiniLM`.
    """
    path = arguments.path("path", path)
    if model is not None:
        arguments.instance("model", model, MiniLM, "a MiniLM")
    model = load_minilm() if model is None else model
    if model.dtype != torch.float32:
        raise TypeError(f"model must be float32; got {model.dtype}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = torch.tensor([[101, 7592, 2088, 102]], dtype=torch.int64)  # (1, 4): [CLS] .. [SEP]
    with torch.no_grad():
        torch.onnx.export(
            AttentionGraph(model).eval(),
            (ids,),
            str(path),
            input_names=["input_ids"],
            output_names=["weights", "value_norms"],
            dynamic_shapes=({1: torch.export.Dim("L", min=2, max=512)},),
            opset_version=OPSET,
            dynamo=True,
            external_data=False,  # one file: the browser fetches one
        )
    return path


def quantize_weights(source: str | Path, target: str | Path) -> Path:
    """A copy of an ONNX graph whose matrix products use int8 weights (dynamic quantisation).

    Args:
        source: the float32 ``.onnx`` file.
        target: the file to write.

    Returns:
        ``target``.

    Raises:
        TypeError: if ``source`` or ``target`` is not a path.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = arguments.path("source", source)
    target = arguments.path("target", target)
    quantize_dynamic(
        str(source),
        str(target),
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul", "Gather"],
    )
    return target


def cache_key() -> str:
    """SHA-256 of everything the exported graphs depend on.

    The weights' hash, the tokenizer and config files, the source of every module of the
    package (the forward is traced through them) and the versions of torch, onnx and
    onnxruntime.

    Returns:
        64 hexadecimal digits.
    """
    digest = hashlib.sha256(MODEL_SHA256.encode())
    root = model_dir()
    for name in ("config.json", "tokenizer.json"):
        digest.update((root / name).read_bytes())
    package = Path(__file__).resolve().parents[1]
    for source in sorted(package.rglob("*.py")):
        digest.update(str(source.relative_to(package)).encode())
        digest.update(source.read_bytes())
    for dist in ("torch", "onnx", "onnxruntime"):
        digest.update(f"{dist}=={importlib.metadata.version(dist)}".encode())
    digest.update(str(OPSET).encode())
    return digest.hexdigest()


WEIGHTS_NAMES = {
    "float32": FLOAT32_NAME,
    "float16": "minilm-attention-f16-weights.onnx",
    "int8": "minilm-attention-int8-weights.onnx",
}
"""File name of the graph for each way of storing its weights (:mod:`mha.models.onnx_weights`)."""


def build_cached(
    out_dir: str | Path, cache_dir: str | Path, weights: str = "float32"
) -> dict[str, Path]:
    """A graph and the tokenizer in ``out_dir``, exported (and compressed) at most once per key.

    Args:
        out_dir: where to copy the graph and ``tokenizer.json``.
        cache_dir: where exports are kept, one folder per :func:`cache_key`.
        weights: how the graph stores its weights: ``"float32"`` (as exported), or
            ``"float16"`` or ``"int8"`` (:func:`mha.models.onnx_weights.compress_weights`).

    Returns:
        ``{"model": path, "tokenizer": path}`` in ``out_dir``.

    Raises:
        ValueError: if ``weights`` is not a key of :data:`WEIGHTS_NAMES`.
        TypeError: if ``out_dir`` or ``cache_dir`` is not a path.
    """
    out_dir = arguments.path("out_dir", out_dir)
    cache_dir = arguments.path("cache_dir", cache_dir)
    if not isinstance(weights, str) or weights not in WEIGHTS_NAMES:
        raise ValueError(f"weights must be one of {sorted(WEIGHTS_NAMES)}; got {weights!r}")
    key = cache_key()
    cached = Path(cache_dir) / key[:16]
    f32 = cached / FLOAT32_NAME
    if not f32.is_file():
        tmp = cached.with_name(cached.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        export_attention_onnx(tmp / FLOAT32_NAME)
        (tmp / "key.json").write_text(json.dumps({"key": key}))
        shutil.rmtree(cached, ignore_errors=True)
        tmp.rename(cached)
    graph = cached / WEIGHTS_NAMES[weights]
    if not graph.is_file():
        partial = graph.with_name(graph.name + ".tmp")
        onnx_weights.compress_weights(f32, partial, weights)
        partial.rename(graph)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"model": out / graph.name, "tokenizer": out / "tokenizer.json"}
    _copy_if_changed(graph, paths["model"])
    _copy_if_changed(model_dir() / "tokenizer.json", paths["tokenizer"])
    return paths


def _copy_if_changed(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` unless ``target`` has the same size and is newer."""
    same = target.is_file() and target.stat().st_size == source.stat().st_size
    if same and target.stat().st_mtime >= source.stat().st_mtime:
        return
    shutil.copyfile(source, target)


def reference_views(model: MiniLM, text: str) -> dict[str, object]:
    """What the live page shows for ``text``, computed by this package in float64.

    Args:
        model: a :class:`MiniLM` (float32 as published, or float64).
        text: one text.

    Shape:
        ``weights`` and ``value_weighted`` ``(num_layers, H, L, L)``; ``value_norms``
        ``(num_layers, H, L)``; ``input_ids`` ``(1, L)``.

    Returns:
        ``{"tokens", "input_ids", "weights", "value_norms", "value_weighted"}``: the tokens
        and ids, the attention weights (:meth:`MiniLM.attention_weights`), the norms of
        :func:`mha.detectors.circuits.value_norms` and the shares of
        :func:`mha.detectors.circuits.value_weighted_attention`.

    Raises:
        ValueError: if the text is longer than the model's positions.
        TypeError: if ``model`` is not a :class:`MiniLM` or ``text`` not a string.
    """
    arguments.instance("model", model, MiniLM, "a MiniLM")
    arguments.text("text", text)
    ids, _, tokens = model.tokenize(text)
    out, _ = model.run(text)
    weights = torch.cat(out.attentions).double().numpy()  # (num_layers, H, L, L)
    norms = np.stack(
        [
            circuits.value_norms(out.hidden_states[i].double().numpy(), model.attention_params(i))[
                0
            ]
            for i in range(model.num_layers)
        ]
    )  # (num_layers, H, L)
    return {
        "tokens": tokens[0],
        "input_ids": ids.numpy(),
        "weights": weights,
        "value_norms": norms,
        "value_weighted": circuits.value_weighted_attention(weights, norms),
    }


def run_onnx(path: str | Path, input_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run an exported graph with ONNX Runtime on the CPU.

    Args:
        path: the ``.onnx`` file.
        input_ids: token ids of one text.

    Shape:
        input_ids ``(1, L)``. Returns ``(num_layers, H, L, L)`` and ``(num_layers, H, L)``.

    Returns:
        ``(weights, value_norms)`` as float32 arrays.

    Raises:
        ValueError: if ``input_ids`` is not ``(1, L)`` with ``2 <= L <= 512``, or an id is
            negative.
        TypeError: if ``path`` is not a path or ``input_ids`` not an integer array.
    """
    import onnxruntime

    path = arguments.path("path", path)
    ids = numpy_arrays.int_array("input_ids", input_ids, ndim=2, layout="(1, L)")
    if ids.shape[0] != 1 or not 2 <= ids.shape[1] <= 512 or (ids < 0).any():
        raise ValueError(
            f"input_ids must be (1, L) with 2 <= L <= 512 non-negative ids; got {ids.shape}"
        )
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    weights, norms = session.run(["weights", "value_norms"], {"input_ids": ids})
    return weights, norms
