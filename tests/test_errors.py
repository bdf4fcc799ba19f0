"""Every error message of the package: bad input raises a clear error, never a wrong answer.

One case per message. Cases that apply to both backends run in both: they are written
with NumPy arrays and converted to PyTorch tensors by ``to``. Each ``match`` names the
argument, the rule and what was received.
"""

from __future__ import annotations

import linecache
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import event, given, settings
from hypothesis import strategies as st
from torch import nn

import mha
import mha.analysis.bottleneck
import mha.analysis.subspaces
import mha.backends.tiled
import mha.core.kv_cache
import mha.core.mask_rules
import mha.cost.measure
import mha.cost.timings
import mha.display.diagrams
import mha.display.plotting
import mha.models.examples
import mha.models.minilm
import mha.numerics.backward
import mha.numerics.gradcheck
import mha.numerics.precision
import mha.numerics.tolerance
import mha.training
import mha.training.ablation
import mha.training.tasks
from mha import MHAParams, init_params
from mha.backends import cpu_shortcuts, np_backend, torch_backend

BACKENDS = {"numpy": np_backend, "torch": torch_backend}
D, H = 8, 2


def to(backend: str, obj: Any) -> Any:
    """Convert NumPy arrays (and MHAParams) to the given backend; leave anything else."""
    if backend == "numpy":
        return obj
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj)
    if isinstance(obj, MHAParams):
        return obj.to_torch()
    return obj


def x(*shape: int, dtype: Any = np.float64) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


def with_value(a: np.ndarray, index: tuple[int, ...], value: float) -> np.ndarray:
    a = a.copy()
    a[index] = value
    return a


P = init_params(D, H)
Q = x(2, 3, D)
KV = x(2, 4, D)
TQKV = (torch.from_numpy(Q), torch.from_numpy(KV), torch.from_numpy(KV))


def _step(kind: str) -> tuple[Any, Any, Any]:
    """One new position of self-attention ``(B, 1, D)``, for calls with a cache."""
    step = Q[:, :1]
    if kind == "torch":
        step = torch.from_numpy(np.ascontiguousarray(step))
    return step, step, step


