"""Diagrams: the layer's dataflow, which weights each head owns, and the tiles of tiled attention.

:func:`layer_diagram` draws multi-head attention as boxes and arrows (each head a lane of
its colour, from :data:`mha.display.plotting.HEAD_COLOURS`), :func:`weight_ownership` the
columns and rows of the weight matrices that belong to each head, and :func:`tile_steps`
the order in which the tiled form (:func:`mha.backends.tiled.attention`) visits the tiles
of the score matrix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mha.backends.tiled import TileStep
from mha.core import packing
from mha.core._checks import arguments, numpy_arrays
from mha.core.params import MHAParams
from mha.display.plotting import HEAD_COLOURS, SEQUENTIAL
from mha.display.shapes import resolve_layout


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
        ValueError: if ``num_heads`` is not positive (or not below 2**63).
        TypeError: if ``num_heads`` is not an int (a Python or NumPy integer, not a bool).
    """
    num_heads = arguments.size("num_heads", num_heads)
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
    """Each step's centre ``(x, y)``, half width, label and hover text (Plotly's HTML).

    Labels of the narrow boxes take two short lines, so that they fit a 390 px screen.
    """
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
            mid, 0.0, 2.4, f"Concat(head{sub(1)},<br>…, head{sub('H')})",
            "the heads' outputs side by side",
        ),
        "MultiHead": (
            mid, -2.0, 2.4, "<b>MultiHead(X, Y)</b><br>= Concat(…) W<sup>O</sup>",
            "the output projection mixes the heads back into the model width",
        ),
    }  # fmt: skip
    for h in range(1, num_heads + 1):
        x0, i = lane * (h - 1), sub(h)
        nodes |= {
            f"Q_{h}": (x0 + 1.0, 8.4, 0.85, f"Q{i}<br>XW<sup>Q</sup>{i}", f"head {h}'s queries"),
            f"K_{h}": (x0 + 3.0, 8.4, 0.85, f"K{i}<br>YW<sup>K</sup>{i}", f"head {h}'s keys"),
            f"V_{h}": (x0 + 5.0, 8.4, 0.85, f"V{i}<br>YW<sup>V</sup>{i}", f"head {h}'s values"),
            f"scores_{h}": (
                x0 + 2.0, 6.2, 1.0, f"Q{i}K{i}<sup>T</sup><br>/√D{sub('h')}",
                f"head {h}'s scores, one row per query",
            ),
            f"A_{h}": (
                x0 + 2.0, 4.2, 1.0, f"A{i}<br>softmax",
                f"head {h}'s weights: softmax over the keys, masked keys get 0",
            ),
            f"head_{h}": (
                x0 + 3.5, 2.2, 1.0, f"head{i}<br>A{i}V{i}",
                f"head {h}'s output: weighted averages of its values",
            ),
        }  # fmt: skip
    return nodes


