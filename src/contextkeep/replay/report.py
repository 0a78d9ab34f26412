"""A self-contained HTML report of replays: inline SVG charts, no external scripts or styles.

One section per trajectory (view tokens per call against the thresholds, compaction
markers by layer, cumulative cost against the raw prompts) and a summary table.
"""

from __future__ import annotations

import html
import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from contextkeep._compaction import LayerName
from contextkeep.replay.metrics import TrajectoryMetrics, median, per_run_min, pooled

__all__ = ["ReportEntry", "render_report", "write_report"]

logger = logging.getLogger("contextkeep.replay.report")

_W, _H, _PAD = 760, 260, 48
_LAYER_COLORS: dict[str, str] = {
    LayerName.MASK: "#2a9d8f",
    LayerName.DROP: "#e9c46a",
    LayerName.SUMMARY: "#f4a261",
    LayerName.REACTIVE: "#e63946",
}
_OTHER_LAYER_COLOR = "#555"
"""A registered layer of your own."""
_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}"
    "td:first-child{text-align:left}svg{background:#fcfcfc;border:1px solid #ddd}"
)


@dataclass(frozen=True, slots=True)
class ReportEntry:
    """One replayed trajectory and the budget lines to draw."""

    metrics: TrajectoryMetrics
    """What the replay measured."""
    strategy: str = "default"
    """The strategy replayed."""
    thresholds: Mapping[str, int | None] = field(default_factory=dict)
    """Horizontal lines in tokens, by label (e.g. trigger, target, budget)."""


@dataclass(frozen=True, slots=True)
class _Series:
    label: str
    color: str
    values: Sequence[float]
    dashed: bool = False


def _chart(
    title: str,
    series: Sequence[_Series],
    lines: Mapping[str, int | None] | None = None,
    markers: Sequence[tuple[int, float, str, str]] = (),
) -> str:
    """An SVG line chart; x is the call number; markers are (call, y, colour, tooltip)."""
    lines = lines or {}
    n = max((len(s.values) for s in series), default=0)
    top = max(
        [*itertools.chain.from_iterable(s.values for s in series), *(v or 0 for v in lines.values()), 1]
    )
    top *= 1.05

    def x(i: float) -> float:
        return _PAD + (_W - 2 * _PAD) * (i / max(n - 1, 1))

    def y(v: float) -> float:
        return _H - _PAD + (2 * _PAD - _H) * (v / top)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" role="img">',
        f"<title>{html.escape(title)}</title>",
        f'<text x="{_PAD}" y="18" font-size="13">{html.escape(title)}</text>',
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" stroke="#999"/>',
        f'<text x="{_PAD}" y="{_H - _PAD + 16}" font-size="10">call 0</text>',
        f'<text x="{_W - _PAD}" y="{_H - _PAD + 16}" font-size="10" text-anchor="end">call {n - 1}</text>',
        f'<text x="{_PAD - 4}" y="{y(top / 1.05):.1f}" font-size="10" text-anchor="end">'
        f"{top / 1.05:,.4g}</text>",
    ]
    for label, value in lines.items():
        if value is None:
            continue
        parts.append(
            f'<line x1="{_PAD}" y1="{y(value):.1f}" x2="{_W - _PAD}" y2="{y(value):.1f}" stroke="#888" '
            f'stroke-dasharray="2 3"/><text x="{_W - _PAD + 2}" y="{y(value) + 3:.1f}" font-size="10">'
            f"{html.escape(label)} {value:,}</text>"
        )
    for k, s in enumerate(series):
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(s.values))
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        parts.append(f'<polyline fill="none" stroke="{s.color}" stroke-width="1.6"{dash} points="{points}"/>')
        parts.append(
            f'<text x="{_PAD + 8 + 150 * k}" y="34" font-size="11" fill="{s.color}">'
            f"{html.escape(s.label)}</text>"
        )
    for i, v, color, tip in markers:
        parts.append(
            f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="4" fill="{color}">'
            f"<title>{html.escape(tip)}</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _cumulative(values: Sequence[float]) -> list[float]:
    return list(itertools.accumulate(values))


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "–" if value is None else format(value, spec)


def _section(entry: ReportEntry) -> str:
    m = entry.metrics
    markers = [
        (i, c.view_tokens, _LAYER_COLORS.get(layer, _OTHER_LAYER_COLOR), f"call {i}: {layer}")
        for i, c in enumerate(m.calls)
        for layer in dict.fromkeys(c.layers)
    ]
    tokens = _chart(
        "Prompt tokens per call",
        [
            _Series("view", "#264653", [c.view_tokens for c in m.calls]),
            _Series("raw (no compaction)", "#aaaaaa", [c.raw_tokens for c in m.calls], dashed=True),
        ],
        entry.thresholds,
        markers,
    )
    cost = _chart(
        "Cumulative prompt cost (USD, cache-aware)",
        [
            _Series("view", "#264653", _cumulative([c.cost for c in m.calls])),
            _Series("raw", "#aaaaaa", _cumulative([c.raw_cost for c in m.calls]), dashed=True),
        ],
    )
    others = dict.fromkeys(layer for c in m.calls for layer in c.layers if layer not in _LAYER_COLORS)
    colors = {**_LAYER_COLORS, **dict.fromkeys(others, _OTHER_LAYER_COLOR)}
    legend = " ".join(
        f'<span style="color:{color}">● {html.escape(layer)}</span>' for layer, color in colors.items()
    )
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(m.compactions.items())) or "none"
    return (
        f"<section><h2>{html.escape(m.name)} <small>({html.escape(entry.strategy)})</small></h2>"
        f"<p>{len(m.calls)} calls · peak {m.peak_view_tokens:,} tokens · compactions: {counts} · "
        f"FRR in view {_fmt(m.frr_in_view)} · whole {_fmt(m.frr_whole)} · in context {_fmt(m.frr_context)} · "
        f"recoverable {_fmt(m.frr_recoverable)} · "
        f"cost ratio {_fmt(m.cost_ratio)}</p><p>{legend}</p>{tokens}<br>{cost}</section>"
    )