def _attend_to_huge_cached_keys(kind: str) -> Any:
    """A float32 step whose query is harmless but whose cached keys make scores of ~1e42.

    The new position's magnitudes alone bound the scores far below float32's range; only
    the cache's own bound (``KVCache.max_abs``) shows that they may overflow.
    """
    params = init_params(D, H, num_kv_heads=1)
    if kind == "numpy":
        params, ones, dtype = params.to_numpy(np.float32), np.ones, np.float32
    else:
        params, ones, dtype = params.to_torch(torch.float32), torch.ones, torch.float32
    cache = mha.core.kv_cache.KVCache(1, 1, D // H, 4, dtype=dtype)
    cache.append(1e34 * ones((1, 1, 2, D // H), dtype=dtype), ones((1, 1, 2, D // H), dtype=dtype))
    step = 1e8 * ones((1, 1, D), dtype=dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        return BACKENDS[kind].multi_head_attention(step, step, step, params, cache=cache)


def _cache(dtype: Any, num_kv_heads: int = H, device: Any = None) -> Any:
    """A key/value cache for ``P`` (B = 2, Dh = D / H) of the given dtype."""
    return mha.core.kv_cache.KVCache(2, num_kv_heads, D // H, 4, dtype=dtype, device=device)


def mha_call(
    query: Any = Q, key: Any = KV, value: Any = KV, params: Any = P, mask: Any = None, **kw: Any
) -> Callable[[str], Any]:
    """A case calling ``multi_head_attention`` with the given (NumPy) arguments."""

    def call(be: str) -> Any:
        args = [to(be, a) for a in (query, key, value, params, mask)]
        return BACKENDS[be].multi_head_attention(*args, **kw)

    return call


def sdpa_call(query: Any, key: Any, value: Any, mask: Any = None) -> Callable[[str], Any]:
    def call(be: str) -> Any:
        return BACKENDS[be].scaled_dot_product_attention(
            *(to(be, a) for a in (query, key, value, mask))
        )

    return call


def fn_call(name: str, *args: Any, **kw: Any) -> Callable[[str], Any]:
    """A case calling backend function ``name`` with converted arguments."""

    def call(be: str) -> Any:
        kwargs = {k: to(be, a) for k, a in kw.items()}
        return getattr(BACKENDS[be], name)(*(to(be, a) for a in args), **kwargs)

    return call


# (id, call taking the backend name, exception type, regex of the message)
BOTH_BACKENDS: list[tuple[str, Callable[[str], Any], type[Exception], str]] = [
    # sizes
    (
        "split_heads_indivisible",
        fn_call("split_heads", x(1, 2, 10), 3),
        ValueError,
        r"num_heads must divide d_model; got d_model=10, num_heads=3",
    ),
    (
        "split_heads_zero_heads",
        fn_call("split_heads", x(1, 2, 8), 0),
        ValueError,
        r"num_heads must be positive; got num_heads=0",
    ),
    (
        "split_heads_float_heads",
        fn_call("split_heads", x(1, 2, 8), 2.0),
        TypeError,
        r"num_heads must be an int; got float 2.0",
    ),
    # ranks
    (
        "split_heads_rank",
        fn_call("split_heads", x(2, 8), 2),
        ValueError,
        r"x must have shape \(B, L, D\); got 2-D shape \(2, 8\)",
    ),
    (
        "merge_heads_rank",
        fn_call("merge_heads", x(2, 3, 8)),
        ValueError,
        r"x must have shape \(B, H, L, Dh\); got 3-D shape \(2, 3, 8\)",
    ),
    (
        "mha_query_rank",
        mha_call(query=x(3, D)),
        ValueError,
        r"query must have shape \(B, L, D\); got 2-D shape \(3, 8\)",
    ),
    (
        "mha_key_rank",
        mha_call(key=x(2, 4, D, 1)),
        ValueError,
        r"key must have shape \(B, S, D\); got 4-D shape \(2, 4, 8, 1\)",
    ),
    (
        "mha_value_rank",
        mha_call(value=x(4, D)),
        ValueError,
        r"value must have shape \(B, S, D\); got 2-D shape \(4, 8\)",
    ),
    (
        "sdpa_query_rank",
        sdpa_call(x(4), x(5, 4), x(5, 4)),
        ValueError,
        r"query must have shape \(\.\.\., length, width\); got 1-D shape \(4,\)",
    ),
    # widths, batches, lengths
    (
        "sdpa_width_mismatch",
        sdpa_call(x(2, 3, 4), x(2, 5, 3), x(2, 5, 4)),
        ValueError,
        r"query and key must have the same width; got query width 4, key width 3",
    ),
    (
        "mha_query_width",
        mha_call(query=x(2, 3, 6)),
        ValueError,
        r"query width must equal d_model=8; got query.shape=\(2, 3, 6\)",
    ),
    (
        "mha_key_width",
        mha_call(key=x(2, 4, 6), value=x(2, 4, 6)),
        ValueError,
        r"key width must equal d_model=8; got key.shape=\(2, 4, 6\)",
    ),
    (
        "mha_batch_mismatch",
        mha_call(key=x(3, 4, D), value=x(3, 4, D)),
        ValueError,
        r"query, key and value must share the batch size; got 2, 3, 3",
    ),
    (
        "sdpa_batch_mismatch",
        sdpa_call(x(2, 3, 4), x(3, 5, 4), x(3, 5, 4)),
        ValueError,
        r"query, key and value must have broadcastable leading \(batch\) dimensions; "
        r"got query \(2,\), key \(3,\), value \(3,\)",
    ),
    (
        "mha_kv_length_mismatch",
        mha_call(value=x(2, 5, D)),
        ValueError,
        r"key and value must have the same length; got key 4, value 5",
    ),
    (
        "sdpa_kv_length_mismatch",
        sdpa_call(x(3, 4), x(5, 4), x(6, 4)),
        ValueError,
        r"key and value must have the same length; got key 5, value 6",
    ),
    # empty sequences
    (
        "mha_empty_query",
        mha_call(query=x(2, 0, D)),
        ValueError,
        r"query must have at least one position; got L=0",
    ),
    (
        "mha_empty_key",
        mha_call(key=x(2, 0, D), value=x(2, 0, D)),
        ValueError,
        r"key must have at least one position; got S=0",
    ),
    (
        "sdpa_empty_query",
        sdpa_call(x(0, 4), x(5, 4), x(5, 4)),
        ValueError,
        r"query must have at least one position; got L=0",
    ),
    (
        "sdpa_empty_key",
        sdpa_call(x(3, 4), x(0, 4), x(0, 4)),
        ValueError,
        r"key must have at least one position; got S=0",
    ),
    (
        "causal_mask_zero",
        fn_call("causal_mask", 0),
        ValueError,
        r"q_len must have at least one position; got L=0",
    ),
    (
        "causal_mask_zero_kv",
        fn_call("causal_mask", 3, 0),
        ValueError,
        r"kv_len must have at least one position; got S=0",
    ),
    (
        "causal_mask_float",
        fn_call("causal_mask", 2.5),
        TypeError,
        r"q_len must be an int; got float 2.5",
    ),
    (
        "causal_mask_unknown_align",
        fn_call("causal_mask", 2, 3, align="bottom-right"),
        ValueError,
        re.escape("align must be one of ('top_left', 'bottom_right'); got align='bottom-right'"),
    ),
    (
        "causal_mask_align_not_a_string",
        fn_call("causal_mask", 2, 3, align=None),
        TypeError,
        re.escape("align must be a string, one of ('top_left', 'bottom_right'); got NoneType None"),
    ),
    # masks
    (
        "mha_mask_does_not_broadcast",
        mha_call(mask=np.ones((3, 3), dtype=bool)),
        ValueError,
        re.escape("mask must broadcast to (B, H, L, S) = (2, 2, 3, 4); got shape (3, 3)"),
    ),
    (
        "mha_mask_too_many_dims",
        mha_call(mask=np.ones((1, 2, 2, 3, 4), dtype=bool)),
        ValueError,
        re.escape("mask must broadcast to (B, H, L, S) = (2, 2, 3, 4); got shape (1, 2, 2, 3, 4)"),
    ),
    (
        "mha_mask_wrong_heads",
        mha_call(mask=np.ones((2, 3, 3, 4), dtype=bool)),
        ValueError,
        re.escape("mask must broadcast to (B, H, L, S) = (2, 2, 3, 4); got shape (2, 3, 3, 4)"),
    ),
    (
        "sdpa_mask_does_not_broadcast",
        sdpa_call(x(3, 4), x(5, 4), x(5, 4), np.ones((5, 3), dtype=bool)),
        ValueError,
        re.escape("mask must broadcast to (..., L, S) = (3, 5); got shape (5, 3)"),
    ),
    (
        "softmax_mask_does_not_broadcast",
        fn_call("softmax", x(3, 5), np.ones((3, 4), dtype=bool)),
        ValueError,
        re.escape("mask must broadcast to scores.shape = (3, 5); got shape (3, 4)"),
    ),
    (
        "mha_mask_not_bool",
        mha_call(mask=np.ones((3, 4))),
        TypeError,
        r"mask must be boolean \(True = may attend\); got dtype (torch\.)?float64",
    ),
    (
        "mha_mask_int",
        mha_call(mask=np.ones((3, 4), dtype=np.int64)),
        TypeError,
        r"mask must be boolean \(True = may attend\); got dtype (torch\.)?int64",
    ),
    (
        "sdpa_mask_not_bool",
        sdpa_call(x(3, 4), x(5, 4), x(5, 4), np.zeros((3, 5))),
        TypeError,
        r"mask must be boolean .*additive == 0",
    ),
    (
        "softmax_mask_not_bool",
        fn_call("softmax", x(3, 5), np.zeros((3, 5), dtype=np.float32)),
        TypeError,
        r"mask must be boolean \(True = may attend\); got dtype (torch\.)?float32",
    ),
    (
        "mha_mask_not_array",
        mha_call(mask=[[True] * 4] * 3),
        TypeError,
        r"mask must be a (numpy\.ndarray|torch\.Tensor) of bool; got list",
    ),
    # dtypes and kinds
    (
        "mha_mixed_input_dtypes",
        mha_call(key=x(2, 4, D, dtype=np.float32)),
        TypeError,
        r"all inputs and parameters must share one dtype; got query=(torch\.)?float64, "
        r"key=(torch\.)?float32, value=(torch\.)?float64",
    ),
    (
        "mha_input_vs_params_dtype",
        mha_call(
            query=x(2, 3, D, dtype=np.float32),
            key=x(2, 4, D, dtype=np.float32),
            value=x(2, 4, D, dtype=np.float32),
        ),
        TypeError,
        r"all inputs and parameters must share one dtype; got query=(torch\.)?float32, "
        r".*params\.w_qkv=(torch\.)?float64",
    ),
    (
        "mha_params_mixed_dtype",
        mha_call(params=MHAParams(P.w_qkv, P.w_o.astype(np.float32), P.b_qkv, P.b_o, H)),
        TypeError,
        r"all inputs and parameters must share one dtype; got .*params\.w_o=(torch\.)?float32",
    ),
    (
        "sdpa_mixed_dtypes",
        sdpa_call(x(3, 4), x(5, 4, dtype=np.float32), x(5, 4)),
        TypeError,
        r"all inputs and parameters must share one dtype; got query=(torch\.)?float64, "
        r"key=(torch\.)?float32",
    ),
    (
        "mha_integer_query",
        mha_call(query=np.ones((2, 3, D), dtype=np.int64)),
        TypeError,
        r"query must have a floating dtype \(.*\); got dtype (torch\.)?int64",
    ),
    (
        "sdpa_integer_value",
        sdpa_call(x(3, 4), x(5, 4), np.ones((5, 4), dtype=np.int32)),
        TypeError,
        r"value must have a floating dtype \(.*\); got dtype (torch\.)?int32",
    ),
    (
        "softmax_integer_scores",
        fn_call("softmax", np.ones((3, 5), dtype=np.int64)),
        TypeError,
        r"scores must have a floating dtype \(.*\); got dtype (torch\.)?int64",
    ),
    (
        "softmax_scalar_scores",
        fn_call("softmax", np.array(1.0)),
        ValueError,
        r"scores must have shape \(\.\.\., S\); got 0-D shape \(\)",
    ),
    (
        "mha_query_not_array",
        mha_call(query=Q.tolist()),
        TypeError,
        r"query must be a (numpy\.ndarray|torch\.Tensor); got list",
    ),
    (
        "mha_params_not_params",
        mha_call(params={"w_qkv": P.w_qkv}),
        TypeError,
        r"params must be MHAParams; got dict",
    ),
    # non-finite values
    (
        "mha_nan_query",
        mha_call(query=with_value(Q, (0, 1, 2), np.nan)),
        ValueError,
        r"query must be finite; got NaN or infinite values",
    ),
    (
        "mha_inf_value",
        mha_call(value=with_value(KV, (1, 0, 0), np.inf)),
        ValueError,
        r"value must be finite; got NaN or infinite values",
    ),
    (
        "mha_nan_params",
        mha_call(params=P.map(lambda a: with_value(a, (0,), np.nan) if a.ndim == 1 else a)),
        ValueError,
        r"params\.b_qkv must be finite; got NaN or infinite values",
    ),
    (
        "sdpa_inf_key",
        sdpa_call(x(3, 4), with_value(x(5, 4), (2, 1), -np.inf), x(5, 4)),
        ValueError,
        r"key must be finite; got NaN or infinite values",
    ),
    (
        "softmax_nan_scores",
        fn_call("softmax", with_value(x(3, 5), (0, 0), np.nan)),
        ValueError,
        r"scores must be finite; got NaN or infinite values",
    ),
    # form
    (
        "mha_unknown_form",
        mha_call(form="flash"),
        ValueError,
        r"form must be one of \('per_head', 'fused', 'packed'(, 'tiled')?\); got form='flash'",
    ),
    # key padding masks
    (
        "key_padding_too_long",
        fn_call("key_padding_mask", [2, 6], 5),
        ValueError,
        r"lengths must lie in \[0, kv_len=5\]; got \[2, 6\]",
    ),
    (
        "key_padding_negative",
        fn_call("key_padding_mask", [-1, 2], 5),
        ValueError,
        r"lengths must lie in \[0, kv_len=5\]; got \[-1, 2\]",
    ),
    (
        "key_padding_rank",
        fn_call("key_padding_mask", [[1, 2]], 5),
        ValueError,
        r"lengths must have shape \(B,\); got shape \(1, 2\)",
    ),
    (
        "key_padding_float_lengths",
        fn_call("key_padding_mask", [1.5, 2.0], 5),
        TypeError,
        r"lengths must be integers; got dtype (torch\.)?float",
    ),
    (
        "key_padding_zero_kv_len",
        fn_call("key_padding_mask", [0], 0),
        ValueError,
        r"kv_len must have at least one position; got S=0",
    ),
    # layer norm
    (
        "layer_norm_eps_zero",
        fn_call("layer_norm", x(2, 3, D), eps=0.0),
        ValueError,
        r"eps must be positive and finite; got eps=0\.0",
    ),
    (
        "layer_norm_eps_infinite",
        fn_call("layer_norm", x(2, 3, D), eps=np.inf),
        ValueError,
        r"eps must be positive and finite; got eps=inf",
    ),
    (
        "layer_norm_eps_string",
        fn_call("layer_norm", x(2, 3, D), eps="1e-5"),
        TypeError,
        r"eps must be a real number \(int or float\); got str '1e-5'",
    ),
    (
        "layer_norm_weight_shape",
        fn_call("layer_norm", x(2, 3, D), np.ones(D + 1)),
        ValueError,
        r"weight must have shape \(D,\) = \(8,\); got \(9,\)",
    ),
    (
        "layer_norm_bias_shape",
        fn_call("layer_norm", x(2, 3, D), None, np.ones((1, D))),
        ValueError,
        r"bias must have shape \(D,\) = \(8,\); got \(1, 8\)",
    ),
    (
        "layer_norm_mixed_dtype",
        fn_call("layer_norm", x(2, 3, D, dtype=np.float32), np.ones(D)),
        TypeError,
        r"all inputs and parameters must share one dtype; got x=(torch\.)?float32, "
        r"weight=(torch\.)?float64",
    ),
    (
        "layer_norm_integer_x",
        fn_call("layer_norm", np.ones((2, D), dtype=np.int64)),
        TypeError,
        r"x must have a floating dtype \(.*\); got dtype (torch\.)?int64",
    ),
    (
        "layer_norm_scalar_x",
        fn_call("layer_norm", np.array(1.0)),
        ValueError,
        r"x must have shape \(\.\.\., D\); got 0-D shape \(\)",
    ),
    (
        "attention_block_norm_first_not_bool",
        fn_call("attention_block", Q, P, norm_first="pre"),
        TypeError,
        re.escape("norm_first must be a bool; got str 'pre'"),
    ),
    (
        "attention_block_ln_weight",
        fn_call("attention_block", Q, P, ln_weight=np.ones(3)),
        ValueError,
        r"weight must have shape \(D,\) = \(8,\); got \(3,\)",
    ),
    # options: flags are bools, positive numbers finite and positive
    (
        "mha_need_weights_string",
        mha_call(need_weights="no"),
        TypeError,
        re.escape("need_weights must be a bool; got str 'no'"),
    ),
    (
        "mha_need_weights_none",
        mha_call(need_weights=None),
        TypeError,
        re.escape("need_weights must be a bool; got NoneType None"),
    ),
    (
        "mha_need_weights_int",
        mha_call(need_weights=1),
        TypeError,
        re.escape("need_weights must be a bool; got int 1"),
    ),
    (
        "key_padding_ragged_lengths",
        fn_call("key_padding_mask", [[1, 2], [3]], 5),
        TypeError,
        r"lengths must be a 1-D sequence or (array|tensor) of integers; got list",
    ),
    # overflow: finite inputs whose results leave the dtype's range
    (
        "mha_inputs_1e30_overflow_the_scores",
        mha_call(*(a.astype(np.float32) * 1e30 for a in (Q, KV, KV)), P.to_numpy(np.float32)),
        ValueError,
        r"multi_head_attention output overflowed (torch\.)?float32 although every input is "
        r"finite: the scores Q K\^T / sqrt\(Dh\) reach .* in float64, beyond its largest "
        r"finite value 3\.4e\+38",
    ),
    (
        "mha_weights_1e20_overflow_the_scores",
        mha_call(
            *(a.astype(np.float32) for a in (Q, KV, KV)),
            P.to_numpy(np.float32).map(lambda a: a * np.float32(1e20)),
            need_weights=False,
        ),
        ValueError,
        r"multi_head_attention output overflowed (torch\.)?float32 .*the scores",
    ),
    (
        "mha_projections_overflow",
        mha_call(
            *(a.astype(np.float32) * 1e30 for a in (Q, KV, KV)),
            P.to_numpy(np.float32).map(lambda a: a * np.float32(1e10)),
        ),
        ValueError,
        r"overflowed (torch\.)?float32 .*: the projections x W \+ b reach",
    ),
    (
        "mha_float64_overflow",
        mha_call(Q * 1e160, KV * 1e160, KV * 1e160),
        ValueError,
        r"overflowed (torch\.)?float64 .*the scores Q K\^T / sqrt\(Dh\) reach inf in float64",
    ),
    (
        "sdpa_scores_overflow",
        sdpa_call(
            x(3, 4, dtype=np.float32) * 1e20,
            x(5, 4, dtype=np.float32) * 1e20,
            x(5, 4).astype(np.float32),
        ),
        ValueError,
        r"scaled_dot_product_attention output overflowed (torch\.)?float32 .*the scores",
    ),
    (
        "layer_norm_variance_overflow",
        fn_call("layer_norm", x(2, 3, D, dtype=np.float32) * 1e20),
        ValueError,
        r"x must have rows whose variance fits (torch\.)?float32: D \(max - min\)\^2 = .* "
        r"reaches its largest finite value",
    ),
    (
        "layer_norm_output_overflow",
        fn_call("layer_norm", x(2, 3, D, dtype=np.float32), np.full(D, 3e38, dtype=np.float32)),
        ValueError,
        r"layer_norm output overflowed (torch\.)?float32 although every input is finite",
    ),
    # ambiguous masks
    (
        "mha_3d_mask_leading_size_is_both_b_and_h",
        mha_call(mask=np.ones((2, 3, 4), dtype=bool)),
        ValueError,
        re.escape(
            "mask of shape (2, 3, 4) is ambiguous: its leading size 2 equals both B and H. "
            "Pass mask[:, None] (B, 1, L, S) for one mask per batch element, or mask[None] "
            "(1, H, L, S) for one mask per head"
        ),
    ),
    (
        "mha_3d_mask_per_batch",
        mha_call(x(3, 3, D), x(3, 4, D), x(3, 4, D), mask=np.ones((3, 3, 4), dtype=bool)),
        ValueError,
        re.escape(
            "mask must broadcast to (B, H, L, S) = (3, 2, 3, 4); got shape (3, 3, 4). A 3-D "
            "mask is read as (H, L, S), one per head; for one mask per batch element "
            "(B, L, S) pass mask[:, None], shape (B, 1, L, S)"
        ),
    ),
    (
        "mha_2d_key_padding_mask",
        mha_call(mask=np.ones((2, 4), dtype=bool)),
        ValueError,
        re.escape(
            "mask must broadcast to (B, H, L, S) = (2, 2, 3, 4); got shape (2, 4). A 2-D mask "
            "is read as (L, S), one row per query; for one row of keys per batch element "
            "(B, S) use key_padding_mask(lengths, S) or mask[:, None, None, :], shape "
            "(B, 1, 1, S)"
        ),
    ),
]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [pytest.param(c, e, m, id=i) for i, c, e, m in BOTH_BACKENDS],
)
def test_bad_input_raises_a_clear_error(
    backend: str, call: Callable[[str], Any], exc: type[Exception], match: str
) -> None:
    """The error comes from mha, with no NumPy RuntimeWarning (overflow, invalid) before it."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(exc, match=match):
            call(backend)


def test_error_cases_have_unique_ids() -> None:
    ids = [case[0] for case in BOTH_BACKENDS]
    assert len(ids) == len(set(ids))


# Errors of one backend only (the wrong backend's arrays, the PyTorch-only dtype).
ONE_BACKEND: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    (
        "numpy_backend_gets_torch_params",
        lambda: np_backend.multi_head_attention(Q, KV, KV, P.to_torch()),
        TypeError,
        r"params\.w_qkv must be a numpy\.ndarray; got Tensor",
    ),
    (
        "torch_backend_gets_numpy_params",
        lambda: torch_backend.multi_head_attention(*map(torch.from_numpy, (Q, KV, KV)), P),
        TypeError,
        r"params\.w_qkv must be a torch\.Tensor; got ndarray \(convert with params\.to_torch\(\)\)",
    ),
    (
        "numpy_backend_gets_tensor",
        lambda: np_backend.scaled_dot_product_attention(torch.ones(3, 4), x(5, 4), x(5, 4)),
        TypeError,
        r"query must be a numpy\.ndarray; got Tensor",
    ),
    (
        "torch_backend_gets_ndarray",
        lambda: torch_backend.softmax(x(3, 4)),
        TypeError,
        r"scores must be a torch\.Tensor; got ndarray",
    ),
    (
        "numpy_float16",
        lambda: np_backend.softmax(x(3, 4, dtype=np.float16)),
        TypeError,
        r"scores must have a floating dtype \(float32, float64\); got dtype float16",
    ),
    (
        "torch_float16",
        lambda: torch_backend.softmax(torch.ones(3, 4, dtype=torch.float16)),
        TypeError,
        r"scores must have a floating dtype \(torch\.float64, torch\.float32, "
        r"torch\.bfloat16\); got dtype torch\.float16",
    ),
    (
        "torch_key_padding_bool_lengths",
        lambda: torch_backend.key_padding_mask(torch.tensor([True, False]), 3),
        TypeError,
        r"lengths must be integers; got dtype torch\.bool",
    ),
    # devices: inputs, parameters and mask on one device (meta tensors have no values)
    (
        "torch_mask_on_another_device",
        lambda: torch_backend.multi_head_attention(
            *TQKV, P.to_torch(), torch.ones(2, 1, 3, 4, dtype=torch.bool, device="meta")
        ),
        TypeError,
        re.escape(
            "mask must be on the device of query (cpu); got mask on meta (inputs, parameters, "
            "mask and cache must share one device)"
        ),
    ),
    (
        "torch_mask_on_another_device_fast_path",
        lambda: torch_backend.multi_head_attention(
            *TQKV,
            P.to_torch(),
            torch.ones(2, 1, 3, 4, dtype=torch.bool, device="meta"),
            need_weights=False,
        ),
        TypeError,
        r"mask must be on the device of query \(cpu\); got mask on meta",
    ),
    (
        "torch_params_on_another_device",
        lambda: torch_backend.multi_head_attention(*TQKV, P.to_torch(device="meta")),
        TypeError,
        r"params\.w_qkv must be on the device of query \(cpu\); got params\.w_qkv on meta",
    ),
    (
        "torch_inputs_on_other_devices",
        lambda: torch_backend.multi_head_attention(
            TQKV[0], TQKV[1].to("meta"), TQKV[1].to("meta"), P.to_torch()
        ),
        TypeError,
        r"key must be on the device of query \(cpu\); got key on meta",
    ),
    (
        "torch_sdpa_value_on_another_device",
        lambda: torch_backend.scaled_dot_product_attention(
            torch.ones(3, 4), torch.ones(5, 4), torch.ones(5, 4, device="meta")
        ),
        TypeError,
        r"value must be on the device of query \(cpu\); got value on meta",
    ),
    (
        "torch_softmax_mask_on_another_device",
        lambda: torch_backend.softmax(
            torch.ones(3, 4), torch.ones(3, 4, dtype=torch.bool, device="meta")
        ),
        TypeError,
        r"mask must be on the device of scores \(cpu\); got mask on meta",
    ),
    (
        "torch_layer_norm_weight_on_another_device",
        lambda: torch_backend.layer_norm(torch.ones(2, D), torch.ones(D, device="meta")),
        TypeError,
        r"weight must be on the device of x \(cpu\); got weight on meta",
    ),
    (
        "torch_causal_mask_unknown_device",
        lambda: torch_backend.causal_mask(3, device="nodevice"),
        ValueError,
        re.escape(
            "device must name a torch device such as 'cpu', 'cuda:0' or 'meta'; "
            "got device='nodevice'"
        ),
    ),
    (
        "torch_causal_mask_device_of_another_kind",
        lambda: torch_backend.causal_mask(3, device=1.5),
        TypeError,
        r"device must be a torch\.device, a device name such as 'cpu', or None; got float 1\.5",
    ),
    (
        "torch_key_padding_meta_lengths",
        lambda: torch_backend.key_padding_mask(torch.tensor([1, 2], device="meta"), 3),
        TypeError,
        r"lengths must hold values; got a meta tensor",
    ),
    # tensors the backend cannot compute with
    (
        "torch_sparse_query",
        lambda: torch_backend.multi_head_attention(
            TQKV[0].to_sparse(), TQKV[1], TQKV[1], P.to_torch()
        ),
        TypeError,
        re.escape(
            "query must be a dense (strided) torch.Tensor; got layout torch.sparse_coo "
            "(convert with query.to_dense())"
        ),
    ),
    (
        "torch_sparse_mask",
        lambda: torch_backend.softmax(
            torch.ones(3, 4), torch.ones(3, 4, dtype=torch.bool).to_sparse()
        ),
        TypeError,
        r"mask must be a dense \(strided\) torch\.Tensor; got layout torch\.sparse_coo",
    ),
    (
        "torch_sparse_csr_params",
        lambda: torch_backend.multi_head_attention(
            *TQKV, P.to_torch().map(lambda t: t.to_sparse_csr() if t.ndim == 2 else t)
        ),
        TypeError,
        r"params\.w_qkv must be a dense \(strided\) torch\.Tensor; got layout "
        r"torch\.sparse_csr",
    ),
    (
        "torch_nested_query",
        lambda: torch_backend.softmax(
            torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)])
        ),
        TypeError,
        r"scores must be a dense torch\.Tensor; got a nested tensor",
    ),
    (
        "torch_need_weights_tensor",
        lambda: torch_backend.multi_head_attention(
            *TQKV, P.to_torch(), need_weights=torch.tensor([True, False])
        ),
        TypeError,
        re.escape("need_weights must be a bool; got Tensor tensor([ True, False])"),
    ),
    (
        "torch_layer_norm_tensor_eps",
        lambda: torch_backend.layer_norm(torch.ones(2, D), eps=torch.tensor(1e-5)),
        TypeError,
        re.escape(
            "eps must be a real number (int or float); got Tensor tensor(1.0000e-05); "
            "pass eps.item()"
        ),
    ),
    (
        "torch_cpu_shortcuts_not_bool",
        lambda: cpu_shortcuts.use("off").__enter__(),
        TypeError,
        re.escape("enabled must be a bool; got str 'off'"),
    ),
    # NumPy arrays whose arithmetic differs from a plain array's
    (
        "numpy_masked_array_query",
        lambda: np_backend.multi_head_attention(np.ma.masked_invalid(Q), KV, KV, P),
        TypeError,
        r"query must be a plain numpy\.ndarray; got a numpy\.ma\.MaskedArray, whose masked "
        r"entries would still be computed with",
    ),
    (
        "numpy_masked_array_with_nan_under_the_mask",
        lambda: np_backend.multi_head_attention(
            np.ma.masked_invalid(with_value(Q, (0, 0, 0), np.nan)), KV, KV, P
        ),
        TypeError,
        r"query must be a plain numpy\.ndarray; got a numpy\.ma\.MaskedArray",
    ),
    (
        "numpy_matrix_scores",
        lambda: np_backend.softmax(np.asmatrix(np.ones((3, 4)))),
        TypeError,
        r"scores must be a plain numpy\.ndarray; got a numpy\.matrix",
    ),
    # sizes and parameters
    (
        "init_params_indivisible",
        lambda: init_params(10, 3),
        ValueError,
        r"num_heads must divide d_model; got d_model=10, num_heads=3",
    ),
    (
        "init_params_zero_d_model",
        lambda: init_params(0, 1),
        ValueError,
        r"d_model must be positive; got d_model=0",
    ),
    (
        "init_params_negative_heads",
        lambda: init_params(8, -2),
        ValueError,
        r"num_heads must be positive; got num_heads=-2",
    ),
    (
        "init_params_float_d_model",
        lambda: init_params(8.0, 2),
        TypeError,
        r"d_model must be an int; got float 8\.0",
    ),
    (
        "init_params_bool_heads",
        lambda: init_params(8, True),
        TypeError,
        r"num_heads must be an int; got bool True",
    ),
    (
        "init_params_integer_dtype",
        lambda: init_params(8, 2, dtype=np.int32),
        TypeError,
        r"dtype must be float32 or float64; got dtype int32",
    ),
    (
        "init_params_bias_not_bool",
        lambda: init_params(8, 2, bias="no"),
        TypeError,
        re.escape("bias must be a bool; got str 'no'"),
    ),
    (
        "init_params_float_seed",
        lambda: init_params(8, 2, seed=1.5),
        TypeError,
        re.escape("seed must be an int; got float 1.5"),
    ),
    (
        "init_params_string_seed",
        lambda: init_params(8, 2, seed="abc"),
        TypeError,
        re.escape("seed must be an int; got str 'abc'"),
    ),
    (
        "init_params_numpy_float_seed",
        lambda: init_params(8, 2, seed=np.float64(3.0)),
        TypeError,
        re.escape("seed must be an int; got float64 np.float64(3.0)"),
    ),
    (
        "init_params_tensor_seed",
        lambda: init_params(8, 2, seed=torch.tensor(3)),
        TypeError,
        re.escape("seed must be an int; got Tensor tensor(3)"),
    ),
    (
        "init_params_negative_seed",
        lambda: init_params(8, 2, seed=-1),
        ValueError,
        re.escape("seed must be a non-negative int; got seed=-1"),
    ),
    (
        "init_params_torch_dtype",
        lambda: init_params(8, 2, dtype=torch.float32),
        TypeError,
        re.escape(
            "dtype must be a NumPy dtype (float32 or float64); got torch.float32, a torch dtype "
            "(convert afterwards with .to_torch(torch.float32))"
        ),
    ),
    (
        "init_params_unknown_dtype",
        lambda: init_params(8, 2, dtype="float33"),
        TypeError,
        re.escape("dtype must be float32 or float64; got str 'float33'"),
    ),
    (
        "params_to_numpy_integer_dtype",
        lambda: P.to_numpy(np.int32),
        TypeError,
        re.escape("dtype must be float16 or float32 or float64; got dtype int32"),
    ),
    (
        "params_to_torch_numpy_dtype",
        lambda: P.to_torch(np.float32),
        TypeError,
        r"dtype must be a floating torch\.dtype or None; got the type numpy\.float32",
    ),
    (
        "params_to_torch_unknown_device",
        lambda: P.to_torch(device="nodevice"),
        ValueError,
        r"device must name a torch device such as 'cpu', 'cuda:0' or 'meta'; got "
        r"device='nodevice'",
    ),
    (
        "params_head_not_an_int",
        lambda: P.head(1.0),
        TypeError,
        re.escape("h must be an int; got float 1.0"),
    ),
    (
        "params_w_qkv_shape",
        lambda: MHAParams(np.ones((4, 7)), np.ones((4, 4)), None, None, 2),
        ValueError,
        r"w_qkv must have shape \(D, D \+ 2 H_kv Dh\) with Dh = 2; got \(4, 7\)",
    ),
    (
        "params_w_qkv_rank",
        lambda: MHAParams(np.ones(12), np.ones((4, 4)), None, None, 2),
        ValueError,
        r"w_qkv must have shape \(D, D \+ 2 H_kv Dh\); got \(12,\)",
    ),
    (
        "params_w_o_shape",
        lambda: MHAParams(np.ones((4, 12)), np.ones((4, 3)), None, None, 2),
        ValueError,
        r"w_o must have shape \(D, D\) = \(4, 4\); got \(4, 3\)",
    ),
    (
        "params_b_qkv_shape",
        lambda: MHAParams(np.ones((4, 12)), np.ones((4, 4)), np.ones(8), None, 2),
        ValueError,
        r"b_qkv must have shape \(D \+ 2 H_kv Dh,\) = \(12,\); got \(8,\)",
    ),
    (
        "params_b_o_shape",
        lambda: MHAParams(np.ones((4, 12)), np.ones((4, 4)), None, np.ones(3), 2),
        ValueError,
        r"b_o must have shape \(D,\) = \(4,\); got \(3,\)",
    ),
    (
        "params_indivisible_heads",
        lambda: MHAParams(np.ones((4, 12)), np.ones((4, 4)), None, None, 3),
        ValueError,
        r"num_heads must divide d_model; got d_model=4, num_heads=3",
    ),
    (
        "params_float_heads",
        lambda: MHAParams(np.ones((4, 12)), np.ones((4, 4)), None, None, 2.0),
        TypeError,
        r"num_heads must be an int; got float 2\.0",
    ),
    (
        "params_list_weights",
        lambda: MHAParams(np.ones((4, 12)).tolist(), np.ones((4, 4)), None, None, 2),
        TypeError,
        r"w_qkv must be a numpy\.ndarray or a torch\.Tensor; got list",
    ),
    (
        "params_mixed_libraries",
        lambda: MHAParams(np.ones((4, 12)), torch.ones(4, 4), None, None, 2),
        TypeError,
        r"all parameters must come from one library; got w_qkv=numpy, w_o=torch",
    ),
    (
        "from_qkv_partial_biases",
        lambda: MHAParams.from_qkv(*(np.eye(4),) * 4, num_heads=2, b_q=np.zeros(4)),
        ValueError,
        r"b_q, b_k and b_v must be given all three or none; got b_q=\(4,\), b_k=None, b_v=None",
    ),
    (
        "from_qkv_weight_shape",
        lambda: MHAParams.from_qkv(np.eye(4), np.ones((4, 2)), np.eye(4), np.eye(4), 2),
        ValueError,
        r"w_k and w_v must have one shape \(D, H_kv Dh\) with the rows of w_q; got "
        r"w_q \(4, 4\), w_k \(4, 2\), w_v \(4, 4\)",
    ),
    (
        "params_head_out_of_range",
        lambda: P.head(H),
        ValueError,
        r"h must be in \[0, num_heads=2\); got h=2",
    ),
    # the module and the converters
    (
        "module_indivisible",
        lambda: mha.MultiHeadAttention(10, 3),
        ValueError,
        r"num_heads must divide d_model; got d_model=10, num_heads=3",
    ),
    (
        "module_float_heads",
        lambda: mha.MultiHeadAttention(8, 2.0),
        TypeError,
        r"num_heads must be an int; got float 2\.0",
    ),
    (
        "module_integer_dtype",
        lambda: mha.MultiHeadAttention(8, 2, dtype=torch.int64),
        TypeError,
        r"dtype must be a floating dtype \(.*\); got dtype torch\.int64",
    ),
    (
        "module_numpy_input",
        lambda: mha.MultiHeadAttention(8, 2)(Q),
        TypeError,
        r"query must be a torch\.Tensor; got ndarray",
    ),
    (
        "module_input_dtype",
        lambda: mha.MultiHeadAttention(8, 2)(torch.from_numpy(Q)),
        TypeError,
        r"all inputs and parameters must share one dtype; got query=torch\.float64, .*"
        r"params\.w_qkv=torch\.float32",
    ),
    (
        "from_params_not_params",
        lambda: mha.MultiHeadAttention.from_params({"w_qkv": P.w_qkv}),
        TypeError,
        r"params must be MHAParams; got dict",
    ),
    (
        "from_params_one_bias",
        lambda: mha.MultiHeadAttention.from_params(MHAParams(P.w_qkv, P.w_o, P.b_qkv, None, H)),
        ValueError,
        r"params must have both biases or neither \(b_qkv and b_o\); got b_qkv=present, b_o=None",
    ),
    (
        "from_torch_mha_not_mha",
        lambda: mha.from_torch_mha(nn.Linear(D, D)),
        TypeError,
        r"m must be a torch\.nn\.MultiheadAttention; got Linear",
    ),
    (
        "from_torch_mha_kdim",
        lambda: mha.from_torch_mha(nn.MultiheadAttention(D, H, kdim=4, vdim=4)),
        ValueError,
        r"m must have kdim == vdim == embed_dim; got embed_dim=8, kdim=4, vdim=4",
    ),
    (
        "from_torch_mha_vdim_only",
        lambda: mha.from_torch_mha(nn.MultiheadAttention(D, H, vdim=4)),
        ValueError,
        r"m must have kdim == vdim == embed_dim; got embed_dim=8, kdim=8, vdim=4",
    ),
    (
        "from_torch_mha_bias_kv",
        lambda: mha.from_torch_mha(nn.MultiheadAttention(D, H, add_bias_kv=True)),
        ValueError,
        r"m must not use add_bias_kv or add_zero_attn; got add_bias_kv=True, "
        r"add_zero_attn=False",
    ),
    (
        "from_torch_mha_zero_attn",
        lambda: mha.from_torch_mha(nn.MultiheadAttention(D, H, add_zero_attn=True)),
        ValueError,
        r"m must not use add_bias_kv or add_zero_attn; got add_bias_kv=False, "
        r"add_zero_attn=True",
    ),
    (
        "module_float_seed",
        lambda: mha.MultiHeadAttention(8, 2, seed=0.5),
        TypeError,
        re.escape("seed must be an int; got float 0.5"),
    ),
    (
        "module_bias_not_bool",
        lambda: mha.MultiHeadAttention(8, 2, "yes"),
        TypeError,
        re.escape("bias must be a bool; got str 'yes'"),
    ),
    (
        "module_unknown_device",
        lambda: mha.MultiHeadAttention(8, 2, device="nodevice"),
        ValueError,
        r"device must name a torch device such as 'cpu', 'cuda:0' or 'meta'; got "
        r"device='nodevice'",
    ),
    (
        "module_need_weights_not_bool",
        lambda: mha.MultiHeadAttention(8, 2)(torch.ones(1, 2, 8), need_weights="yes"),
        TypeError,
        re.escape("need_weights must be a bool; got str 'yes'"),
    ),
    (
        "to_torch_mha_none",
        lambda: mha.to_torch_mha(None),
        TypeError,
        r"source must be a mha\.MultiHeadAttention or MHAParams; got NoneType",
    ),
    (
        "to_torch_mha_string",
        lambda: mha.to_torch_mha("params"),
        TypeError,
        r"source must be a mha\.MultiHeadAttention or MHAParams; got str",
    ),
    (
        "to_torch_mha_torch_module",
        lambda: mha.to_torch_mha(nn.MultiheadAttention(D, H)),
        TypeError,
        r"source must be a mha\.MultiHeadAttention or MHAParams; got a "
        r"torch\.nn\.MultiheadAttention, which is PyTorch's module already \(from_torch_mha "
        r"converts it to this package's\)",
    ),
    (
        "to_torch_mha_batch_first_not_bool",
        lambda: mha.to_torch_mha(P, batch_first="yes"),
        TypeError,
        re.escape("batch_first must be a bool; got str 'yes'"),
    ),
    (
        "from_torch_mha_dropout",
        lambda: mha.from_torch_mha(nn.MultiheadAttention(D, H, dropout=0.5)),
        ValueError,
        re.escape(
            "m must have dropout=0.0: MultiHeadAttention has no attention dropout, so in "
            "training mode it would compute another map; got dropout=0.5 (set m.dropout = 0.0 "
            "to convert the map m computes in eval mode)"
        ),
    ),
    (
        "from_torch_mha_float16",
        lambda: mha.from_torch_mha(nn.MultiheadAttention(D, H, dtype=torch.float16)),
        TypeError,
        r"m must have a floating dtype \(torch\.float64, torch\.float32, torch\.bfloat16\); "
        r"got m\.in_proj_weight\.dtype torch\.float16 \(convert with m\.to\(torch\.float32\)\)",
    ),
    (
        "from_torch_mha_one_bias",
        lambda: mha.from_torch_mha(_without_out_proj_bias(nn.MultiheadAttention(D, H))),
        ValueError,
        re.escape(
            "m must have both biases or neither (in_proj_bias and out_proj.bias); got "
            "in_proj_bias=present, out_proj.bias=None"
        ),
    ),
    (
        "to_torch_attn_mask_float",
        lambda: mha.to_torch_attn_mask(torch.zeros(3, 3), H),
        TypeError,
        r"mask must be a boolean tensor \(True = may attend\); got dtype torch\.float32",
    ),
    (
        "to_torch_attn_mask_numpy",
        lambda: mha.to_torch_attn_mask(np.ones((3, 3), dtype=bool), H),
        TypeError,
        r"mask must be a boolean tensor \(True = may attend\); got ndarray",
    ),
    (
        "to_torch_attn_mask_rank",
        lambda: mha.to_torch_attn_mask(torch.ones(2, 3, 3, dtype=torch.bool), H),
        ValueError,
        r"mask must be 2-D \(L, S\) or 4-D \(B, H, L, S\); got 3-D shape \(2, 3, 3\)",
    ),
    (
        "to_torch_attn_mask_heads",
        lambda: mha.to_torch_attn_mask(torch.ones(1, 3, 3, 3, dtype=torch.bool), H),
        ValueError,
        r"mask head dimension must be 1 or num_heads=2; got shape \(1, 3, 3, 3\)",
    ),
    (
        "to_torch_attn_mask_zero_q_len",
        lambda: mha.to_torch_attn_mask(torch.ones(1, 4, dtype=torch.bool), H, q_len=0),
        ValueError,
        re.escape("q_len must be positive; got q_len=0"),
    ),
    (
        "to_torch_attn_mask_q_len_mismatch",
        lambda: mha.to_torch_attn_mask(torch.ones(1, 1, 3, 4, dtype=torch.bool), H, q_len=5),
        ValueError,
        re.escape("mask query dimension must be 1 or q_len=5; got shape (1, 1, 3, 4)"),
    ),
    (
        "to_torch_attn_mask_2d_q_len_mismatch",
        lambda: mha.to_torch_attn_mask(torch.ones(3, 4, dtype=torch.bool), H, q_len=5),
        ValueError,
        re.escape("mask query dimension must be 1 or q_len=5; got shape (3, 4)"),
    ),
    (
        "to_torch_attn_mask_negative_batch",
        lambda: mha.to_torch_attn_mask(torch.ones(1, 1, 1, 4, dtype=torch.bool), H, batch_size=-1),
        ValueError,
        re.escape("batch_size must be positive; got batch_size=-1"),
    ),
    (
        "to_torch_attn_mask_float_batch",
        lambda: mha.to_torch_attn_mask(torch.ones(1, 1, 1, 4, dtype=torch.bool), H, batch_size=2.0),
        TypeError,
        re.escape("batch_size must be an int; got float 2.0"),
    ),
    (
        "to_torch_attn_mask_batch_mismatch",
        lambda: mha.to_torch_attn_mask(torch.ones(2, 1, 1, 4, dtype=torch.bool), H, batch_size=3),
        ValueError,
        re.escape("mask batch dimension must be 1 or batch_size=3; got shape (2, 1, 1, 4)"),
    ),
    (
        "to_torch_attn_mask_kv_len_mismatch",
        lambda: mha.to_torch_attn_mask(torch.ones(2, 2, 3, 4, dtype=torch.bool), H, kv_len=5),
        ValueError,
        re.escape("mask key dimension must be 1 or kv_len=5; got shape (2, 2, 3, 4)"),
    ),
    (
        "to_torch_attn_mask_sparse",
        lambda: mha.to_torch_attn_mask(torch.ones(3, 4, dtype=torch.bool).to_sparse(), H),
        TypeError,
        r"mask must be a dense \(strided\) torch\.Tensor; got layout torch\.sparse_coo",
    ),
    # grouped-query attention and the key/value cache get the same checks
    (
        "torch_cache_on_another_device",
        lambda: torch_backend.multi_head_attention(
            *_step("torch"), P.to_torch(), cache=_cache(torch.float64, device="meta")
        ),
        TypeError,
        re.escape(
            "cache must be on the device of query (cpu); got cache on meta (inputs, "
            "parameters, mask and cache must share one device)"
        ),
    ),
    (
        "module_cache_on_another_device",
        lambda: mha.MultiHeadAttention(D, H, dtype=torch.float64)(
            *_step("torch"), cache=_cache(torch.float64, device="meta")
        ),
        TypeError,
        r"cache must be on the device of query \(cpu\); got cache on meta",
    ),
    (
        "torch_cache_of_another_dtype",
        lambda: torch_backend.multi_head_attention(
            *_step("torch"), P.to_torch(), cache=_cache(torch.float32)
        ),
        TypeError,
        re.escape(
            "cache must have the inputs' dtype torch.float64; got a cache of dtype torch.float32"
        ),
    ),
    (
        "numpy_cache_of_another_dtype",
        lambda: np_backend.multi_head_attention(*_step("numpy"), P, cache=_cache(np.float32)),
        TypeError,
        "cache must have the inputs' dtype float64; got a cache of dtype float32",
    ),
    (
        "numpy_cache_with_the_wrong_kv_heads",
        lambda: np_backend.multi_head_attention(
            *_step("numpy"), P, cache=_cache(np.float64, num_kv_heads=1)
        ),
        ValueError,
        re.escape(
            "cache must have the inputs' batch size and the layer's num_kv_heads and d_head: "
            "want (B, H_kv, Dh) = (2, 2, 4); got (2, 1, 4)"
        ),
    ),
    (
        "torch_cache_with_the_wrong_kv_heads",
        lambda: torch_backend.multi_head_attention(
            *_step("torch"), P.to_torch(), cache=_cache(torch.float64, num_kv_heads=1)
        ),
        ValueError,
        re.escape("want (B, H_kv, Dh) = (2, 2, 4); got (2, 1, 4)"),
    ),
    (
        "numpy_cache_of_torch_buffers",
        lambda: np_backend.multi_head_attention(*_step("numpy"), P, cache=_cache(torch.float64)),
        TypeError,
        "cache must hold numpy.ndarray buffers like the inputs; got Tensor",
    ),
    (
        "numpy_cached_keys_overflow_the_scores",
        lambda: _attend_to_huge_cached_keys("numpy"),
        ValueError,
        r"multi_head_attention output overflowed float32 although every input is finite: the "
        r"scores Q K\^T / sqrt\(Dh\) reach 1\.6e\+42 in float64",
    ),
    (
        "torch_cached_keys_overflow_the_scores",
        lambda: _attend_to_huge_cached_keys("torch"),
        ValueError,
        r"overflowed torch\.float32 although every input is finite: the scores Q K\^T",
    ),
    (
        "kv_cache_bool_batch_size",
        lambda: mha.core.kv_cache.KVCache(True, H, D // H, 4),
        TypeError,
        re.escape("batch_size must be an int; got bool True"),
    ),
    (
        "kv_cache_unknown_device",
        lambda: mha.core.kv_cache.KVCache(2, H, D // H, 4, dtype=torch.float32, device="nodevice"),
        ValueError,
        "device must name a torch device such as 'cpu', 'cuda:0' or 'meta'; got device='nodevice'",
    ),
    (
        "kv_cache_truncate_bool",
        lambda: mha.core.kv_cache.KVCache(2, H, D // H, 4).truncate(True),
        TypeError,
        re.escape("length must be an int; got bool True"),
    ),
    (
        "init_params_bool_kv_heads",
        lambda: init_params(D, H, num_kv_heads=True),
        TypeError,
        re.escape("num_kv_heads must be an int; got bool True"),
    ),
    (
        "init_params_kv_heads_not_dividing",
        lambda: init_params(D, H, num_kv_heads=3),
        ValueError,
        re.escape("num_kv_heads must divide num_heads; got num_heads=2, num_kv_heads=3"),
    ),
    (
        "init_params_float_kv_heads",
        lambda: init_params(D, H, num_kv_heads=np.float64(1.0)),
        TypeError,
        r"num_kv_heads must be an int; got float64 (np\.float64\()?1\.0",
    ),
    (
        "module_float_kv_heads",
        lambda: mha.MultiHeadAttention(D, H, num_kv_heads=1.0),
        TypeError,
        re.escape("num_kv_heads must be an int; got float 1.0"),
    ),
    (
        "module_kv_heads_not_dividing",
        lambda: mha.MultiHeadAttention(D, H, num_kv_heads=3),
        ValueError,
        re.escape("num_kv_heads must divide num_heads; got num_heads=2, num_kv_heads=3"),
    ),
    (
        "params_bool_kv_heads",
        lambda: MHAParams(P.w_qkv, P.w_o, P.b_qkv, P.b_o, H, True),
        TypeError,
        re.escape("num_kv_heads must be an int; got bool True"),
    ),
    (
        "to_torch_attn_mask_zero_heads",
        lambda: mha.to_torch_attn_mask(torch.ones(3, 3, dtype=torch.bool), 0),
        ValueError,
        r"num_heads must be positive; got num_heads=0",
    ),
]


def _without_out_proj_bias(m: nn.MultiheadAttention) -> nn.MultiheadAttention:
    m.out_proj.bias = None
    return m


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [pytest.param(c, e, m, id=i) for i, c, e, m in ONE_BACKEND],
)
def test_bad_input_raises_a_clear_error_in_one_backend(
    call: Callable[[], Any], exc: type[Exception], match: str
) -> None:
    with pytest.raises(exc, match=match):
        call()


def test_no_assert_statements_in_src(repo_root) -> None:
    """``assert`` vanishes under ``python -O``; checks in src/ must raise real errors."""
    offenders = [
        f"{path.relative_to(repo_root)}:{n}"
        for path in sorted((repo_root / "src" / "mha").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.match(r"\s*assert\b", line)
    ]
    assert offenders == []


# ---- generated inputs: every call is answered correctly or refused by our own error -------

_MHA_DIR = Path(mha.__file__).parent


def _raised_by_mha(error: BaseException) -> bool:
    """True when a ``raise`` statement of the ``mha`` package raised ``error``: the innermost
    frame is in the package and its line is a ``raise`` (a TypeError that a NumPy ufunc
    raises, called from a line of mha, is not mha's own error)."""
    tb = error.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = tb.tb_frame.f_code.co_filename
    line = linecache.getline(path, tb.tb_lineno).strip()
    return _MHA_DIR in Path(path).parents and line.startswith("raise ")


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """``("ok", output)`` or ``("error", exception type)``; anything not ours fails the test."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mha.core.mask_rules.AmbiguousMaskWarning)
            warnings.simplefilter("ignore", RuntimeWarning)  # overflow inside, then our error
            out, _ = call()
    except (ValueError, TypeError) as error:
        assert _raised_by_mha(error), f"{type(error).__name__} from outside mha: {error}"
        return "error", type(error)
    return "ok", out


def _mostly(draw: st.DrawFn, bad: list[str], what: str, valid: list, invalid: list) -> Any:
    """One of ``valid`` seven times in eight, else one of ``invalid`` (then ``what`` joins
    ``bad``, the reasons the call must be refused)."""
    if draw(st.integers(0, 7)):
        return draw(st.sampled_from(valid))
    bad.append(what)
    return draw(st.sampled_from(invalid))


@st.composite
def _bad_calls(draw: st.DrawFn) -> dict[str, Any]:
    """Arguments of ``multi_head_attention``, valid or not in shape, dtype, mask and options,
    with ``bad``: the reasons a call must be refused (empty when it may be accepted)."""
    bad: list[str] = []
    B = draw(st.sampled_from([0, 1, 2, 3]))  # B = 0 is valid: empty outputs
    L, S = _mostly(draw, bad, "L", [1, 2, 3], [0]), _mostly(draw, bad, "S", [1, 3], [0])
    D, Hp = draw(st.sampled_from([4, 6])), draw(st.sampled_from([1, 2]))
    Hkv = _mostly(draw, [], "num_kv_heads", [None, 1, Hp], [True, 2.0, 3, 0])
    dtype = _mostly(draw, bad, "dtype", [np.float64, np.float32], [np.float16, np.int64, np.bool_])
    q_shape = _mostly(
        draw, bad, "query shape", [(B, L, D)], [(L, D), (B, L, D + 1), (B, L, D, 1), (B + 1, L, D)]
    )
    mask_shape = _mostly(
        draw,
        bad,
        "mask shape",
        # (B, S) and (B, L, S) broadcast as (L, S) and (H, L, S) when the sizes allow (then
        # both backends read them so, or refuse the ambiguous ones); the last two never do
        [None, (L, S), (B, 1, 1, S), (B, Hp, L, S), (1, Hp, L, S), (S,), (Hp, L, S), (B, S)]
        + [(B, L, S)],
        [(2, 7), (B, Hp + 1, L, S)],
    )
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    scale = _mostly(draw, [], "magnitude", [1.0], [1e20, 1e30])  # overflows float32 only
    with np.errstate(over="ignore", invalid="ignore"):  # 1e30 overflows float16 on purpose
        query = (scale * rng.standard_normal(q_shape)).astype(dtype)
    kv = rng.standard_normal((B, S, D)).astype(dtype)
    mask = None
    if mask_shape is not None:
        mask = rng.random(mask_shape) < 0.7
        if not draw(st.integers(0, 5)):
            mask = mask.astype(np.float64)  # a float mask, which must be refused
            bad.append("mask dtype")
    return {
        "sizes": (D, Hp, Hkv),
        "query": query,
        "kv": kv,
        "mask": mask,
        "need_weights": _mostly(
            draw, bad, "need_weights", [True, False], [None, "no", 0, np.bool_(True)]
        ),
        "form": _mostly(
            draw, bad, "form", ["fused", "packed", "per_head", "tiled"], ["bogus", None]
        ),
        "mask_on_meta": draw(st.booleans()),
        "bad": bad,
    }


@settings(max_examples=300, deadline=None)
@given(case=_bad_calls())
def test_generated_calls_are_answered_correctly_or_refused_by_our_errors(case) -> None:
    D, Hp, Hkv = case["sizes"]
    params = _outcome(lambda: (init_params(D, Hp, num_kv_heads=Hkv, seed=1), None))
    if params[0] == "error":
        event(f"init_params refused: {params[1].__name__}")
        return  # refused by our own error: the sizes are checked once, here
    query, kv, mask = case["query"], case["kv"], case["mask"]
    params = params[1].to_numpy(query.dtype) if query.dtype.kind == "f" else params[1]
    options = {"need_weights": case["need_weights"], "form": case["form"]}
    ours = _outcome(lambda: np_backend.multi_head_attention(query, kv, kv, params, mask, **options))
    tq, tkv = torch.from_numpy(query), torch.from_numpy(kv)
    tmask = None if mask is None else torch.from_numpy(mask)
    if case["form"] == "tiled":  # NumPy's form only: PyTorch refuses it; its fused form answers
        tiled = _outcome(
            lambda: torch_backend.multi_head_attention(
                tq, tkv, tkv, params.to_torch(), tmask, **options
            )
        )
        assert tiled[0] == "error", f"PyTorch accepted form='tiled': {tiled}"
        if ours[0] == "error" and case["need_weights"] is True:
            return  # refused for the weights the tiled form never forms; fused would give them
        options["form"] = "fused"
    theirs = _outcome(
        lambda: torch_backend.multi_head_attention(
            tq, tkv, tkv, params.to_torch(), tmask, **options
        )
    )
    event(f"{ours[0]}: {ours[1].__name__ if ours[0] == 'error' else 'accepted'}")
    assert ours[0] == theirs[0], f"NumPy {ours}, PyTorch {theirs}"
    if case["bad"]:  # a wrong shape, dtype, magnitude or option: never an answer
        assert ours[0] == "error", f"accepted although {case['bad']} are wrong"
    if ours[0] == "error":
        assert ours[1] == theirs[1]  # the same kind of error in both backends
        return
    out, tout = ours[1], theirs[1].numpy()
    assert np.isfinite(out).all() and np.isfinite(tout).all()
    if out.size:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mha.core.mask_rules.AmbiguousMaskWarning)
            tol, _ = mha.numerics.tolerance.attention_tolerance(query, kv, kv, params, mask)
        mha.numerics.tolerance.assert_close(tout, out, tol, name="PyTorch output")
    if mask is not None and case["mask_on_meta"]:  # the same call with the mask elsewhere
        meta = torch.from_numpy(mask).to("meta")
        moved = _outcome(
            lambda: torch_backend.multi_head_attention(
                tq, tkv, tkv, params.to_torch(), meta, **options
            )
        )
        assert moved == ("error", TypeError)


# ---- flags, sizes and numbers of the modules that measure heads ----------------------------
#
# tests/test_api_search.py refuses every bad argument of every public callable of the
# analysis, detector, model, training, cost and display modules once (a flag that is not a
# bool gets a TypeError naming it, a NaN rate a ValueError, ...).


# ---- a head width of zero: one clear error everywhere ---------------------------------------

_ZERO_WIDTH = r"query and key must have a head width Dh \(last dimension\) of at least 1"


def _zero_width_qkv():
    q = np.zeros((2, 3, 0))
    v = np.ones((2, 4, 2))
    return q, np.zeros((2, 4, 0)), v


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda q, k, v: np_backend.scaled_dot_product_attention(q, k, v), id="numpy"),
        pytest.param(
            lambda q, k, v: torch_backend.scaled_dot_product_attention(
                *(torch.from_numpy(x) for x in (q, k, v))
            ),
            id="torch",  # the CPU shortcut, without autograd
        ),
        pytest.param(
            lambda q, k, v: torch_backend.scaled_dot_product_attention(
                *(torch.from_numpy(x).requires_grad_() for x in (q, k, v))
            ),
            id="torch-autograd",
        ),
        pytest.param(lambda q, k, v: mha.backends.tiled.attention(q, k, v), id="tiled"),
        pytest.param(
            lambda q, k, v: mha.backends.tiled.three_pass_attention(q, k, v), id="three-pass"
        ),
        pytest.param(
            lambda q, k, v: mha.numerics.tolerance.tiled_attention_tolerance(q, k, v),
            id="tolerance",
        ),
        pytest.param(
            lambda q, k, v: mha.numerics.backward.scaled_dot_product_attention(
                q, k, v, np.ones((2, 3, 4)), np.ones((2, 3, 2))
            ),
            id="backward",
        ),
        pytest.param(
            lambda q, k, v: mha.numerics.precision.rounded_attention(
                *(torch.from_numpy(x) for x in (q, k, v))
            ),
            id="rounded",
        ),
    ],
)
def test_a_zero_head_width_is_refused_alike_everywhere(call) -> None:
    """The scores divide by sqrt(Dh): with Dh = 0 every backend and form refuses, instead of
    a ZeroDivisionError or a uniform average with a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no RuntimeWarning before the error
        with pytest.raises(ValueError, match=_ZERO_WIDTH):
            call(*_zero_width_qkv())


# ---- generated bad inputs of the numeric modules: tiled, backward, precision, tolerance ----
#
# Every public function of the four modules (tiled.attention and rounded_attention twice:
# their options and their scores' range; the key/value cache has tests/test_kv_cache_search.py).
# Each case is one public function with valid arguments, then (seven times in eight) one
# argument replaced by a mutation. A "bad" mutation must be refused by mha's own error; a
# "same" mutation (the same numbers in another container: a tensor or a list for an array)
# must be refused by mha's own error or give exactly the valid call's result. The valid call
# itself must succeed and agree with a reference route within the library's tolerance.


def _nan(a):
    b = np.array(a, dtype=np.float64 if a.dtype.kind != "f" else a.dtype, copy=True)
    b.flat[0] = np.nan
    return b


def _inf(a):
    b = np.array(a, copy=True)
    b.flat[-1] = -np.inf
    return b


def _tnan(t):
    t = t.clone()
    t.view(-1)[0] = float("nan")
    return t


_MUTATIONS = {
    "None": lambda a: None,
    "nan": _nan,
    "inf": _inf,
    "int": lambda a: a.astype(np.int64),
    "float16": lambda a: a.astype(np.float16),
    "mixed": lambda a: a.astype(np.float32 if a.dtype == np.float64 else np.float64),
    "masked": lambda a: np.ma.masked_array(a, mask=np.zeros(a.shape, bool)),
    "tensor": lambda a: torch.from_numpy(np.array(a)),
    "list": lambda a: np.asarray(a).tolist(),
    "width+1": lambda a: np.concatenate([a, a[..., :1]], axis=-1),
    "length+1": lambda a: np.concatenate([a, a[..., :1, :]], axis=-2),
    "batch+1": lambda a: np.concatenate([a, a[:1]], axis=0),
    "0-D": lambda a: np.asarray(a).reshape(-1)[0],
    "float mask": lambda m: np.where(m, 0.0, -np.inf),
    "mask shape": lambda m: np.ones((m.shape[-2] + 1, m.shape[-1]), bool),
    "t-nan": _tnan,
    "t-meta": lambda t: t.to("meta"),
    "t-int": lambda t: t.long(),
    "t-numpy": lambda t: t.numpy(),
    "t-batch+1": lambda t: torch.cat([t, t[:1]], dim=0),
    "t-width+1": lambda t: torch.cat([t, t[..., :1]], dim=-1),
    "t-huge": lambda t: 1e305 * t,  # finite, but the scores go beyond float64's range
    "torch half dtype": lambda d: torch.float16,
    "zero": lambda x: 0,
    "negative": lambda x: -1,
    "fraction": lambda x: 1.5,
    "bool": lambda x: True,
    "string": lambda x: "1",
    "nan number": lambda x: float("nan"),
    "inf number": lambda x: float("inf"),
    "huge": lambda x: 1e39,  # beyond float16's and float32's largest
    "int dtype": lambda d: np.int32,
    "torch int dtype": lambda d: torch.int8,
    "numpy float dtype": lambda d: np.float16,
    "not a dtype": lambda d: "nope",
    "dict": lambda p: {},
    "other width": lambda p: init_params(6, 2, seed=0),
    "other dtype": lambda p: p.to_numpy(np.float32 if p.dtype == np.float64 else np.float64),
    "tuple": lambda s: (),
    "huge int": lambda x: 10**400,  # an int no float holds
    "numpy dtype": lambda d: np.float32,
}

_ARRAY_BAD = ["None", "nan", "inf", "int", "float16", "mixed", "masked", "tensor", "list"]
_ONE_ARRAY_BAD = [m for m in _ARRAY_BAD if m != "mixed"]  # one float array: any float dtype
_NUMBER_BAD = ["None", "zero", "negative", "fraction", "bool", "string"]
_TENSOR_BAD = ["None", "t-nan", "t-meta", "t-int", "t-numpy"]
_DTYPE_BAD = ["None", "int dtype", "not a dtype"]
_PARAMS_BAD = ["None", "dict", "other width", "other dtype"]


def _numeric_cases():
    """name -> (build(rng, dtype) -> valid arguments, call, bad, same, reference)."""

    def qkv(rng, dt, B=2, L=3, S=4, Dh=4, Dv=3):
        return {
            "query": rng.standard_normal((B, L, Dh)).astype(dt),
            "key": rng.standard_normal((B, S, Dh)).astype(dt),
            "value": rng.standard_normal((B, S, Dv)).astype(dt),
            "mask": rng.random((L, S)) < 0.8,
        }

    def attention_reference(a, got):
        want = np_backend.scaled_dot_product_attention(
            a["query"], a["key"], a["value"], a.get("mask")
        )[0]
        tol = mha.numerics.tolerance.tiled_attention_tolerance(a["query"], a["key"], a["value"])[0]
        mha.numerics.tolerance.assert_close(got[0], want, tol)

    qkv_bad = {
        "query": [*_ARRAY_BAD, "width+1", "batch+1", "0-D"],
        "key": [*_ARRAY_BAD, "width+1", "length+1"],
        "value": [*_ARRAY_BAD, "length+1", "batch+1"],
        "mask": ["float mask", "mask shape", "tensor"],
    }

    def layer(rng, dt):
        params = init_params(8, 4, num_kv_heads=int(rng.choice([1, 2, 4])), seed=1, dtype=dt)
        x = {n: rng.standard_normal((2, 3 if n == "q" else 4, 8)).astype(dt) for n in "qkv"}
        return {
            "query": x["q"],
            "key": x["k"],
            "value": x["v"],
            "params": params,
            "mask": np_backend.causal_mask(3, 4),
        }

    def saved_and_d_out(rng, dt):
        a = layer(rng, dt)
        _, saved = mha.numerics.backward.multi_head_attention_forward(**a)
        return {"saved": saved, "d_out": rng.standard_normal((2, 3, 8)).astype(dt)}

    def sdpa_grads(rng, dt):
        a = qkv(rng, dt)
        out, lse = mha.backends.tiled.attention(a["query"], a["key"], a["value"], a["mask"])
        w = np_backend.scaled_dot_product_attention(a["query"], a["key"], a["value"], a["mask"])
        d_out = rng.standard_normal(out.shape).astype(dt)
        return {**a, "weights": w[1], "out": out, "lse": lse, "d_out": d_out}

    def sdpa_grads_reference(a, got):
        want = mha.numerics.backward.tiled_attention(
            a["query"], a["key"], a["value"], a["out"], a["lse"], a["d_out"], a["mask"]
        )
        tols = mha.numerics.tolerance.attention_gradient_tolerance(
            a["query"], a["key"], a["value"], a["weights"], a["d_out"]
        )
        for g, w, t in zip(got, want, tols, strict=True):
            mha.numerics.tolerance.assert_close(g, w, t)

    grad_bad = {
        "query": [*_ARRAY_BAD, "width+1", "batch+1"],
        "key": [*_ARRAY_BAD, "length+1"],
        "value": [*_ARRAY_BAD, "length+1"],
        "d_out": [*_ARRAY_BAD, "width+1", "batch+1"],
    }

    def torch_qkv(rng, dt):
        return {n: torch.from_numpy(x) for n, x in qkv(rng, np.float64).items() if n != "mask"} | {
            "weights_dtype": torch.float16
        }

    def rounded_reference(a, got):
        q, k, v = (a[n].numpy() for n in ("query", "key", "value"))
        want = np_backend.scaled_dot_product_attention(q, k, v)[0]
        tol = (
            mha.numerics.tolerance.unit_roundoff(torch.float16) * np.abs(v).max()
        )  # the docstring's
        tol += mha.numerics.tolerance.tiled_attention_tolerance(q, k, v)[
            0
        ]  # and the float64 routes' own
        mha.numerics.tolerance.assert_close(got, want, tol)

    def spacing_reference(a, got):
        x = np.abs(np.asarray(a["value"], dtype=a["dtype"]))
        assert got == float(np.spacing(x))  # exact: a power of two

    tb = mha.backends.tiled
    G = mha.numerics.backward
    P = mha.numerics.precision
    T = mha.numerics.tolerance
    return {
        "tiled.attention": (
            qkv, lambda a: tb.attention(**a, block_q=2, block_kv=3), qkv_bad, {},
            attention_reference,
        ),
        "tiled.three_pass_attention": (
            qkv, lambda a: tb.three_pass_attention(**a, block_q=2, block_kv=3), qkv_bad, {},
            attention_reference,
        ),
        "tiled.attention blocks": (
            lambda rng, dt: {**qkv(rng, dt), "block_q": 2, "block_kv": 3},
            lambda a: tb.attention(**a),
            {"block_q": _NUMBER_BAD, "block_kv": _NUMBER_BAD}, {}, attention_reference,
        ),
        "tiled.online_softmax": (
            lambda rng, dt: {"scores": rng.standard_normal((2, 5)).astype(dt)},
            lambda a: tb.online_softmax(a["scores"], block_size=2),
            {"scores": [*_ONE_ARRAY_BAD, "0-D"]}, {}, None,
        ),
        "tiled.softmax_stats": (
            lambda rng, dt: {"scores": rng.standard_normal((2, 5)).astype(dt)},
            lambda a: tb.softmax_stats(**a),
            {"scores": [*_ONE_ARRAY_BAD, "0-D"]}, {}, None,
        ),
        "tiled.combine_stats": (
            lambda rng, dt: {
                "max_a": rng.standard_normal((2, 3)).astype(dt),
                "sum_a": (1 + rng.random((2, 3))).astype(dt),
                "max_b": rng.standard_normal((2, 3)).astype(dt),
                "sum_b": (1 + rng.random((2, 3))).astype(dt),
            },
            lambda a: tb.combine_stats(**a),
            {"max_a": ["None", "nan", "int", "float16", "mixed", "masked", "tensor", "list",
                       "width+1"],
             "sum_b": ["None", "nan", "inf", "int", "mixed", "tensor", "width+1"]},
            {}, None,
        ),
        "backward.scaled_dot_product_attention": (
            sdpa_grads,
            lambda a: G.scaled_dot_product_attention(
                a["query"], a["key"], a["value"], a["weights"], a["d_out"]
            ),
            grad_bad | {"weights": [*_ARRAY_BAD, "width+1"]}, {}, sdpa_grads_reference,
        ),
        "backward.tiled_attention": (
            sdpa_grads,
            lambda a: G.tiled_attention(
                a["query"], a["key"], a["value"], a["out"], a["lse"], a["d_out"], a["mask"],
                block_q=2, block_kv=3,
            ),
            grad_bad | {"lse": ["None", "int", "mixed", "tensor", "width+1"],
                        "out": [*_ARRAY_BAD, "width+1"], "mask": ["float mask", "mask shape"]},
            {}, None,
        ),
        "backward.linear": (
            lambda rng, dt: {
                "x": rng.standard_normal((2, 3, 4)).astype(dt),
                "weight": rng.standard_normal((4, 5)).astype(dt),
                "d_y": rng.standard_normal((2, 3, 5)).astype(dt),
            },
            lambda a: G.linear(**a),
            {"x": [*_ARRAY_BAD, "width+1", "batch+1"], "weight": [*_ARRAY_BAD, "width+1"],
             "d_y": [*_ARRAY_BAD, "width+1", "batch+1"]},
            {},
            lambda a, got: T.assert_close(
                got[0], a["d_y"] @ a["weight"].T, T.matmul_tolerance(a["d_y"], a["weight"].T)
            ),
        ),
        "backward.multi_head_attention_forward": (
            layer, lambda a: G.multi_head_attention_forward(**a, form="tiled"),
            {"query": [*_ARRAY_BAD, "width+1", "batch+1"], "key": [*_ARRAY_BAD, "width+1"],
             "value": [*_ARRAY_BAD, "length+1"], "params": _PARAMS_BAD,
             "mask": ["float mask", "mask shape", "tensor"]},
            {},
            lambda a, got: T.assert_close(
                got[0], np_backend.multi_head_attention(**a)[0], T.attention_tolerance(**a)[0]
            ),
        ),
        "backward.multi_head_attention": (
            saved_and_d_out, lambda a: G.multi_head_attention(**a),
            {"saved": ["None", "tuple"], "d_out": [*_ARRAY_BAD, "width+1", "batch+1"]}, {},
            None,
        ),
        "tolerance.gradient_tolerance": (
            saved_and_d_out, lambda a: T.gradient_tolerance(**a),
            {"saved": ["None", "tuple"], "d_out": [*_ARRAY_BAD, "width+1", "batch+1"]}, {},
            None,
        ),
        "precision.spacing": (
            lambda rng, dt: {"value": float(rng.choice([1e-6, 1e-40, 3.0, -7e3, 6e4])),
                             "dtype": np.float16 if dt == np.float64 else np.float32},
            lambda a: P.spacing(a["value"], a["dtype"]),
            {"value": ["None", "zero", "bool", "string", "nan number", "inf number", "huge"],
             "dtype": _DTYPE_BAD},
            {}, spacing_reference,
        ),
        "precision.rounded_attention": (
            torch_qkv, lambda a: P.rounded_attention(**a),
            {"query": [*_TENSOR_BAD, "t-batch+1", "t-width+1"], "key": [*_TENSOR_BAD],
             "value": [*_TENSOR_BAD, "t-batch+1"],
             "weights_dtype": ["torch int dtype", "numpy float dtype", "not a dtype"]},
            {}, rounded_reference,
        ),
        "precision.rounded_attention scores": (
            lambda rng, dt: {
                "query": torch.full((2, 3, 4), 200.0, dtype=torch.float64),
                "key": torch.full((2, 5, 4), 200.0, dtype=torch.float64),
                "value": torch.from_numpy(rng.standard_normal((2, 5, 3))),
                "scores_dtype": torch.float32,  # scores of 8e4: beyond float16's 65504
            },
            lambda a: P.rounded_attention(**a),
            {"key": ["t-huge"], "scores_dtype": ["torch half dtype", "numpy float dtype"]},
            {}, rounded_reference,
        ),
        "precision.exp_overflow_threshold": (
            lambda rng, dt: {"dtype": dt}, lambda a: P.exp_overflow_threshold(a["dtype"]),
            {"dtype": _DTYPE_BAD}, {}, None,
        ),
        "tolerance.gamma": (
            lambda rng, dt: {"dtype": dt, "terms": 7}, lambda a: T.gamma(a["dtype"], a["terms"]),
            {"dtype": _DTYPE_BAD, "terms": _NUMBER_BAD}, {}, None,
        ),
        "tolerance.attention_tolerance": (
            layer, lambda a: T.attention_tolerance(**a),
            {"query": ["None", "nan", "int", "mixed", "width+1", "batch+1"],
             "params": _PARAMS_BAD, "mask": ["float mask", "mask shape"]},
            {"query": ["tensor"], "key": ["tensor"], "mask": ["tensor"]}, None,
        ),
        "tolerance.matmul_tolerance": (
            lambda rng, dt: {"a": rng.standard_normal((2, 3, 4)).astype(dt),
                             "b": rng.standard_normal((4, 5)).astype(dt)},
            lambda a: T.matmul_tolerance(a["a"], a["b"]),
            {"a": ["None", "nan", "inf", "int", "width+1", "0-D"], "b": ["None", "nan", "int"]},
            {"a": ["tensor"], "b": ["tensor"]}, None,
        ),
        "tolerance.assert_close": (
            lambda rng, dt: {"actual": rng.standard_normal((2, 3)).astype(dt),
                             "expected": rng.standard_normal((2, 3)).astype(dt),
                             "tolerance": 10.0},
            lambda a: T.assert_close(a["actual"], a["expected"], a["tolerance"]),
            {"actual": ["None", "width+1"], "expected": ["None", "batch+1"],
             "tolerance": ["None", "negative", "nan number", "inf number", "string"]},
            {"actual": ["tensor", "list"], "expected": ["tensor", "list"]}, None,
        ),
        **_more_numeric_cases(qkv, layer, sdpa_grads, saved_and_d_out, grad_bad),
    }  # fmt: skip


def _all_within(checks: dict) -> None:
    assert all(c.within for c in checks.values()), {n: c.used for n, c in checks.items()}


def _more_numeric_cases(qkv, layer, sdpa_grads, saved_and_d_out, grad_bad):
    """The other public functions of the four modules: precision's sums and limits,
    tolerance's bounds and comparisons, backward's softmax, heads and magnitudes, and the
    gradient check against autograd (mha.numerics.gradcheck)."""
    G = mha.numerics.backward
    P = mha.numerics.precision
    T = mha.numerics.tolerance
    magnitude_bad = ["None", "negative", "nan number", "inf number", "string", "bool", "huge int"]
    torch_dtype_bad = ["None", "numpy dtype", "torch int dtype", "not a dtype"]

    def sums(rng, dt):
        return {"values": torch.from_numpy(rng.standard_normal((3, 9))), "dtype": torch.float16}

    def sum_reference(a, got):
        # float16 partial sums: each of the n - 1 additions rounds by a relative u
        exact = a["values"].sum(-1).numpy()
        scale = float(a["values"].abs().sum(-1).max())
        T.assert_close(got.double(), exact, T.rounding_tolerance(a["dtype"], terms=9, scale=scale))

    def softmax_grads(rng, dt):
        z = rng.standard_normal((2, 3, 5))
        w = np.exp(z - z.max(-1, keepdims=True))
        return {
            "weights": (w / w.sum(-1, keepdims=True)).astype(dt),
            "d_weights": rng.standard_normal((2, 3, 5)).astype(dt),
        }

    def softmax_reference(a, got):
        z = torch.from_numpy(np.log(a["weights"].astype(np.float64))).requires_grad_()
        torch.softmax(z, -1).backward(torch.from_numpy(a["d_weights"].astype(np.float64)))
        scale = 2 * float(np.abs(a["d_weights"]).max())  # |dZ| <= w (|dA| + max |dA|)
        tol = T.rounding_tolerance(a["weights"].dtype, terms=5 + 2, scale=scale, stages=3)
        T.assert_close(got, z.grad.numpy(), tol)

    def compare(rng, dt):
        return {
            "actual": rng.standard_normal((2, 3)).astype(dt),
            "expected": rng.standard_normal((2, 3)).astype(dt),
            "tolerance": 10.0,
        }

    compare_bad = {
        "actual": ["None", "width+1"],
        "expected": ["None", "batch+1"],
        "tolerance": ["None", "negative", "nan number", "inf number", "string"],
    }
    compare_same = {"actual": ["tensor", "list"], "expected": ["tensor", "list"]}
    return {
        "precision.running_sum_limit": (
            lambda rng, dt: {"dtype": torch.float16 if dt == np.float64 else torch.bfloat16},
            lambda a: P.running_sum_limit(a["dtype"]), {"dtype": _DTYPE_BAD}, {},
            lambda a, got: T.assert_close(
                np.array(got), P.sequential_sum(torch.ones(int(got) + 5), a["dtype"]).double(), 0
            ),  # exact: the running sum of ones stops at the limit
        ),
        "precision.sequential_sum": (
            sums, lambda a: P.sequential_sum(a["values"], a["dtype"]),
            {"values": ["None", "t-meta", "t-numpy", "0-D"], "dtype": torch_dtype_bad},
            {}, sum_reference,
        ),
        "precision.pairwise_sum": (
            sums, lambda a: P.pairwise_sum(a["values"], a["dtype"]),
            {"values": ["None", "t-meta", "t-numpy", "0-D"], "dtype": torch_dtype_bad},
            {}, sum_reference,
        ),
        "tolerance.unit_roundoff": (
            lambda rng, dt: {"dtype": dt}, lambda a: T.unit_roundoff(a["dtype"]),
            {"dtype": _DTYPE_BAD}, {},
            lambda a, got: T.assert_close(np.array(got), np.finfo(a["dtype"]).eps / 2, 0),
        ),
        "tolerance.rounding_tolerance": (
            lambda rng, dt: {"dtype": dt, "terms": 7, "scale": 2.0, "stages": 2},
            lambda a: T.rounding_tolerance(
                a["dtype"], terms=a["terms"], scale=a["scale"], stages=a["stages"]
            ),
            {"dtype": _DTYPE_BAD, "terms": [*_NUMBER_BAD, "huge int"],
             "scale": magnitude_bad, "stages": _NUMBER_BAD},
            {}, None,
        ),
        "tolerance.softmax_tolerance": (
            lambda rng, dt: {"dtype": dt, "logit_scale": 3.0, "d_head": 4, "kv_len": 5},
            lambda a: T.softmax_tolerance(
                a["dtype"], logit_scale=a["logit_scale"], d_head=a["d_head"], kv_len=a["kv_len"]
            ),
            {"dtype": _DTYPE_BAD, "logit_scale": magnitude_bad, "d_head": _NUMBER_BAD,
             "kv_len": _NUMBER_BAD},
            {}, None,
        ),
        "tolerance.online_softmax_tolerance": (
            lambda rng, dt: {"dtype": dt, "terms": 5, "merges": 2},
            lambda a: T.online_softmax_tolerance(a["dtype"], terms=a["terms"], merges=a["merges"]),
            {"dtype": _DTYPE_BAD, "terms": _NUMBER_BAD,
             "merges": ["None", "negative", "fraction", "bool", "string"]},
            {}, None,
        ),
        "tolerance.tiled_attention_tolerance": (
            lambda rng, dt: {k: v for k, v in qkv(rng, dt).items() if k != "mask"},
            lambda a: T.tiled_attention_tolerance(a["query"], a["key"], a["value"]),
            {"query": [*_ARRAY_BAD, "width+1", "batch+1", "0-D"],
             "key": [*_ARRAY_BAD, "width+1", "length+1"],
             "value": [*_ARRAY_BAD, "length+1", "batch+1"]},
            {}, None,
        ),
        "tolerance.attention_gradient_tolerance": (
            sdpa_grads,
            lambda a: T.attention_gradient_tolerance(
                a["query"], a["key"], a["value"], a["weights"], a["d_out"]
            ),
            grad_bad | {"weights": [*_ARRAY_BAD, "width+1"]}, {}, None,
        ),
        "tolerance.max_abs_diff": (
            compare, lambda a: T.max_abs_diff(a["actual"], a["expected"]),
            {"actual": ["None", "width+1"], "expected": ["None", "batch+1"]}, compare_same,
            lambda a, got: T.assert_close(
                np.array(got), np.abs(np.subtract(a["actual"], a["expected"], dtype=float)).max(), 0
            ),  # exact: the same float64 subtraction
        ),
        "tolerance.is_close": (
            compare, lambda a: T.is_close(a["actual"], a["expected"], a["tolerance"]),
            compare_bad, compare_same, None,
        ),
        "backward.softmax": (
            softmax_grads, lambda a: G.softmax(a["weights"], a["d_weights"]),
            {"weights": [*_ARRAY_BAD, "width+1"],
             "d_weights": [*_ARRAY_BAD, "width+1", "batch+1"]},
            {}, softmax_reference,
        ),
        "backward.split_heads": (
            lambda rng, dt: {"d_heads": rng.standard_normal((2, 2, 3, 4)).astype(dt)},
            lambda a: G.split_heads(a["d_heads"]),
            {"d_heads": [*_ONE_ARRAY_BAD, "0-D"]}, {},
            lambda a, got: T.assert_close(got, np_backend.merge_heads(a["d_heads"]), 0),
        ),
        "backward.merge_heads": (
            lambda rng, dt: {"d_x": rng.standard_normal((2, 3, 8)).astype(dt), "num_heads": 2},
            lambda a: G.merge_heads(a["d_x"], a["num_heads"]),
            {"d_x": [*_ONE_ARRAY_BAD, "0-D", "width+1"], "num_heads": _NUMBER_BAD}, {},
            lambda a, got: T.assert_close(got, np_backend.split_heads(a["d_x"], 2), 0),
        ),
        "backward.attention_gradient_magnitudes": (
            sdpa_grads,
            lambda a: G.attention_gradient_magnitudes(
                a["query"], a["key"], a["value"], a["weights"], a["d_out"]
            ),
            grad_bad | {"weights": [*_ARRAY_BAD, "width+1"]}, {}, None,
        ),
        "gradcheck.compare_with_autograd": (
            lambda rng, dt: {**layer(rng, dt), "d_out": rng.standard_normal((2, 3, 8)).astype(dt)},
            lambda a: mha.numerics.gradcheck.compare_with_autograd(**a),
            {"query": ["None", "nan", "int", "mixed", "width+1", "batch+1"],
             "params": _PARAMS_BAD, "d_out": [*_ARRAY_BAD, "width+1"],
             "mask": ["float mask", "mask shape"]},
            {},
            lambda a, got: _all_within(got),
        ),
        "backward.gradient_magnitudes": (
            saved_and_d_out, lambda a: G.gradient_magnitudes(**a),
            {"saved": ["None", "tuple"], "d_out": [*_ARRAY_BAD, "width+1", "batch+1"]}, {},
            None,
        ),
    }  # fmt: skip


_NUMERIC_CASES = _numeric_cases()


@st.composite
def _numeric_calls(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(sorted(_NUMERIC_CASES)))
    build, _, bad, same, _ = _NUMERIC_CASES[name]
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    seed = draw(st.integers(0, 2**16))
    mutation = None
    choices = [(arg, m, "bad") for arg, ms in bad.items() for m in ms]
    choices += [(arg, m, "same") for arg, ms in same.items() for m in ms]
    if draw(st.integers(0, 7)):
        mutation = draw(st.sampled_from(choices))
    return {"name": name, "dtype": dtype, "seed": seed, "mutation": mutation}


def _numeric_outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no NumPy warning before our error
            return "ok", call()
    except (ValueError, TypeError) as error:
        assert _raised_by_mha(error), f"{type(error).__name__} from outside mha: {error}"
        return "error", error


# Every (function, argument, mutation) runs once below, with seed 0 and float64; the search
# draws them again with other seeds and float32, within a budget (MHA_SEARCH_EXAMPLES for a
# longer run, as in tests/test_api_search.py).
@settings(max_examples=int(os.environ.get("MHA_SEARCH_EXAMPLES", "200")), deadline=None)
@given(case=_numeric_calls())
def test_generated_bad_inputs_of_the_numeric_modules_get_our_error_or_the_reference(case):
    _check_numeric_call(case, event)


_EVERY_MUTATION = [
    (name, (arg, m, expect))
    for name, (_, _, bad, same, _) in sorted(_NUMERIC_CASES.items())
    for expect, table in (("bad", bad), ("same", same))
    for arg, ms in table.items()
    for m in ms
]


def test_every_mutation_of_the_numeric_modules_once() -> None:
    """Each (function, argument, mutation) of the search above once, so that none depends
    on being drawn; every failure is listed."""
    failures = []
    for name, mutation in _EVERY_MUTATION:
        case = {"name": name, "dtype": np.float64, "seed": 0, "mutation": mutation}
        try:
            _check_numeric_call(case, lambda _: None)
        except AssertionError as error:
            failures.append(f"{name} {mutation[:2]}: {str(error)[:300]}")
    assert failures == [], "\n".join(failures)


def _check_numeric_call(case: dict[str, Any], event: Callable[[str], None]) -> None:
    build, call, _, _, reference = _NUMERIC_CASES[case["name"]]
    valid = build(np.random.default_rng(case["seed"]), case["dtype"])
    if case["mutation"] is None:
        kind, result = _numeric_outcome(lambda: call(valid))
        assert kind == "ok", f"a valid call was refused: {result}"
        if reference is not None:
            reference(valid, result)
        event(f"{case['name']}: valid")
        return
    arg, mutation, expect = case["mutation"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # casting NaN to int, on purpose
        args = dict(valid, **{arg: _MUTATIONS[mutation](valid[arg])})
    kind, result = _numeric_outcome(lambda: call(args))
    event(f"{expect}: {kind}")
    if expect == "bad":
        assert kind == "error", f"{case['name']} accepted {arg} {mutation}"
        return
    if kind == "ok":  # the same numbers in another container: exactly the same result
        want = call(valid)
        for g, w in zip(
            (result if isinstance(result, tuple) else (result,)),
            (want if isinstance(want, tuple) else (want,)),
            strict=True,
        ):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))  # exact: same arithmetic
