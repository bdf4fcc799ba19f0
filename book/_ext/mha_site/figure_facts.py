"""What the site needs to know about one Plotly figure, computed from its JSON at build time.

Pure functions on a figure's JSON (``{"data": [...], "layout": {...}}`` as plotly.py writes
it, with NumPy arrays as ``{"dtype", "bdata", "shape"}`` blocks):

- ``title_text`` and ``describe``: the accessible name and a one-line text alternative
  (trace kinds, sizes, value ranges, axis titles), derived from the data.
- ``trace_types`` and ``CARTESIAN_TRACES``: which plotly.js bundle can draw the figure.
- ``narrow_layout``: the layout changes for a container narrower than ``NARROW_PX``: a grid of
  subplots becomes one column, legends move below the plot, long subplot titles wrap, and the
  figure's height grows to fit. The browser merges it into the layout when the figure's
  container is narrow.
- ``figure_heights``: the heights (wide, narrow) of the placeholder, so the page does not jump
  when the figure is drawn.
"""

from __future__ import annotations

import base64
import html
import math
import re
from typing import Any

NARROW_PX = 600  # a container narrower than this gets the narrow layout
DEFAULT_HEIGHT = 450  # plotly.js's default figure height
NARROW_CELL_PX = 300  # height of one subplot in the narrow (one-column) layout
NARROW_GAP_PX = 120  # between stacked subplots: x tick labels, axis title, next subplot title
NARROW_TOP_PX = 60  # above the first subplot, plus one title line per NARROW_TITLE_LINE_PX
NARROW_TITLE_LINE_PX = 24
NARROW_TITLE_CHARS = 34  # characters per title line at 390 px
NARROW_SUBTITLE_CHARS = 40
NARROW_BOTTOM_PX = 90  # below the last subplot: tick labels and the x-axis title
LEGEND_ROW_PX = 22
MAX_DESCRIPTION = 420

# Trace types drawn by plotly.js's cartesian partial bundle (plotly.js-cartesian-dist-min).
CARTESIAN_TRACES = frozenset(
    {
        "bar",
        "box",
        "contour",
        "heatmap",
        "histogram",
        "histogram2d",
        "histogram2dcontour",
        "image",
        "pie",
        "scatter",
        "scatterternary",
        "violin",
    }
)

_DTYPES = {
    "f8": "<f8",
    "f4": "<f4",
    "i1": "<i1",
    "u1": "<u1",
    "i2": "<i2",
    "u2": "<u2",
    "i4": "<i4",
    "u4": "<u4",
}
_TAG = re.compile(r"<[^>]+>")


# --------------------------------------------------------------------------- reading data


def values(array: Any) -> list[Any]:
    """A data array of a figure as a flat list (decodes plotly.py's typed-array blocks)."""
    if array is None:
        return []
    if isinstance(array, dict) and "bdata" in array:
        import numpy as np

        raw = base64.b64decode(array["bdata"])
        return np.frombuffer(raw, dtype=_DTYPES.get(array.get("dtype", "f8"), "<f8")).tolist()
    if isinstance(array, list | tuple):
        flat: list[Any] = []
        for item in array:
            flat.extend(values(item) if isinstance(item, list | tuple | dict) else [item])
        return flat
    return [array]


def shape(array: Any) -> tuple[int, ...]:
    """The shape of a data array (rows, columns for a heatmap's z)."""
    if isinstance(array, dict) and "bdata" in array:
        text = str(array.get("shape", ""))
        dims = tuple(int(part) for part in text.split(",") if part.strip())
        return dims or (len(values(array)),)
    if isinstance(array, list | tuple):
        if array and isinstance(array[0], list | tuple | dict):
            return (len(array), *shape(array[0]))
        return (len(array),)
    return ()


