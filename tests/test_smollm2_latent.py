"""SmolLM2 through latent caches: the converted model, decoding from latents, its loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mha.analysis import latent_factors
from mha.cost import latent_arithmetic
from mha.models import smollm2_latent
from mha.models.smollm2 import SmolLM2, load_smollm2
from mha.numerics import tolerance

TEXT = "The river rose slowly through the night. By morning the old bridge was under water."


@pytest.fixture(scope="module")
def model():
    return load_smollm2()


@pytest.fixture(scope="module")
def small(model):
    """The first four layers of the model: the same code path, a quarter of the work."""
    return SmolLM2(model.metadata, model.tokenizer, model.embed, model.layers[:4], model.final_norm)


def logit_tolerance(logits: torch.Tensor) -> float:
    """Two float32 routes through the model: sums of D terms at the logits' scale."""
    return tolerance.rounding_tolerance(
        torch.float32, terms=576, scale=float(logits.abs().max()), stages=4
    )


@pytest.mark.parametrize("d_latent", [64, 384])
def test_decoding_from_latent_caches_gives_the_converted_models_logits(small, d_latent) -> None:
    tokens = small.encode(TEXT)  # (1, L)
    L = tokens.shape[1]
    expected, _ = smollm2_latent.converted(small, [d_latent])[d_latent].forward(tokens)
    layers = smollm2_latent.latent_layers(small, d_latent)
    whole = smollm2_latent.latent_logits(small, layers, tokens)
    caches = smollm2_latent.new_latent_caches(small, layers, 1, L)
    parts = [
        smollm2_latent.latent_logits(small, layers, tokens[:, a:b], caches)
        for a, b in ((0, 6), (6, 7), (7, L))  # a prefill, one token, a block
    ]
    tol = logit_tolerance(expected)
    assert tolerance.max_abs_diff(whole, expected) < tol
    assert tolerance.max_abs_diff(torch.cat(parts, dim=1), expected) < tol
    assert [c.length for c in caches] == [L] * 4
    per_token = latent_arithmetic.latent_cache_bytes(4, L, d_latent, 0, torch.float32)
    assert sum(c.nbytes for c in caches) == per_token  # Dc elements per token and layer
    if d_latent == 384:  # as wide as the keys and values: the model itself
        original, _ = small.forward(tokens)
        assert tolerance.max_abs_diff(expected, original) < tol


def test_a_refused_layer_leaves_every_latent_cache_as_it_was(small) -> None:
    tokens = small.encode(TEXT)
    layers = smollm2_latent.latent_layers(small, 32)
    caches = smollm2_latent.new_latent_caches(small, layers, 1, 8)
    caches[-1] = smollm2_latent.new_latent_caches(small, layers, 1, 5)[-1]  # the last is short
    smollm2_latent.latent_logits(small, layers, tokens[:, :3], caches)
    with pytest.raises(ValueError, match="capacity=5"):
        smollm2_latent.latent_logits(small, layers, tokens[:, 3:6], caches)
    assert [c.length for c in caches] == [3] * 4  # the first three layers' appends undone


def test_the_loss_is_the_mean_cross_entropy_of_next_tokens(small) -> None:
    tokens = small.encode(TEXT)
    logits, _ = small.forward(tokens)
    by_hand = F.cross_entropy(logits[0, :-1].double(), tokens[0, 1:])
    loss = smollm2_latent.next_token_loss(small, tokens)
    scale = float(logits.abs().max())  # a log-sum-exp and a logit, each within the logits
    tol = tolerance.rounding_tolerance(torch.float64, terms=small.vocab_size, scale=scale)
    assert abs(loss - float(by_hand)) < tol


def test_pooling_to_one_key_value_head_averages_the_heads(small) -> None:
    one = smollm2_latent.pooled(small, 1)
    assert one.num_kv_heads == 1 and one.layers[0].attn.w_k.shape == (576, 64)
    w_k = small.layers[0].attn.w_k.reshape(576, 3, 64)
    assert tolerance.max_abs_diff(one.layers[0].attn.w_k, w_k.mean(1)) < 1e-6


def test_the_conversion_keeps_what_the_rank_chapters_tools_say(small) -> None:
    kept = latent_factors.energy_kept(small.layers[0].attn)
    assert kept.shape == (385,) and kept[192] < kept[256] < kept[384]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda m: smollm2_latent.converted(m, [385]), ValueError, "d_latent must be at most"),
        (lambda m: smollm2_latent.pooled(m, 2), ValueError, "num_kv_heads"),
        (lambda m: smollm2_latent.latent_layers("model", 8), TypeError, "model must be a SmolLM2"),
        (
            lambda m: smollm2_latent.latent_logits(m, [], m.encode(TEXT)),
            ValueError,
            r"layers must hold one entry per layer \(4\); got 0",
        ),
        (
            lambda m: smollm2_latent.latent_logits(
                m, smollm2_latent.latent_layers(m, 8), m.encode(TEXT).int()
            ),
            TypeError,
            "tokens must be an int64 torch.Tensor",
        ),
        (
            lambda m: smollm2_latent.next_token_loss(m, m.encode(TEXT)[:, :1]),
            ValueError,
            r"tokens must have shape \(B, L\) with B >= 1 and L >= 2",
        ),
        (
            lambda m: smollm2_latent.next_token_loss(m, m.encode(TEXT)[:0]),
            ValueError,
            r"tokens must have shape \(B, L\) with B >= 1 and L >= 2; got \(0, ",
        ),
        (
            lambda m: smollm2_latent.latent_logits(m, "ab", m.encode(TEXT)),
            TypeError,
            "layers must be a list or tuple",
        ),
        (
            lambda m: smollm2_latent.new_latent_caches(m, [], 1, 4),
            ValueError,
            r"layers must hold one entry per layer \(4\); got 0",
        ),
        (
            lambda m: latent_factors.low_rank_series(m.layers[0].attn, "ab"),
            TypeError,
            "widths must be a list or tuple",
        ),
    ],
)
def test_bad_arguments_are_named(small, call, error, match) -> None:
    with pytest.raises(error, match=match):
        call(small)
