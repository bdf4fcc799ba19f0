"""The parameters of a latent attention layer: sizes read from shapes, widths refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha.core.latent_params import MLAParams, init_mla_params


def test_sizes_are_read_from_the_shapes_of_the_weights() -> None:
    p = init_mla_params(32, 4, 12, 6, d_head=10, d_query_latent=24, seed=1)
    assert (p.d_model, p.num_heads, p.d_head, p.d_latent, p.d_rope) == (32, 4, 10, 12, 6)
    assert p.d_query_latent == 24 and p.cached_width() == 12 + 6
    assert p.w_uk.shape == (12, 40) and p.w_qr.shape == (24, 24) and p.w_o.shape == (40, 32)
    plain = init_mla_params(32, 4, 12)  # no rotary key, no query latent, Dh = D / H
    assert (plain.d_rope, plain.d_query_latent, plain.d_head) == (0, None, 8)
    assert plain.w_kr is None and plain.w_qr is None and plain.w_dq is None
    assert set(plain.arrays()) == {"w_dkv", "w_uk", "w_uv", "w_uq", "w_o"}


def test_one_seed_gives_one_layer_in_both_libraries() -> None:
    p = init_mla_params(16, 2, 8, 4, seed=3)
    t = p.to_torch()
    assert isinstance(t.w_dkv, torch.Tensor) and t.dtype == torch.float64
    for name, a in p.arrays().items():
        assert np.array_equal(t.to_numpy().arrays()[name], a)  # exact: copies
    assert p.to_numpy(np.float32).dtype == np.float32
    other = init_mla_params(16, 2, 8, 4, seed=4).w_dkv
    assert not np.array_equal(p.w_dkv, other)  # exact: another seed draws other weights


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"d_latent": 65}, ValueError, r"d_latent must be at most 2 H Dh = 64, the keys and "),
        ({"d_query_latent": 41}, ValueError, r"d_query_latent must be at most H \(Dh \+ Dr\) = 40"),
        ({"d_rope": 3}, ValueError, "d_rope must be even"),
        ({"d_rope": -2}, ValueError, "d_rope must be at least 0"),
        ({"num_heads": 3}, ValueError, "num_heads must divide d_model when d_head is None"),
        ({"d_latent": 0}, ValueError, "d_latent must be positive"),
        ({"d_head": 0}, ValueError, "d_head must be positive"),
        ({"seed": -1}, ValueError, "seed must be a non-negative int"),
        ({"d_latent": 8.0}, TypeError, "d_latent must be an int"),
        ({"dtype": np.int32}, TypeError, "dtype must be float32 or float64"),
    ],
)
def test_init_refuses_bad_widths(kwargs, error, match) -> None:
    args = {"d_model": 32, "num_heads": 4, "d_latent": 16, "d_rope": 2} | kwargs
    with pytest.raises(error, match=match):
        init_mla_params(**args)


def _weights() -> dict:
    return init_mla_params(16, 2, 8, 4, d_query_latent=12, seed=0).arrays()


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"w_uk": np.zeros((8, 15))}, ValueError, "w_uk must have H Dh columns, a multiple of"),
        ({"w_uv": np.zeros((8, 14))}, ValueError, r"w_uv must have shape \(Dc, H Dh\)"),
        ({"w_uq": np.zeros((16, 16))}, ValueError, r"w_uq must have shape \(Dq, H Dh\)"),
        ({"w_o": np.zeros((16, 15))}, ValueError, r"w_o must have shape \(H Dh, D\)"),
        ({"w_qr": np.zeros((12, 6))}, ValueError, r"w_qr must have shape \(Dq, H Dr\)"),
        ({"w_kr": np.zeros((16, 3)), "w_qr": np.zeros((12, 6))}, ValueError, "even width Dr"),
        ({"w_kr": None}, ValueError, "w_kr and w_qr must be given both"),
        (
            {"w_dkv": np.zeros((16, 33)), "w_uk": np.zeros((33, 16)), "w_uv": np.zeros((33, 16))},
            ValueError,
            "d_latent must be at most 2 H Dh = 32",
        ),
        ({"w_dkv": np.zeros(16)}, ValueError, "w_dkv must be a 2-D matrix"),
        ({"w_o": torch.zeros(16, 16, dtype=torch.float64)}, TypeError, "one library"),
        ({"w_o": np.zeros((16, 16), np.float32)}, TypeError, "share one dtype"),
        ({"w_uv": [[0.0]]}, TypeError, "w_uv must be a numpy.ndarray or a torch.Tensor"),
    ],
)
def test_the_constructor_refuses_weights_that_do_not_fit(change, error, match) -> None:
    with pytest.raises(error, match=match):
        MLAParams(num_heads=2, **(_weights() | change))


def test_num_heads_must_be_a_positive_int() -> None:
    with pytest.raises(TypeError, match="num_heads must be an int"):
        MLAParams(num_heads=2.0, **_weights())
    with pytest.raises(ValueError, match="num_heads must be positive"):
        MLAParams(num_heads=0, **_weights())