def plain(text: Any) -> str:
    """Plotly's rich text (``<br>``, ``<sup>``, entities) as one line of plain text."""
    text = re.sub(r"<br\s*/?>", " ", str(text or ""), flags=re.I)
    return " ".join(html.unescape(_TAG.sub("", text)).split())


def _text_of(title: Any) -> str:
    if isinstance(title, dict):
        return plain(title.get("text", ""))
    return plain(title)


def title_text(figure: dict[str, Any]) -> str:
    """The figure's title as plain text ('' if it has none)."""
    return _text_of((figure.get("layout") or {}).get("title"))


def trace_types(figure: dict[str, Any]) -> set[str]:
    """The plotly.js trace types of a figure (``scatter`` when a trace names none)."""
    return {trace.get("type", "scatter") for trace in figure.get("data") or []}


# --------------------------------------------------------------------------- text alternative


def _number(value: float) -> str:
    if value == 0 or 1e-3 <= abs(value) < 1e4:
        return f"{value:.3g}"
    return f"{value:.2e}"


def _finite(items: list[Any]) -> list[float]:
    out = []
    for item in items:
        if isinstance(item, int | float) and not isinstance(item, bool) and math.isfinite(item):
            out.append(float(item))
    return out


def _axis_title(layout: dict[str, Any], ref: str, letter: str) -> str:
    key = f"{letter}axis{ref[1:]}"
    return _text_of((layout.get(key) or {}).get("title"))


def _describe_trace(trace: dict[str, Any], layout: dict[str, Any]) -> str:
    kind = trace.get("type", "scatter")
    name = plain(trace.get("name", ""))
    label = f"{kind} {name!r}" if name else kind
    x_title = _axis_title(layout, trace.get("xaxis", "x"), "x")
    y_title = _axis_title(layout, trace.get("yaxis", "y"), "y")
    if kind in ("heatmap", "contour", "histogram2d"):
        z = trace.get("z")
        dims = shape(z)
        numbers = _finite(values(z))
        size = "x".join(str(d) for d in dims) if dims else "0"
        span = f", values {_number(min(numbers))} to {_number(max(numbers))}" if numbers else ""
        axes = f" ({y_title or 'rows'} by {x_title or 'columns'})"
        return f"{label}: {size} grid{axes}{span}"
    lengths, labels = ("x", "y") if trace.get("orientation") == "h" else ("y", "x")
    ys = _finite(values(trace.get(lengths if kind == "bar" else "y")))
    if kind == "bar" and ys:  # a horizontal bar's lengths lie on x, its labels on y
        xs = values(trace.get(labels)) or list(range(len(ys)))
        shown = ", ".join(f"{plain(x)} {_number(y)}" for x, y in zip(xs[:6], ys[:6], strict=False))
        more = f", and {len(ys) - 6} more" if len(ys) > 6 else ""
        return f"{label}: {shown}{more}"
    if ys:
        what = y_title or "y"
        return (
            f"{label}: {len(ys)} points, {what} from {_number(ys[0])} to {_number(ys[-1])} "
            f"(range {_number(min(ys))} to {_number(max(ys))})"
        )
    return label


def describe(figure: dict[str, Any]) -> str:
    """A one-line text alternative of a figure, derived from its data.

    It names the figure's kind and panels, then each trace (up to five) with its size and
    the range of its values, and the number of further traces.
    """
    layout = figure.get("layout") or {}
    traces = [t for t in figure.get("data") or [] if t.get("visible", True) is not False]
    if not traces:
        return "An empty figure."
    cells = {(t.get("xaxis", "x"), t.get("yaxis", "y")) for t in traces}
    kinds = sorted(trace_types({"data": traces}))
    head = f"{'Plot' if len(kinds) > 1 else kinds[0].capitalize()} figure"
    if len(cells) > 1:
        head += f" with {len(cells)} panels"
    parts = [_describe_trace(t, layout) for t in traces[:5]]
    if len(traces) > 5:
        parts.append(f"and {len(traces) - 5} more traces")
    text = f"{head}: " + "; ".join(parts) + "."
    if len(text) > MAX_DESCRIPTION:
        text = text[: MAX_DESCRIPTION - 1].rsplit(" ", 1)[0] + "…"
    return text


