"""The explorables' arithmetic in Chromium, held to ``mha``'s results.

``book/_static/mha-explore.js`` mirrors ``mha``'s functions by name (softmax, scaled
dot-product attention, the online softmax and the tiled forward, the cache's size and a
decoding step's bytes). Each check below draws inputs in Python, evaluates the JavaScript
function in a headless Chromium page and compares with ``mha``: to the rounding bounds of
``mha.numerics.tolerance`` for float64, exactly where the arithmetic is exact (integer byte
counts, maxima, masked zeros). A mutated copy of the module (a wrong scale, no max
subtraction, a missing rescale, a missing factor of 2) must fail those same checks.

The explorables themselves are then driven in the built site (from ``file://`` and from a
server that puts the site under a subpath): a drag, a key press, a button, and the numbers the
page shows are compared with ``mha``'s for the state read back from the page.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from mha.backends import np_backend, tiled
from mha.cost import arithmetic
from mha.numerics import tolerance
from mha.numerics.tolerance import assert_close

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "book" / "_static" / "mha-explore.js"

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
    return _load_module(blank_page, MODULE.read_text(encoding="utf8") + TRACE_HELPER)


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


CHECKS = {
    "softmax": check_softmax,
    "scaled_dot_product_attention": check_attention,
    "online_softmax": check_online_softmax,
    "tiled_attention": check_tiled_trace,
    "cost": check_cost,
}

# The trace check's helper: tiled_attention's output, lse and trace (an array passed in
# ``options.trace`` is filled in the page, so it is returned from there).
TRACE_HELPER = """
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
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_mutated_module_fails_the_checks(blank_page, mutation: str) -> None:
    old, new, check = MUTATIONS[mutation]
    text = MODULE.read_text(encoding="utf8")
    assert text.count(old) == 1, f"the mutation's target is not in the module once: {old}"
    js = _load_module(blank_page, text.replace(old, new) + TRACE_HELPER)
    with pytest.raises(AssertionError) as failure:
        CHECKS[check](js)
    print(f"\n[{mutation}] {str(failure.value).splitlines()[0][:300]}")
