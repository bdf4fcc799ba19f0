"""Tests of the attention-only transformer, head gates, ablation, importance and training."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from mha.backends import torch_checks
from mha.backends.torch_backend import causal_mask
from mha.detectors import circuits
from mha.models import attention_only
from mha.numerics import tolerance
from mha.training import ablation, runs, tasks
from mha.training.tasks import repeated_segments

SMALL = runs.TrainConfig(
    vocab_size=24, seq_len=16, min_period=4, max_period=8, prefix_prob=0.0, d_model=32,
    num_heads=4, batch_size=16, steps=40, lr=1e-2, eval_every=20, eval_size=16,
)  # fmt: skip


def _model(dtype=torch.float64, seed=0):
    return attention_only.AttentionOnlyTransformer(24, 16, 16, 4, 2, seed=seed, dtype=dtype)


def _batch(seed=0):
    return repeated_segments(8, 16, 24, min_period=4, max_period=8, rng=seed)


def test_model_shapes_and_weights():
    model, b = _model(), _batch()
    logits, weights = model(b.tokens, need_weights=True)
    assert logits.shape == (8, 16, 24)
    assert len(weights) == 2 and all(w.shape == (8, 4, 16, 16) for w in weights)
    assert model(b.tokens)[1] is None
    assert torch.allclose(weights[0].sum(-1), torch.ones(8, 4, 16, dtype=torch.float64))
    assert (weights[1].triu(1) == 0).all()  # causal


def test_model_is_causal():
    model, b = _model(), _batch()
    changed = b.tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 24
    # exact: earlier positions run the same arithmetic on the same values
    assert torch.equal(model(b.tokens)[0][:, :10], model(changed)[0][:, :10])


def test_same_seed_same_model_and_parameter_count_independent_of_heads():
    a, b, c = _model(seed=3), _model(seed=3), _model(seed=4)
    # exact: the same seeded draws
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(a.embed, c.embed)  # exact: the same seeded draws
    one = attention_only.AttentionOnlyTransformer(24, 16, 16, 1, 2)
    assert sum(p.numel() for p in one.parameters()) == sum(p.numel() for p in a.parameters())


def test_gate_of_all_ones_equals_the_ungated_model_exactly():
    model, b = _model(torch.float32), _batch()
    ones = torch.ones(2, 4)
    for need in (False, True):
        plain, w_plain = model(b.tokens, need_weights=need)
        gated, w_gated = model(b.tokens, ones, need_weights=need)
        assert torch.equal(plain, gated)  # exact: gates of one multiply by 1.0
        if need:
            # exact: gates of one multiply by 1.0
            assert all(torch.equal(x, y) for x, y in zip(w_plain, w_gated, strict=True))
    params = model.layers[0].params()
    assert attention_only.gated_params(params, None) is params


def test_gated_params_scales_only_that_heads_rows_of_w_o():
    p = _model().layers[0].params()
    g = attention_only.gated_params(p, torch.tensor([1.0, 0.0, 2.0, 1.0]))
    # exact: the gate scales W^O rows by 0, 1 or 2
    assert torch.equal(g.w_qkv, p.w_qkv) and torch.equal(g.b_o, p.b_o)
    # exact: the gate scales W^O rows by 0, 1 or 2
    assert torch.equal(g.w_o[4:8], torch.zeros(4, 16, dtype=torch.float64))
    assert torch.equal(g.w_o[8:12], 2 * p.w_o[8:12])  # exact: the gate scales W^O rows by 0, 1 or 2
    # exact: the gate scales W^O rows by 0, 1 or 2
    assert torch.equal(g.w_o[:4], p.w_o[:4]) and torch.equal(g.w_o[12:], p.w_o[12:])


def test_head_contributions_sum_to_the_layer_output():
    model, b = _model(), _batch()
    x = model.residual_stream(b.tokens)[0]
    p = model.layers[0].params()
    mask = torch.ones(16, 16, dtype=torch.bool).tril()
    parts = attention_only.head_contributions(x, p, mask)  # (B, H, L, D)
    out = model.residual_stream(b.tokens)[1] - x
    assert parts.shape == (8, 4, 16, 16)
    assert torch.allclose(parts.sum(1) + p.b_o, out, atol=1e-12)


@pytest.mark.parametrize("layer", [0, 1])
def test_ablation_removes_one_head_and_leaves_the_others_untouched(layer):
    model, b = _model(), _batch()
    mask = torch.ones(16, 16, dtype=torch.bool).tril()
    gates = ablation.head_gates(2, 4, [(layer, 2)])
    full, cut = model.residual_stream(b.tokens), model.residual_stream(b.tokens, gates)
    # exact: the same arithmetic on the same values
    assert torch.equal(full[layer], cut[layer])  # everything before the layer is unchanged
    p = model.layers[layer].params()
    heads_full = attention_only.head_contributions(full[layer], p, mask)
    heads_cut = attention_only.head_contributions(
        cut[layer], attention_only.gated_params(p, gates[layer]), mask
    )
    keep = [0, 1, 3]
    # exact: the same arithmetic on the same values
    assert torch.equal(heads_full[:, keep], heads_cut[:, keep])  # the other heads: exactly
    assert (heads_cut[:, 2] == 0).all()  # the ablated head: exactly nothing
    _, w_full = model(b.tokens, need_weights=True)
    _, w_cut = model(b.tokens, gates, need_weights=True)
    # exact: the same arithmetic on the same values
    assert torch.equal(w_full[layer], w_cut[layer])  # its layer's patterns are unchanged
    delta = cut[layer + 1] - cut[layer]
    assert torch.allclose(delta, heads_full[:, keep].sum(1) + p.b_o, atol=1e-12)


def test_gate_gradient_matches_finite_differences():
    model, b = _model(), _batch()
    gates = torch.ones(2, 4, dtype=torch.float64, requires_grad=True)
    loss = attention_only.next_token_loss(model(b.tokens, gates)[0], b.tokens)
    (grad,) = torch.autograd.grad(loss, gates)
    eps = 1e-6
    for layer, head in [(0, 1), (1, 3)]:
        up, down = torch.ones(2, 4, dtype=torch.float64), torch.ones(2, 4, dtype=torch.float64)
        up[layer, head] += eps
        down[layer, head] -= eps
        with torch.no_grad():
            fd = (
                attention_only.next_token_loss(model(b.tokens, up)[0], b.tokens)
                - attention_only.next_token_loss(model(b.tokens, down)[0], b.tokens)
            ) / (2 * eps)
        assert abs(float(fd) - float(grad[layer, head])) < 1e-7


def test_gate_gradient_is_the_directional_derivative_along_that_heads_rows_of_w_o():
    # xi_h scales head h's rows of W^O, so dL/dxi_h = <W^O[rows of h], dL/dW^O[rows of h]>
    model, b = _model(), _batch()
    gates = torch.ones(2, 4, dtype=torch.float64, requires_grad=True)
    loss = attention_only.next_token_loss(model(b.tokens, gates)[0], b.tokens)
    w_o = [layer.w_o for layer in model.layers]  # (D, D) each, rows grouped by head
    grads = torch.autograd.grad(loss, [gates, *w_o])
    for layer in range(2):
        rows = (w_o[layer] * grads[1 + layer]).reshape(4, 4, 16).sum(dim=(1, 2))  # (H,)
        assert torch.allclose(grads[0][layer], rows, rtol=1e-10, atol=1e-14)


def test_head_importance_shape_sign_and_normalisation():
    model = _model(torch.float32)
    batches = [_batch(s) for s in range(3)]
    raw = ablation.head_importance(model, batches, normalize=False)
    norm = ablation.head_importance(model, batches)
    assert raw.shape == norm.shape == (2, 4)
    assert (raw >= 0).all() and (raw > 0).any()
    assert np.allclose(np.linalg.norm(norm, axis=1), 1.0)
    assert np.allclose(norm, raw / np.linalg.norm(raw, axis=1, keepdims=True))


def test_head_importance_is_the_mean_over_sequences_of_each_sequences_gradient():
    model = _model()  # float64: the two routes agree to rounding
    batches = [_batch(s) for s in range(2)]
    raw = ablation.head_importance(model, batches, normalize=False)
    grads = []
    for b in batches:
        for seq in b.tokens:  # one sequence at a time, through the model's own forward
            gates = torch.ones(2, 4, dtype=torch.float64, requires_grad=True)
            loss = attention_only.next_token_loss(model(seq[None], gates)[0], seq[None])
            grads.append(torch.autograd.grad(loss, gates)[0].abs().numpy())
    assert len(grads) == 16
    assert np.allclose(raw, np.mean(grads, axis=0), rtol=1e-10, atol=1e-14)


def test_head_importance_per_batch_takes_the_absolute_value_of_each_batch_gradient():
    model = _model(torch.float32)
    batches = [_batch(s) for s in range(3)]
    per_batch = ablation.head_importance(model, batches, normalize=False, per_sequence=False)
    grads = []
    for b in batches:
        gates = torch.ones(2, 4, requires_grad=True)
        loss = attention_only.next_token_loss(model(b.tokens, gates)[0], b.tokens)
        grads.append(torch.autograd.grad(loss, gates)[0].abs().double().numpy())
    assert np.allclose(per_batch, np.mean(grads, axis=0))
    # |mean of gradients| <= mean of |gradients|: the batch score cancels, never adds
    per_sequence = ablation.head_importance(model, batches, normalize=False)
    assert (per_batch <= per_sequence + 1e-7).all() and (per_batch < per_sequence).any()


def test_next_token_loss_matches_a_manual_cross_entropy():
    logits = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(0))
    tokens = torch.randint(0, 7, (2, 5), generator=torch.Generator().manual_seed(1))
    logp = logits.log_softmax(-1)
    manual = -torch.stack([logp[b, i, tokens[b, i + 1]] for b in range(2) for i in range(4)])
    assert torch.allclose(attention_only.next_token_loss(logits, tokens), manual.mean())
    where = torch.zeros(2, 5, dtype=torch.bool)
    where[1, 2] = True
    assert torch.allclose(attention_only.next_token_loss(logits, tokens, where), manual[4 + 2])


def test_segment_losses_split_first_and_repeated_positions():
    model, b = _model(torch.float32), _batch()
    losses = runs.segment_losses(model, b)
    logits = model(b.tokens)[0].detach()
    rep = b.repeated
    assert losses["repeat"] == pytest.approx(
        float(attention_only.next_token_loss(logits, b.tokens, rep))
    )
    assert losses["first"] == pytest.approx(
        float(attention_only.next_token_loss(logits, b.tokens, ~rep))
    )


def test_prune_curve_runs_from_the_full_model_to_no_heads():
    model, b = _model(torch.float32), _batch()
    order = ablation.importance_order(np.arange(8.0)[::-1].reshape(2, 4))
    assert order[0] == (1, 3) and order[-1] == (0, 0)
    curve = ablation.prune_curve(model, b, order)
    assert curve.shape == (9,)
    assert curve[0] == runs.segment_losses(model, b)["all"]
    assert curve[-1] == runs.segment_losses(model, b, torch.zeros(2, 4))["all"]
    greedy = ablation.greedy_prune_order(model, b)
    assert sorted(greedy) == [(i, h) for i in range(2) for h in range(4)]
    g_curve = ablation.prune_curve(model, b, greedy)
    assert g_curve[1] == min(ablation.ablation_loss(model, b, [p]) for p in greedy)


def test_a_short_run_reduces_the_loss_and_learns_the_repeats():
    model, hist = runs.train(replace(SMALL, steps=300, eval_every=100))
    assert hist.train_loss.shape == (300,)
    assert hist.train_loss[-10:].mean() < hist.train_loss[:10].mean() - 1.0
    assert hist.repeat_loss[-1] < 0.5 * hist.first_loss[-1]
    assert list(hist.step) == [0, 100, 200, 300]
    assert hist.previous_token.shape == hist.induction.shape == (4, 2, 4)
    assert ((hist.induction >= 0) & (hist.induction <= 1)).all()
    assert hist.cpu_seconds > 0


def test_training_is_deterministic():
    _, a = runs.train(SMALL)
    _, b = runs.train(SMALL)
    _, c = runs.train(replace(SMALL, seed=1))
    # exact: the same run, repeated in one process
    assert np.array_equal(a.train_loss, b.train_loss)
    assert np.array_equal(a.induction, b.induction)  # exact: the same run, repeated in one process
    # exact: the same run, repeated in one process
    assert not np.array_equal(a.train_loss, c.train_loss)


def test_training_runs_on_one_thread_whatever_the_global_setting(monkeypatch):
    seen = []
    loss = attention_only.next_token_loss

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return loss(*args, **kwargs)

    monkeypatch.setattr(runs, "next_token_loss", spy)
    config = replace(SMALL, steps=10, eval_every=5, batch_size=64)  # big enough to split
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        _, one = runs.train(config)
        torch.set_num_threads(2)
        _, two = runs.train(config)
        _, again = runs.train(config)
        assert torch.get_num_threads() == 2  # restored after each run
    finally:
        torch.set_num_threads(threads)
    assert set(seen) == {1} and len(seen) >= 30  # every training step, at least
    # on two threads the float32 sums are split differently, and not even the same way
    # from one run to the next; inside train they are not split at all
    # exact: inside train every run is on one thread: the same arithmetic
    assert np.array_equal(one.train_loss, two.train_loss)
    # exact: the same run, repeated in one process
    assert np.array_equal(two.train_loss, again.train_loss)
    # exact: inside train every run is on one thread: the same arithmetic
    assert np.array_equal(one.induction, two.induction)


def test_first_step_above_finds_the_first_crossing():
    steps = np.array([0, 25, 50, 75, 100])
    values = np.array([0.1, 0.4, 0.6, 0.3, 0.9])
    assert runs.first_step_above(steps, values, 0.5) == 50
    assert runs.first_step_above(steps, values, 0.05) == 0
    assert runs.first_step_above(steps, values, 0.8) == 100
    with pytest.raises(ValueError, match=r"values never exceed level=0.95; their maximum is 0.9"):
        runs.first_step_above(steps, values, 0.95)
    with pytest.raises(ValueError, match=r"steps and values must have the same shape \(E,\)"):
        runs.first_step_above(steps, values[:3], 0.5)


def test_model_errors():
    model = _model(torch.float32)
    tokens = _batch().tokens
    with pytest.raises(TypeError, match=r"tokens must have an integer dtype; got dtype torch.fl"):
        model(tokens.float())
    with pytest.raises(TypeError, match=r"tokens must be a torch.Tensor of token ids; got"):
        model(tokens.numpy())
    assert torch.equal(model(tokens.int())[0], model(tokens)[0])  # exact: the same ids, as int64
    with pytest.raises(ValueError, match=r"1 <= L <= max_len=16; got \(8, 17\)"):
        model(torch.zeros(8, 17, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"tokens must lie in \[0, vocab_size=24\); got values in"):
        model(tokens + 24)
    with pytest.raises(
        ValueError, match=r"gates must be a tensor of shape \(num_layers, H\) = \(2, 4\)"
    ):
        model(tokens, torch.ones(4))
    with pytest.raises(ValueError, match=r"gate must have shape \(H,\) = \(4,\); got \(3,\)"):
        attention_only.gated_params(model.layers[0].params(), torch.ones(3))
    with pytest.raises(ValueError, match=r"num_layers must be positive; got num_layers=0"):
        attention_only.AttentionOnlyTransformer(24, 16, 16, 4, 0)
    with pytest.raises(TypeError, match=r"vocab_size must be an int; got float"):
        attention_only.AttentionOnlyTransformer(24.0, 16, 16, 4)
    with pytest.raises(ValueError, match=r"num_heads must divide d_model"):
        attention_only.AttentionOnlyTransformer(24, 16, 16, 3)


def test_loss_and_pruning_errors():
    model, b = _model(torch.float32), _batch()
    logits = model(b.tokens)[0]
    with pytest.raises(
        ValueError, match=r"tokens must have the shape \(B, L\) = \(8, 16\) of logits"
    ):
        attention_only.next_token_loss(logits, b.tokens[:, :5])
    with pytest.raises(ValueError, match=r"where must have shape \(B, L\) = \(8, 16\)"):
        attention_only.next_token_loss(logits, b.tokens, torch.ones(8, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"where must select at least one query position"):
        attention_only.next_token_loss(logits, b.tokens, torch.zeros(8, 16, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"off must hold \(layer, head\) .* got \(2, 0\)"):
        ablation.head_gates(2, 4, [(2, 0)])
    with pytest.raises(ValueError, match=r"part must be 'all', 'first' or 'repeat'"):
        ablation.ablation_loss(model, b, [], part="second")
    with pytest.raises(ValueError, match=r"batches must hold at least one batch"):
        ablation.head_importance(model, [])
    with pytest.raises(ValueError, match=r"importance must have shape \(num_layers, H\); got 1-D"):
        ablation.importance_order(np.zeros(4))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(steps=0), ValueError, r"steps must be positive; got steps=0"),
        (dict(eval_every=1.5), TypeError, r"eval_every must be an int; got float 1.5"),
        (dict(lr=0.0), ValueError, r"lr must be positive; got lr=0.0"),
    ],
)
def test_train_config_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        replace(SMALL, **kwargs)


def test_train_runs_gives_each_config_its_own_run_in_order_and_continues_given_models():
    """One pool of workers for fresh runs and a continued one (each spawn imports torch):
    every run, in order, is the run train gives in this process."""
    start, _ = runs.train(replace(SMALL, steps=10))
    configs = [replace(SMALL, steps=20, eval_every=10, seed=s) for s in (0, 1)]
    configs.append(replace(SMALL, steps=5, eval_every=5, seed=0))
    models = [None, None, ablation.with_kv_heads(start, 1)]
    parallel = runs.train_runs(configs, processes=2, models=models)
    serial = [runs.train(c, m) for c, m in zip(configs, models, strict=True)]
    assert len(parallel) == 3
    for (m_par, h_par), (m_ser, h_ser) in zip(parallel, serial, strict=True):
        # exact: the same run on one thread, in another process of the same machine
        assert np.array_equal(h_par.train_loss, h_ser.train_loss)
        assert torch.equal(m_par.unembed, m_ser.unembed)  # exact: the same run
    assert not np.array_equal(parallel[0][1].train_loss, parallel[1][1].train_loss)  # exact: ditto
    assert [m.num_kv_heads for m, _ in parallel] == [4, 4, 1]
    with pytest.raises(ValueError, match="models must give one model \\(or None\\) per config"):
        runs.train_runs(configs, models=[None])


@pytest.mark.parametrize(
    ("configs", "processes", "error", "match"),
    [
        ([], None, ValueError, "configs must hold at least one TrainConfig; got none"),
        (
            [SMALL, "cfg"],
            None,
            TypeError,
            r"configs\[1\] must be a TrainConfig or a DigitSumConfig; got str",
        ),
        ([SMALL], 0, ValueError, "processes must be positive; got processes=0"),
        ([SMALL], 1.5, TypeError, "processes must be an int; got float 1.5"),
    ],
)
def test_train_runs_rejects_bad_arguments(configs, processes, error, match):
    with pytest.raises(error, match=match):
        runs.train_runs(configs, processes)


def test_copying_scores_are_one_for_heads_that_copy_through_the_embedding():
    model = attention_only.AttentionOnlyTransformer(8, 4, 8, 2, num_layers=2, seed=0)
    with torch.no_grad():
        model.embed.copy_(torch.eye(8))  # token t -> e_t
        model.unembed.copy_(torch.eye(8))
        layer = model.layers[1]
        w_qkv = layer.w_qkv.clone()
        w_qkv[:, 16:] = torch.eye(8)  # W^V = I
        layer.w_qkv.copy_(w_qkv)
        layer.w_o.copy_(-torch.eye(8))  # W^O = -I: each head of layer 1 anti-copies
    scores = ablation.copying_scores(model)
    assert scores.shape == (2, 2)
    np.testing.assert_allclose(scores[1], [-1.0, -1.0], rtol=1e-12)
    assert np.abs(scores[0]).max() < 1.0  # a random layer does neither
    expected = [
        circuits.copying_score(
            model.embed.detach().double().numpy(),
            model.layers[0].params().to_numpy(np.float64).head(h)["w_v"],
            model.layers[0].params().to_numpy(np.float64).head(h)["w_o"],
            model.unembed.detach().double().numpy(),
        )
        for h in range(2)
    ]
    np.testing.assert_allclose(scores[0], expected, rtol=1e-12)


# ---- inference: caches, conversion to fewer key/value heads -------------


@pytest.mark.parametrize("h_kv", [4, 2, 1])
def test_decoding_with_caches_gives_the_full_forwards_logits_at_every_position(h_kv):
    model = attention_only.AttentionOnlyTransformer(24, 16, 16, 4, 2, num_kv_heads=h_kv, seed=3)
    tokens = _batch().tokens[:, :12]
    full, _ = model(tokens)
    caches = model.new_caches(tokens.shape[0])
    with torch.no_grad():
        first, _ = model(tokens[:, :5], caches=caches)  # prefill
        steps = [model(tokens[:, t : t + 1], caches=caches)[0] for t in range(5, 12)]
    got = torch.cat([first, *steps], dim=1)
    assert [c.length for c in caches] == [12, 12]
    # one route per position against another: well inside float32 rounding of logits ~ 1
    tol = tolerance.rounding_tolerance(torch.float32, terms=16, scale=8.0, stages=6)
    tolerance.assert_close(got, full.detach(), tol)


@pytest.mark.parametrize(
    ("trouble", "error", "match"),
    [
        ("full", ValueError, r"the cache holds at most capacity=5 positions; it holds 5"),
        ("dtype", TypeError, r"cache must have the inputs' dtype torch.float32; got a cache of"),
        ("NaN", ValueError, r"cache must hold finite keys and values; got NaN .* cache.values"),
        ("not a list", TypeError, r"caches must be a list of num_layers=2 KVCache"),
    ],
)
@pytest.mark.parametrize("recorded", [False, True])
def test_a_refused_decoding_step_leaves_every_layers_cache_as_it_was(
    trouble, error, match, recorded
):
    """Layer 0 appends, then layer 1 refuses its call: layer 0's append is undone too, so the
    caches still agree, and decoding goes on to the full forward's logits."""
    from mha.core.kv_cache import KVCache

    model = attention_only.AttentionOnlyTransformer(24, 16, 16, 4, 2, seed=3)
    tokens = _batch().tokens[:1, :7]
    caches = model.new_caches(1)
    with torch.no_grad():
        model(tokens[:, :5], caches=caches)
    keep = caches[1]
    if trouble in ("full", "dtype"):  # layer 1's positions in a cache that cannot take more
        dtype = torch.float64 if trouble == "dtype" else torch.float32
        caches[1] = KVCache(1, 4, 4, 5, dtype=dtype)
        caches[1].append(keep.keys.to(dtype), keep.values.to(dtype), max_abs=keep.max_abs)
    elif trouble == "NaN":
        saved = keep.values[0, 0, 2, 1].clone()
        keep.values[0, 0, 2, 1] = math.nan
    before = [(c.length, c.max_abs, c.keys.clone(), c.values.clone()) for c in caches]
    given = iter(caches) if trouble == "not a list" else caches
    with torch.set_grad_enabled(recorded), pytest.raises(error, match=match):
        model(tokens[:, 5:6], caches=given)
    for c, (length, max_abs, keys, values) in zip(caches, before, strict=True):
        assert c.length == length and c.max_abs == max_abs  # exact: ints and a float kept
        for now, then in ((c.keys, keys), (c.values, values)):  # exact: memory untouched
            assert np.array_equal(now.numpy(), then.numpy(), equal_nan=True)
    caches[1] = keep
    if trouble == "NaN":
        keep.values[0, 0, 2, 1] = saved
    with torch.no_grad():
        steps = [model(tokens[:, t : t + 1], caches=caches)[0] for t in (5, 6)]
    full, _ = model(tokens)
    tol = tolerance.rounding_tolerance(torch.float32, terms=16, scale=8.0, stages=6)
    tolerance.assert_close(torch.cat(steps, dim=1), full[:, 5:].detach(), tol)