_COLUMNS = (
    "trajectory",
    "strategy",
    "calls",
    "peak",
    "over budget",
    "violations",
    "FRR view",
    "FRR whole",
    "FRR context",
    "FRR recov.",
    "cache prefix",
    "breaks",
    "cost ratio",
)


def _row(entry: ReportEntry) -> str:
    m = entry.metrics
    cells = (
        html.escape(m.name),
        html.escape(entry.strategy),
        str(len(m.calls)),
        f"{m.peak_view_tokens:,}",
        str(m.over_budget_calls),
        str(m.invariant_violations),
        _fmt(m.frr_in_view),
        _fmt(m.frr_whole),
        _fmt(m.frr_context),
        _fmt(m.frr_recoverable),
        _fmt(m.cacheable_prefix_fraction),
        str(m.prefix_breaks),
        _fmt(m.cost_ratio),
    )
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


_FRR_METRICS = (
    ("FRR view", "frr_in_view"),
    ("FRR whole", "frr_whole"),
    ("FRR context", "frr_context"),
    ("FRR recov.", "frr_recoverable"),
)


def _pooled_table(entries: Sequence[ReportEntry]) -> str:
    """Per strategy, each FRR metric over every probe together, then its median and minimum per run."""
    by_strategy: dict[str, list[TrajectoryMetrics]] = {}
    for e in entries:
        by_strategy.setdefault(e.strategy, []).append(e.metrics)
    header = "<th>strategy</th><th>runs</th>" + "".join(
        f"<th>{label} pooled · median · min</th>" for label, _ in _FRR_METRICS
    )
    rows = []
    for strategy, runs in by_strategy.items():
        cells = [html.escape(strategy), str(len(runs))]
        for _, metric in _FRR_METRICS:
            values = (pooled(runs, metric), median(runs, metric), per_run_min(runs, metric))
            cells.append(" · ".join(_fmt(v) for v in values))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table><tr>{header}</tr>{''.join(rows)}</table>"


def render_report(entries: Sequence[ReportEntry], *, title: str = "contextkeep replay") -> str:
    """The whole HTML document."""
    header = "".join(f"<th>{c}</th>" for c in _COLUMNS)
    table = f"<table><tr>{header}</tr>{''.join(_row(e) for e in entries)}</table>{_pooled_table(entries)}"
    sections = "".join(_section(e) for e in entries)
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1><h2>Summary</h2>{table}"
        f"{sections}</body></html>"
    )


def write_report(
    path: str | Path, entries: Sequence[ReportEntry], *, title: str = "contextkeep replay"
) -> Path:
    """Write the report to `path`; returns it."""
    out = Path(path)
    out.write_text(render_report(entries, title=title), encoding="utf-8")
    logger.info("replay report written to %s", out)
    return out
