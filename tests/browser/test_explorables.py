"""The explorables' arithmetic in Chromium, held to ``mha``'s results.

``book/_static/mha-explore.js`` mirrors ``mha``'s functions by name (softmax, scaled
dot-product attention, the online softmax and the tiled forward, the cache's size and a
decoding step's bytes, the trained attention-only model's forward). Each check below draws
inputs in Python, evaluates the JavaScript function in a headless Chromium page and compares
with ``mha``: to the rounding bounds of
``mha.numerics.tolerance`` for float64, exactly where the arithmetic is exact (integer byte
counts, maxima, masked zeros). A mutated copy of the module (a wrong scale, no max
subtraction, a missing rescale, a missing factor of 2) must fail those same checks.

The explorables themselves are then driven in the built site (from ``file://`` and from a
server that puts the site under a subpath): a drag, a key press, a button, and the numbers the
page shows are compared with ``mha``'s for the state read back from the page.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import build_pdf
import numpy as np
import pytest
import torch
from mha_site.explorables import data_name, data_script

from mha.backends import np_backend, tiled
from mha.cost import arithmetic, latent_arithmetic
from mha.display import live_decoder
from mha.numerics import tolerance
from mha.numerics.tolerance import assert_close
from mha.training import runs, tasks

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "book" / "_static" / "mha-explore.js"
MODEL = MODULE.parent / "mha-explore-model.js"  # adds the attention-only model to MODULE

pytestmark = [pytest.mark.browser]

Js = Callable[..., object]  # js("softmax", scores, mask) -> the function's result


def _js_caller(page) -> Js:
    def call(name: str, *args: object) -> object:
        return page.evaluate("([name, args]) => window.mhaExplore[name](...args)", [name, args])

    return call


@pytest.fixture(scope="module")
def blank_page(browser) -> Iterator[object]:
    page = browser.new_page()
    try:
        yield page
    finally:
        page.close()


def _load_module(page, text: str) -> Js:
    page.set_content("<!doctype html><html lang='en'><title>mha-explore</title></html>")
    page.add_script_tag(content=text)
    return _js_caller(page)


@pytest.fixture
def js(blank_page) -> Js:
    """The book's module, as committed, in a blank page (with the trace check's helper)."""
    return _load_module(blank_page, _module_text() + TRACE_HELPER)


def _module_text() -> str:
    """The module and the model's functions that extend it, as a page loads them."""
    return MODULE.read_text(encoding="utf8") + "\n" + MODEL.read_text(encoding="utf8")


def _tolist(x: np.ndarray) -> list:
    return np.asarray(x).tolist()


def _masks(rng: np.random.Generator, shape: tuple[int, ...]) -> list[np.ndarray | None]:
    """No mask, a random mask with one fully masked row, a causal mask, a (1, S) row mask."""
    L, S = shape[-2], shape[-1]
    random = rng.random(shape) < 0.7
    random[..., 0, :] = False  # a fully masked row: all-zero weights in mha
    causal = np.broadcast_to(np.tril(np.ones((L, S), dtype=bool)), shape).copy()
    row = np.ones((1, S), dtype=bool)
    row[0, -1] = False  # the last key is padding
    return [None, random, causal, row]


# --------------------------------------------------------------------------- the checks
# Each check takes a caller of the module and raises AssertionError when a result differs
# from mha's by more than its bound; the mutation test runs them on mutated modules.


def check_softmax(js: Js) -> None:
    for seed in range(3):
        rng = np.random.default_rng(seed)
        for shape, spread in (((4, 7), 3.0), ((2, 3, 17), 10.0), ((5, 1), 1.0), ((3, 9), 300.0)):
            scores = spread * rng.standard_normal(shape)
            S = shape[-1]
            weight_tol = tolerance.online_softmax_tolerance(np.float64, terms=S, merges=0)[1]
            for mask in _masks(rng, shape if len(shape) >= 2 else (1, *shape)):
                expected = np_backend.softmax(scores, mask)
                got = np.array(
                    js("softmax", _tolist(scores), None if mask is None else _tolist(mask))
                )
                assert got.shape == expected.shape, f"softmax shape {got.shape} != {expected.shape}"
                assert_close(got, expected, weight_tol, name=f"softmax (seed {seed}, {shape})")
                if mask is not None:
                    blocked = ~np.broadcast_to(mask, shape)
                    assert (got[blocked] == 0).all(), "softmax: a masked entry is not exactly 0"


def _score_bound(query: np.ndarray, key: np.ndarray, scale: float) -> float:
    """``c >= max_ij sum_d |q_id k_jd| * scale``: the logit scale of the tolerance."""
    return float((np.abs(query) @ np.abs(np.swapaxes(key, -1, -2))).max() * scale)


def check_attention(js: Js) -> None:
    for seed in range(3):
        rng = np.random.default_rng(100 + seed)
        for lead, L, S, Dh, Dv in (((), 3, 5, 4, 4), ((2,), 6, 6, 8, 3), ((2, 2), 1, 9, 2, 5)):
            query = rng.standard_normal((*lead, L, Dh))
            key = rng.standard_normal((*lead, S, Dh))
            value = rng.standard_normal((*lead, S, Dv))
            for mask in _masks(rng, (*lead, L, S)):
                m = None if mask is None else _tolist(mask)
                for scale in (None, 1.0):
                    s = 1 / math.sqrt(Dh) if scale is None else scale
                    if scale is None:  # mha's function: the scale 1 / sqrt(Dh)
                        exp_out, exp_w = np_backend.scaled_dot_product_attention(
                            query, key, value, mask
                        )
                    else:  # a given scale: mha's softmax of the scaled scores, times V
                        exp_w = np_backend.softmax(query @ np.swapaxes(key, -1, -2) * s, mask)
                        exp_out = exp_w @ value
                    got_out, got_w = js(
                        "scaled_dot_product_attention",
                        _tolist(query),
                        _tolist(key),
                        _tolist(value),
                        m,
                        scale,
                    )
                    rho = tolerance.softmax_tolerance(
                        np.float64, logit_scale=_score_bound(query, key, s), d_head=Dh, kv_len=S
                    )
                    out_tol = (rho + 2 * tolerance.gamma(np.float64, S)) * np.abs(value).max()
                    where = f"seed {seed}, lead {lead}, L={L}, S={S}, Dh={Dh}, scale={scale}"
                    assert_close(np.array(got_w), exp_w, rho, name=f"weights ({where})")
                    assert_close(np.array(got_out), exp_out, out_tol, name=f"output ({where})")


def check_online_softmax(js: Js) -> None:
    for seed in range(3):
        rng = np.random.default_rng(200 + seed)
        scores = 20 * rng.standard_normal((4, 23))
        keep = rng.random((4, 23)) < 0.6
        keep[2] = False  # a fully masked row: (-inf, 0), then all-zero weights
        for mask in (None, keep):
            m = None if mask is None else _tolist(mask)
            row_max, row_sum = tiled.softmax_stats(scores, mask)
            got_max, got_sum = js("softmax_stats", _tolist(scores), m)
            sum_tol, _ = tolerance.online_softmax_tolerance(np.float64, terms=23, merges=0)
            same = np.array_equal(np.array(got_max), row_max)  # exact: a maximum, no rounding
            assert same, "softmax_stats row_max"
            assert_close(
                np.array(got_sum), row_sum, sum_tol * row_sum, name="softmax_stats row_sum"
            )
            for block_size in (1, 5, 23, 64):
                merges = math.ceil(23 / block_size) - 1
                _, weight_tol = tolerance.online_softmax_tolerance(
                    np.float64, terms=23, merges=merges
                )
                expected = tiled.online_softmax(scores, mask, block_size=block_size)
                got = np.array(js("online_softmax", _tolist(scores), m, {"block_size": block_size}))
                assert_close(
                    got, expected, weight_tol, name=f"online_softmax (blocks of {block_size})"
                )
                assert_close(got, np_backend.softmax(scores, mask), weight_tol, name="vs softmax")
        # combine_stats on the statistics of two blocks, the empty block (-inf, 0) included
        a, b = scores[:, :10], scores[:, 10:]
        ka, kb = keep[:, :10], keep[:, 10:]
        ka[0] = False  # row 0: block a empty; row 2: both empty
        sa, sb = tiled.softmax_stats(a, ka), tiled.softmax_stats(b, kb)
        expected = tiled.combine_stats(*sa, *sb)
        got = js("combine_stats", *(_tolist(x) for x in (*sa, *sb)))
        same = np.array_equal(np.array(got[0]), expected[0])  # exact: a maximum, no rounding
        assert same, "combine_stats max"
        sum_tol, _ = tolerance.online_softmax_tolerance(np.float64, terms=23, merges=1)
        assert_close(np.array(got[1]), expected[1], sum_tol * expected[1], name="combine_stats sum")
        assert got[0][2] == -math.inf and got[1][2] == 0, "(-inf, 0) and (-inf, 0) give (-inf, 0)"
        identity = got[1][0] == float(sb[1][0])  # exact: l_b e^0 + 0 e^-inf
        assert identity, "(-inf, 0) is the identity: l_b unchanged"