def test_decoding_refuses_to_pass_the_positional_embedding():
    model = attention_only.AttentionOnlyTransformer(24, 8, 16, 4, 2)
    caches = model.new_caches(1)
    model(torch.zeros(1, 6, dtype=torch.int64), caches=caches)
    with pytest.raises(ValueError, match="positions must stay below max_len=8; got 6 cached"):
        model(torch.zeros(1, 3, dtype=torch.int64), caches=caches)
    with pytest.raises(TypeError, match="caches must be a list of num_layers=2 KVCache"):
        model(torch.zeros(1, 1, dtype=torch.int64), caches=caches[:1])


def test_converting_to_as_many_key_value_heads_copies_and_to_fewer_changes_the_model():
    model = _model(torch.float32)
    b = _batch()
    same = ablation.with_kv_heads(model, model.num_heads)
    assert torch.equal(same(b.tokens)[0], model(b.tokens)[0])  # exact: the same parameters
    fewer = ablation.with_kv_heads(model, 1)
    assert fewer.num_kv_heads == 1 and model.num_kv_heads == 4  # the original is left alone
    assert fewer.layers[0].w_qkv.shape == (16, 16 + 2 * 4)
    assert not torch.allclose(fewer(b.tokens)[0], model(b.tokens)[0])


def test_training_continues_from_a_given_model_and_leaves_it_alone():
    start, _ = runs.train(replace(SMALL, steps=10))
    before = start.unembed.detach().clone()
    mqa = ablation.with_kv_heads(start, 1)
    after, hist = runs.train(replace(SMALL, steps=10), mqa)
    assert after.num_kv_heads == 1 and after is not mqa
    assert torch.equal(start.unembed, before)  # exact: not trained
    assert not torch.equal(after.unembed, mqa.unembed)
    assert hist.train_loss.shape == (10,)
    with pytest.raises(TypeError, match="model must be an AttentionOnlyTransformer; got str"):
        runs.train(SMALL, "model")


