"""The attention figures: titles, labels, colour scales, shapes and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha import plotting


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
    edges = plotting.layer_edges(3)
    assert len(edges) == 9 * 3 + 1
    assert {e.head for e in edges} == {1, 2, 3, None}  # heads from 1, as in the equations
    into_scores = {(e.source, e.layout) for e in edges if e.target == "scores_2"}
    assert into_scores == {("Q_2", "(B, L, Dh)"), ("K_2", "(B, S, Dh)")}
    assert [e.layout for e in edges if e.target == "MultiHead"] == ["(B, L, H*Dh)"]
    with pytest.raises(ValueError, match="num_heads must be positive; got num_heads=0"):
        plotting.layer_edges(0)


def test_layer_diagram_labels_every_arrow_and_colours_each_head() -> None:
    from mha import shapes

    sizes = shapes.shape_sizes(batch_size=1, q_len=3, kv_len=5, d_model=4, num_heads=2)
    fig = plotting.layer_diagram(num_heads=2, sizes=sizes)
    arrows = [a for a in fig.layout.annotations if a.showarrow]
    edges = plotting.layer_edges(2)
    assert len(arrows) == len(edges)
    labels = [a.text for a in fig.layout.annotations if not a.showarrow and "=" in a.text]
    assert "(B, L, S) = (1, 3, 5)" in labels and "(B, S, D<sub>h</sub>) = (1, 5, 2)" in labels
    arrow_colours = {a.arrowcolor for a in arrows}
    assert set(plotting.HEAD_COLOURS[:2]) <= arrow_colours  # one colour per head
    assert [t.name for t in fig.data if t.name] == ["head 1", "head 2"]
    assert fig.data[0].hovertext and fig.layout.title.text
    assert fig.layout.width is None and fig.layout.autosize
    with pytest.raises(ValueError, match="num_heads must be at most 6 to draw; got num_heads=7"):
        plotting.layer_diagram(num_heads=7)