def _layout_text(layout: str, sizes: Mapping[str, int] | None) -> str:
    text = layout.replace("Dh", "D<sub>h</sub>").replace("*", "·")
    if sizes is None:
        return text

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
    lane has its own colour from :data:`mha.display.plotting.HEAD_COLOURS`.

    Args:
        num_heads: the number of lanes drawn (at most ``len(HEAD_COLOURS)``).
        title: the figure's title.
        sizes: symbol sizes (:func:`mha.display.shapes.shape_sizes`) to print each arrow's shape.

    Returns:
        A Plotly figure (shapes and annotations, and one hover point per step). Its
        ``layout.meta`` asks the book's site to keep it 640 px wide on a phone, scrolled
        sideways, so that the shapes on the arrows stay readable.

    Raises:
        ValueError: if ``num_heads`` is not an int from 1 to ``len(HEAD_COLOURS)``, or
            ``sizes`` lacks a symbol or holds a size that is not positive.
        TypeError: if ``num_heads`` is not an int, ``title`` not a string, or ``sizes`` not
            a dict of ints.
    """
    num_heads = arguments.size("num_heads", num_heads)
    if num_heads > len(HEAD_COLOURS):
        raise ValueError(
            f"num_heads must be at most {len(HEAD_COLOURS)} to draw; got num_heads={num_heads}"
        )
    edges = layer_edges(num_heads)
    arguments.text("title", title)
    if sizes is not None:
        resolve_layout("()", sizes)  # checks every size
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

    half_height = 0.6
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
        fig.add_annotation(x=x, y=y, text=label, showarrow=False, font=dict(size=10))
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
        meta=dict(mha_min_width=640),  # on the book's site: kept at 640 px on a phone, scrolled
    )
    return fig


def weight_ownership(
    params: Any, *, title: str = "Which weights belong to which head"
) -> go.Figure:
    """The packed weights ``w_qkv`` and PyTorch's ``in_proj_weight``, coloured by owner.

    Each column of ``w_qkv`` (``(D, 3D)``, ``x @ w_qkv``) belongs to one projection (Q, K or
    V) and one head; PyTorch's ``in_proj_weight`` (``(3D, D)``, ``x @ W.T``) holds the same
    numbers transposed, so there each *row* has an owner. Both are drawn with one colour per
    (projection, head) block; heads are numbered from 1, as in the equations, and the
    hover text gives the code's index (``params.head(h - 1)``) and the weight.

    Args:
        params: the layer's parameters (NumPy or PyTorch ``MHAParams``, ``H_kv = H``).
        title: the figure's title.

    Returns:
        A Plotly figure with the two matrices side by side.

    Raises:
        ValueError: if the layer has fewer key/value heads than query heads (draw
            :func:`mha.core.params.repeat_kv_heads` of it), or its weights are not finite.
        TypeError: if ``params`` is not ``MHAParams`` or ``title`` not a string.
    """
    arguments.instance("params", params, MHAParams, "MHAParams")
    arguments.text("title", title)

    D, H = params.d_model, params.num_heads
    if params.num_kv_heads != H:
        raise ValueError(
            f"params must have num_kv_heads = num_heads; got {params.num_kv_heads} and {H}"
        )
    w = numpy_arrays.float_array("params.w_qkv", params.w_qkv)
    proj, head = packing.column_owner(D, H)  # (3D,), (3D,)
    owner = proj * H + head  # one code per (projection, head) block
    names = [f"{'QKV'[p]}, head {h + 1} (code: head({h}))" for p in range(3) for h in range(H)]
    Dh = D // H
    centres = [p * D + h * Dh + (Dh - 1) / 2 for p in range(3) for h in range(H)]
    block_labels = [f"{'QKV'[p]}{h + 1}" for p in range(3) for h in range(H)]
    scale = dict(zmin=0, zmax=3 * H - 1, colorscale=SEQUENTIAL, showscale=False)
    hover_packed = [
        [f"row {r}, column {c}<br>{names[owner[c]]}<br>w = {w[r, c]:+.3f}" for c in range(3 * D)]
        for r in range(D)
    ]
    hover_torch = [
        [f"row {r}, column {c}<br>{names[owner[r]]}<br>w = {w[c, r]:+.3f}" for c in range(D)]
        for r in range(3 * D)
    ]
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.72, 0.28],
        horizontal_spacing=0.06,
        subplot_titles=["w_qkv (D, 3D)", "PyTorch (3D, D)"],
    )
    fig.add_trace(
        go.Heatmap(
            z=np.broadcast_to(owner, (D, 3 * D)), text=hover_packed, hoverinfo="text", **scale
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Heatmap(
            z=np.broadcast_to(owner[:, None], (3 * D, D)), text=hover_torch, hoverinfo="text",
            **scale,
        ),
        row=1,
        col=2,
    )  # fmt: skip
    fig.update_xaxes(
        tickvals=centres, ticktext=block_labels, title_text="column: projection, head", row=1, col=1
    )
    fig.update_yaxes(title_text="input feature", autorange="reversed", row=1, col=1)
    fig.update_xaxes(title_text="input feature", row=1, col=2)
    fig.update_yaxes(
        tickvals=centres, ticktext=block_labels, side="right", autorange="reversed", row=1, col=2
    )  # fmt: skip
    fig.update_layout(
        title=dict(text=title, subtitle=dict(text=f"D = {D}, H = {H}, Dh = {Dh}")),
        height=520,
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
    """The steps of :func:`mha.backends.tiled.attention` on one head, one slider position per tile.

    The upper panel is the ``(L, S)`` grid of scores that is never formed: every tile drawn as
    a rectangle, the live tile outlined, and each entry coloured by what has happened to it
    (not reached, done, in the live tile, skipped because the whole tile may not be attended,
    masked). The lower panel has one row per query: its running maximum ``m``, running sum
    ``l``, the factor ``exp(m_old - m_new)`` by which this step rescaled the row's earlier sum
    and accumulator, and the first components of the accumulator itself (rows not reached
    yet are blank). Panels are stacked, so the figure keeps its width on a phone.

    Args:
        steps: the ``trace`` of :func:`mha.backends.tiled.attention` on 2-D query, key and value
            (:class:`mha.backends.tiled.TileStep` items, in order).
        q_len: the query length, L.
        kv_len: the key/value length, S.
        title: the figure's title (short; ``<br>`` starts a second line).
        causal: whether the run was causal (entries with ``j > i`` shown as masked).
        acc_columns: how many components of the accumulator to show.

    Returns:
        A Plotly figure with a slider over the steps and no fixed width.

    Raises:
        ValueError: if there are no steps, a step is not of one head (2-D accumulator), a
            block lies outside ``(L, S)``, or a size is not positive.
        TypeError: if ``causal`` is not a bool, a step is not a
            :class:`mha.backends.tiled.TileStep`, a size not an int, or ``title`` not a string.
    """
    arguments.check_bool("causal", causal)
    arguments.text("title", title)
    q_len, kv_len, acc_columns = arguments.sizes(
        q_len=q_len, kv_len=kv_len, acc_columns=acc_columns
    ).values()
    arguments.check_elements("q_len", q_len * kv_len, 8)
    steps = arguments.items("steps", steps)
    if not steps:
        raise ValueError("steps must hold at least one tile step; got none")
    for k, st in enumerate(steps):
        arguments.instance(f"steps[{k}]", st, TileStep, "a TileStep")
        blocks_ok = all(0 <= b[0] < b[1] for b in (st.q_block, st.kv_block))
        if (
            not blocks_ok
            or np.ndim(st.acc) != 2
            or st.q_block[1] > q_len
            or st.kv_block[1] > kv_len
        ):
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