# ---- path ablation, timing, cancellation ---------------------------------------------


def test_path_ablation_of_every_path_is_the_gated_model():
    model, b = _model(), _batch()
    off = [(0, 1), (1, 2)]
    logits, weights = ablation.path_ablation(model, b.tokens, off)
    gated, gated_w = model(b.tokens, ablation.head_gates(2, 4, off), need_weights=True)
    # two routes (per-head terms against a gated W^O) to float64 logits of size ~ 1
    tol = tolerance.rounding_tolerance(torch.float64, terms=16, scale=8.0, stages=6)
    tolerance.assert_close(logits, gated.detach(), tol)
    for w, g in zip(weights, gated_w, strict=True):
        tolerance.assert_close(w, g.detach(), tol)


def test_path_ablation_of_no_head_is_the_model():
    model, b = _model(), _batch()
    logits, weights = ablation.path_ablation(model, b.tokens, [])
    tol = tolerance.rounding_tolerance(torch.float64, terms=16, scale=8.0, stages=6)
    tolerance.assert_close(logits, model(b.tokens)[0].detach(), tol)


def test_path_ablation_removes_a_head_only_from_the_named_paths():
    model, b = _model(), _batch()
    full_logits, full_w = model(b.tokens, need_weights=True)
    tol = tolerance.rounding_tolerance(torch.float64, terms=16, scale=8.0, stages=6)
    # from the keys only: layer 1's weights change, its values and the logits' direct path not
    _, w_key = ablation.path_ablation(model, b.tokens, [(0, 1)], ["key"])
    tolerance.assert_close(w_key[0], full_w[0].detach(), tol)  # layer 0 is upstream
    assert (w_key[1] - full_w[1]).abs().max() > 1e-3
    # from the logits only: every attention pattern is the model's, the logits are not
    logits, w_direct = ablation.path_ablation(model, b.tokens, [(0, 1)], ["logits"])
    for w, f in zip(w_direct, full_w, strict=True):
        tolerance.assert_close(w, f.detach(), tol)
    assert (logits - full_logits).abs().max() > 1e-3
    # the direct path of head (0, 1) is its term times W_U: removing it subtracts exactly that
    x0 = model.embed[b.tokens] + model.pos[:16]
    term = attention_only.head_contributions(x0, model.layers[0].params(), causal_mask(16))[:, 1]
    tolerance.assert_close(full_logits - logits, (term @ model.unembed).detach(), tol)


