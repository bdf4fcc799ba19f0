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
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mha.core._checks import arguments
from mha.core._checks.numpy_arrays import boolean_mask
from mha.display._plot_checks import (
    axis_labels,
    check_options,
    line_values,
    matrix_stack,
    text_list,
)

WEIGHTS = "Blues"
SEQUENTIAL = "Viridis"
DIVERGING = "RdBu"
COLORSCALES = (WEIGHTS, SEQUENTIAL, DIVERGING, "Cividis", "Greys")


def token_labels(tokens: Sequence[Any]) -> list[str]:
    """Axis labels ``"i token"``, unique even when a token repeats (Plotly merges equal labels).

    Args:
        tokens: the tokens (strings or ids) of one sequence.

    Returns:
        One label per position.

    Raises:
        TypeError: if ``tokens`` is not a list or tuple (a string, whose characters would be
            read as tokens, included).
    """
    return [f"{i} {t}" for i, t in enumerate(arguments.items("tokens", tokens))]


def _check_colorscale(colorscale: str) -> None:
    if not isinstance(colorscale, str) or colorscale not in COLORSCALES:
        raise ValueError(
            f"colorscale must be one of the book's colour-blind-safe scales {COLORSCALES}; "
            f"got {colorscale!r}"
        )


def _heatmap(
    z: np.ndarray,
    x: list[str],
    y: list[str],
    *,
    value_name: str,
    showscale: bool = True,
    visible: bool = True,
    **trace: Any,
) -> go.Heatmap:
    """A map of ``z`` with the colour bar and hover text of the book's maps; ``trace`` holds
    the trace's other settings (``zmin``, ``zmax``, ``colorscale``, ``name``)."""
    return go.Heatmap(
        z=z,
        x=x,
        y=y,
        showscale=showscale,
        colorbar=dict(title=dict(text=value_name), thickness=12),
        hovertemplate=f"query %{{y}}<br>key %{{x}}<br>{value_name} %{{z:.3f}}<extra></extra>",
        visible=visible,
        **trace,
    )


MASKED_GREY = "#9e9e9e"  # masked cells: a mid grey, readable on light and dark pages


