"""Figures of attention, drawn the same way in every chapter.

Every figure has a title, axis titles and token labels, uses one of the book's
colour-blind-safe scales, and leaves its width to the page (``autosize``), so that it fits a
phone as well as a desktop; the site's script sets the light or dark template. An attention
map has queries as rows, top to bottom, and keys as columns, as in the equations.

Colour scales (all readable with the common colour-vision deficiencies):

- :data:`WEIGHTS`: ``"Blues"``, one hue from white (0) to dark blue (1), for attention
  weights and other values in ``[0, 1]``;
- :data:`SEQUENTIAL`: ``"Viridis"``, perceptually uniform, for unbounded non-negative values;
- :data:`DIVERGING`: ``"RdBu"``, for signed values centred on zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

WEIGHTS = "Blues"
SEQUENTIAL = "Viridis"
DIVERGING = "RdBu"
COLORSCALES = (WEIGHTS, SEQUENTIAL, DIVERGING, "Cividis", "Greys")


def _matrix_stack(name: str, weights: Any, ndim: int) -> np.ndarray:
    if hasattr(weights, "detach"):
        weights = weights.detach().cpu().double().numpy()
    w = np.asarray(weights)
    if w.ndim != ndim or not np.issubdtype(w.dtype, np.number):
        layout = "(L, S)" if ndim == 2 else "(n, L, S)"
        raise ValueError(f"{name} must be a numeric array of shape {layout}; got shape {w.shape}")
    return w.astype(np.float64)


def token_labels(tokens: Sequence[Any]) -> list[str]:
    """Axis labels ``"i token"``, unique even when a token repeats (Plotly merges equal labels).

    Args:
        tokens: the tokens (strings or ids) of one sequence.

    Returns:
        One label per position.
    """
    return [f"{i} {t}" for i, t in enumerate(tokens)]


def _labels(name: str, labels: Sequence[str] | None, n: int) -> list[str]:
    if labels is None:
        return [str(i) for i in range(n)]
    labels = [str(x) for x in labels]
    if len(labels) != n:
        raise ValueError(f"{name} must have one label per position ({n}); got {len(labels)}")
    if len(set(labels)) != n:
        raise ValueError(f"{name} must be unique (use token_labels); got repeats in {labels}")
    return labels


def _check_colorscale(colorscale: str) -> None:
    if colorscale not in COLORSCALES:
        raise ValueError(
            f"colorscale must be one of the book's colour-blind-safe scales {COLORSCALES}; "
            f"got {colorscale!r}"
        )


def _heatmap(
    z: np.ndarray,
    x: list[str],
    y: list[str],
    *,
    zmin: float | None,
    zmax: float | None,
    colorscale: str,
    value_name: str,
    showscale: bool = True,
    name: str | None = None,
    visible: bool = True,
) -> go.Heatmap:
    return go.Heatmap(
        z=z,
        x=x,
        y=y,
        zmin=zmin,
        zmax=zmax,
        colorscale=colorscale,
        showscale=showscale,
        colorbar=dict(title=dict(text=value_name), thickness=12),
        hovertemplate=f"query %{{y}}<br>key %{{x}}<br>{value_name} %{{z:.3f}}<extra></extra>",
        name=name,
        visible=visible,
    )


def attention_heatmap(
    weights: Any,
    *,
    title: str,
    queries: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    value_name: str = "weight",
    zmin: float | None = 0.0,
    zmax: float | None = 1.0,
    colorscale: str = WEIGHTS,
    xaxis_title: str = "key",
    yaxis_title: str = "query",
    height: int | None = None,
) -> go.Figure:
    """One attention map (or any query-by-key matrix) as a heatmap.

    Args:
        weights: the matrix, NumPy array or torch tensor.
        title: the figure's title (also its accessible name on the site).
        queries: row labels, top to bottom (default: positions).
        keys: column labels (default: positions).
        value_name: what a cell holds, for the colour bar and the hover text.
        zmin: the value at the light end of the scale (``None``: the data's minimum).
        zmax: the value at the dark end (``None``: the data's maximum).
        colorscale: one of :data:`COLORSCALES`.
        xaxis_title: the columns' axis title.
        yaxis_title: the rows' axis title.
        height: in pixels (default: grows with the number of rows).

    Shape:
        weights ``(L, S)``.

    Returns:
        A Plotly figure.

    Raises:
        ValueError: if ``weights`` is not 2-D, a label list has the wrong length or
            repeats, or the colour scale is not one of the book's.
    """
    w = _matrix_stack("weights", weights, 2)
    _check_colorscale(colorscale)
    y, x = _labels("queries", queries, w.shape[0]), _labels("keys", keys, w.shape[1])
    fig = go.Figure(
        _heatmap(w, x, y, zmin=zmin, zmax=zmax, colorscale=colorscale, value_name=value_name)
    )
    fig.update_layout(
        title=dict(text=title),
        xaxis=dict(title=dict(text=xaxis_title), tickangle=-45 if w.shape[1] > 8 else 0),
        yaxis=dict(title=dict(text=yaxis_title), autorange="reversed"),
        height=height or max(320, 140 + 22 * w.shape[0]),
        autosize=True,
    )
    return fig


def attention_grid(
    weights: Any,
    *,
    title: str,
    titles: Sequence[str],
    queries: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    cols: int = 2,
    value_name: str = "weight",
    zmin: float | None = 0.0,
    zmax: float | None = 1.0,
    colorscale: str = WEIGHTS,
    xaxis_title: str = "key",
    yaxis_title: str = "query",
    height: int | None = None,
) -> go.Figure:
    """Several attention maps (heads, layers, seeds) side by side, one colour scale.

    Args:
        weights: the maps, NumPy array or torch tensor.
        title: the figure's title.
        titles: one subplot title per map.
        queries: row labels shared by every map.
        keys: column labels shared by every map.
        cols: maps per row; the grid has as many rows as needed.
        value_name: what a cell holds.
        zmin: the value at the light end of the scale.
        zmax: the value at the dark end.
        colorscale: one of :data:`COLORSCALES`.
        xaxis_title: the columns' axis title, on every map.
        yaxis_title: the rows' axis title, on every map.
        height: in pixels (default: grows with the number of grid rows).

    Shape:
        weights ``(n, L, S)``.

    Returns:
        A Plotly figure.

    Raises:
        ValueError: if ``weights`` is not 3-D, ``titles`` does not give one title per map,
            ``cols`` is not a positive int, a label list is wrong, or the colour scale is
            not one of the book's.
    """
    w = _matrix_stack("weights", weights, 3)
    _check_colorscale(colorscale)
    n = w.shape[0]
    if len(titles) != n:
        raise ValueError(f"titles must give one title per map ({n}); got {len(titles)}")
    if isinstance(cols, bool) or not isinstance(cols, int) or cols < 1:
        raise ValueError(f"cols must be a positive int; got cols={cols!r}")
    cols = min(cols, n)
    rows = -(-n // cols)
    y, x = _labels("queries", queries, w.shape[1]), _labels("keys", keys, w.shape[2])
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=list(titles),
        horizontal_spacing=0.12 if cols > 1 else 0.0,
        vertical_spacing=min(0.12, 0.3 / rows),
    )
    for k in range(n):
        r, c = divmod(k, cols)
        trace = _heatmap(
            w[k],
            x,
            y,
            zmin=zmin,
            zmax=zmax,
            colorscale=colorscale,
            value_name=value_name,
            showscale=k == 0,
        )
        fig.add_trace(trace, row=r + 1, col=c + 1)
        fig.update_xaxes(title_text=xaxis_title, row=r + 1, col=c + 1)
        fig.update_yaxes(title_text=yaxis_title, autorange="reversed", row=r + 1, col=c + 1)
    fig.update_layout(
        title=dict(text=title),
        height=height or max(360, rows * (120 + 22 * w.shape[1])),
        autosize=True,
    )
    return fig


def head_slider(
    weights: Any,
    *,
    title: str,
    queries: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    head_names: Sequence[str] | None = None,
    value_name: str = "weight",
    colorscale: str = WEIGHTS,
) -> go.Figure:
    """One attention map at a time, with a slider that picks the head.

    Args:
        weights: one map per head, NumPy array or torch tensor.
        title: the figure's title; the slider's value is appended (", head 3").
        queries: row labels.
        keys: column labels.
        head_names: the slider's labels (default: ``"0"``, ``"1"``, ...).
        value_name: what a cell holds.
        colorscale: one of :data:`COLORSCALES`.

    Shape:
        weights ``(H, L, S)``.

    Returns:
        A Plotly figure whose slider shows one head at a time.

    Raises:
        ValueError: as :func:`attention_grid`, or if ``head_names`` has the wrong length.
    """
    w = _matrix_stack("weights", weights, 3)
    _check_colorscale(colorscale)
    H = w.shape[0]
    names = [str(h) for h in range(H)] if head_names is None else [str(n) for n in head_names]
    if len(names) != H:
        raise ValueError(f"head_names must name every head ({H}); got {len(names)}")
    y, x = _labels("queries", queries, w.shape[1]), _labels("keys", keys, w.shape[2])
    fig = go.Figure(
        [
            _heatmap(
                w[h],
                x,
                y,
                zmin=0.0,
                zmax=1.0,
                colorscale=colorscale,
                value_name=value_name,
                name=f"head {names[h]}",
                visible=h == 0,
            )
            for h in range(H)
        ]
    )
    steps = [
        dict(
            method="update",
            label=names[h],
            args=[
                {"visible": [g == h for g in range(H)]},
                {"title.text": f"{title}, head {names[h]}"},
            ],
        )
        for h in range(H)
    ]
    fig.update_layout(
        title=dict(text=f"{title}, head {names[0]}"),
        sliders=[dict(active=0, steps=steps, currentvalue=dict(prefix="head "), pad=dict(t=90))],
        xaxis=dict(title=dict(text="key"), tickangle=-45),
        yaxis=dict(title=dict(text="query"), autorange="reversed"),
        height=max(420, 220 + 22 * w.shape[1]),
        autosize=True,
    )
    return fig


def attention_panels(
    weights: Sequence[Any],
    *,
    title: str,
    titles: Sequence[str],
    queries: Sequence[Sequence[str] | None] | None = None,
    keys: Sequence[Sequence[str] | None] | None = None,
    value_name: str = "weight",
    zmin: float | None = 0.0,
    zmax: float | None = 1.0,
    colorscale: str = WEIGHTS,
    xaxis_titles: Sequence[str] | None = None,
    yaxis_titles: Sequence[str] | None = None,
    height: int | None = None,
) -> go.Figure:
    """Attention maps of different shapes side by side, one colour scale.

    Unlike :func:`attention_grid`, each map has its own size and labels: a self-attention
    map ``(L, L)`` next to a cross-attention map ``(L, S)``, for example.

    Args:
        weights: the maps, each a 2-D NumPy array or torch tensor.
        title: the figure's title.
        titles: one subplot title per map.
        queries: row labels per map (``None``, or ``None`` for a map: positions).
        keys: column labels per map.
        value_name: what a cell holds.
        zmin: the value at the light end of the scale.
        zmax: the value at the dark end.
        colorscale: one of :data:`COLORSCALES`.
        xaxis_titles: the columns' axis title per map (default ``"key"``).
        yaxis_titles: the rows' axis title per map (default ``"query"``).
        height: in pixels (default: grows with the largest map).

    Shape:
        weights: a sequence of ``(L_k, S_k)`` maps.

    Returns:
        A Plotly figure with the maps in one row.

    Raises:
        ValueError: if a map is not 2-D, a per-map list does not have one entry per map,
            a label list is wrong, or the colour scale is not one of the book's.
    """
    maps = [_matrix_stack(f"weights[{k}]", w, 2) for k, w in enumerate(weights)]
    _check_colorscale(colorscale)
    n = len(maps)
    per_map = {
        "titles": titles,
        "queries": [None] * n if queries is None else queries,
        "keys": [None] * n if keys is None else keys,
        "xaxis_titles": ["key"] * n if xaxis_titles is None else xaxis_titles,
        "yaxis_titles": ["query"] * n if yaxis_titles is None else yaxis_titles,
    }
    for name, values in per_map.items():
        if len(values) != n:
            raise ValueError(f"{name} must give one entry per map ({n}); got {len(values)}")
    fig = make_subplots(rows=1, cols=n, subplot_titles=list(titles), horizontal_spacing=0.1)
    for k, w in enumerate(maps):
        y = _labels(f"queries[{k}]", per_map["queries"][k], w.shape[0])
        x = _labels(f"keys[{k}]", per_map["keys"][k], w.shape[1])
        trace = _heatmap(
            w, x, y, zmin=zmin, zmax=zmax, colorscale=colorscale, value_name=value_name,
            showscale=k == 0,
        )  # fmt: skip
        fig.add_trace(trace, row=1, col=k + 1)
        fig.update_xaxes(title_text=per_map["xaxis_titles"][k], row=1, col=k + 1)
        fig.update_yaxes(
            title_text=per_map["yaxis_titles"][k], autorange="reversed", row=1, col=k + 1
        )
    rows = max(w.shape[0] for w in maps)
    fig.update_layout(
        title=dict(text=title), height=height or max(360, 160 + 24 * rows), autosize=True
    )
    return fig


# Okabe and Ito's palette: distinguishable with the common colour-vision deficiencies.
HEAD_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")


@dataclass(frozen=True)
class DiagramEdge:
    """One arrow of :func:`layer_diagram`: the tensor that flows from one step to the next.

    Attributes:
        source: the step the arrow leaves.
        target: the step it enters.
        layout: the shape of the tensor on the arrow, in the book's symbols.
        head: the head (1 to H) whose lane the arrow is in, or ``None`` outside the heads.
    """

    source: str
    target: str
    layout: str
    head: int | None


def layer_edges(num_heads: int) -> list[DiagramEdge]:
    """The arrows of a multi-head attention layer, ``MultiHead(X, Y)``, head by head.

    Heads are numbered from 1, as in the book's equations. Self-attention is ``Y = X``
    (then ``S = L``).

    Args:
        num_heads: H, the number of head lanes.

    Returns:
        Every arrow, with the layout of the tensor it carries.

    Raises:
        ValueError: if ``num_heads`` is not a positive int.
    """
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive int; got num_heads={num_heads!r}")
    edges = []
    for h in range(1, num_heads + 1):
        edges += [
            DiagramEdge("X", f"Q_{h}", "(B, L, D)", h),
            DiagramEdge("Y", f"K_{h}", "(B, S, D)", h),
            DiagramEdge("Y", f"V_{h}", "(B, S, D)", h),
            DiagramEdge(f"Q_{h}", f"scores_{h}", "(B, L, Dh)", h),
            DiagramEdge(f"K_{h}", f"scores_{h}", "(B, S, Dh)", h),
            DiagramEdge(f"scores_{h}", f"A_{h}", "(B, L, S)", h),
            DiagramEdge(f"A_{h}", f"head_{h}", "(B, L, S)", h),
            DiagramEdge(f"V_{h}", f"head_{h}", "(B, S, Dh)", h),
            DiagramEdge(f"head_{h}", "Concat", "(B, L, Dh)", h),
        ]
    edges.append(DiagramEdge("Concat", "MultiHead", "(B, L, H*Dh)", None))
    return edges


def _diagram_nodes(num_heads: int) -> dict[str, tuple[float, float, float, str, str]]:
    """Each step's centre ``(x, y)``, half width, label and hover text (Plotly's HTML)."""
    lane = 6.0
    mid = lane * num_heads / 2
    sub = "<sub>{}</sub>".format
    nodes = {
        "X": (mid - 2.0, 11.0, 0.8, "<b>X</b>", "X: the positions that ask (queries' source)"),
        "Y": (
            mid + 2.0, 11.0, 0.8, "<b>Y</b>",
            "Y: the positions that answer (keys' and values' source); Y = X in self-attention",
        ),
        "Concat": (
            mid, 0.0, 2.4, f"Concat(head{sub(1)}, …, head{sub('H')})",
            "the heads' outputs side by side",
        ),
        "MultiHead": (
            mid, -2.0, 2.4, "<b>MultiHead(X, Y)</b> = Concat(…) W<sup>O</sup>",
            "the output projection mixes the heads back into the model width",
        ),
    }  # fmt: skip
    for h in range(1, num_heads + 1):
        x0, i = lane * (h - 1), sub(h)
        nodes |= {
            f"Q_{h}": (x0 + 1.0, 8.4, 0.85, f"Q{i}=XW<sup>Q</sup>{i}", f"head {h}'s queries"),
            f"K_{h}": (x0 + 3.0, 8.4, 0.85, f"K{i}=YW<sup>K</sup>{i}", f"head {h}'s keys"),
            f"V_{h}": (x0 + 5.0, 8.4, 0.85, f"V{i}=YW<sup>V</sup>{i}", f"head {h}'s values"),
            f"scores_{h}": (
                x0 + 2.0, 6.2, 1.0, f"Q{i}K{i}<sup>T</sup>/√D{sub('h')}",
                f"head {h}'s scores, one row per query",
            ),
            f"A_{h}": (
                x0 + 2.0, 4.2, 1.0, f"A{i}=softmax",
                f"head {h}'s weights: softmax over the keys, masked keys get 0",
            ),
            f"head_{h}": (
                x0 + 3.5, 2.2, 1.0, f"head{i}=A{i}V{i}",
                f"head {h}'s output: weighted averages of its values",
            ),
        }  # fmt: skip
    return nodes


def _layout_text(layout: str, sizes: Mapping[str, int] | None) -> str:
    text = layout.replace("Dh", "D<sub>h</sub>").replace("*", "·")
    if sizes is None:
        return text
    from mha.shapes import resolve_layout

    return f"{text} = {resolve_layout(layout, sizes)}"


def layer_diagram(
    *,
    num_heads: int = 2,
    title: str = "One multi-head attention layer, shapes on the arrows",
    sizes: Mapping[str, int] | None = None,
) -> go.Figure:
    """A data-flow diagram of one multi-head attention layer, one colour per head.

    Boxes are the steps of the book's equations (``Q_h = X W^Q_h``, ...,
    ``MultiHead(X, Y) = Concat(head_1, ..., head_H) W^O``); every arrow carries the layout
    of its tensor (see :func:`layer_edges`), and, with ``sizes``, its shape. Each head's
    lane has its own colour from :data:`HEAD_COLOURS`.

    Args:
        num_heads: the number of lanes drawn (at most ``len(HEAD_COLOURS)``).
        title: the figure's title.
        sizes: symbol sizes (:func:`mha.shapes.shape_sizes`) to print each arrow's shape.

    Returns:
        A Plotly figure (shapes and annotations, and one hover point per step).

    Raises:
        ValueError: if ``num_heads`` is not an int from 1 to ``len(HEAD_COLOURS)``, or
            ``sizes`` lacks a symbol.
    """
    edges = layer_edges(num_heads)
    if num_heads > len(HEAD_COLOURS):
        raise ValueError(
            f"num_heads must be at most {len(HEAD_COLOURS)} to draw; got num_heads={num_heads}"
        )
    nodes = _diagram_nodes(num_heads)
    neutral = "#555555"
    fig = go.Figure()

    def colour(name: str) -> str:
        head = name.rsplit("_", 1)[-1]
        return HEAD_COLOURS[int(head) - 1] if head.isdigit() else neutral

    half_height = 0.42
    for name, (x, y, half_width, label, _) in nodes.items():
        fig.add_shape(
            type="rect",
            x0=x - half_width,
            x1=x + half_width,
            y0=y - half_height,
            y1=y + half_height,
            line=dict(color=colour(name), width=2),
            fillcolor="rgba(0,0,0,0)",
        )
        fig.add_annotation(x=x, y=y, text=label, showarrow=False, font=dict(size=11))
    fanned = set()
    for edge in edges:
        x0, y0 = nodes[edge.source][:2]
        x1, y1 = nodes[edge.target][:2]
        c = colour(edge.target) if edge.head is not None else neutral
        fig.add_annotation(
            x=x1, y=y1 + half_height, ax=x0, ay=y0 - half_height,
            xref="x", yref="y", axref="x", ayref="y",
            showarrow=True, arrowhead=2, arrowwidth=1.5, arrowcolor=c, text="",
        )  # fmt: skip
        if edge.source in ("X", "Y"):  # one tensor fans out to every head: label it once
            if edge.source not in fanned:
                fanned.add(edge.source)
                fig.add_annotation(
                    x=x0, y=y0 - half_height, yshift=-2, yanchor="top",
                    text=_layout_text(edge.layout, sizes), showarrow=False,
                    font=dict(size=10, color=neutral), bgcolor="rgba(128,128,128,0.12)",
                )  # fmt: skip
            continue
        t = 0.45
        side = -1 if x1 > x0 else 1  # left of an arrow going right, else right of it
        fig.add_annotation(
            x=x0 + t * (x1 - x0),
            y=(y0 - half_height) + t * ((y1 + half_height) - (y0 - half_height)),
            text=_layout_text(edge.layout, sizes),
            showarrow=False,
            font=dict(size=9, color=c),
            xshift=6 * side,
            xanchor="right" if side < 0 else "left",
        )
    fig.add_trace(
        go.Scatter(
            x=[node[0] for node in nodes.values()],
            y=[node[1] for node in nodes.values()],
            mode="markers",
            marker=dict(size=18, opacity=0),
            hovertext=[node[4] for node in nodes.values()],
            hoverinfo="text",
            showlegend=False,
        )
    )
    for h in range(1, num_heads + 1):  # a legend entry per head colour
        fig.add_trace(
            go.Scatter(
                x=[None], y=[None], mode="lines", line=dict(color=HEAD_COLOURS[h - 1], width=3),
                name=f"head {h}",
            )
        )  # fmt: skip
    axis = dict(visible=False, fixedrange=True)
    fig.update_layout(
        title=dict(text=title),
        xaxis=axis | dict(range=[-0.6, 6.0 * num_heads + 0.6]),
        yaxis=axis | dict(range=[-3.0, 11.8]),
        height=640,
        autosize=True,
        legend=dict(orientation="h", y=-0.02),
        margin=dict(l=10, r=10, t=60, b=30),
    )
    return fig


# --- Line charts and the tiles of the tiled forward ----------------------------------------

OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
_LEGEND_BELOW = dict(orientation="h", x=0.0, xanchor="left", y=-0.22, yanchor="top")


def _log_axis(title: str, values: Sequence[float] | None) -> dict[str, Any]:
    """A log axis with readable ticks: the given values, or one tick per power of ten."""
    axis: dict[str, Any] = dict(title=dict(text=title), type="log", exponentformat="power")
    if values is not None:
        axis |= dict(tickvals=list(values), ticktext=[f"{v:,g}" for v in values])
    else:
        axis |= dict(dtick=1)
    return axis


def lines(
    x: Sequence[float],
    series: dict[str, Sequence[float]],
    *,
    title: str,
    xaxis_title: str,
    yaxis_title: str,
    log_x: bool = False,
    log_y: bool = False,
    x_ticks: Sequence[float] | None = None,
    dashed: Sequence[str] = (),
    markers: bool = True,
    height: int = 420,
) -> go.Figure:
    """Curves over one x axis, with the legend below the plot so a phone keeps the width.

    Colours come from the Okabe-Ito palette (colour-blind safe), in the order of ``series``;
    a series named in ``dashed`` is drawn as a black dashed line without markers (a model or
    a bound next to measurements). Log axes get one tick per power of ten (or ``x_ticks``),
    labelled as powers, never Plotly's unlabelled minor ticks.

    Args:
        x: the x values, shared by every series.
        series: ``{name: y values}``, in legend order.
        title: the figure's title (keep it short: it must fit a phone).
        xaxis_title: the x axis title.
        yaxis_title: the y axis title.
        log_x: a logarithmic x axis.
        log_y: a logarithmic y axis.
        x_ticks: the x values to label (default: powers of ten on a log axis).
        dashed: names of series drawn dashed.
        markers: mark the points of the other series.
        height: in pixels.

    Shape:
        x ``(n,)``; each series ``(n,)``.

    Returns:
        A Plotly figure with no fixed width.

    Raises:
        ValueError: if there is no series, a series does not have one value per x, or a
            name in ``dashed`` is not a series.
    """
    n = len(x)
    if not series:
        raise ValueError("series must hold at least one curve; got none")
    for name, y in series.items():
        if len(y) != n:
            raise ValueError(f"series {name!r} must have one value per x ({n}); got {len(y)}")
    unknown = [d for d in dashed if d not in series]
    if unknown:
        raise ValueError(f"dashed must name series; got {unknown}, series {list(series)}")
    fig = go.Figure()
    colours = iter(OKABE_ITO)
    for name, y in series.items():
        style = (
            dict(mode="lines", line=dict(dash="dash", color="black"))
            if name in dashed
            else dict(mode="lines+markers" if markers else "lines", line=dict(color=next(colours)))
        )
        fig.add_trace(go.Scatter(x=list(x), y=[float(v) for v in y], name=name, **style))
    xaxis = (
        _log_axis(xaxis_title, x_ticks)
        if log_x
        else dict(
            title=dict(text=xaxis_title),
            **({} if x_ticks is None else dict(tickvals=list(x_ticks))),
        )
    )
    yaxis = _log_axis(yaxis_title, None) if log_y else dict(title=dict(text=yaxis_title))
    fig.update_layout(
        title=dict(text=title),
        xaxis=xaxis,
        yaxis=yaxis,
        legend=_LEGEND_BELOW,
        margin=dict(l=60, r=20, t=70, b=140),
        height=height,
        autosize=True,
    )
    return fig


TILE_STATUSES = ("not reached", "done", "live tile", "skipped tile", "masked (j > i)")
_TILE_COLOURS = ("#f0f0f0", "#0072B2", "#E69F00", "#CC79A7", "#bdbdbd")  # Okabe-Ito


def _column(x: np.ndarray) -> list[float | None]:
    return [float(v) if np.isfinite(v) else None for v in x]


def tile_steps(
    steps: Sequence[Any],
    q_len: int,
    kv_len: int,
    *,
    title: str,
    causal: bool = True,
    acc_columns: int = 4,
) -> go.Figure:
    """The steps of :func:`mha.tiled.attention` on one head, one slider position per tile.

    The upper panel is the ``(L, S)`` grid of scores that is never formed: every tile drawn as
    a rectangle, the live tile outlined, and each entry coloured by what has happened to it
    (not reached, done, in the live tile, skipped because the whole tile may not be attended,
    masked). The lower panel has one row per query: its running maximum ``m``, running sum
    ``l``, the factor ``exp(m_old - m_new)`` by which this step rescaled the row's earlier sum
    and accumulator, and the first components of the accumulator itself (rows not reached
    yet are blank). Panels are stacked, so the figure keeps its width on a phone.

    Args:
        steps: the ``trace`` of :func:`mha.tiled.attention` on 2-D query, key and value
            (:class:`mha.tiled.TileStep` items, in order).
        q_len: L.
        kv_len: S.
        title: the figure's title (short; ``<br>`` starts a second line).
        causal: whether the run was causal (entries with ``j > i`` shown as masked).
        acc_columns: how many components of the accumulator to show.

    Returns:
        A Plotly figure with a slider over the steps and no fixed width.

    Raises:
        ValueError: if there are no steps, a step is not of one head (2-D accumulator), or a
            block lies outside ``(L, S)``.
    """
    if not steps:
        raise ValueError("steps must hold at least one tile step; got none")
    for k, st in enumerate(steps):
        if np.ndim(st.acc) != 2 or st.q_block[1] > q_len or st.kv_block[1] > kv_len:
            raise ValueError(
                f"steps[{k}] must be a tile of one head inside (L, S) = ({q_len}, {kv_len}); "
                f"got blocks {st.q_block}, {st.kv_block} and accumulator shape {np.shape(st.acc)}"
            )
    pending, done, live, skipped, masked = range(5)
    allowed = np.tril(np.ones((q_len, kv_len), bool)) if causal else np.ones((q_len, kv_len), bool)
    n_acc = min(acc_columns, np.shape(steps[0].acc)[1])
    stat_names = ["m", "ℓ", "rescale", *[f"õ{c + 1}" for c in range(n_acc)]]
    status = np.full((q_len, kv_len), pending)
    stats = np.full((q_len, len(stat_names)), np.nan)
    frames = []
    for st in steps:
        rq, rk = slice(*st.q_block), slice(*st.kv_block)
        status[status == live] = done
        status[rq, rk] = np.where(allowed[rq, rk], live, masked) if st.computed else skipped
        stats[rq] = np.column_stack([st.row_max, st.row_sum, st.rescale, st.acc[:, :n_acc]])
        frames.append((status.copy(), stats.copy()))
    final = frames[-1][1]
    low, high = np.nanmin(final, axis=0), np.nanmax(final, axis=0)
    width = np.where(high > low, high - low, 1.0)

    def stat_z(values: np.ndarray) -> list[list[float | None]]:
        return [_column(row) for row in np.clip((values - low) / width, 0, 1)]  # per column

    def stat_text(values: np.ndarray) -> list[list[str]]:
        return [["" if not np.isfinite(v) else f"{v + 0.0:.2f}".replace("-0.00", "0.00")
                 for v in row] for row in values]  # fmt: skip

    def status_text(grid: np.ndarray) -> list[list[str]]:
        return [
            [f"query {i}, key {j}: {TILE_STATUSES[grid[i, j]]}" for j in range(kv_len)]
            for i in range(q_len)
        ]

    fig = make_subplots(rows=2, cols=1, vertical_spacing=0.12, row_heights=[0.5, 0.5])
    scale = [[p, c] for n, c in enumerate(_TILE_COLOURS) for p in (n / 5, (n + 1) / 5)]
    grid0, stats0 = frames[0]
    fig.add_trace(
        go.Heatmap(z=grid0.tolist(), text=status_text(grid0), hoverinfo="text", zmin=-0.5,
                   zmax=4.5, colorscale=scale, showscale=False, xgap=1, ygap=1),
        row=1, col=1,
    )  # fmt: skip
    fig.add_trace(
        go.Heatmap(z=stat_z(stats0), x=stat_names, text=stat_text(stats0),
                   texttemplate="%{text}", hoverinfo="text", colorscale="Cividis", zmin=0,
                   zmax=1, showscale=False, xgap=1, ygap=1, textfont=dict(size=10)),
        row=2, col=1,
    )  # fmt: skip
    for name, colour in zip(TILE_STATUSES, _TILE_COLOURS, strict=True):  # the legend
        fig.add_trace(
            go.Scatter(x=[None], y=[None], mode="markers", name=name,
                       marker=dict(symbol="square", size=12, color=colour,
                                   line=dict(color="#555", width=1))),
            row=1, col=1,
        )  # fmt: skip
    tiles = sorted({(st.q_block, st.kv_block) for st in steps})

    def rect(q_block, kv_block, **line) -> dict[str, Any]:
        return dict(type="rect", xref="x", yref="y", x0=kv_block[0] - 0.5, x1=kv_block[1] - 0.5,
                    y0=q_block[0] - 0.5, y1=q_block[1] - 0.5, line=line)  # fmt: skip

    outlines = [rect(q, k, color="#333", width=1) for q, k in tiles]

    def panel_titles(st: Any, t: int) -> list[dict[str, Any]]:
        what = "computed" if st.computed else "skipped (nothing allowed)"
        return [
            dict(text=f"step {t + 1}: queries {st.q_block[0]}–{st.q_block[1] - 1}, keys "
                      f"{st.kv_block[0]}–{st.kv_block[1] - 1}: {what}",
                 xref="paper", yref="paper", x=0, y=1.0, yanchor="bottom", xanchor="left",
                 showarrow=False, font=dict(size=12)),
            dict(text="per row: m, ℓ, rescale e<sup>m_old − m_new</sup>, õ",
                 xref="paper", yref="paper", x=0, y=0.44, yanchor="bottom", xanchor="left",
                 showarrow=False, font=dict(size=12)),
        ]  # fmt: skip

    sliders = [
        dict(
            active=0,
            currentvalue=dict(visible=False),
            pad=dict(t=40),
            steps=[
                dict(
                    method="update",
                    label=str(t + 1),
                    args=[
                        {
                            "z": [grid.tolist(), stat_z(values)],
                            "text": [status_text(grid), stat_text(values)],
                        },
                        {
                            "shapes": [
                                *outlines,
                                rect(st.q_block, st.kv_block, color="#000", width=3),
                            ],
                            "annotations": panel_titles(st, t),
                        },
                        [0, 1],
                    ],  # fmt: skip
                )
                for t, (st, (grid, values)) in enumerate(zip(steps, frames, strict=True))
            ],
        )
    ]
    top, bottom, legend_gap = 90, 230, 120  # the slider under the plots, the legend under it
    height = top + bottom + 2 * (30 + 26 * q_len)
    plot_height = height - top - bottom
    fig.update_yaxes(autorange="reversed", title_text="query i", row=1, col=1)
    fig.update_yaxes(autorange="reversed", title_text="query i", row=2, col=1)
    fig.update_xaxes(title_text="key j", row=1, col=1)
    fig.update_layout(
        title=dict(text=title),
        shapes=[*outlines, rect(steps[0].q_block, steps[0].kv_block, color="#000", width=3)],
        annotations=panel_titles(steps[0], 0),
        sliders=sliders,
        legend=dict(orientation="h", x=0.0, xanchor="left", y=-legend_gap / plot_height,
                    yanchor="top"),
        margin=dict(l=50, r=10, t=top, b=bottom),
        height=height,
        autosize=True,
    )  # fmt: skip
    return fig