def test_mean_ablation_replaces_a_term_by_its_batch_mean():
    model, b = _model(), _batch()
    tol = tolerance.rounding_tolerance(torch.float64, terms=16, scale=8.0, stages=6)
    logits, _ = ablation.path_ablation(model, b.tokens, [(1, 0)], ["logits"], replacement="mean")
    full, _ = model(b.tokens)
    x1 = model.residual_stream(b.tokens)[1]
    term = attention_only.head_contributions(x1, model.layers[1].params(), causal_mask(16))[:, 0]
    expected = full - (term - term.mean(dim=0)) @ model.unembed
    tolerance.assert_close(logits, expected.detach(), tol)
    zero, _ = ablation.path_ablation(model, b.tokens, [(1, 0)], ["logits"])
    assert (zero - logits).abs().max() > 1e-3


def test_path_ablation_losses_and_single_ablations():
    model, b = _model(torch.float32), _batch()
    losses = ablation.path_ablation_losses(model, b, [(0, 2)])
    assert set(losses) == {"first", "repeat", "all"}
    single = ablation.single_ablation_losses(model, b, "repeat")
    assert single.shape == (2, 4)
    assert single[1, 3] == ablation.ablation_loss(model, b, [(1, 3)], "repeat")  # exact: same call


def test_path_ablation_errors():
    model, b = _model(), _batch()
    with pytest.raises(ValueError, match="paths must be drawn from"):
        ablation.path_ablation(model, b.tokens, [(0, 0)], ["keys"])
    with pytest.raises(ValueError, match="replacement must be 'zero' or 'mean'; got"):
        ablation.path_ablation(model, b.tokens, [(0, 0)], replacement="resample")
    with pytest.raises(ValueError, match="off must hold \\(layer, head\\)"):
        ablation.path_ablation(model, b.tokens, [(2, 0)])