# --------------------------------------------------------------------------- narrow layout


def wrap(text: str, width: int) -> str:
    """Break rich text at spaces into lines of at most ``width`` characters (``<br>``)."""
    lines = []
    for paragraph in re.split(r"<br\s*/?>", text, flags=re.I):
        line = ""
        for word in paragraph.split(" "):
            visible = len(plain(line + " " + word))
            if line and visible > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return "<br>".join(lines)


def _axis_key(ref: str, letter: str) -> str:
    return f"{letter}axis{ref[1:]}"


def _domain(layout: dict[str, Any], key: str) -> tuple[float, float]:
    domain = (layout.get(key) or {}).get("domain") or [0.0, 1.0]
    return float(domain[0]), float(domain[1])


def cells(figure: dict[str, Any]) -> list[tuple[str, str]]:
    """The (x axis, y axis) pairs that hold data, top row first, then left to right."""
    layout = figure.get("layout") or {}
    pairs: list[tuple[str, str]] = []
    for trace in figure.get("data") or []:
        if trace.get("type", "scatter") not in CARTESIAN_TRACES - {"pie", "scatterternary"}:
            continue
        pair = (trace.get("xaxis", "x"), trace.get("yaxis", "y"))
        if pair not in pairs:
            pairs.append(pair)

    def order(pair: tuple[str, str]) -> tuple[float, float]:
        y0, y1 = _domain(layout, _axis_key(pair[1], "y"))
        x0, _ = _domain(layout, _axis_key(pair[0], "x"))
        return (-round(y1, 6), round(x0, 6))

    return sorted(pairs, key=order)


def _legend_items(figure: dict[str, Any]) -> int:
    layout = figure.get("layout") or {}
    if layout.get("showlegend") is False:
        return 0
    shown = [
        t
        for t in figure.get("data") or []
        if t.get("showlegend", t.get("type", "scatter") not in ("heatmap", "contour"))
        and t.get("name") is not None
    ]
    if layout.get("showlegend") is None and len(shown) < 2:
        return 0
    return len({(t.get("legendgroup") or t.get("name")) for t in shown})