def check_tiled_trace(js: Js) -> None:
    """The stepper's computation: one row of scores z as a query of width 1 (q = 1, k_j = z_j,
    scale 1/sqrt(1) = 1, so the scores are exactly z), values v of width 1 or more."""
    for seed in range(3):
        rng = np.random.default_rng(300 + seed)
        S = int(rng.integers(5, 17))
        z = 5 * rng.standard_normal(S)
        for Dv in (1, 3):
            v = rng.standard_normal((S, Dv))
            keep = rng.random((1, S)) < 0.7
            keep[0, :3] = False  # the first block(s) may be skipped
            for mask in (None, keep):
                for block_kv in (1, 3, 4, S):
                    query, key = np.ones((1, 1)), z[:, None]
                    steps: list[tiled.TileStep] = []
                    exp_out, exp_lse = tiled.attention(
                        query, key, v, mask, block_q=1, block_kv=block_kv, trace=steps
                    )
                    m = None if mask is None else _tolist(mask)
                    got_out, got_lse, got_trace = js(
                        "__traced",
                        _tolist(query),
                        _tolist(key),
                        _tolist(v),
                        m,
                        {"block_q": 1, "block_kv": block_kv},
                    )
                    where = f"seed {seed}, S={S}, Dv={Dv}, blocks of {block_kv}"
                    assert len(got_trace) == len(steps), f"trace length ({where})"
                    merges = math.ceil(S / block_kv) - 1
                    sum_tol, w_tol = tolerance.online_softmax_tolerance(
                        np.float64, terms=S, merges=merges
                    )
                    for got, st in zip(got_trace, steps, strict=True):
                        assert tuple(got["kv_block"]) == st.kv_block, f"kv_block ({where})"
                        assert got["computed"] == st.computed, f"computed ({where})"
                        same = np.array_equal(np.array(got["row_max"]), st.row_max)  # exact: max
                        assert same, f"row_max ({where})"
                        l_exp = st.row_sum
                        assert_close(
                            np.array(got["row_sum"]), l_exp, sum_tol * l_exp, name="row_sum"
                        )
                        assert_close(np.array(got["rescale"]), st.rescale, w_tol, name="rescale")
                        acc_tol = sum_tol * l_exp[:, None] * np.abs(v).max()
                        assert_close(np.array(got["acc"]), st.acc, acc_tol, name=f"acc ({where})")
                    out_tol = (w_tol + 2 * tolerance.gamma(np.float64, S)) * np.abs(v).max()
                    assert_close(np.array(got_out), exp_out, out_tol, name=f"output ({where})")
                    assert_close(np.array(got_lse), exp_lse, sum_tol, name=f"lse ({where})")


def check_cost(js: Js) -> None:
    for cfg in arithmetic.PUBLISHED_CONFIGS:
        divisors = [h for h in range(1, cfg.num_heads + 1) if cfg.num_heads % h == 0]
        for h_kv in divisors:
            for kv_len in (1, 2, 17, 4096, cfg.max_context):
                for dtype in ("float16", "float32"):
                    for batch_size in (1, 3):
                        expected = arithmetic.kv_cache_bytes(
                            cfg.num_layers, kv_len, h_kv, cfg.d_head, dtype, batch_size=batch_size
                        )
                        got = js(
                            "kv_cache_bytes",
                            cfg.num_layers,
                            kv_len,
                            h_kv,
                            cfg.d_head,
                            dtype,
                            {"batch_size": batch_size},
                        )
                        assert got == expected, f"kv_cache_bytes {cfg.name} H_kv={h_kv} S={kv_len}"
                        for cached in (True, False):
                            step = arithmetic.decode_step_cost(
                                cfg.d_model,
                                cfg.num_heads,
                                h_kv,
                                kv_len,
                                dtype,
                                batch_size=batch_size,
                                cached=cached,
                            )
                            got = js(
                                "decode_step_cost",
                                cfg.d_model,
                                cfg.num_heads,
                                h_kv,
                                kv_len,
                                dtype,
                                {"batch_size": batch_size, "cached": cached},
                            )
                            what = f"decode_step_cost {cfg.name} H_kv={h_kv} S={kv_len} {dtype}"
                            assert (got["flops"], got["bytes"]) == (step.flops, step.bytes), what


def check_latent_cost(js: Js) -> None:
    v2 = latent_arithmetic.DEEPSEEK_V2
    for num_layers, d_latent, d_rope in (
        (v2.num_layers, v2.d_latent, v2.d_rope),
        (30, 128, 0),
        (1, 1, 0),
        (60, 4096, 128),
        (7, 384, 32),
    ):
        for kv_len in (1, 2, 17, 4096, 131072):
            for dtype in ("bfloat16", "float16", "float32"):
                for batch_size in (1, 3):
                    expected = latent_arithmetic.latent_cache_bytes(
                        num_layers,
                        kv_len,
                        d_latent,
                        d_rope,
                        getattr(torch, dtype),  # bfloat16: a PyTorch dtype, not NumPy's
                        batch_size=batch_size,
                    )
                    got = js(
                        "latent_cache_bytes",
                        num_layers,
                        kv_len,
                        d_latent,
                        d_rope,
                        dtype,
                        {"batch_size": batch_size},
                    )
                    what = f"latent_cache_bytes L={num_layers} Dc={d_latent} Dr={d_rope} S={kv_len}"
                    assert got == expected, what