def test_seen_guess_loss_is_the_log_of_the_tokens_seen():
    b = repeated_segments(4, 16, 24, min_period=4, max_period=4, prefix_prob=0.0, rng=0)
    assert (b.start == 0).all() and (b.period == 4).all()
    assert np.isclose(tasks.seen_guess_loss(b), np.log(4))
    no_repeat = replace(b, start=torch.full((4,), 12))  # the repeat would begin at the end
    with pytest.raises(ValueError, match="batch must have a repeated position"):
        tasks.seen_guess_loss(no_repeat)


def _history(prev, ind, repeat):
    E = len(prev)
    scores = np.zeros((E, 2, 2))
    p, i = scores.copy(), scores.copy()
    p[:, 0, 1], i[:, 1, 0] = prev, ind
    return runs.TrainHistory(
        step=np.arange(E) * 25, train_loss=np.zeros(1), first_loss=np.zeros(E),
        repeat_loss=np.array(repeat), previous_token=p, induction=i,
    )  # fmt: skip


def test_phase_timing_reads_the_curves():
    h = _history(
        prev=[0.1, 0.1, 0.2, 0.6, 0.9, 0.9],
        ind=[0.0, 0.1, 0.4, 0.7, 0.85, 0.9],
        repeat=[4.0, 3.5, 3.0, 1.5, 0.5, 0.1],
    )
    t = runs.phase_timing(h)
    assert (t["prev"], t["ind"], t["loss"], t["plateau"]) == (75, 75, 75, 50)
    assert t["rise"] == 100 - 25 and t["start"] == 4.0 and t["plateau_loss"] == 3.5
    with pytest.raises(ValueError, match="values never exceed level=0.5"):
        runs.phase_timing(_history([0.1] * 3, [0.9] * 3, [1.0] * 3))
    one_layer = replace(h, previous_token=h.previous_token[:, :1], induction=h.induction[:, :1])
    with pytest.raises(ValueError, match="history must come from a model with at least two"):
        runs.phase_timing(one_layer)


