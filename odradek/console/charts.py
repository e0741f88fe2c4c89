"""Line charts as inline SVG (no JavaScript, nothing fetched from elsewhere): :func:`line_chart` draws one
polyline per series over a shared time axis, with the value range on the left and the time range below.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from html import escape

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563")
Point = tuple[float, float]  # (time in s since the epoch, value)


def line_chart(series: Mapping[str, Sequence[Point]], *, width: int = 1100, height: int = 260,
               unit: str = "") -> str:  # fmt: skip
    """The SVG markup of a line chart of ``series`` (name -> points ordered by time)."""
    points = [p for values in series.values() for p in values]
    left, right, top, bottom = 64, 16, 12, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img">']  # fmt: skip
    parts.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="chart-area"/>')
    if not points:
        parts.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h / 2}" text-anchor="middle" class="chart-note">'
                     "no samples yet</text></svg>")  # fmt: skip
        return "".join(parts)
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    v1 = max(max(p[1] for p in points), 1.0)
    span = max(t1 - t0, 1e-9)

    def x(t: float) -> float:
        return left + (t - t0) / span * plot_w if t1 > t0 else left + plot_w / 2

    def y(v: float) -> float:
        return top + plot_h - v / v1 * plot_h

    for fraction in (0.0, 0.5, 1.0):
        gy = top + plot_h - fraction * plot_h
        parts.append(f'<line x1="{left}" y1="{gy:.1f}" x2="{left + plot_w}" y2="{gy:.1f}" class="chart-grid"/>')
        label = _number(v1 * fraction) + (f" {unit}" if unit and fraction == 1.0 else "")
        parts.append(f'<text x="{left - 6}" y="{gy + 4:.1f}" text-anchor="end" class="chart-label">{label}</text>')
    for t, anchor, at in ((t0, "start", left), (t1, "end", left + plot_w)):
        parts.append(f'<text x="{at}" y="{height - bottom + 18}" text-anchor="{anchor}" class="chart-label">'
                     f"{_clock(t)}</text>")  # fmt: skip
    legend_x = left
    for i, (name, values) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in values)
        if len(values) == 1:
            cx, cy = coords.split(",")
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="3" fill="{color}"/>')
        else:
            parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"/>')
        parts.append(f'<rect x="{legend_x}" y="{height - 14}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{legend_x + 14}" y="{height - 5}" class="chart-label">{escape(name)}</text>')
        legend_x += 24 + 7 * len(name)
    parts.append("</svg>")
    return "".join(parts)


def _number(value: float) -> str:
    for bound, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= bound:
            return f"{value / bound:.3g}{suffix}"
    return f"{value:.3g}"


def _clock(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%H:%M:%S")
