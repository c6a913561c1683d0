"""Inline SVG charts for the owner's page: no script, no external asset, works offline.

Every text that reaches the SVG goes through `escape`; numbers are formatted here. A chart with
nothing to draw says so in words instead of showing empty axes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

WIDTH = 900
HEIGHT = 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 12, 26, 34

OUTCOME_COLOURS = {"answered": "#3b8f5a", "degraded": "#d49a1f", "failed": "#c2423a"}
SERIES_COLOURS = ("#3867b5", "#9b59b6", "#c2423a", "#3b8f5a")


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    points: Sequence[float | None]  # one per x position; None: no value there
    colour: str
    dashed: bool = False


def _empty(message: str) -> Markup:
    return Markup('<p class="empty">{}</p>').format(message)


def _scale(value: float, *, integer: bool = False) -> tuple[float, float]:
    """(top, step) of the value axis: 3 to 6 steps of 1, 2, 2.5 or 5 × 10ⁿ (no 2.5 for counts),
    the top the first step at or above `value`, so every tick reads as a round number."""
    if value <= 0:
        return (4.0, 1.0) if integer else (1.0, 0.25)
    rough = value / 4
    magnitude = 10 ** math.floor(math.log10(rough))
    steps = (1, 2, 5, 10) if integer else (1, 2, 2.5, 5, 10)
    step = next(m * magnitude for m in steps if m * magnitude >= rough)
    if integer:
        step = max(1.0, step)
    return math.ceil(value / step - 1e-9) * step, step


def _number(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:g}k"
    return f"{round(value, 3):g}"


def _frame(title: str, scale: tuple[float, float], unit: str, labels: Sequence[str], inner: list[str]) -> Markup:
    top, step = scale
    plot_w = WIDTH - _LEFT - _RIGHT
    plot_h = HEIGHT - _TOP - _BOTTOM
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    intervals = round(top / step)
    for i in range(intervals + 1):
        value = step * i
        y = _TOP + plot_h * (1 - value / top)
        parts.append(f'<line class="grid" x1="{_LEFT}" y1="{y:.1f}" x2="{WIDTH - _RIGHT}" y2="{y:.1f}"/>')
        parts.append(
            f'<text class="tick" x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(_number(value))}</text>'
        )
    parts.append(f'<text class="unit" x="{_LEFT - 6}" y="12" text-anchor="end">{escape(unit)}</text>')
    # At most ~8 x labels, evenly spread, so they never overlap.
    if labels:
        every = max(1, -(-len(labels) // 8))
        slot = plot_w / len(labels)
        for i in range(0, len(labels), every):
            x = _LEFT + slot * (i + 0.5)
            parts.append(
                f'<text class="tick" x="{x:.1f}" y="{HEIGHT - _BOTTOM + 16}" text-anchor="middle">{escape(labels[i])}</text>'
            )
    parts.extend(inner)
    parts.append("</svg>")
    return Markup("".join(parts))


def stacked_bars(
    title: str, labels: Sequence[str], stacks: Mapping[str, Sequence[int]], colours: dict[str, str]
) -> Markup:
    """One bar per label, its parts stacked in the order of `stacks`."""
    totals = [sum(values[i] for values in stacks.values()) for i in range(len(labels))]
    if not any(totals):
        return _empty("No turn in this period.")
    scale = _scale(max(totals), integer=True)
    top = scale[0]
    plot_w = WIDTH - _LEFT - _RIGHT
    plot_h = HEIGHT - _TOP - _BOTTOM
    slot = plot_w / len(labels)
    bar = max(1.0, slot * 0.72)
    inner: list[str] = []
    for i, label in enumerate(labels):
        y: float = _TOP + plot_h
        x = _LEFT + slot * i + (slot - bar) / 2
        for name, values in stacks.items():
            if not values[i]:
                continue
            h = plot_h * values[i] / top
            y -= h
            tip = f"{label}: {values[i]} {name}"
            inner.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="{colours[name]}">'
                f"<title>{escape(tip)}</title></rect>"
            )
    return _frame(title, scale, "turns", labels, inner) + legend({n: colours[n] for n in stacks})


def lines(title: str, labels: Sequence[str], series: Sequence[Series], unit: str) -> Markup:
    """One polyline per series; a point is a dot too, so a single value still shows."""
    values = [v for s in series for v in s.points if v is not None]
    if not values:
        return _empty("Nothing measured in this period.")
    scale = _scale(max(values))
    top = scale[0]
    plot_w = WIDTH - _LEFT - _RIGHT
    plot_h = HEIGHT - _TOP - _BOTTOM
    slot = plot_w / max(1, len(labels))
    inner: list[str] = []
    for s in series:
        points = [
            (_LEFT + slot * (i + 0.5), _TOP + plot_h * (1 - v / top)) for i, v in enumerate(s.points) if v is not None
        ]
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
            inner.append(f'<polyline fill="none" stroke="{s.colour}" stroke-width="2"{dash} points="{path}"/>')
        if not s.dashed:
            for (x, y), v in zip(points, [v for v in s.points if v is not None], strict=True):
                inner.append(
                    f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{s.colour}"><title>{escape(s.name)}: {escape(_number(v))}</title></circle>'
                )
    return _frame(title, scale, unit, labels, inner) + legend({s.name: s.colour for s in series})


def hbars(title: str, counts: dict[str, int], colour: str = "#3867b5") -> Markup:
    """Horizontal bars, one per key, with its count written at the end."""
    if not counts or not any(counts.values()):
        return _empty("None yet.")
    top = max(counts.values())
    row = 26
    label_w = 110
    width = 460
    height = row * len(counts) + 8
    parts = [
        f'<svg class="chart hbars" viewBox="0 0 {width} {height}" role="img" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    for i, (name, count) in enumerate(counts.items()):
        y = 4 + row * i
        w = (width - label_w - 60) * count / top
        parts.append(f'<text class="label" x="{label_w - 8}" y="{y + 16}" text-anchor="end">{escape(name)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" fill="{colour}"/>')
        parts.append(f'<text class="tick" x="{label_w + w + 6:.1f}" y="{y + 16}">{escape(str(count))}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def legend(colours: dict[str, str]) -> Markup:
    items = "".join(
        Markup('<span class="key"><i style="background:{}"></i>{}</span>').format(colour, name)
        for name, colour in colours.items()
    )
    return Markup('<div class="legend">{}</div>').format(Markup(items))