def test_importance_cancellation_is_at_most_one_and_orders_every_head():
    model, _ = runs.train(replace(SMALL, steps=20))
    batches = [_batch(1), _batch(2)]
    c = ablation.importance_cancellation(model, batches)
    assert (c["ratio"] <= 1 + 1e-6).all()  # |mean| <= mean |.|
    assert sorted(c["order"]) == [(i, h) for i in range(2) for h in range(4)]
    per_seq = ablation.head_importance(model, batches, normalize=False)
    assert np.array_equal(c["per_sequence"], per_seq)  # exact: the same call


def test_random_key_value_heads_keep_queries_and_outputs_and_draw_new_keys():
    model = _model(torch.float32)
    rand = ablation.with_kv_heads(model, 2, init="random", seed=5)
    pooled = ablation.with_kv_heads(model, 2)
    a, b = rand.layers[0].params(), pooled.layers[0].params()
    assert torch.equal(a.w_q, b.w_q) and torch.equal(a.w_o, b.w_o)  # exact: copies
    assert not torch.allclose(a.w_k, b.w_k)
    with pytest.raises(ValueError, match="init must be 'mean' or 'random'; got init='first'"):
        ablation.with_kv_heads(model, 2, init="first")


@pytest.mark.parametrize("init", ["mean", "random"])
def test_converted_models_keep_the_training_mode_and_refuse_bad_seeds(init: str) -> None:
    model = _model(torch.float32).eval()
    fewer = ablation.with_kv_heads(model, 2, init=init)
    assert not fewer.training and not any(m.training for m in fewer.modules())
    assert fewer.layers[0].w_qkv.dtype == torch.float32
    with pytest.raises(TypeError, match=r"seed must be an int; got float 1\.5"):
        ablation.with_kv_heads(model, 2, init=init, seed=1.5)
    with pytest.raises(ValueError, match="seed must be a non-negative int; got seed=-1"):
        ablation.with_kv_heads(model, 2, init=init, seed=-1)