def _masked_layer(name: str, mask: Any, z: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``z`` with masked cells set to NaN, and the grey layer's values (None: no mask)."""
    if mask is None:
        return z, None
    keep = boolean_mask(name, mask, z.shape, "the map's shape")
    return np.where(keep, z, np.nan), np.where(keep, np.nan, 1.0)


def _grey_heatmap(z: np.ndarray, x: list[str], y: list[str]) -> go.Heatmap:
    """Grey cells where ``z`` is 1 (the masked ones), nothing where it is NaN."""
    return go.Heatmap(
        z=z,
        x=x,
        y=y,
        zmin=0.0,
        zmax=1.0,
        colorscale=[[0.0, MASKED_GREY], [1.0, MASKED_GREY]],
        showscale=False,
        hovertemplate="query %{y}<br>key %{x}<br>masked<extra></extra>",
        name="masked",
    )


def legend_below(fig: go.Figure) -> go.Figure:
    """Lay the figure's legend out in a row below the plot, where it takes no width.

    Args:
        fig: a Plotly figure.

    Returns:
        The same figure, changed in place.

    Raises:
        TypeError: if ``fig`` is not a Plotly figure.
    """
    arguments.instance("fig", fig, go.Figure, "a plotly Figure")
    fig.update_layout(
        legend=dict(
            orientation="h", x=0.0, xanchor="left", yref="container", y=0.0, yanchor="bottom"
        ),
    )
    return fig


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
    mask: Any = None,
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
        mask: boolean, True = may attend; masked cells are drawn in grey, as in
            :func:`attention_grid` (default: no cell is masked).

    Shape:
        weights ``(L, S)``; mask broadcastable to it.

    Returns:
        A Plotly figure.

    Raises:
        ValueError: if ``weights`` is not 2-D or not finite, a label list has the wrong
            length or repeats, the colour scale is not one of the book's, ``zmin`` is not
            below ``zmax`` (or either is not finite), ``height`` is not positive, or
            ``mask`` does not broadcast to ``weights``.
        TypeError: if ``weights`` is not numeric, ``mask`` is not boolean, a title is not a
            string, or a label list is not a list.
    """
    w = matrix_stack("weights", weights, 2)
    check_options(
        title, zmin, zmax, height, value_name=value_name, xaxis_title=xaxis_title,
        yaxis_title=yaxis_title,
    )  # fmt: skip
    _check_colorscale(colorscale)
    y, x = axis_labels("queries", queries, w.shape[0]), axis_labels("keys", keys, w.shape[1])
    shown, grey = _masked_layer("mask", mask, w)
    fig = go.Figure([] if grey is None else [_grey_heatmap(grey, x, y)])
    fig.add_trace(
        _heatmap(shown, x, y, zmin=zmin, zmax=zmax, colorscale=colorscale, value_name=value_name)
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
    mask: Any = None,
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
        mask: boolean, True = may attend; cells where it is False are drawn in grey
            (:data:`MASKED_GREY`) and say "masked" on hover, so that a masked key does not
            look like a small weight (default: no cell is masked).

    Shape:
        weights ``(n, L, S)``; mask broadcastable to it.

    Returns:
        A Plotly figure.

    Raises:
        ValueError: if ``weights`` is not 3-D with at least one map or not finite,
            ``titles`` does not give one title per map, ``cols`` is not positive, a label
            list is wrong, the colour scale is not one of the book's, the colour range or
            height is wrong (as :func:`attention_heatmap`), or ``mask`` does not broadcast
            to ``weights``.
        TypeError: if ``weights`` is not numeric, ``mask`` is not boolean, ``cols`` is not
            an int, or a title is not a string.
    """
    w = matrix_stack("weights", weights, 3)
    _check_colorscale(colorscale)
    check_options(
        title, zmin, zmax, height, value_name=value_name, xaxis_title=xaxis_title,
        yaxis_title=yaxis_title,
    )  # fmt: skip
    titles = text_list("titles", titles)
    n = w.shape[0]
    if n == 0:
        raise ValueError(f"weights must hold at least one map; got shape {w.shape}")
    if len(titles) != n:
        raise ValueError(f"titles must give one title per map ({n}); got {len(titles)}")
    cols = arguments.size("cols", cols)
    cols = min(cols, n)
    rows = -(-n // cols)
    y, x = axis_labels("queries", queries, w.shape[1]), axis_labels("keys", keys, w.shape[2])
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=list(titles),
        horizontal_spacing=0.12 if cols > 1 else 0.0,
        vertical_spacing=min(0.12, 0.3 / rows),
    )
    shown, grey = _masked_layer("mask", mask, w)
    for k in range(n):
        r, c = divmod(k, cols)
        if grey is not None:
            fig.add_trace(_grey_heatmap(grey[k], x, y), row=r + 1, col=c + 1)
        trace = _heatmap(
            shown[k],
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
        TypeError: as :func:`attention_grid`.
    """
    w = matrix_stack("weights", weights, 3)
    _check_colorscale(colorscale)
    check_options(title, None, None, None, value_name=value_name)
    H = w.shape[0]
    if H == 0:
        raise ValueError(f"weights must hold at least one map; got shape {w.shape}")
    names = (
        [str(h) for h in range(H)]
        if head_names is None
        else [str(n) for n in arguments.items("head_names", head_names)]
    )
    if len(names) != H:
        raise ValueError(f"head_names must name every head ({H}); got {len(names)}")
    y, x = axis_labels("queries", queries, w.shape[1]), axis_labels("keys", keys, w.shape[2])
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
    masks: Sequence[Any] | None = None,
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
        masks: per map, a boolean mask (True = may attend) or ``None``; masked cells are
            drawn in grey, as in :func:`attention_grid`.

    Shape:
        weights: a sequence of ``(L_k, S_k)`` maps; each mask broadcastable to its map.

    Returns:
        A Plotly figure with the maps in one row.

    Raises:
        ValueError: if there is no map, a map is not 2-D or not finite, a per-map list does
            not have one entry per map, a label list is wrong, the colour scale is not one
            of the book's, the colour range or height is wrong (as
            :func:`attention_heatmap`), or a mask does not broadcast to its map.
        TypeError: if a map is not numeric, a mask is not boolean, a per-map list is not a
            list, or a title is not a string.
    """
    maps = [
        matrix_stack(f"weights[{k}]", w, 2)
        for k, w in enumerate(arguments.items("weights", weights))
    ]
    if not maps:
        raise ValueError("weights must hold at least one map; got none")
    _check_colorscale(colorscale)
    check_options(title, zmin, zmax, height, value_name=value_name)
    n = len(maps)
    per_map = {
        "titles": text_list("titles", titles),
        "queries": [None] * n if queries is None else arguments.items("queries", queries),
        "keys": [None] * n if keys is None else arguments.items("keys", keys),
        "xaxis_titles": ["key"] * n
        if xaxis_titles is None
        else text_list("xaxis_titles", xaxis_titles),
        "yaxis_titles": ["query"] * n
        if yaxis_titles is None
        else text_list("yaxis_titles", yaxis_titles),
        "masks": [None] * n if masks is None else arguments.items("masks", masks),
    }
    for name, values in per_map.items():
        if len(values) != n:
            raise ValueError(f"{name} must give one entry per map ({n}); got {len(values)}")
    fig = make_subplots(rows=1, cols=n, subplot_titles=per_map["titles"], horizontal_spacing=0.1)
    for k, w in enumerate(maps):
        y = axis_labels(f"queries[{k}]", per_map["queries"][k], w.shape[0])
        x = axis_labels(f"keys[{k}]", per_map["keys"][k], w.shape[1])
        shown, grey = _masked_layer(f"masks[{k}]", per_map["masks"][k], w)
        if grey is not None:
            fig.add_trace(_grey_heatmap(grey, x, y), row=1, col=k + 1)
        trace = _heatmap(
            shown, x, y, zmin=zmin, zmax=zmax, colorscale=colorscale, value_name=value_name,
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


# --- Line charts, the forms' timings and panels of head pairs -----------------------------

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
        series: ``{name: y values}``, in legend order; NaN is a point not measured (a gap
            in the curve).
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
        ValueError: if there is no series, a series does not have one value per x, an x
            value or tick is NaN or infinite, a y value infinite, a value not positive on a
            log axis, a name in ``dashed`` is not a series, or ``height`` is not positive.
        TypeError: if ``log_x``, ``log_y`` or ``markers`` is not a bool, ``series`` is not a
            dict, the values are not numbers, or a title is not a string.
    """
    arguments.check_bool("log_x", log_x)
    arguments.check_bool("log_y", log_y)
    arguments.check_bool("markers", markers)
    check_options(title, None, None, None, xaxis_title=xaxis_title, yaxis_title=yaxis_title)
    height = arguments.size("height", height)
    xs = line_values("x", x, log_x)
    n = len(xs)
    if not isinstance(series, Mapping):
        raise TypeError(
            f"series must be a dict of name -> values; got {arguments.describe(series)}"
        )
    if not series:
        raise ValueError("series must hold at least one curve; got none")
    ys = {}
    for name, y in series.items():
        ys[name] = line_values(f"series[{name!r}]", y, log_y, gaps=True)
        if len(ys[name]) != n:
            raise ValueError(f"series {name!r} must have one value per x ({n}); got {len(y)}")
    if x_ticks is not None:
        x_ticks = line_values("x_ticks", x_ticks, log_x)
    dashed = arguments.items("dashed", dashed)
    unknown = [d for d in dashed if d not in series]
    if unknown:
        raise ValueError(f"dashed must name series; got {unknown}, series {list(series)}")
    fig = go.Figure()
    colours = iter(OKABE_ITO)
    for name in series:
        style = (
            dict(mode="lines", line=dict(dash="dash", color="black"))
            if name in dashed
            else dict(mode="lines+markers" if markers else "lines", line=dict(color=next(colours)))
        )
        fig.add_trace(go.Scatter(x=xs, y=ys[name], name=name, **style))
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


FORM_COLOURS = dict(
    zip(
        ("per_head", "fused", "packed", "nn.MultiheadAttention", "sdpa"),
        ("#D55E00", "#0072B2", "#56B4E9", "#999999", "#009E73"),
        strict=True,
    )
)  # Okabe and Ito's palette, one colour per form timed by mha.cost.timings


def form_timings(
    times: Mapping[tuple[int, int], Mapping[str, float]],
    *,
    title: str = "Forward time by form",
) -> go.Figure:
    """Seconds per forward of each form, against the sequence length, one panel per H.

    Both axes are logarithmic in every panel (times over several decades, lengths
    doubling), the ticks are the measured lengths, and the legend sits below the panels.

    Args:
        times: ``{(H, N): {form: seconds}}``, as :func:`mha.cost.timings.time_forms` returns
            for each ``(H, N)``; every cell must time the same forms.
        title: the figure's title.

    Returns:
        A Plotly figure, milliseconds on the y axes.

    Raises:
        ValueError: if ``times`` is empty, its cells time different forms, a key is not a
            pair of positive ints, or a time is not positive and finite (log axes).
        TypeError: if ``times`` or a cell is not a dict, a time not a number, or ``title``
            not a string.
    """
    arguments.text("title", title)
    if not isinstance(times, Mapping):
        raise TypeError(
            f"times must be a dict {{(H, N): {{form: seconds}}}}; got {arguments.describe(times)}"
        )
    if not times:
        raise ValueError("times must hold at least one (H, N) cell; got none")
    arguments.pairs("times", list(times))  # every key a pair of ints
    for key, cell in times.items():
        for j, v in enumerate(key):
            arguments.size(f"times key {key}[{j}]", v)
        if not isinstance(cell, Mapping):
            raise TypeError(
                f"times[{key}] must be a dict {{form: seconds}}; got {arguments.describe(cell)}"
            )
        for form, seconds in cell.items():
            arguments.number(f"times[{key}][{form!r}]", seconds, low=0.0, open_low=True)
    forms = list(next(iter(times.values())))
    if any(list(cell) != forms for cell in times.values()):
        raise ValueError(f"every cell of times must time the same forms {forms}")
    heads = sorted({h for h, _ in times})
    lengths = sorted({n for _, n in times})
    fig = make_subplots(
        rows=1, cols=len(heads), shared_yaxes=True, subplot_titles=[f"H = {h}" for h in heads]
    )
    palette = iter(HEAD_COLOURS)
    for c, h in enumerate(heads, start=1):
        ns = [n for n in lengths if (h, n) in times]
        for form in forms:
            colour = FORM_COLOURS.get(form) or next(palette)
            fig.add_trace(
                go.Scatter(
                    x=ns, y=[1e3 * times[h, n][form] for n in ns], name=form, legendgroup=form,
                    showlegend=c == 1, mode="lines+markers", line_color=colour,
                    hovertemplate=f"{form}, H = {h}<br>N = %{{x}}: %{{y:.3g}} ms<extra></extra>",
                ),
                row=1, col=c,
            )  # fmt: skip
        fig.update_xaxes(title_text="N", type="log", tickvals=ns, row=1, col=c)
        fig.update_yaxes(type="log", exponentformat="power", row=1, col=c)
    fig.update_yaxes(title_text="ms per forward", row=1, col=1)
    fig.update_layout(title=dict(text=title), height=460, autosize=True)
    return legend_below(fig)


def head_pair_panels(
    panels: Sequence[Any],
    *,
    title: str,
    titles: Sequence[str],
    zranges: Sequence[tuple[float, float]],
    colorscales: Sequence[str],
    heads: Sequence[str] | None = None,
    value_names: Sequence[str] | None = None,
) -> go.Figure:
    """Head-by-head matrices (similarities of pairs of heads) side by side.

    The diagonal, a head compared with itself, is left blank; each panel has its own
    colour scale, with its colour bar below it so that it covers no tick labels.

    Args:
        panels: the matrices, one per panel.
        title: the figure's title.
        titles: one subplot title per panel.
        zranges: ``(zmin, zmax)`` per panel.
        colorscales: one of :data:`COLORSCALES` per panel.
        heads: the heads' labels (default ``"1"``, ``"2"``, ...: heads from 1).
        value_names: what a cell holds, per panel (default: the subplot titles).

    Shape:
        every panel ``(H, H)``.

    Returns:
        A Plotly figure.

    Raises:
        ValueError: if there is no panel, a panel is not square or not finite, the panels
            differ in size, a per-panel list does not have one entry per panel, a colour
            scale is not one of the book's, or a range is not ``zmin < zmax``, finite.
        TypeError: if a panel is not numeric, a per-panel list is not a list, a range not
            a pair of numbers, or a title not a string.
    """
    maps = [
        matrix_stack(f"panels[{k}]", p, 2) for k, p in enumerate(arguments.items("panels", panels))
    ]
    if not maps:
        raise ValueError("panels must hold at least one matrix; got none")
    arguments.text("title", title)
    titles = text_list("titles", titles)
    zranges = arguments.items("zranges", zranges)
    colorscales = arguments.items("colorscales", colorscales)
    for k, pair in enumerate(zranges):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(
                f"zranges[{k}] must be a pair (zmin, zmax); got {arguments.describe(pair)}"
            )
        check_options(titles[k] if k < len(titles) else "", pair[0], pair[1], None)
    n = len(maps)
    H = maps[0].shape[0] if maps else 0
    if any(m.shape != (H, H) for m in maps):
        raise ValueError(f"panels must be square and of one size; got {[m.shape for m in maps]}")
    value_names = list(titles) if value_names is None else text_list("value_names", value_names)
    for name, values in (
        ("titles", titles), ("zranges", zranges), ("colorscales", colorscales),
        ("value_names", value_names),
    ):  # fmt: skip
        if len(values) != n:
            raise ValueError(f"{name} must give one entry per panel ({n}); got {len(values)}")
    for scale in colorscales:
        _check_colorscale(scale)
    labels = (
        [str(h) for h in range(1, H + 1)]
        if heads is None
        else [str(h) for h in arguments.items("heads", heads)]
    )
    if len(labels) != H:
        raise ValueError(f"heads must label every head ({H}); got {len(labels)}")
    spacing = 0.14
    fig = make_subplots(rows=1, cols=n, subplot_titles=list(titles), horizontal_spacing=spacing)
    width = (1 - spacing * (n - 1)) / n
    off_diagonal = ~np.eye(H, dtype=bool)
    for k, m in enumerate(maps):
        zmin, zmax = zranges[k]
        fig.add_trace(
            go.Heatmap(
                z=np.where(off_diagonal, m, np.nan), x=labels, y=labels, zmin=zmin, zmax=zmax,
                colorscale=colorscales[k],
                colorbar=dict(
                    orientation="h", x=k * (width + spacing) + width / 2, xanchor="center",
                    len=width, thickness=10, y=-0.28, yanchor="top",
                    title=dict(text=value_names[k], side="top"),
                ),
                hovertemplate=(
                    f"head %{{y}} and head %{{x}}<br>{value_names[k]} %{{z:.3f}}<extra></extra>"
                ),
            ),
            row=1, col=k + 1,
        )  # fmt: skip
        fig.update_xaxes(title_text="head", row=1, col=k + 1)
        fig.update_yaxes(title_text="head", autorange="reversed", row=1, col=k + 1)
    fig.update_layout(title=dict(text=title), height=520, autosize=True, margin=dict(b=140))
    return fig


# Okabe and Ito's palette: distinguishable with the common colour-vision deficiencies.
HEAD_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
