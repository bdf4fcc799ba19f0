"""The attention figures: titles, labels, colour scales, shapes and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha.display import diagrams, plotting


def weights(n: int = 3, L: int = 4, S: int = 5, seed: int = 0) -> np.ndarray:
    w = np.random.default_rng(seed).random((n, L, S))
    return w / w.sum(-1, keepdims=True)


def test_token_labels_are_unique_when_tokens_repeat() -> None:
    labels = plotting.token_labels(["the", "cat", "the"])
    assert labels == ["0 the", "1 cat", "2 the"] and len(set(labels)) == 3


def test_attention_heatmap_has_title_axis_titles_labels_and_the_weights_scale() -> None:
    w = weights()[0]
    fig = plotting.attention_heatmap(w, title="one head", queries=list("abcd"), keys=list("vwxyz"))
    (trace,) = fig.data
    assert fig.layout.title.text == "one head"
    assert fig.layout.xaxis.title.text == "key" and fig.layout.yaxis.title.text == "query"
    assert fig.layout.yaxis.autorange == "reversed"  # query 0 at the top, as in the equations
    assert list(trace.x) == list("vwxyz") and list(trace.y) == list("abcd")
    assert (trace.zmin, trace.zmax) == (0.0, 1.0)
    assert fig.layout.width is None and fig.layout.autosize  # the page sets the width
    np.testing.assert_array_equal(np.array(trace.z), w)  # exact: a copy
    assert trace.colorscale[0][1] != trace.colorscale[-1][1]  # "Blues", resolved by Plotly


def test_attention_heatmap_accepts_a_torch_tensor() -> None:
    fig = plotting.attention_heatmap(torch.eye(3), title="identity")
    assert np.array(fig.data[0].z).shape == (3, 3) and list(fig.data[0].x) == ["0", "1", "2"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"weights": np.ones(3)}, r"weights must be a numeric array of shape \(L, S\)"),
        ({"queries": ["a", "b"]}, r"queries must have one label per position \(4\); got 2"),
        ({"keys": list("aabcd")}, "keys must be unique"),
        ({"colorscale": "Jet"}, "colorscale must be one of the book's colour-blind-safe scales"),
    ],
)
def test_attention_heatmap_rejects_bad_arguments(kwargs, match) -> None:
    args = {"weights": weights()[0], "title": "t"} | kwargs
    with pytest.raises(ValueError, match=match):
        plotting.attention_heatmap(**args)


def test_attention_grid_lays_out_every_map_with_one_colour_bar() -> None:
    w = weights(5)
    fig = plotting.attention_grid(w, title="five heads", titles=[f"h{k}" for k in range(5)])
    assert len(fig.data) == 5
    assert [t.showscale for t in fig.data] == [True, False, False, False, False]
    titles = [a.text for a in fig.layout.annotations]
    assert titles == [f"h{k}" for k in range(5)]
    assert fig.layout.xaxis6.title.text is None  # 3 rows of 2: the sixth cell stays empty
    for k, trace in enumerate(fig.data):
        np.testing.assert_array_equal(np.array(trace.z), w[k])  # exact: copies


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"weights": np.ones((2, 2))}, r"weights must be a numeric array of shape \(n, L, S\)"),
        ({"titles": ["a"]}, r"titles must give one title per map \(3\); got 1"),
        ({"cols": 0}, "cols must be positive; got cols=0"),
    ],
)
def test_attention_grid_rejects_bad_arguments(kwargs, match) -> None:
    args = {"weights": weights(), "title": "t", "titles": ["a", "b", "c"]} | kwargs
    with pytest.raises(ValueError, match=match):
        plotting.attention_grid(**args)


def test_head_slider_shows_one_head_per_step() -> None:
    w = weights(4)
    fig = plotting.head_slider(w, title="layer 0")
    assert [t.visible for t in fig.data] == [True, False, False, False]
    (slider,) = fig.layout.sliders
    assert [s.label for s in slider.steps] == ["0", "1", "2", "3"]
    assert slider.steps[2].args[0]["visible"] == [False, False, True, False]
    assert slider.steps[2].args[1]["title.text"] == "layer 0, head 2"
    with pytest.raises(ValueError, match=r"head_names must name every head \(4\); got 2"):
        plotting.head_slider(w, title="t", head_names=["a", "b"])


def test_attention_panels_puts_maps_of_different_shapes_side_by_side() -> None:
    maps = [weights(1, 3, 3)[0], weights(1, 3, 5)[0]]
    fig = plotting.attention_panels(
        maps, title="self and cross", titles=["self", "cross"], keys=[None, list("abcde")]
    )
    assert [np.array(t.z).shape for t in fig.data] == [(3, 3), (3, 5)]
    assert [t.showscale for t in fig.data] == [True, False]
    assert list(fig.data[1].x) == list("abcde") and list(fig.data[0].x) == ["0", "1", "2"]
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.yaxis2.autorange == "reversed"
    assert fig.layout.width is None and fig.layout.autosize
    with pytest.raises(ValueError, match=r"titles must give one entry per map \(2\); got 1"):
        plotting.attention_panels(maps, title="t", titles=["a"])
    with pytest.raises(ValueError, match=r"weights\[1\] must be a numeric array of shape \(L, S\)"):
        plotting.attention_panels([maps[0], np.ones(3)], title="t", titles=["a", "b"])


def test_layer_edges_carry_each_tensor_of_the_layer_with_its_layout() -> None:
    edges = diagrams.layer_edges(3)
    assert len(edges) == 9 * 3 + 1
    assert {e.head for e in edges} == {1, 2, 3, None}  # heads from 1, as in the equations
    into_scores = {(e.source, e.layout) for e in edges if e.target == "scores_2"}
    assert into_scores == {("Q_2", "(B, L, Dh)"), ("K_2", "(B, S, Dh)")}
    assert [e.layout for e in edges if e.target == "MultiHead"] == ["(B, L, H*Dh)"]
    with pytest.raises(ValueError, match="num_heads must be positive; got num_heads=0"):
        diagrams.layer_edges(0)


def test_layer_diagram_labels_every_arrow_and_colours_each_head() -> None:
    from mha.display import shapes

    sizes = shapes.shape_sizes(batch_size=1, q_len=3, kv_len=5, d_model=4, num_heads=2)
    fig = diagrams.layer_diagram(num_heads=2, sizes=sizes)
    arrows = [a for a in fig.layout.annotations if a.showarrow]
    edges = diagrams.layer_edges(2)
    assert len(arrows) == len(edges)
    labels = [a.text for a in fig.layout.annotations if not a.showarrow and "=" in a.text]
    assert "(B, L, S) = (1, 3, 5)" in labels and "(B, S, D<sub>h</sub>) = (1, 5, 2)" in labels
    arrow_colours = {a.arrowcolor for a in arrows}
    assert set(diagrams.HEAD_COLOURS[:2]) <= arrow_colours  # one colour per head
    assert [t.name for t in fig.data if t.name] == ["head 1", "head 2"]
    assert fig.data[0].hovertext and fig.layout.title.text
    assert fig.layout.width is None and fig.layout.autosize
    with pytest.raises(ValueError, match="num_heads must be at most 6 to draw; got num_heads=7"):
        diagrams.layer_diagram(num_heads=7)


def test_attention_grid_greys_out_masked_cells_instead_of_drawing_them_as_small_weights() -> None:
    w = weights(2, 4, 4)
    causal = np.tril(np.ones((4, 4), dtype=bool))
    fig = plotting.attention_grid(w, title="t", titles=["a", "b"], mask=causal)
    grey, shown = fig.data[0], fig.data[1]  # per map: the grey layer, then the weights
    assert len(fig.data) == 4 and grey.name == "masked" and not grey.showscale
    assert np.isnan(np.array(shown.z, dtype=float)[0, 1]) and np.array(grey.z)[0, 1] == 1.0
    assert np.isnan(np.array(grey.z, dtype=float)[1, 0]) and np.array(shown.z)[1, 0] == w[0, 1, 0]
    with pytest.raises(TypeError, match="mask must be boolean"):
        plotting.attention_grid(w, title="t", titles=["a", "b"], mask=causal.astype(float))
    with pytest.raises(ValueError, match=r"mask must broadcast to the map's shape \(2, 4, 4\)"):
        plotting.attention_grid(w, title="t", titles=["a", "b"], mask=np.ones(3, dtype=bool))


def test_attention_heatmap_greys_out_masked_cells() -> None:
    fig = plotting.attention_heatmap(weights()[0], title="t", mask=np.array([True] * 4 + [False]))
    assert [t.name for t in fig.data] == ["masked", None]
    assert np.isnan(np.array(fig.data[1].z, dtype=float)[:, 4]).all()


def test_attention_panels_grey_out_masked_cells_per_map() -> None:
    maps = [weights(1, 3, 3)[0], weights(1, 3, 5)[0]]
    fig = plotting.attention_panels(
        maps, title="t", titles=["a", "b"], masks=[None, np.array([True] * 4 + [False])]
    )
    assert [t.name for t in fig.data] == [None, "masked", None]
    assert np.isnan(np.array(fig.data[2].z, dtype=float)[:, 4]).all()


def test_legend_below_puts_a_horizontal_legend_under_the_plot() -> None:
    fig = plotting.legend_below(plotting.attention_heatmap(weights()[0], title="t"))
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.yref == "container"


def test_weight_ownership_colours_every_column_and_row_by_its_head_from_one() -> None:
    import mha

    params = mha.init_params(12, 3, seed=0)
    fig = diagrams.weight_ownership(params)
    packed, theirs = fig.data
    owner = np.array(packed.z)[0]  # one code per (projection, head) block
    assert owner.tolist() == [p * 3 + h for p in range(3) for h in range(3) for _ in range(4)]
    np.testing.assert_array_equal(np.array(theirs.z)[:, 0], owner)  # exact: transposed owners
    assert "Q, head 1 (code: head(0))" in packed.text[0][0]
    assert list(fig.layout.xaxis.ticktext) == ["Q1", "Q2", "Q3", "K1", "K2", "K3", "V1", "V2", "V3"]
    assert fig.layout.title.text and fig.layout.width is None
    with pytest.raises(ValueError, match="num_kv_heads = num_heads"):
        diagrams.weight_ownership(mha.init_params(12, 4, num_kv_heads=2))


def test_form_timings_draws_every_form_on_log_axes_in_one_panel_per_head_count() -> None:
    forms = ("fused", "per_head")
    times = {(h, n): {f: 1e-4 * n * (h if f == "per_head" else 1) for f in forms}
             for h in (1, 8) for n in (16, 64)}  # fmt: skip
    fig = plotting.form_timings(times, title="t")
    assert len(fig.data) == 4 and [t.showlegend for t in fig.data] == [True, True, False, False]
    assert fig.layout.yaxis.type == fig.layout.yaxis2.type == "log"  # every panel
    assert fig.layout.xaxis2.type == "log" and list(fig.layout.xaxis.tickvals) == [16, 64]
    assert list(fig.data[1].y) == [1e3 * 1e-4 * 16, 1e3 * 1e-4 * 64]  # per_head at H = 1, ms
    assert fig.layout.legend.orientation == "h"
    with pytest.raises(ValueError, match="every cell of times must time the same forms"):
        plotting.form_timings({(1, 16): {"fused": 1.0}, (1, 64): {"packed": 1.0}})
    with pytest.raises(ValueError, match="times must hold at least one"):
        plotting.form_timings({})


def test_head_pair_panels_blank_the_diagonal_and_put_each_colour_bar_below() -> None:
    a = np.random.default_rng(0).random((3, 3))
    fig = plotting.head_pair_panels(
        [a, -a], title="t", titles=["x", "y"], zranges=[(0, 1), (-1, 1)],
        colorscales=[plotting.SEQUENTIAL, plotting.DIVERGING],
    )  # fmt: skip
    z = np.array(fig.data[0].z, dtype=float)
    assert np.isnan(np.diag(z)).all() and z[0, 1] == a[0, 1]
    assert list(fig.data[0].x) == ["1", "2", "3"]  # heads from 1
    assert all(t.colorbar.orientation == "h" for t in fig.data)
    with pytest.raises(ValueError, match=r"zranges must give one entry per panel \(2\); got 1"):
        plotting.head_pair_panels(
            [a, a], title="t", titles=["x", "y"], zranges=[(0, 1)], colorscales=["Blues"] * 2
        )


# ---- line charts and the tile figure ------------------------------------------------------


def test_lines_put_the_legend_below_and_label_log_axes_by_powers_of_ten() -> None:
    fig = plotting.lines(
        [256, 512, 1024], {"measured": [1.0, 2.0, 4.0], "model": [1.1, 2.1, 4.1]},
        title="t", xaxis_title="N", yaxis_title="MiB", log_x=True, log_y=True,
        x_ticks=[256, 512, 1024], dashed=["model"],
    )  # fmt: skip
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.y < 0
    assert fig.layout.width is None and fig.layout.autosize
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == [256, 512, 1024]
    assert list(fig.layout.xaxis.ticktext) == ["256", "512", "1,024"]
    assert fig.layout.yaxis.dtick == 1 and fig.layout.yaxis.exponentformat == "power"
    measured, model = fig.data
    assert measured.mode == "lines+markers" and model.line.dash == "dash"
    assert measured.line.color == plotting.OKABE_ITO[0]


@pytest.mark.parametrize(
    ("series", "dashed", "match"),
    [
        ({}, (), "series must hold at least one curve"),
        ({"a": [1.0]}, (), r"series 'a' must have one value per x \(2\); got 1"),
        ({"a": [1.0, 2.0]}, ("b",), "dashed must name series"),
    ],
)
def test_lines_reject_bad_series(series, dashed, match) -> None:
    with pytest.raises(ValueError, match=match):
        plotting.lines([1, 2], series, title="t", xaxis_title="x", yaxis_title="y", dashed=dashed)


def tile_trace(L=10, S=10, Br=4, Bc=3, causal=True):
    from mha.backends import tiled

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((n, 4)) for n in (L, S, S))
    steps = []
    tiled.attention(q, k, v, causal=causal, block_q=Br, block_kv=Bc, trace=steps)
    return steps


def test_tile_steps_has_one_slider_step_per_tile_with_the_tiles_drawn_as_rectangles() -> None:
    steps = tile_trace()
    fig = diagrams.tile_steps(steps, 10, 10, title="tiles<br>L = S = 10")
    (slider,) = fig.layout.sliders
    assert len(slider.steps) == len(steps) == 12
    assert fig.layout.title.text == "tiles<br>L = S = 10" and fig.layout.width is None
    assert fig.layout.legend.orientation == "h"
    assert [t.name for t in fig.data[2:]] == list(diagrams.TILE_STATUSES)
    for step, tile in zip(slider.steps, steps, strict=True):
        data, layout, traces = step.args
        assert list(traces) == [0, 1]
        shapes = layout["shapes"]
        assert len(shapes) == 12 + 1  # every tile, and the live one outlined
        live = shapes[-1]
        assert (live["x0"], live["x1"]) == (tile.kv_block[0] - 0.5, tile.kv_block[1] - 0.5)
        assert (live["y0"], live["y1"]) == (tile.q_block[0] - 0.5, tile.q_block[1] - 0.5)
        assert ("skipped" in layout["annotations"][0]["text"]) == (not tile.computed)
    last_grid = np.array(slider.steps[-1].args[0]["z"][0])
    skipped = [t for t in steps if not t.computed]
    assert len(skipped) == 3
    for t in skipped:  # whole tiles above the diagonal
        assert np.all(last_grid[slice(*t.q_block), slice(*t.kv_block)] == 3)
    assert np.all(last_grid[np.triu_indices(10, 1)] >= 3)  # skipped or masked: j > i
    stats = slider.steps[-1].args[0]["text"][1]
    assert len(stats) == 10 and len(stats[0]) == 3 + 4  # m, l, rescale and 4 of the acc
    assert list(fig.data[1].x) == ["m", "ℓ", "rescale", "õ1", "õ2", "õ3", "õ4"]
    first_rescale = slider.steps[0].args[0]["text"][1][0][2]
    assert first_rescale == "0.00"  # nothing was attended before the first tile


def test_tile_steps_rejects_bad_steps() -> None:
    with pytest.raises(ValueError, match="steps must hold at least one tile step"):
        diagrams.tile_steps([], 4, 4, title="t")
    with pytest.raises(ValueError, match=r"steps\[4\] must be a tile of one head inside"):
        diagrams.tile_steps(tile_trace(), 5, 10, title="t")