def _same_run(a, b):
    (m_a, h_a), (m_b, h_b) = a, b
    for name, value in m_a.state_dict().items():
        assert torch.equal(value, m_b.state_dict()[name]), name  # exact: stored, then loaded
    for f in dataclasses.fields(h_a):
        # exact: the arrays written and read back
        assert np.array_equal(getattr(h_a, f.name), getattr(h_b, f.name)), f.name


def test_train_runs_stores_fresh_runs_and_loads_them_instead_of_training(tmp_path, monkeypatch):
    configs = [replace(SMALL, steps=20, eval_every=10, seed=s) for s in (0, 1)]
    first = runs.train_runs(configs, processes=1, store=tmp_path)
    assert len(list(tmp_path.glob("*.pt"))) == 2 and len(list(tmp_path.glob("*.npz"))) == 2

    def no_training(*args, **kwargs):
        raise AssertionError("a stored run was trained again")

    monkeypatch.setattr(runs, "train", no_training)
    again = runs.train_runs(configs, processes=1, store=tmp_path)
    for a, b in zip(first, again, strict=True):
        _same_run(a, b)
    assert again[0][1].cpu_seconds == first[0][1].cpu_seconds  # exact: the stored number
    with pytest.raises(AssertionError, match="trained again"):  # another config: trained
        runs.train_runs([replace(configs[0], steps=30)], processes=1, store=tmp_path)


def test_stored_run_equals_training_again(tmp_path):
    config = replace(SMALL, steps=20, eval_every=10, seed=3)
    stored = runs.train_runs([config], processes=1, store=tmp_path)[0]
    loaded = runs.train_runs([config], processes=1, store=tmp_path)[0]
    fresh = runs.train(config)  # exact below: one thread gives the same run on this machine
    _same_run(loaded, stored)
    assert np.array_equal(loaded[1].train_loss, fresh[1].train_loss)  # exact: ditto
    assert torch.equal(loaded[0].unembed, fresh[0].unembed)  # exact: ditto


def test_train_runs_store_from_the_environment_and_not_for_continued_models(tmp_path, monkeypatch):
    config = replace(SMALL, steps=10, eval_every=10)
    monkeypatch.setenv(runs.STORE_VARIABLE, str(tmp_path / "env"))
    runs.train_runs([config], processes=1)
    assert len(list((tmp_path / "env").glob("*.pt"))) == 1
    model = config.model()
    runs.train_runs([config], processes=1, models=[model], store=tmp_path / "given")
    assert not (tmp_path / "given").exists()  # a continued model is not a fresh run
    monkeypatch.delenv(runs.STORE_VARIABLE)
    runs.train_runs([config], processes=1)  # no store named: nothing written anywhere
    assert len(list((tmp_path / "env").glob("*.pt"))) == 1


def test_no_train_store_reaches_a_test():
    """The autouse fixture in conftest.py clears a store named in the developer's shell."""
    assert runs.STORE_VARIABLE not in os.environ


def test_a_train_store_set_in_the_shell_is_cleared_for_the_tests(tmp_path):
    env = dict(os.environ, **{runs.STORE_VARIABLE: str(tmp_path / "shell")})
    probe = f"{Path(__file__).name}::test_no_train_store_reaches_a_test"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", probe],
        cwd=Path(__file__).parent,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-2000:]


def test_unreadable_stored_run_is_trained_again(tmp_path):
    config = replace(SMALL, steps=10, eval_every=10)
    key = runs.run_key(config)
    (tmp_path / f"{key}.pt").write_bytes(b"not a checkpoint")
    (tmp_path / f"{key}.npz").write_bytes(b"not an archive")
    model, history = runs.train_runs([config], processes=1, store=tmp_path)[0]
    assert history.step[-1] == 10  # exact: integer steps
    _same_run((model, history), runs.train_runs([config], processes=1, store=tmp_path)[0])


def test_run_key_changes_with_the_config_and_the_kernel_settings(monkeypatch):
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    key = runs.run_key(SMALL)
    assert key == runs.run_key(replace(SMALL))  # exact: the same config, the same key
    assert key != runs.run_key(replace(SMALL, seed=SMALL.seed + 1))
    assert key != runs.run_key(replace(SMALL, lr=SMALL.lr / 2))
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    assert key != runs.run_key(SMALL)
    with pytest.raises(
        TypeError, match="config must be a TrainConfig or a DigitSumConfig; got dict"
    ):
        runs.run_key({})


