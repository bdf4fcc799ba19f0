"""Smaller ONNX graphs: large weights stored as float16 or int8, computed with in float32.

:func:`compress_weights` rewrites every large float32 initializer (a weight matrix or an
embedding table) of a graph as a smaller stored tensor and the few nodes that turn it back
into float32 under the same name, so that every node that used the weight reads it unchanged
in type and shape. Only the stored weights are rounded; the graph still computes in float32
(unlike ONNX Runtime's dynamic quantisation, which also rounds the activations to int8).
ONNX Runtime folds the new nodes into constants when it loads the graph, so a run costs what
the float32 graph costs.

- ``"float16"``: each weight rounded to float16 (a relative error of at most 2^-11), restored
  by a ``Cast``.
- ``"int8"``: each weight rounded to int8 times a float32 scale per block: a block is
  ``block`` consecutive rows of one column (a matrix whose rows divide into blocks), else one
  row (an embedding table, whose rows are looked up). The scale is the block's largest
  magnitude over 127, so an entry moves by at most half a step, ``scale / 2``. Restored by
  ``Cast``, ``Reshape``, ``Mul``, ``Reshape``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mha.core._checks import arguments

DTYPES = ("float16", "int8")
"""The stored types :func:`compress_weights` offers."""


def _int8_blocks(w: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """``w`` as int8 and scales: ``q * scale`` (broadcast over the block's shape) is ``w`` to
    half a step. Returns ``(q, scale, blocked_shape)``; ``q`` has ``blocked_shape``."""
    rows, cols = w.shape
    shape: tuple[int, ...]
    if rows % block == 0:
        shape = (rows // block, block, cols)  # (R / block, block, C): a block of rows per column
        grouped = w.reshape(shape)
        scale = np.abs(grouped).max(axis=1, keepdims=True) / 127  # (R / block, 1, C)
    else:
        shape = (rows, cols)  # one scale per row
        grouped = w
        scale = np.abs(w).max(axis=1, keepdims=True) / 127  # (R, 1)
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    q = np.clip(np.rint(grouped / scale), -127, 127).astype(np.int8)
    return q, scale, shape


def compress_weights(
    source: str | Path,
    target: str | Path,
    dtype: str,
    *,
    min_size: int = 4096,
    block: int = 32,
) -> Path:
    """Write a copy of an ONNX graph whose large weights are stored as ``dtype``.

    Args:
        source: the float32 ``.onnx`` file.
        target: the file to write.
        dtype: ``"float16"`` or ``"int8"``.
        min_size: a float32 initializer of two dimensions with at least this many entries is
            stored as ``dtype``; the others (biases, norms) stay float32.
        block: rows per int8 scale, in a matrix whose rows divide into such blocks.

    Returns:
        ``target``.

    Raises:
        ValueError: if ``dtype`` is not one of :data:`DTYPES`, ``block`` or ``min_size`` is
            not positive, or ``source`` is not a file.
        TypeError: if ``source`` or ``target`` is not a path, or ``block`` or ``min_size``
            is not an int.
    """
    source = arguments.path("source", source)
    target = arguments.path("target", target)
    arguments.choice("dtype", dtype, DTYPES)
    min_size = arguments.size("min_size", min_size, high=None)
    block = arguments.size("block", block, high=None)
    if not source.is_file():
        raise ValueError(f"source must be an ONNX file; got source={str(source)!r}, no such file")
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    kept, added, nodes = [], [], []
    for init in graph.initializer:
        w = numpy_helper.to_array(init)
        if init.data_type != TensorProto.FLOAT or w.ndim != 2 or w.size < min_size:
            kept.append(init)
            continue
        name = init.name
        if dtype == "float16":
            added.append(numpy_helper.from_array(w.astype(np.float16), f"{name}__f16"))
            nodes.append(helper.make_node("Cast", [f"{name}__f16"], [name], to=TensorProto.FLOAT))
            continue
        q, scale, shape = _int8_blocks(w, block)
        added += [
            numpy_helper.from_array(q, f"{name}__q"),
            numpy_helper.from_array(scale, f"{name}__scale"),
        ]
        nodes.append(
            helper.make_node("Cast", [f"{name}__q"], [f"{name}__qf"], to=TensorProto.FLOAT)
        )
        if shape == w.shape:  # one scale per row: (R, C) * (R, 1)
            nodes.append(helper.make_node("Mul", [f"{name}__qf", f"{name}__scale"], [name]))
            continue
        added += [
            numpy_helper.from_array(np.array(w.shape, dtype=np.int64), f"{name}__shape"),
        ]
        nodes += [  # (R / block, block, C) * (R / block, 1, C) -> (R, C)
            helper.make_node("Mul", [f"{name}__qf", f"{name}__scale"], [f"{name}__wb"]),
            helper.make_node("Reshape", [f"{name}__wb", f"{name}__shape"], [name]),
        ]
    del graph.initializer[:]
    graph.initializer.extend(kept + added)
    old_nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes + old_nodes)  # before every node that reads the weights
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))
    return target
