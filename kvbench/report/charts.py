"""Per-run summary charts: throughput bars, latency CDFs, the memory split, fp8 accuracy."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvbench.bench.metric_catalogue import METRICS
from kvbench.report.runs import RunData, RunSet
from kvbench.report.style import PART_COLORS, PART_TITLES, RunStyle, base_layout
from kvbench.report.tables import flatten, is_long_series

CDF_POINTS = 400


def throughput_figure(runset: RunSet, styles: dict[str, RunStyle]) -> go.Figure:
    """Output tokens/s per strategy; one bar series per group when groups are compared."""
    fig = go.Figure()
    metric = METRICS["output_tok_s"]
    for index in range(len(runset.groups)):
        runs = [r for r in runset.runs if r.group_index == index]
        values = [metric.value(r.summary) for r in runs]
        fig.add_bar(
            x=[r.label if runset.multi_group else r.name for r in runs],
            y=[v if v is not None else 0 for v in values],
            text=[metric.format(v) for v in values],
            textposition="outside",
            name=runs[0].group_tag if runs else "",
            marker={"color": [styles[r.name].color for r in runs],
                    "pattern": {"shape": [styles[r.name].pattern for r in runs]},
                    "line": {"color": "#444", "width": 0.5}},
            hovertemplate="%{x}: %{y:.1f} tok/s<extra>%{fullData.name}</extra>",
        )
    fig.update_layout(**base_layout("Output throughput (tokens/s)", 360,
                                    barmode="group", showlegend=runset.multi_group,
                                    yaxis={"title": "output tokens / s", "rangemode": "tozero"},
                                    bargap=0.35))
    return fig


def _cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = np.sort(values[~np.isnan(values)])
    n = values.size
    if n == 0:
        return values, values
    probs = np.arange(1, n + 1) / n
    if n > CDF_POINTS:
        keep = np.unique(np.linspace(0, n - 1, CDF_POINTS).round().astype(int))
        values, probs = values[keep], probs[keep]
    return values, probs


def latency_cdf_figure(runset: RunSet, styles: dict[str, RunStyle]) -> go.Figure:
    columns = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E latency"))
    fig = make_subplots(rows=1, cols=3, subplot_titles=[f"{t} (ms)" for _, t in columns],
                        horizontal_spacing=0.07)
    for run in runset.runs:
        style = styles[run.name]
        for col, (column, title) in enumerate(columns, start=1):
            if run.requests.empty or column not in run.requests:
                continue
            x, y = _cdf(run.requests[column].to_numpy(dtype=float))
            if x.size == 0:
                continue
            fig.add_scatter(
                x=x, y=y, row=1, col=col, mode="lines", line_shape="hv", name=run.name,
                legendgroup=run.name, showlegend=col == 1,
                line={"color": style.color, "dash": style.dash, "width": 2},
                hovertemplate=f"{title} %{{x:.1f}} ms: %{{y:.0%}} of requests"
                              "<extra>%{fullData.name}</extra>",
            )
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%")
    fig.update_yaxes(title_text="share of requests ≤ x", row=1, col=1)
    fig.update_layout(**base_layout("Latency CDFs (further left is faster)", 400))
    return fig


def _parts(run: RunData) -> dict[str, float] | None:
    """Mean memory split as fractions of the arena; `free` excludes the prefix cache."""
    split = run.summary.memory.breakdown_mean
    if all(split.get(p) is None for p in PART_COLORS):
        return None
    parts = {p: float(split.get(p) or 0.0) for p in PART_COLORS}
    parts["free"] = max(parts["free"] - parts["cached"], 0.0)  # cached is part of free
    return parts


def memory_figure(runset: RunSet) -> go.Figure:
    """Stacked bars: the whole arena (left) and the memory held for requests (right)."""
    runs = [r for r in runset.runs if _parts(r) is not None][::-1]  # first run on top
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("share of the KV arena", "share of memory held "
                                        "for requests (PagedAttention Fig. 2)"))
    names = [r.name for r in runs]
    for part, color in PART_COLORS.items():
        arena = [_parts(r)[part] for r in runs]
        fig.add_bar(y=names, x=arena, orientation="h", name=PART_TITLES[part], row=1, col=1,
                    marker_color=color, legendgroup=part,
                    text=[f"{v:.0%}" if v >= 0.05 else "" for v in arena],
                    textposition="inside", insidetextanchor="middle",
                    hovertemplate=f"{PART_TITLES[part]}: %{{x:.1%}}<extra>%{{y}}</extra>")
        if part in ("cached", "free"):
            continue
        held = []
        for run in runs:
            p = _parts(run)
            total = sum(p[k] for k in ("token", "reserved", "internal", "external"))
            held.append(p[part] / total if total else 0.0)
        fig.add_bar(y=names, x=held, orientation="h", name=PART_TITLES[part], row=1, col=2,
                    marker_color=color, legendgroup=part, showlegend=False,
                    text=[f"{v:.0%}" if v >= 0.05 else "" for v in held],
                    textposition="inside", insidetextanchor="middle",
                    hovertemplate=f"{PART_TITLES[part]}: %{{x:.1%}} of held<extra>%{{y}}"
                                  "</extra>")
    fig.update_xaxes(range=[0, 1], tickformat=".0%")
    fig.update_layout(**base_layout("KV memory split (time-weighted mean over steps)",
                                    150 + 46 * max(len(runs), 1), barmode="stack",
                                    bargap=0.3))
    fig.update_layout(legend={"traceorder": "normal"})
    return fig


def accuracy_figure(runs: list[RunData], styles: dict[str, RunStyle]) -> go.Figure | None:
    """Long lists of numbers in `summary['accuracy']` (per-layer scales, errors), a panel each."""
    keys: list[str] = []
    series: list[tuple[RunData, str, list]] = []
    for run in runs:
        for key, value in flatten(run.summary.accuracy or {}):
            if is_long_series(value):
                series.append((run, key, value))
                if key not in keys:
                    keys.append(key)
    if not series:
        return None
    fig = make_subplots(rows=len(keys), cols=1, subplot_titles=keys,
                        vertical_spacing=0.25 / len(keys) + 0.04)
    for run, key, value in series:
        fig.add_scatter(y=value, row=keys.index(key) + 1, col=1, mode="lines+markers",
                        name=run.name, legendgroup=run.name,
                        showlegend=keys.index(key) == 0,
                        line={"color": styles[run.name].color, "dash": styles[run.name].dash},
                        hovertemplate=f"{key}[%{{x}}] = %{{y:.4g}}<extra>%{{fullData.name}}"
                                      "</extra>")
    fig.update_xaxes(title_text="index (layer, position, ...)", row=len(keys), col=1)
    fig.update_layout(**base_layout("fp8 accuracy: per-index values", 120 + 220 * len(keys)))
    return fig