def test_train_runs_its_steps_with_the_value_checks_off_and_measures_with_them_on(monkeypatch):
    """Every training step's forward skips the checks that read values; evaluation keeps them."""
    from mha.backends import torch_backend

    calls = []
    attend = torch_backend.multi_head_attention

    def spy(*args, **kwargs):
        calls.append((kwargs["need_weights"], torch_checks._VALUE_CHECKS.get()))
        return attend(*args, **kwargs)

    monkeypatch.setattr(torch_backend, "multi_head_attention", spy)
    config = replace(SMALL, steps=3, eval_every=2)
    runs.train(config)
    steps = [on for need_weights, on in calls if not need_weights]
    measurements = [on for need_weights, on in calls if need_weights]
    assert len(steps) == config.steps * config.num_layers
    assert len(measurements) == 3 * config.num_layers  # at steps 0, 2 and the end
    assert not any(steps) and all(measurements)
    assert torch_checks._VALUE_CHECKS.get()  # on again after training


def test_train_refuses_a_loss_that_is_not_finite():
    model = SMALL.model()
    with torch.no_grad():
        model.unembed[0, 0] = math.inf
    with pytest.raises(
        ValueError,
        match=r"the training loss must stay finite at step 0 \(lr=.*\): training diverged "
        r"\(logits must not hold NaN or \+inf",
    ):
        runs.train(replace(SMALL, steps=2), model)


DIGITS = runs.DigitSumConfig(base=4, seq_len=8, d_model=16, steps=20, eval_every=10, eval_size=16)


def test_answer_loss_is_the_cross_entropy_of_the_answers_after_position_0():
    batch = tasks.digit_sums(3, 6, 4, rng=0)
    logits = torch.randn(3, 6, 16, generator=torch.Generator().manual_seed(0))
    manual = -np.mean([
        torch.log_softmax(logits[b, i], dim=-1)[batch.answers[b, i]].item()
        for b in range(3) for i in range(1, 6)
    ])  # fmt: skip
    assert math.isclose(runs.answer_loss(logits, batch).item(), manual, rel_tol=1e-6)
    with pytest.raises(ValueError, match=r"logits must have shape \(B, L, V\) = \(3, 6, V\)"):
        runs.answer_loss(logits[:, :5], batch)


def test_digit_sum_training_learns_both_reads_with_two_heads_in_one_layer():
    config = runs.DigitSumConfig(steps=400, eval_every=200, eval_size=64)
    model, hist = runs.train_digit_sums(config)
    assert list(hist.step) == [0, 200, 400] and hist.train_loss.shape == (400,)
    assert hist.previous_token.shape == hist.first_token.shape == (3, 1, 2)
    assert hist.loss[-1] < 0.1 < 2.0 < hist.loss[0] and hist.accuracy[-1] > 0.99
    prev, first = hist.previous_token[-1, 0], hist.first_token[-1, 0]  # (H,) each
    assert sorted([prev.argmax(), first.argmax()]) == [0, 1]  # one head each
    assert prev.max() > 0.9 and first.max() > 0.9
    scores = runs.digit_sum_scores(model, config.eval_batch())
    assert scores["loss"] == hist.loss[-1]  # exact: the same measurement, repeated
    assert np.array_equal(scores["first_token"], hist.first_token[-1])  # exact: ditto


def test_digit_sum_training_is_deterministic_and_continues_a_given_model():
    _, a = runs.train_digit_sums(DIGITS)
    _, b = runs.train_digit_sums(DIGITS)
    assert np.array_equal(a.train_loss, b.train_loss)  # exact: the same run, repeated
    start = DIGITS.model()
    before = start.unembed.detach().clone()
    _, c = runs.train_digit_sums(DIGITS, start)
    assert np.array_equal(a.train_loss, c.train_loss)  # exact: the same start, the same run
    assert torch.equal(start.unembed, before)  # exact: the given model is left alone


def test_train_runs_trains_and_stores_digit_sum_configs(tmp_path, monkeypatch):
    configs = [replace(DIGITS, seed=1), replace(SMALL, steps=10, eval_every=10)]
    first = runs.train_runs(configs, processes=1, store=tmp_path)
    assert isinstance(first[0][1], runs.DigitSumHistory)
    assert isinstance(first[1][1], runs.TrainHistory)
    fresh = runs.train_digit_sums(configs[0])
    assert np.array_equal(first[0][1].train_loss, fresh[1].train_loss)  # exact: same run

    def no_training(*args, **kwargs):
        raise AssertionError("a stored run was trained again")

    monkeypatch.setattr(runs, "train_digit_sums", no_training)
    monkeypatch.setattr(runs, "train", no_training)
    again = runs.train_runs(configs, processes=1, store=tmp_path)
    for a, b in zip(first, again, strict=True):
        _same_run(a, b)
    assert runs.run_key(configs[0]) != runs.run_key(replace(DIGITS, seed=2))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(steps=0), ValueError, r"steps must be positive; got steps=0"),
        (dict(base=1), ValueError, r"base must be at least 2; got base=1"),
        (dict(seq_len=2.0), TypeError, r"seq_len must be an int; got float 2.0"),
        (dict(lr=-1.0), ValueError, r"lr must be positive; got lr=-1.0"),
    ],
)
def test_digit_sum_config_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        replace(DIGITS, **kwargs)


def test_train_digit_sums_refuses_another_config_or_model():
    with pytest.raises(TypeError, match="config must be a DigitSumConfig; got TrainConfig"):
        runs.train_digit_sums(SMALL)
    with pytest.raises(TypeError, match="model must be an AttentionOnlyTransformer; got str"):
        runs.train_digit_sums(DIGITS, "model")
