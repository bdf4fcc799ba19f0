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

from collections.abc import Sequence
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
