"""Every error message of the package: bad input raises a clear error, never a wrong answer.

One case per message. Cases that apply to both backends run in both: they are written
with NumPy arrays and converted to PyTorch tensors by ``to``. Each ``match`` names the
argument, the rule and what was received.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import mha
from mha import MHAParams, init_params, np_backend, torch_backend

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
        ValueError,
        re.escape("align must be one of ('top_left', 'bottom_right'); got align=None"),
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
        r"form must be one of \('per_head', 'fused', 'packed', 'tiled'\); got form='flash'",
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
        r"eps must be a positive number; got eps=0\.0",
    ),
    (
        "layer_norm_eps_string",
        fn_call("layer_norm", x(2, 3, D), eps="1e-5"),
        ValueError,
        r"eps must be a positive number; got eps='1e-5'",
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
]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [pytest.param(c, e, m, id=i) for i, c, e, m in BOTH_BACKENDS],
)
def test_bad_input_raises_a_clear_error(
    backend: str, call: Callable[[str], Any], exc: type[Exception], match: str
) -> None:
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
        "to_torch_attn_mask_zero_heads",
        lambda: mha.to_torch_attn_mask(torch.ones(3, 3, dtype=torch.bool), 0),
        ValueError,
        r"num_heads must be positive; got num_heads=0",
    ),
]


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
        f"{path.name}:{n}"
        for path in sorted((repo_root / "src" / "mha").glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.match(r"\s*assert\b", line)
    ]
    assert offenders == []
