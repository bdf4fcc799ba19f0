"""Colour-vision-deficiency checks for figure colours (used by the site tests).

Colours are simulated for protanopia, deuteranopia and tritanopia with the severity-1
matrices of Machado, Oliveira and Fernandes (2009), applied in linear sRGB, and compared in
CIELAB (D65): two colours are told apart when their distance (CIE76 delta E) is at least
``MIN_DELTA_E`` in normal vision and in each simulation.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

MIN_DELTA_E = 8.0
SIMULATIONS = {
    "normal": np.eye(3),
    "protanopia": np.array(
        [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
         [-0.003882, -0.048116, 1.051998]]
    ),
    "deuteranopia": np.array(
        [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
         [-0.011820, 0.042940, 0.968881]]
    ),
    "tritanopia": np.array(
        [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
         [0.004733, 0.691367, 0.303900]]
    ),
}  # fmt: skip
NAMED = {
    "black": "#000000",
    "white": "#ffffff",
    "grey": "#808080",
    "gray": "#808080",
    "lightgray": "#d3d3d3",
    "lightgrey": "#d3d3d3",
    "darkgray": "#a9a9a9",
    "crimson": "#dc143c",
    "steelblue": "#4682b4",
}


def rgb(colour: str) -> np.ndarray:
    """A CSS colour (#rgb, #rrggbb, rgb(), rgba() or a few names) as sRGB in [0, 1]."""
    text = NAMED.get(colour.strip().lower(), colour.strip())
    if text.startswith("#"):
        digits = text[1:] if len(text) == 7 else "".join(c * 2 for c in text[1:4])
        return np.array([int(digits[i : i + 2], 16) for i in (0, 2, 4)]) / 255
    match = re.match(r"rgba?\(([^)]*)\)", text)
    if not match:
        raise ValueError(f"colour must be #hex, rgb() or a known name; got {colour!r}")
    return np.array([float(v) for v in match.group(1).split(",")[:3]]) / 255


def _linear(c: np.ndarray) -> np.ndarray:
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def lab(linear: np.ndarray) -> np.ndarray:
    """CIELAB (D65) of linear sRGB."""
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = m @ np.clip(linear, 0, 1) / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def seen(colour: str, vision: str) -> np.ndarray:
    """The CIELAB colour that a viewer with ``vision`` sees."""
    return lab(SIMULATIONS[vision] @ _linear(rgb(colour)))


def palette_problems(colours: list[str]) -> list[str]:
    """Pairs of distinct colours that some viewer cannot tell apart."""
    problems = []
    distinct = list(dict.fromkeys(c.lower() for c in colours))
    for vision in SIMULATIONS:
        points = [seen(c, vision) for c in distinct]
        for i in range(len(distinct)):
            for j in range(i + 1, len(distinct)):
                delta = float(np.linalg.norm(points[i] - points[j]))
                if delta < MIN_DELTA_E:
                    problems.append(
                        f"{distinct[i]} and {distinct[j]} differ by {delta:.1f} < {MIN_DELTA_E} "
                        f"({vision})"
                    )
    return problems


def scale_colour(scale: list[list[Any]], t: float) -> np.ndarray:
    """The linear sRGB colour of a Plotly colour scale at ``t`` in [0, 1]."""
    stops = [(float(pos), _linear(rgb(colour))) for pos, colour in scale]
    for (p0, c0), (p1, c1) in zip(stops, stops[1:], strict=False):
        if p0 <= t <= p1:
            w = 0.0 if p1 == p0 else (t - p0) / (p1 - p0)
            return (1 - w) * c0 + w * c1
    return stops[-1][1] if t > stops[-1][0] else stops[0][1]


def scale_problems(scale: list[list[Any]], levels: list[float] | None = None) -> list[str]:
    """A colour scale is safe if every viewer sees its lightness change in one direction
    (sequential) or in one direction on each side of one turning point (diverging), and
    tells its ends apart; a scale used for a few categories (``levels`` in [0, 1]) is safe
    if every viewer tells each category's colour from the others'."""
    problems = []
    ts = list(levels) if levels is not None else list(np.linspace(0, 1, 11))
    for vision, matrix in SIMULATIONS.items():
        points = [lab(matrix @ scale_colour(scale, t)) for t in ts]
        if levels is not None:
            for i in range(len(points)):
                for j in range(i + 1, len(points)):
                    delta = float(np.linalg.norm(points[i] - points[j]))
                    if delta < MIN_DELTA_E:
                        problems.append(
                            f"categories at {ts[i]:.2f} and {ts[j]:.2f} differ by {delta:.1f} "
                            f"({vision})"
                        )
            continue
        lightness = np.array([p[0] for p in points])
        steps = np.sign(np.round(np.diff(lightness), 1))
        turns = int(np.sum(steps[1:] * steps[:-1] < 0))
        if turns > 1:
            problems.append(f"lightness changes direction {turns} times ({vision})")
        ends = float(np.linalg.norm(points[0] - points[-1]))
        if ends < 3 * MIN_DELTA_E:
            problems.append(f"the ends differ by {ends:.1f} ({vision})")
    return problems


def _z_levels(trace: dict[str, Any]) -> list[float] | None:
    """The positions in [0, 1] of a heatmap's values, if it shows a few integer categories."""
    from mha_site import figure_facts

    values = figure_facts.values(trace.get("z"))
    z = [v for v in values if isinstance(v, int | float) and math.isfinite(v)]  # NaN: masked
    distinct = sorted(set(z))
    if not distinct or len(distinct) > 12 or any(float(v) != int(v) for v in distinct):
        return None
    lo = trace.get("zmin", min(distinct))
    hi = trace.get("zmax", max(distinct))
    if hi == lo or len(distinct) <= 2:
        return None  # two values (a mask) is a sequential scale's two ends
    return [(v - lo) / (hi - lo) for v in distinct]


def figure_colour_problems(figure: dict[str, Any]) -> list[str]:
    """Colour problems of a figure's traces: colour scales, and explicit trace colours."""
    problems = []
    explicit = []
    for trace in figure.get("data") or []:
        scale = trace.get("colorscale")
        if isinstance(scale, list) and len({str(colour) for _, colour in scale}) > 1:
            # (a scale of one colour is a flat layer, e.g. the grey of masked cells)
            problems += scale_problems(scale, _z_levels(trace))
        for part in ("line", "marker"):
            colour = (trace.get(part) or {}).get("color")
            if isinstance(colour, str):
                explicit.append(colour)
    return problems + palette_problems(explicit)