def forward_bounds(model, tokens: torch.Tensor) -> tuple[float, float]:
    """Bounds on how far two float64 routes to the model's weights and next-token
    probabilities may differ: every stage (projections, scores, weighted sums, the output
    projection in each layer, the unembedding, the softmax) is a sum of at most ``D`` products
    no larger in magnitude than ``c``, the largest ``sum |a_k b_k|`` of the forward, computed
    here; a softmax moves a weight by at most twice the largest change of its row's inputs.
    Returns ``(weights_tolerance, probabilities_tolerance)``."""
    D, H = model.embed.shape[1], model.num_heads
    with torch.no_grad():
        stream = [x[0].numpy() for x in model.residual_stream(tokens)]  # (L, D) each
    c = float((np.abs(stream[-1]) @ np.abs(model.unembed.detach().numpy())).max())
    for x, layer in zip(stream, model.layers, strict=False):
        p = layer.params()
        w_qkv, b_qkv = p.w_qkv.detach().numpy(), p.b_qkv.detach().numpy()
        qkv = x @ w_qkv + b_qkv  # (L, 3D)
        c = max(c, float((np.abs(x) @ np.abs(w_qkv)).max() + np.abs(b_qkv).max()))
        q, k, v = (
            np.abs(np_backend.split_heads(qkv[None, :, i * D : (i + 1) * D], H)[0])
            for i in range(3)
        )  # (H, L, Dh) each
        c = max(c, float((q @ k.swapaxes(-1, -2)).max() / math.sqrt(D // H)))
        c = max(c, float(np.abs(v).max() * len(x)))
        c = max(c, float(np.abs(v).max() * np.abs(p.w_o.detach().numpy()).sum(axis=0).max()))
    stages = 4 * model.num_layers + 2
    bound = 2 * tolerance.rounding_tolerance(np.float64, terms=D, scale=c, stages=stages)
    return bound, bound


def _decoder_sequences() -> list[list[int]]:
    """Token sequences that no chapter uses: random ids of three lengths and three repeated
    segments, from seeds of this test only."""
    rng = np.random.default_rng(20_261_205)
    found = [rng.integers(0, 64, size=n).tolist() for n in (1, 9, 32)]
    batch = tasks.repeated_segments(3, 32, 64, min_period=8, max_period=16, rng=9_001)
    return found + batch.tokens.tolist()


def decoder_check_data() -> dict:
    """The figure's data for a model at initialisation (seed 11) with its parameters tripled,
    so that its heads attend sharply; the heads named are any two."""
    config = runs.TrainConfig(seed=11)
    model = config.model()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    scores = {"previous_token": np.zeros((2, 4)), "induction": np.zeros((2, 4))}
    return live_decoder.decoder_data(
        model, scores, previous_token_head=1, induction_head=3, config=config
    )


def check_attention_only(js: Js, data: dict | None = None) -> None:
    data = decoder_check_data() if data is None else data
    model = live_decoder.decoder_model(data)
    for tokens in _decoder_sequences():
        t = torch.tensor([tokens])
        with torch.no_grad():
            logits, weights = model(t, need_weights=True)
        probs = torch.softmax(logits[0], dim=-1).numpy()  # (L, V)
        got = js("__forward", data, tokens)
        w_tol, p_tol = forward_bounds(model, t)
        where = f"L={len(tokens)}"
        for layer in range(model.num_layers):
            expected = weights[layer][0].numpy()  # (H, L, L)
            assert_close(np.array(got["weights"][layer]), expected, w_tol, name=f"weights {where}")
        got_p = np.array(js("softmax", got["logits"]))
        assert_close(got_p, probs, p_tol, name=f"next-token probabilities ({where})")


CHECKS = {
    "softmax": check_softmax,
    "scaled_dot_product_attention": check_attention,
    "online_softmax": check_online_softmax,
    "tiled_attention": check_tiled_trace,
    "cost": check_cost,
    "latent_cost": check_latent_cost,
    "attention_only": check_attention_only,
}

# The checks' helpers: tiled_attention's output, lse and trace (an array passed in
# ``options.trace`` is filled in the page, so it is returned from there); the model of the
# figure's data run on tokens.
TRACE_HELPER = """
window.mhaExplore.__forward = function (data, tokens) {
  var x = window.mhaExplore;
  return x.attention_only_forward(x.attention_only_model(data), tokens);
};
window.mhaExplore.__traced = function (q, k, v, m, options) {
  var trace = [];
  var r = window.mhaExplore.tiled_attention(q, k, v, m, Object.assign({}, options, {trace: trace}));
  return [r[0], r[1], trace];
};
"""


@pytest.mark.parametrize("name", list(CHECKS))
def test_module_matches_mha(js: Js, name: str) -> None:
    CHECKS[name](js)


def test_module_refuses_what_mha_refuses(js: Js) -> None:
    for args, message in (
        ((4096, 32, 5, 10), "num_kv_heads must divide num_heads; got num_heads=32, num_kv_heads=5"),
        ((10, 3, 1, 10), "num_heads must divide d_model; got d_model=10, num_heads=3"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            arithmetic.decode_step_cost(*args)
        with pytest.raises(Exception, match=re.escape(message)):
            js("decode_step_cost", *args)
    message = "d_rope must be at least 0; got d_rope=-1"
    with pytest.raises(ValueError, match=re.escape(message)):
        latent_arithmetic.latent_cache_bytes(60, 1, 512, -1)
    with pytest.raises(Exception, match=re.escape(message)):
        js("latent_cache_bytes", 60, 1, 512, -1)


# --------------------------------------------------------------------------- mutations
# (what is replaced, by what, which check must then fail)
MUTATIONS = {
    "wrong scale (1/Dh for 1/sqrt(Dh))": (
        "var s = scale === null || scale === undefined ? 1 / Math.sqrt(Dh) : scale;",
        "var s = scale === null || scale === undefined ? 1 / Dh : scale;",
        "scaled_dot_product_attention",
    ),
    "softmax without the max subtraction": (
        "var m = safeMax(rowMax(z)); // fully masked rows",
        "var m = 0; // fully masked rows",
        "softmax",
    ),
    "combine without rescaling block a": (
        "return [m, sum_a * Math.exp(max_a - shift) + sum_b * Math.exp(max_b - shift)];",
        "return [m, sum_a + sum_b * Math.exp(max_b - shift)];",
        "online_softmax",
    ),
    "accumulator not rescaled": (
        "acc[r][e] = acc[r][e] * factor + pv;",
        "acc[r][e] = acc[r][e] + pv;",
        "tiled_attention",
    ),
    "cache without the factor 2 (keys only)": (
        "2 * num_layers * batch_size * kv_len * num_kv_heads * d_head * itemsize(dtype)",
        "num_layers * batch_size * kv_len * num_kv_heads * d_head * itemsize(dtype)",
        "cost",
    ),
    "attention-only forward without the causal mask": (
        "for (j = 0; j < L; j++) mask[i].push(j <= i);",
        "for (j = 0; j < L; j++) mask[i].push(true);",
        "attention_only",
    ),
    "attention-only forward without the residual": (
        "return row.map(function (v, d) { return v + out[pos][d]; });",
        "return row.map(function (v, d) { return out[pos][d]; });",
        "attention_only",
    ),
    "latent cache without its rotary key": (
        "num_layers * batch_size * kv_len * (d_latent + d_rope) * itemsize(dtype)",
        "num_layers * batch_size * kv_len * d_latent * itemsize(dtype)",
        "latent_cost",
    ),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_mutated_module_fails_the_checks(blank_page, mutation: str) -> None:
    old, new, check = MUTATIONS[mutation]
    text = _module_text()
    assert text.count(old) == 1, f"the mutation's target is not in the module once: {old}"
    js = _load_module(blank_page, text.replace(old, new) + TRACE_HELPER)
    with pytest.raises(AssertionError) as failure:
        CHECKS[check](js)
    print(f"\n[{mutation}] {str(failure.value).splitlines()[0][:300]}")


# --------------------------------------------------------------------------- the explorables
# Each figure keeps its state (data-state) and the numbers it shows (data-*) on the page; the
# tests drive it as a reader would and recompute those numbers with mha for the state read
# back.

PAGES = {
    "heads": "book/one-head-to-many.html",
    "online-softmax": "book/attention-without-the-score-matrix.html",
    "kv-cache": "book/inference.html",
    "latent-cache": "book/latent-attention.html",
    "induction-heads": "book/trained-heads.html",
}
NO_SVG = {"induction-heads"}  # a strip of token buttons and a table, named as a group
PHONE = {"width": 390, "height": 844}


def _open(browser, url: str, **context: object):
    """A new page at ``url`` whose explorables are drawn; the console errors it logs and the
    requests that failed.

    An explorable is drawn when it comes near the screen: each is scrolled into view, and
    the page is left there."""
    ctx = browser.new_context(**context)
    page = ctx.new_page()
    errors: list[str] = []
    # A resource that fails to load is reported below by its URL, not by its console message.
    page.on(
        "console",
        lambda m: (
            errors.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource")
            else None
        ),
    )
    page.on("pageerror", lambda e: errors.append(str(e)))
    failed: list[str] = []
    page.on("requestfailed", lambda r: failed.append(r.url))
    # Under a subpath the browser also asks the host's root for /favicon.ico, which is not
    # the site's (the site's own is at its root, /html/favicon.ico here).
    page.on(
        "response",
        lambda r: (
            failed.append(r.url)
            if r.status >= 400 and urlsplit(r.url).path != "/favicon.ico"
            else None
        ),
    )
    page.goto(url, wait_until="load")
    roots = page.locator(".mha-explore[data-explore]")
    assert roots.count() >= 1, f"{url} has no explorable"
    for i in range(roots.count()):
        _scroll_near(page, roots.nth(i))
    return page, errors, failed


def _scroll_near(page, root) -> None:
    """Scroll the explorable ``root`` into view and wait until it is drawn."""
    root.evaluate("(e) => e.scrollIntoView({block: 'center'})")
    root.and_(page.locator("[data-ready]")).wait_for(state="attached", timeout=30_000)


def _center(page, locator) -> tuple[float, float]:
    """The centre of ``locator`` on screen, once it is in the viewport and stays there.

    The site lays out offscreen sections lazily (``content-visibility: auto``), so bringing an
    element into view can lay out the sections around it and move it: scroll again until
    it holds still inside the viewport.
    """
    size = page.viewport_size
    for _ in range(10):
        # the element's own scrollIntoView: it lays out a lazily drawn section on its way,
        # where Playwright's scrolling can stop at the placeholder's end of the page
        locator.evaluate("(e) => e.scrollIntoView({block: 'center', inline: 'nearest'})")
        page.wait_for_timeout(100)
        box = locator.bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        if 0 <= x <= size["width"] and 0 <= y <= size["height"]:
            page.wait_for_timeout(100)
            again = locator.bounding_box()
            if (again["x"], again["y"]) == (box["x"], box["y"]):
                return x, y
    raise AssertionError(f"{locator} does not stay in the viewport: {box}")


def _state(page, figure: str) -> dict:
    root = page.locator(f'.mha-explore[data-explore="{figure}"]')
    return json.loads(root.get_attribute("data-state"))


def _attr(page, selector: str, name: str) -> object:
    return json.loads(page.locator(selector).get_attribute(name))


def figure_scripts(figure: str) -> list[str]:
    """The scripts a page with the explorable ``figure`` loads, in order: the arithmetic
    (MODULE, and MODEL for the figure that runs the trained model), what the explorables
    share, then the figure's own."""
    model = [MODEL.name] if figure == "induction-heads" else []
    return [MODULE.name, *model, "mha-explore-kit.js", f"mha-explore-{figure}.js"]


def test_built_site_serves_the_tested_module(built_site: Path) -> None:
    # Sphinx copies static files only when it writes a page: a stale copy fails here.
    for name in sorted({name for figure in PAGES for name in figure_scripts(figure)}):
        shipped = built_site / "_static" / name
        source = MODULE.parent / name
        assert shipped.read_bytes() == source.read_bytes(), f"the site's {name} is not the source's"
    for figure, page in PAGES.items():
        text = (built_site / page).read_text(encoding="utf8")
        assert f'data-explore="{figure}"' in text, f"{page} has no {figure} explorable"
        loaded = re.findall(
            r'<script defer="defer" src="\.\./_static/(mha-explore[\w-]*\.js)\?v=', text
        )
        assert loaded == figure_scripts(figure), f"{page} loads {loaded}"


@pytest.mark.parametrize("where", ["file", "subpath"])
@pytest.mark.parametrize("figure", list(PAGES))
def test_explorable_is_drawn_without_errors(
    browser, built_site: Path, subpath_url: str, figure: str, where: str
) -> None:
    base = built_site.as_uri() + "/" if where == "file" else subpath_url
    page, errors, failed = _open(browser, base + PAGES[figure], viewport=PHONE)
    try:
        root = page.locator(f'.mha-explore[data-explore="{figure}"]')
        assert root.get_attribute("data-ready") == "true"
        if figure in NO_SVG:
            assert root.locator("[role=group][aria-label]").count() >= 1, "no named group"
        else:
            assert root.locator("svg title").count() >= 1, "the figure's SVG has no title"
        assert not errors, f"console errors: {errors}"
        assert not failed, f"failed requests: {failed}"
        overflow = page.evaluate(
            "(sel) => { const r = document.querySelector(sel);"
            " const box = r.getBoundingClientRect();"
            " return [document.documentElement.scrollWidth, window.innerWidth, box.right]; }",
            f'.mha-explore[data-explore="{figure}"]',
        )
        assert overflow[0] <= overflow[1] and overflow[2] <= overflow[1], (
            f"horizontal overflow at 390 px: {overflow}"
        )
        unnamed = page.evaluate(
            "(sel) => [...document.querySelector(sel).querySelectorAll('button, select, input')]"
            ".filter((c) => !(c.labels && c.labels.length) && !c.getAttribute('aria-label')"
            " && !c.textContent.trim()).length",
            f'.mha-explore[data-explore="{figure}"]',
        )
        assert unnamed == 0, f"{unnamed} controls without an accessible name"
    finally:
        page.context.close()


# The book's notation, as each figure writes it: a script as <sup>/<sub> (HTML) or a shifted
# <tspan> (SVG), never as ASCII "^" or "_"; accessible names as words ("H kv").
SUB = '<tspan baseline-shift="sub" font-size="75%">'
NOTATION = {
    "heads": [
        ('.mx-head[data-head="2"]', "x&nbsp;W<sup>Q</sup><sub>2</sub>"),
        (".mx-note", "1/\u221aD<sub>h</sub>"),
        ('[data-point="k1"] text', f"k{SUB}1</tspan>"),
        (".mx-head svg text", f"k{SUB}5</tspan>"),
    ],
    "online-softmax": [
        ("table.mx-keys caption", "e<sup>z<sub>j</sub> \u2212 m</sup>/\u2113"),
        ("svg text", f"z{SUB}8</tspan>"),
    ],
    "kv-cache": [
        (".mx-legend", "W<sup>K</sup>"),
        ("label", "H<sub>kv</sub>"),
        ('[data-label="h-kv"]', f"H{SUB}kv</tspan>"),
    ],
    "latent-cache": [
        ("label", "D<sub>c</sub>"),
        (".mx-note", "D<sub>r</sub>"),
        ('[data-label="mla"]', f"D{SUB}c</tspan>"),
    ],
    "induction-heads": [],  # no symbol with a script: heads are named "1.2", tokens by letter
}


@pytest.mark.parametrize("figure", list(PAGES))
def test_explorables_write_the_books_notation(browser, built_site: Path, figure: str) -> None:
    page, errors, _ = _open(browser, built_site.as_uri() + "/" + PAGES[figure], viewport=PHONE)
    try:
        root = f'.mha-explore[data-explore="{figure}"]'
        found = page.evaluate(
            """(root) => {
            const r = document.querySelector(root), bare = r.cloneNode(true);
            // code names keep their _, and a figure's data (a script of JSON) is not its text
            bare.querySelectorAll('code, script').forEach((c) => c.remove());
            const named = [...r.querySelectorAll('[aria-label]')];
            return {text: bare.textContent, names: named.map((e) => e.getAttribute('aria-label'))};
        }""",
            root,
        )
        for where, text in [("text", found["text"])] + [("aria-label", n) for n in found["names"]]:
            ascii_script = re.search(r"[A-Za-z)}][_^]|sqrt", text)
            assert not ascii_script, f"{figure}: ASCII notation in its {where}: {text!r}"
        for selector, markup in NOTATION[figure]:
            drawn = page.eval_on_selector_all(
                f"{root} {selector}", "es => es.map(e => e.innerHTML)"
            )
            assert any(markup in html for html in drawn), f"{figure}: no {markup} in {drawn}"
        assert not errors, f"console errors: {errors}"
    finally:
        page.context.close()


def _expected_head(state: dict, w_q, w_k, head: int, query_position: int):
    """Head ``head``'s weights and output by mha, with their bounds, for the figure's state."""
    x = np.array([state["query"]], dtype=np.float64)  # (1, 2)
    keys = np.array(state["keys"], dtype=np.float64)  # (S, 2)
    S = len(keys)
    q = x @ np.array(w_q[head], dtype=np.float64)
    k = keys @ np.array(w_k[head], dtype=np.float64)
    mask = None
    if state["mask"] == "causal":
        mask = (np.arange(1, S + 1) <= query_position)[None, :]
    elif state["mask"] == "padding":
        mask = (np.arange(1, S + 1) < S)[None, :]
    if state["scale"] == "sqrt":
        scale = 1 / math.sqrt(2)
        out, weights = np_backend.scaled_dot_product_attention(q, k, keys, mask)
    else:
        scale = 1.0
        weights = np_backend.softmax(q @ k.T * scale, mask)
        out = weights @ keys
    rho = tolerance.softmax_tolerance(
        np.float64, logit_scale=_score_bound(q, k, scale), d_head=2, kv_len=S
    )
    out_tol = (rho + 2 * tolerance.gamma(np.float64, S)) * np.abs(keys).max()
    return weights[0], out[0], rho, out_tol, mask


def _check_heads(page) -> dict:
    state = _state(page, "heads")
    root = '.mha-explore[data-explore="heads"]'
    w_q, w_k = _attr(page, root, "data-w-q"), _attr(page, root, "data-w-k")
    position = int(page.locator(root).get_attribute("data-query-position"))
    for h in range(len(w_q)):
        box = f'{root} .mx-head[data-head="{h + 1}"]'
        weights, out, rho, out_tol, mask = _expected_head(state, w_q, w_k, h, position)
        got_w = np.array(_attr(page, box, "data-weights"))
        got_o = np.array(_attr(page, box, "data-output"))
        assert_close(got_w, weights, rho, name=f"head {h + 1} weights")
        assert_close(got_o, out, out_tol, name=f"head {h + 1} output")
        if mask is not None:
            assert (got_w[~mask[0]] == 0).all(), "a masked key's weight is not exactly 0"
        shown = page.locator(box).text_content()
        assert f"{got_w.argmax() + 1} {got_w.max():.2f}" in shown, "the weights shown"
    return state


def test_heads_explorable_follows_mouse_keyboard_and_controls(browser, built_site: Path) -> None:
    page, errors, _ = _open(browser, built_site.as_uri() + "/" + PAGES["heads"])
    try:
        start = _check_heads(page)
        cx, cy = _center(page, page.locator('.mha-explore [data-point="x"] .mx-hit'))
        page.mouse.move(cx, cy)
        page.mouse.down()
        page.mouse.move(cx - 60, cy + 40, steps=5)
        page.mouse.up()
        dragged = _check_heads(page)
        assert dragged["query"][0] < start["query"][0] and dragged["query"][1] < start["query"][1]

        key = page.locator('.mha-explore [data-point="k2"]')
        key.focus()
        page.keyboard.press("ArrowRight")
        moved = _check_heads(page)
        assert moved["keys"][1] == [dragged["keys"][1][0] + 0.25, dragged["keys"][1][1]]
        page.keyboard.press("Shift+ArrowDown")
        assert _check_heads(page)["keys"][1][1] == dragged["keys"][1][1] - 1.0

        page.get_by_label("Scale of the scores", exact=True).select_option("none")
        assert _check_heads(page)["scale"] == "none"
        for mask in ("causal", "padding", "none"):
            page.get_by_label("Mask", exact=True).select_option(mask)
            assert _check_heads(page)["mask"] == mask
        assert not errors, f"console errors: {errors}"
    finally:
        page.context.close()


def test_heads_explorable_follows_touch_on_a_phone(browser, built_site: Path) -> None:
    page, errors, _ = _open(
        browser,
        built_site.as_uri() + "/" + PAGES["heads"],
        viewport=PHONE,
        has_touch=True,
        is_mobile=True,
    )
    try:
        start = _check_heads(page)
        x, y = _center(page, page.locator('.mha-explore [data-point="k1"] .mx-hit'))
        cdp = page.context.new_cdp_session(page)
        cdp.send(
            "Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [{"x": x, "y": y}]}
        )
        for i in range(1, 6):
            cdp.send(
                "Input.dispatchTouchEvent",
                {"type": "touchMove", "touchPoints": [{"x": x - 12 * i, "y": y + 8 * i}]},
            )
        cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
        moved = _check_heads(page)
        assert moved["keys"][0][0] < start["keys"][0][0], "a touch drag did not move k1"
        assert moved["keys"][0][1] < start["keys"][0][1]
        # only the points take a touch for themselves; a swipe elsewhere on the plot scrolls
        actions = page.evaluate(
            "() => { const r = document.querySelector('.mha-explore[data-explore=\"heads\"]');"
            " const svg = r.querySelector('svg');"
            " return [getComputedStyle(svg).touchAction,"
            " getComputedStyle(r.querySelector('[data-point=\"k1\"]')).touchAction]; }"
        )
        assert actions == ["pan-y", "none"], f"touch-action of the plot and a point: {actions}"
        plot = page.locator('.mha-explore[data-explore="heads"] svg').first
        _center(page, plot)  # in view and holding still
        box = plot.bounding_box()
        bx, by = box["x"] + 0.06 * box["width"], box["y"] + 0.5 * box["height"]  # no point here
        before = page.evaluate("() => window.scrollY")
        cdp.send(
            "Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [{"x": bx, "y": by}]}
        )
        for i in range(1, 8):
            cdp.send(
                "Input.dispatchTouchEvent",
                {"type": "touchMove", "touchPoints": [{"x": bx, "y": by - 20 * i}]},
            )
        cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
        page.wait_for_timeout(300)
        assert page.evaluate("() => window.scrollY") > before, "a swipe on the plot does not scroll"
        assert _check_heads(page)["keys"] == moved["keys"], "a swipe off the points moved one"
        assert not errors, f"console errors: {errors}"
    finally:
        page.context.close()


HEADS_ROOT = '.mha-explore[data-explore="heads"]'


def _drag_point_to(page, point: str, target: list[float]) -> None:
    """Drag the plane's point ``point`` (x, k1, ...) with the mouse to the plane's ``target``."""
    sx, sy = _center(page, page.locator(f'{HEADS_ROOT} [data-point="{point}"] .mx-hit'))
    tx, ty = page.evaluate(
        """([root, v]) => {
        const svg = document.querySelector(root + ' svg'), p = svg.createSVGPoint();
        p.x = (v[0] + 4) / 8 * 320;  // the plane's [-4, 4] on 320 SVG units, as the figure draws it
        p.y = (4 - v[1]) / 8 * 320;
        const q = p.matrixTransform(svg.getScreenCTM());
        return [q.x, q.y];
    }""",
        [HEADS_ROOT, target],
    )
    page.mouse.move(sx, sy)
    page.mouse.down()
    page.mouse.move(tx, ty, steps=6)
    page.mouse.up()


def _check_plane_labels(page, where: str) -> list[str]:
    """The plane's drawn labels: no two boxes meet and each lies inside the plane's figure;
    every label left off is named in the note under it. Returns the labels left off."""
    drawn = page.evaluate(
        """(root) => {
        const svg = document.querySelector(root + ' svg'), s = svg.getBoundingClientRect();
        const labels = [...svg.querySelectorAll('text')]
            .filter((t) => t.getAttribute('display') !== 'none' && t.textContent.trim())
            .map((t) => { const r = t.getBoundingClientRect();
                          return [t.textContent, r.left, r.top, r.right, r.bottom]; });
        const note = document.querySelector(root + ' [data-labels-left-off]');
        return {svg: [s.left, s.top, s.right, s.bottom], labels: labels,
                left: note ? note.getAttribute('data-labels-left-off') : '',
                note: note ? note.textContent : ''};
    }""",
        HEADS_ROOT,
    )
    labels, (left, top, right, bottom) = drawn["labels"], drawn["svg"]
    names = {name for name, *_ in labels}
    assert {"x", "k1", "k2", "k3", "k4", "k5"} - set(drawn["left"].split()) <= names, where
    for i, (a, *ra) in enumerate(labels):
        assert ra[2] - ra[0] > 0 and ra[3] - ra[1] > 0, f"{where}: {a} drawn empty"
        assert left <= ra[0] and ra[2] <= right and top <= ra[1] and ra[3] <= bottom, (
            f"{where}: label {a} sticks out of the plane: {ra} in {drawn['svg']}"
        )
        for b, *rb in labels[i + 1 :]:
            meet = ra[0] < rb[2] and rb[0] < ra[2] and ra[1] < rb[3] and rb[1] < ra[3]
            assert not meet, f"{where}: labels {a} {ra} and {b} {rb} overlap"
    left_off = drawn["left"].split()
    for name in left_off:
        assert name not in names, f"{where}: {name} is drawn and said to be left off"
        assert f"{name} (" in drawn["note"], f"{where}: {name} left off and not named in the note"
    assert bool(left_off) == bool(drawn["note"]), f"{where}: the note: {drawn['note']!r}"
    return left_off


@pytest.mark.parametrize("viewport", [PHONE, {"width": 1280, "height": 900}], ids=["390", "1280"])
def test_heads_plane_labels_do_not_overlap(browser, built_site: Path, viewport: dict) -> None:
    """The labels of the points (x, the keys), of the outputs o_h, of head 2's query q_2 and of
    the origin never cover one another: in the initial state, with x dragged onto the origin
    (where q_2, both outputs and 0 gather), with one key dragged onto another, and with every
    point in one corner (where some labels have no room and are named in a note instead)."""
    page, errors, _ = _open(browser, built_site.as_uri() + "/" + PAGES["heads"], viewport=viewport)
    try:
        assert _check_plane_labels(page, "initial") == [], "a label left off at the start"
        _drag_point_to(page, "x", [0.0, 0.0])
        assert _check_heads(page)["query"] == [0.0, 0.0]
        _check_plane_labels(page, "x at the origin")
        _drag_point_to(page, "k2", [2.5, 2.0])
        _drag_point_to(page, "x", [2.0, 1.5])
        state = _check_heads(page)
        assert state["keys"][1] == state["keys"][0] == [2.5, 2.0], state
        _check_plane_labels(page, "k2 on k1, x beside them")
        for point in ("k2", "k1", "k3", "k4", "k5", "x"):  # k2 first: it is drawn over k1
            _drag_point_to(page, point, [4.0, 4.0])
        state = _check_heads(page)
        assert state["query"] == [4.0, 4.0] and all(k == [4.0, 4.0] for k in state["keys"])
        _check_plane_labels(page, "every point in a corner")
        assert not errors, f"console errors: {errors}"
    finally:
        page.context.close()


def _check_online(page) -> dict:
    root = '.mha-explore[data-explore="online-softmax"]'
    state = _state(page, "online-softmax")
    running = _attr(page, root, "data-running")
    exact = _attr(page, root, "data-exact")
    z = np.array(state["scores"], dtype=np.float64)
    v = np.array(state["values"], dtype=np.float64)[:, None]
    S, block_size, step = len(z), state["block_size"], state["step"]
    steps: list[tiled.TileStep] = []
    tiled.attention(np.ones((1, 1)), z[:, None], v, block_q=1, block_kv=block_size, trace=steps)
    merges = math.ceil(S / block_size) - 1
    sum_tol, w_tol = tolerance.online_softmax_tolerance(np.float64, terms=S, merges=merges)
    assert_close(np.array(exact["weights"]), np_backend.softmax(z), w_tol, name="exact softmax")
    ref_out, _ = np_backend.scaled_dot_product_attention(np.ones((1, 1)), z[:, None], v)
    out_tol = (w_tol + 2 * tolerance.gamma(np.float64, S)) * np.abs(v).max()
    assert_close(np.array(exact["output"]), ref_out[0, 0], out_tol, name="exact output")
    if step == 0:
        assert running["row_max"] is None or running["row_max"] == -math.inf
        assert running["row_sum"] == 0 and running["acc"] == 0 and running["seen"] == 0
        return state
    st = steps[step - 1]
    assert running["seen"] == st.kv_block[1]
    assert running["row_max"] == float(st.row_max[0]), "running max"  # exact: a maximum of z
    l_ref = float(st.row_sum[0])
    assert_close(np.array(running["row_sum"]), l_ref, sum_tol * l_ref, name="running sum")
    assert_close(np.array(running["rescale"]), st.rescale[0], w_tol, name="rescale")
    acc_tol = sum_tol * l_ref * np.abs(v).max()
    assert_close(np.array(running["acc"]), st.acc[0, 0], acc_tol, name="accumulator")
    seen = st.kv_block[1]
    so_far = np.array(running["weights"][:seen], dtype=np.float64)
    assert_close(so_far, np.exp(z[:seen] - st.row_max[0]) / l_ref, w_tol, name="weights so far")
    if seen == S:  # after the last block: the exact softmax and output
        assert_close(so_far, np_backend.softmax(z), 2 * w_tol, name="final weights")
        assert_close(
            np.array(running["acc"] / running["row_sum"]), ref_out[0, 0], 2 * out_tol, name="o"
        )
    return state


def test_online_softmax_explorable_steps_through_the_blocks(browser, built_site: Path) -> None:
    page, errors, _ = _open(
        browser, built_site.as_uri() + "/" + PAGES["online-softmax"], viewport=PHONE
    )
    try:
        assert _check_online(page)["step"] == 0
        nxt = page.get_by_role("button", name="Next block")
        prev = page.get_by_role("button", name="Previous block")
        for control in (nxt, page.get_by_label("Block size B c", exact=True)):
            assert control.bounding_box()["height"] >= 44, "a touch target under 44 px on a phone"
        nxt.click()
        assert _check_online(page)["step"] == 1
        root = page.locator('.mha-explore[data-explore="online-softmax"]')
        assert "nothing before" in root.text_content(), "the first block's rescale"
        page.get_by_label("score z 5", exact=True).fill("9.5")
        state = _check_online(page)
        assert state["scores"][4] == 9.5 and state["step"] == 1
        nxt.click()
        nxt.click()
        assert _check_online(page)["step"] == 3
        assert nxt.is_disabled(), "Next stays enabled after the last block"
        prev.click()
        assert _check_online(page)["step"] == 2
        for size in ("1", "4", "8"):
            page.get_by_label("Block size B c", exact=True).select_option(size)
            assert _check_online(page)["step"] == 0
            while not nxt.is_disabled():
                nxt.click()
                _check_online(page)
        page.get_by_role("button", name="Random scores").click()
        assert _check_online(page)["scores"] != state["scores"]
        nxt.focus()
        page.keyboard.press("Enter")
        assert _check_online(page)["step"] == 1, "the keyboard does not step"
        assert not errors, f"console errors: {errors}"
    finally:
        page.context.close()


def _check_cache(page) -> dict:
    root = '.mha-explore[data-explore="kv-cache"]'
    state = _state(page, "kv-cache")
    model = _attr(page, root, "data-model")
    n, h_kv = state["tokens"], state["num_kv_heads"]
    cache = arithmetic.kv_cache_bytes(model["num_layers"], n, h_kv, model["d_head"], np.float16)
    step = arithmetic.decode_step_cost(
        model["d_model"], model["num_heads"], h_kv, n + 1, np.float16
    )
    assert int(page.locator(root).get_attribute("data-cache-bytes")) == cache
    assert int(page.locator(root).get_attribute("data-step-bytes")) == step.bytes
    assert int(page.locator(root).get_attribute("data-step-flops")) == step.flops
    shown = page.locator(root).text_content()
    assert f"{cache:,} bytes" in shown and f"{step.bytes:,} bytes" in shown, "the bytes shown"
    return state


def test_kv_cache_explorable_appends_and_shares_heads(browser, built_site: Path) -> None:
    page, errors, _ = _open(browser, built_site.as_uri() + "/" + PAGES["kv-cache"], viewport=PHONE)
    try:
        model = _attr(page, '.mha-explore[data-explore="kv-cache"]', "data-model")
        llama = next(c for c in arithmetic.PUBLISHED_CONFIGS if c.name == model["name"])
        assert (model["num_layers"], model["num_heads"], model["d_head"], model["d_model"]) == (
            llama.num_layers,
            llama.num_heads,
            llama.d_head,
            llama.d_model,
        )
        assert model["max_context"] == llama.max_context
        first = _check_cache(page)
        one = page.get_by_role("button", name="Append a token")
        one.click()
        assert _check_cache(page)["tokens"] == first["tokens"] + 1
        kv = page.get_by_label("Key/value heads H kv", exact=True)
        options = kv.locator("option").all_inner_texts()
        assert [int(o) for o in options] == [
            h for h in range(1, llama.num_heads + 1) if llama.num_heads % h == 0
        ]
        for h_kv in ("8", "1", "32"):
            kv.select_option(h_kv)
            assert _check_cache(page)["num_kv_heads"] == int(h_kv)
        many = page.get_by_role("button", name="Append 256 tokens")
        while not many.is_disabled():
            many.click()
        full = _check_cache(page)
        assert full["tokens"] == llama.max_context - 1 and one.is_disabled()
        page.get_by_role("button", name=re.compile("Start over")).click()
        assert _check_cache(page)["tokens"] == first["tokens"]
        one.focus()
        page.keyboard.press("Space")
        assert _check_cache(page)["tokens"] == first["tokens"] + 1, "the keyboard does not append"
        assert not errors, f"console errors: {errors}"
    finally:
        page.context.close()


def _check_latent(page) -> dict:
    root = '.mha-explore[data-explore="latent-cache"]'
    state = _state(page, "latent-cache")
    model = _attr(page, root, "data-model")
    layers, heads, d_head = model["num_layers"], model["num_heads"], model["d_head"]
    dtype = getattr(torch, model["dtype"])  # "bfloat16": a PyTorch dtype, not NumPy's
    latent = latent_arithmetic.latent_cache_bytes(
        layers, 1, state["d_latent"], state["d_rope"], dtype
    )
    expected = {
        "data-latent-bytes": latent,
        "data-kv-bytes": arithmetic.kv_cache_bytes(layers, 1, state["num_kv_heads"], d_head, dtype),
        "data-mha-bytes": arithmetic.kv_cache_bytes(layers, 1, heads, d_head, dtype),
        "data-mqa-bytes": arithmetic.kv_cache_bytes(layers, 1, 1, d_head, dtype),
    }
    shown = page.locator(root).text_content()
    for name, value in expected.items():
        assert int(page.locator(root).get_attribute(name)) == value, name
        assert f"{value:,} bytes" in shown, f"{name}: {value:,} bytes not shown"
    heads_equal = (state["d_latent"] + state["d_rope"]) / (2 * d_head)
    assert f"as much as {heads_equal:,.3f}".rstrip("0").rstrip(".") in shown, "H_kv equivalent"
    return state


def test_latent_cache_explorable_follows_its_widths(browser, built_site: Path) -> None:
    page, errors, _ = _open(
        browser, built_site.as_uri() + "/" + PAGES["latent-cache"], viewport=PHONE
    )
    try:
        model = _attr(page, '.mha-explore[data-explore="latent-cache"]', "data-model")
        v2 = latent_arithmetic.DEEPSEEK_V2
        assert (model["num_layers"], model["num_heads"], model["d_head"]) == (
            v2.num_layers,
            v2.num_heads,
            v2.d_head,
        )
        assert (model["d_latent"], model["d_rope"]) == (v2.d_latent, v2.d_rope)
        first = _check_latent(page)
        assert (first["d_latent"], first["d_rope"]) == (v2.d_latent, v2.d_rope)
        root = page.locator('.mha-explore[data-explore="latent-cache"]')
        assert "as much as 2.25 key/value heads" in root.text_content(), "the paper's 2.25"
        dc = page.get_by_label("Latent width D c", exact=True)
        dr = page.get_by_label("Rotary key width D r", exact=True)
        kv = page.get_by_label("Key/value heads H kv", exact=True)
        for control in (dc, dr, kv):
            assert control.bounding_box()["height"] >= 44, "a touch target under 44 px on a phone"
        for width in ("64", "4096", "256"):
            dc.select_option(width)
            assert _check_latent(page)["d_latent"] == int(width)
        for width in ("0", "128"):
            dr.select_option(width)
            assert _check_latent(page)["d_rope"] == int(width)
        for h_kv in ("1", "2", "128"):
            kv.select_option(h_kv)
            assert _check_latent(page)["num_kv_heads"] == int(h_kv)
        dr.focus()
        page.keyboard.press("ArrowUp")
        assert _check_latent(page)["d_rope"] == 64, "the keyboard does not choose"
        assert not errors, f"console errors: {errors}"
    finally:
        page.context.close()


INDUCTION_ROOT = '.mha-explore[data-explore="induction-heads"]'


def _page_data(page) -> dict:
    return json.loads(page.locator(f"{INDUCTION_ROOT} script.mha-explore-data").text_content())


def _check_induction(page, model) -> dict:
    """The two heads' weights from the chosen query and the next-token probabilities there, as
    the page shows them, held to ``mha``'s forward of the page's model on the page's text;
    the predictions listed, most likely first, with the copies marked."""
    state = _state(page, "induction-heads")
    heads = _attr(page, INDUCTION_ROOT, "data-heads")
    tokens = live_decoder.encode(state["text"])
    i = state["query"]
    t = torch.tensor([tokens])
    with torch.no_grad():
        logits, weights = model(t, need_weights=True)
    w_tol, p_tol = forward_bounds(model, t)
    shown = _attr(page, INDUCTION_ROOT, "data-weights")
    for role in live_decoder.ROLES:
        layer, head = heads[role]["layer"], heads[role]["head"]
        expected = weights[layer][0, head, i].numpy()  # (L,)
        assert_close(np.array(shown[role]), expected, w_tol, name=f"{role} head's weights")
        assert (np.array(shown[role])[i + 1 :] == 0).all(), "a later token has weight"
    probs = torch.softmax(logits[0, i], dim=-1).numpy()  # (V,)
    got = np.array(_attr(page, INDUCTION_ROOT, "data-probs"))
    assert_close(got, probs, p_tol, name="next-token probabilities")
    copies = {tokens[j + 1] for j in range(i) if tokens[j] == tokens[i]}
    assert set(_attr(page, INDUCTION_ROOT, "data-copies")) == copies
    rows = page.locator(f"{INDUCTION_ROOT} table tr:has(td)")
    listed = [rows.nth(r).locator("th").text_content() for r in range(rows.count())]
    top = np.argsort(-got, kind="stable")[: len(listed)]
    assert listed == [live_decoder.ALPHABET[k] for k in top], "the predictions listed"
    marked = [rows.nth(r).get_attribute("data-copy") == "true" for r in range(rows.count())]
    assert marked == [int(k) in copies for k in top], "the copies marked"
    assert f"{100 * got[top[0]]:.1f}%" in rows.first.text_content()
    pressed = page.locator(f'{INDUCTION_ROOT} button.mx-tok[aria-pressed="true"]')
    assert pressed.get_attribute("data-position") == str(i), "the chosen token is not marked"
    return state


def _page_model(page):
    """The page's model in mha, after checking that its heads are the chapter's: each head's
    score, measured again on the model the page carries, within 0.05 of the score it says."""
    data = _page_data(page)
    model = live_decoder.decoder_model(data)
    measured = runs.head_scores(model, runs.TrainConfig().eval_batch())
    for role in live_decoder.ROLES:
        h = data["heads"][role]
        assert abs(measured[role][h["layer"], h["head"]] - h["score"]) < 0.05, (role, h)
        assert h["score"] > 0.5, f"the {role} head scores {h['score']}"
    return model


def _is_repeated_segment(text: str, task: dict) -> bool:
    """Whether ``text`` is as the training data draws it with ``task``, the settings the
    figure's data carries: distinct tokens until a segment of ``min_period`` to ``max_period``
    tokens repeats to the end, twice or more, after no prefix where ``prefix_prob`` is 0."""
    for n in range(len(text) if task["prefix_prob"] > 0 else 1):
        for period in range(task["min_period"], task["max_period"] + 1):
            head = text[: n + period]
            repeats = all(text[k] == text[k - period] for k in range(n + period, len(text)))
            if len(set(head)) == len(head) and repeats and len(text) >= n + 2 * period:
                return True
    return False


def test_induction_explorable_loads_its_data_and_draws_only_when_it_comes_near(
    browser, subpath_url: str
) -> None:
    """The trained model's figure sits far down its page: at load a phone neither fetches its
    data (a file of its own) nor runs the model; scrolled near, it loads the data once, draws,
    and its numbers are ``mha``'s."""
    context = browser.new_context(viewport=PHONE, has_touch=True, is_mobile=True)
    page = context.new_page()
    requested: list[str] = []
    page.on("request", lambda r: requested.append(urlsplit(r.url).path))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(subpath_url + PAGES["induction-heads"], wait_until="load")
        page.wait_for_timeout(1000)  # the page settles: nothing near the screen is pending
        root = page.locator(INDUCTION_ROOT)
        name = root.get_attribute("data-explore-data")
        assert name, "the figure names no data file"
        data_file = f"/_figures/{name}.js"
        assert root.get_attribute("data-ready") is None, "drawn at load, far below the screen"
        assert root.locator("script.mha-explore-data").count() == 0
        assert not [path for path in requested if path.endswith(data_file)], requested
        _scroll_near(page, root)
        assert len([path for path in requested if path.endswith(data_file)]) == 1, requested
        assert root.locator("script.mha-explore-data").count() == 1
        _check_induction(page, _page_model(page))
        assert not errors, f"page errors: {errors}"
    finally:
        context.close()


def test_printing_draws_every_explorable_where_it_is(browser, subpath_url: str) -> None:
    """Before printing (``beforeprint``), a figure not yet near the screen is drawn, its data
    loaded, and the page is not scrolled."""
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    try:
        page.goto(subpath_url + PAGES["induction-heads"], wait_until="load")
        root = page.locator(INDUCTION_ROOT)
        assert root.get_attribute("data-ready") is None, "drawn at load, far below the screen"
        page.evaluate("() => window.dispatchEvent(new Event('beforeprint'))")
        root.and_(page.locator("[data-ready]")).wait_for(state="attached", timeout=30_000)
        assert page.evaluate("() => window.scrollY") == 0
        state = _state(page, "induction-heads")  # its first state, as the PDF prints it
        assert state["query"] == len(state["text"]) - 1
    finally:
        context.close()


def test_induction_explorable_follows_touch_and_typing_on_a_phone(browser, built_site) -> None:
    page, errors, _ = _open(
        browser,
        built_site.as_uri() + "/" + PAGES["induction-heads"],
        viewport=PHONE,
        has_touch=True,
        is_mobile=True,
    )
    try:
        model = _page_model(page)
        start = _check_induction(page, model)
        tokens = page.locator(f"{INDUCTION_ROOT} button.mx-tok")
        for control in (tokens.nth(3), page.get_by_role("button", name="Repeat a random sequence")):
            assert control.bounding_box()["height"] >= 44, "a touch target under 44 px on a phone"
        page.touchscreen.tap(*_center(page, tokens.nth(3)))
        assert _check_induction(page, model)["query"] == 3, "a tap does not choose a token"
        page.touchscreen.tap(*_center(page, tokens.nth(14)))
        assert _check_induction(page, model)["query"] == 14
        field = page.get_by_label("Your sequence", exact=True)
        field.fill("ZyX0+/ZyX0")
        assert _check_induction(page, model) == {"text": "ZyX0+/ZyX0", "query": 9}
        field.press("End")
        page.keyboard.type("é")  # refused: a message, nothing else changes
        refused = page.locator(f"{INDUCTION_ROOT} .mx-refused").text_content()
        assert "\u201c\u00e9\u201d is not one of the 64 characters" in refused
        assert field.input_value() == "ZyX0+/ZyX0"
        assert _check_induction(page, model) == {"text": "ZyX0+/ZyX0", "query": 9}
        field.fill("A" * 33)  # longer than the model's positions: refused
        assert "At most 32 tokens" in page.locator(f"{INDUCTION_ROOT} .mx-refused").text_content()
        assert _check_induction(page, model)["text"] == "ZyX0+/ZyX0"
        random = page.get_by_role("button", name="Repeat a random sequence")
        task = _page_data(page)["task"]
        seen = set()
        for _ in range(4):
            page.touchscreen.tap(*_center(page, random))
            state = _check_induction(page, model)
            assert len(state["text"]) == 32 and state["query"] == 30  # the last one trained
            assert _is_repeated_segment(state["text"], task), (state["text"], task)
            assert page.locator(f"{INDUCTION_ROOT} .mx-refused").text_content() == ""
            seen.add(state["text"])
        assert len(seen) > 1 and start["text"] not in seen, "the same sequence each time"
        assert not errors, f"console errors: {errors}"
    finally:
        page.context.close()


def test_induction_explorable_draws_random_sequences_from_its_datas_task(
    browser, subpath_url: str
) -> None:
    """The button "Repeat a random sequence" takes the task's settings from the figure's
    data, not from constants of its script: served data whose task has one period, 12, and no
    prefix, every sequence it draws is a segment of 12 from the first token, repeated."""
    task = {"min_period": 12, "max_period": 12, "prefix_prob": 0.0}
    name = data_name(PAGES["induction-heads"].removesuffix(".html"), "explore-induction-heads")
    prefix, suffix = f"window.mhaExploreKit.data({json.dumps(name)},", ");\n"
    served: list[dict] = []

    def serve(route) -> None:
        response = route.fetch()
        text = response.text()
        data = json.loads(json.loads(text.removeprefix(prefix).removesuffix(suffix)))
        served.append(data.get("task"))
        route.fulfill(response=response, body=data_script(name, {**data, "task": task}))

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.route(f"**/_figures/{name}.js", serve)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(subpath_url + PAGES["induction-heads"], wait_until="load")
        _scroll_near(page, page.locator(INDUCTION_ROOT))
        assert len(served) == 1 and served[0] != task, served  # not the chapter's own task
        assert _page_data(page)["task"] == task, "the figure did not get the served data"
        random = page.get_by_role("button", name="Repeat a random sequence")
        for _ in range(12):
            random.click()
            text = _state(page, "induction-heads")["text"]
            assert _is_repeated_segment(text, task), f"{text!r} is not drawn from {task}"
        assert not errors, f"page errors: {errors}"
    finally:
        context.close()


def test_induction_explorable_follows_mouse_and_keyboard(browser, built_site) -> None:
    page, errors, _ = _open(
        browser,
        built_site.as_uri() + "/" + PAGES["induction-heads"],
        viewport={"width": 1280, "height": 900},
    )
    try:
        model = _page_model(page)
        start = _check_induction(page, model)
        last = len(start["text"]) - 1
        assert start["query"] == last
        tokens = page.locator(f"{INDUCTION_ROOT} button.mx-tok")
        page.mouse.click(*_center(page, tokens.nth(5)))
        assert _check_induction(page, model)["query"] == 5
        tokens.nth(5).focus()
        page.keyboard.press("ArrowRight")
        assert _check_induction(page, model)["query"] == 6
        focused = page.evaluate("() => document.activeElement.getAttribute('data-position')")
        assert focused == "6", "the focus does not follow the chosen token"
        page.keyboard.press("ArrowLeft")
        page.keyboard.press("ArrowLeft")
        assert _check_induction(page, model)["query"] == 4
        page.keyboard.press("End")
        assert _check_induction(page, model)["query"] == last
        page.keyboard.press("ArrowRight")  # past the end: it stays
        assert _check_induction(page, model)["query"] == last
        page.keyboard.press("Home")
        assert _check_induction(page, model)["query"] == 0
        field = page.get_by_label("Your sequence", exact=True)
        field.click()
        field.press("End")
        page.keyboard.type("Q")
        assert _check_induction(page, model) == {"text": start["text"] + "Q", "query": last + 1}
        page.keyboard.type("#")
        assert (
            "\u201c#\u201d is not one of"
            in page.locator(f"{INDUCTION_ROOT} .mx-refused").text_content()
        )
        assert _state(page, "induction-heads")["text"] == start["text"] + "Q"
        page.get_by_role("button", name="Repeat a random sequence").focus()
        page.keyboard.press("Enter")
        task = _page_data(page)["task"]
        assert _is_repeated_segment(_check_induction(page, model)["text"], task)
        assert not errors, f"console errors: {errors}"
    finally:
        page.context.close()


def test_induction_explorable_prints_as_a_still_with_a_sentence(browser, built_site) -> None:
    """Printed (the book's PDF), the figure keeps its tokens, bars and predictions, drops its
    controls and the refusal line, and ``build_pdf``'s sentence after it says that the site
    has it live."""
    page, errors, _ = _open(
        browser, built_site.as_uri() + "/" + PAGES["induction-heads"], viewport=PHONE
    )
    try:
        page.emulate_media(media="print")
        page.evaluate(build_pdf.STILLS_JS, ["https://example.org/", build_pdf.EXPLORABLES])
        shown = page.evaluate(
            """(root) => [...document.querySelectorAll(root + ' > *')].filter(
                (e) => e.tagName !== 'SCRIPT' && !e.classList.contains('mha-explore-fallback')
            ).map((e) => [e.className, getComputedStyle(e).display !== 'none'])""",
            INDUCTION_ROOT,
        )
        hidden = [name for name, visible in shown if not visible]
        assert hidden == ["mx-row", "mx-note mx-refused"], shown
        note = page.evaluate(
            "(root) => document.querySelector(root).nextElementSibling.textContent",
            INDUCTION_ROOT,
        )
        assert note.startswith("On the book's site this figure is interactive: ") and (
            "#explore-induction-heads. Here it is printed as it first appears." in note
        ), note
        assert not errors, f"console errors: {errors}"
    finally:
        page.context.close()