def narrow_layout(figure: dict[str, Any]) -> dict[str, Any]:
    """Layout changes for a narrow container (phone): one column, legend below, wrapped text.

    Returns a dict to merge (key by key, recursively) into the figure's layout. It always
    sets ``height``; for a grid of subplots it stacks the subplots in one column (new axis
    domains, subplot titles moved with them, colour bars beside their own subplot).
    """
    layout = figure.get("layout") or {}
    patch: dict[str, Any] = {}
    grid = cells(figure)
    title = _text_of(layout.get("title"))
    title_lines = max(1, math.ceil(len(title) / NARROW_TITLE_CHARS)) if title else 0
    legend_rows = _legend_items(figure)
    top = NARROW_TOP_PX + NARROW_TITLE_LINE_PX * title_lines
    bottom = NARROW_BOTTOM_PX + LEGEND_ROW_PX * legend_rows
    columns = {round(_domain(layout, _axis_key(x, "x"))[0], 6) for x, _ in grid}
    wide_height = int(layout.get("height") or DEFAULT_HEIGHT)
    if len(columns) > 1:
        n = len(grid)
        plot = n * NARROW_CELL_PX + (n - 1) * NARROW_GAP_PX
        height = top + plot + bottom
        annotations = [dict(a) for a in layout.get("annotations") or []]
        for index, (x_ref, y_ref) in enumerate(grid):
            x_key, y_key = _axis_key(x_ref, "x"), _axis_key(y_ref, "y")
            (x0, x1), (_, y1) = _domain(layout, x_key), _domain(layout, y_key)
            top_px = index * (NARROW_CELL_PX + NARROW_GAP_PX)
            new_y1 = 1 - top_px / plot
            new_y0 = 1 - (top_px + NARROW_CELL_PX) / plot
            patch[x_key] = {"domain": [0.0, 1.0]}
            patch[y_key] = {"domain": [round(new_y0, 6), round(new_y1, 6)]}
            for note in annotations:  # subplot titles sit centred above their subplot
                if (
                    note.get("xref") == "paper"
                    and note.get("yref") == "paper"
                    and abs(float(note.get("x", -1)) - (x0 + x1) / 2) < 1e-6
                    and abs(float(note.get("y", -1)) - y1) < 1e-6
                    and not note.get("_moved")
                ):
                    note.update(x=0.5, y=round(new_y1, 6), _moved=True)
                    note["text"] = wrap(str(note.get("text", "")), NARROW_SUBTITLE_CHARS)
            for t_index, trace in enumerate(figure.get("data") or []):
                if (trace.get("xaxis", "x"), trace.get("yaxis", "y")) != (x_ref, y_ref):
                    continue
                if trace.get("type") in ("heatmap", "contour") and trace.get("showscale", True):
                    patch.setdefault("_traces", {})[str(t_index)] = {
                        "colorbar": {
                            "len": round(new_y1 - new_y0, 6),
                            "y": round((new_y0 + new_y1) / 2, 6),
                            "yanchor": "middle",
                            "thickness": 12,
                        }
                    }
        if annotations:
            for note in annotations:
                note.pop("_moved", None)
            patch["annotations"] = annotations
    else:
        height = max(wide_height, top + NARROW_CELL_PX + bottom) if legend_rows else wide_height
        if layout.get("annotations"):
            notes = [dict(a) for a in layout["annotations"]]
            for note in notes:
                note["text"] = wrap(str(note.get("text", "")), NARROW_SUBTITLE_CHARS)
            patch["annotations"] = notes
    patch["height"] = int(height)
    patch["margin"] = {"l": 60, "r": 20, "t": top, "b": bottom}
    if legend_rows:
        paper = height - top - bottom
        patch["legend"] = {  # in the plot's coordinates, whatever the wide layout used
            "orientation": "v",
            "x": 0,
            "xanchor": "left",
            "xref": "paper",
            "y": -round((NARROW_BOTTOM_PX - 10) / paper, 6),
            "yanchor": "top",
            "yref": "paper",
        }
    return patch


def subplot_titles(figure: dict[str, Any]) -> dict[str, float]:
    """Subplot titles: annotation index -> width of its subplot (a fraction of the plot).

    A subplot title is a paper-positioned annotation centred over a subplot's top edge
    (as ``make_subplots`` writes them); the browser wraps it to that width.
    """
    layout = figure.get("layout") or {}
    found: dict[str, float] = {}
    spans = []
    for x_ref, y_ref in cells(figure):
        (x0, x1), (_, y1) = (
            _domain(layout, _axis_key(x_ref, "x")),
            _domain(layout, _axis_key(y_ref, "y")),
        )
        spans.append((x0, x1, y1))
    for index, note in enumerate(layout.get("annotations") or []):
        if note.get("xref") != "paper" or note.get("yref") != "paper":
            continue
        for x0, x1, y1 in spans:
            x, y = float(note.get("x", -1)), float(note.get("y", -1))
            if abs(x - (x0 + x1) / 2) < 1e-6 and abs(y - y1) < 1e-6:
                found[str(index)] = round(x1 - x0, 6)
                break
    return found


def figure_heights(figure: dict[str, Any]) -> tuple[int, int]:
    """The figure's height in a wide container and in a narrow one (CSS pixels)."""
    layout = figure.get("layout") or {}
    wide = int(layout.get("height") or DEFAULT_HEIGHT)
    return wide, int(narrow_layout(figure)["height"])
