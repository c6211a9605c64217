"""Per-run summary charts: throughput bars, latency CDFs (TTFT, TPOT, E2E; ITL when the
folders keep per-token times), the TTFT split, the memory split, fp8 accuracy."""

from __future__ import annotations

import math

import numpy as np

from kvbench.report.figure import Figure, subplots
from kvbench.report.runs import RunData, RunSet
from kvbench.report.style import PART_COLORS, PART_TITLES, RunStyle, base_layout
from kvbench.report.tables import flatten, is_long_series
from kvbench.report.thinning import even_rows
from kvbench.results.metric_catalogue import METRICS
from kvbench.results.token_times import TokenTimes
from kvbench.results.weighted import WeightedValues

CDF_POINTS = 400


def throughput_figure(runset: RunSet, styles: dict[str, RunStyle]) -> Figure:
    """Output tokens/s per run. One bar trace per run, so each legend entry has the run's own
    colour and pattern, as in every other chart; runs of one folder share an offset group."""
    fig = Figure()
    metric = METRICS["output_tok_s"]
    for run in runset.runs:
        value = metric.value(run.summary)
        style = styles[run.name]
        fig.add({
            "type": "bar", "x": [run.label if runset.multi_group else run.name],
            "y": [value if value is not None else 0],
            "text": [metric.format(value)], "textposition": "outside", "name": run.name,
            "legendgroup": run.name, "offsetgroup": str(run.group_index),
            "marker": {"color": style.color, "pattern": {"shape": style.pattern},
                       "line": {"color": "#444", "width": 0.5}},
            "hovertemplate": "%{x}: %{y:.1f} tok/s<extra>%{fullData.name}</extra>",
        })
    layout = base_layout("Output throughput (tokens/s)", 360, barmode="group",
                         showlegend=runset.multi_group,
                         yaxis={"title": {"text": "output tokens / s"}, "rangemode": "tozero"},
                         bargap=0.35)
    if not runset.multi_group:
        layout["margin"]["b"] = 48
        layout["height"] = 360
    fig.update_layout(**layout)
    return fig


def _present(values: np.ndarray) -> np.ndarray:
    """The values that are not NaN."""
    return values[~np.isnan(values)]


def _nanmean(values: np.ndarray) -> float:
    """The mean of the values that are not NaN, as pandas computes it (the NaNs summed as
    zeros, divided by the count: the same bits); NaN when there are none."""
    missing = np.isnan(values)
    count = values.size - int(missing.sum())
    return float(np.where(missing, 0.0, values).sum() / count) if count else math.nan


def _cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF at up to CDF_POINTS evenly spread ranks: (sorted values, share of
    values at or below each)."""
    return _sorted_cdf(np.sort(_present(values)))


def _weighted_cdf(values: WeightedValues) -> tuple[np.ndarray, np.ndarray]:
    """`_cdf` of the expanded multiset, from its values and counts: a million-request run's
    hundreds of millions of gaps are a few million (gap, count) pairs."""
    ascending, running = values.ascending()
    n = int(running[-1]) if running.size else 0
    ranks = even_rows(n, CDF_POINTS)
    return ascending[np.searchsorted(running, ranks, side="right")], (ranks + 1) / max(n, 1)


def _sorted_cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_cdf` of values already sorted, without NaN."""
    # A sort, not a partition at the kept ranks: numpy's sort of a long run's millions of ITLs
    # is vectorised (SIMD), a partition at hundreds of ranks is not, and costs more.
    keep = even_rows(values.size, CDF_POINTS)
    return values[keep], (keep + 1) / max(values.size, 1)


def latency_cdf_figure(runset: RunSet, styles: dict[str, RunStyle]) -> Figure:
    """CDFs over requests of TTFT, TPOT and E2E latency, a panel each."""
    columns = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E latency"))
    fig = subplots(rows=1, cols=3, titles=[f"{t} (ms)" for _, t in columns],
                   horizontal_spacing=0.07)
    for run in runset.runs:
        style = styles[run.name]
        for col, (column, title) in enumerate(columns, start=1):
            if run.requests.empty or column not in run.requests:
                continue
            x, y = _cdf(run.requests.floats(column))
            if x.size == 0:
                continue
            fig.add({
                "type": "scatter", "x": x, "y": y, "mode": "lines", "name": run.name,
                "legendgroup": run.name, "showlegend": col == 1,
                "line": {"color": style.color, "dash": style.dash, "width": 2, "shape": "hv"},
                "hovertemplate": f"{title} %{{x:.1f}} ms: %{{y:.0%}} of requests"
                                 "<extra>%{fullData.name}</extra>",
            }, row=1, col=col)
    fig.update_axes("y", {"range": [0, 1.02], "tickformat": ".0%"})
    fig.update_axes("y", {"title": {"text": "share of requests ≤ x"}}, row=1, col=1)
    fig.update_layout(**base_layout("Latency CDFs (further left is faster)", 400))
    return fig


def sorted_inter_token_gaps_s(tokens: TokenTimes) -> np.ndarray:
    """Every inter-token gap (docs/design.md, Metrics: ITL), seconds, ascending, NaN left out:
    computed into one array and sorted in place (a long run has millions of them)."""
    times = tokens.times_s
    if times.size < 2:
        return np.empty(0)
    gaps = np.diff(times)
    # The gap from one sample's last token to the next sample's first is no ITL: NaN, which
    # the sort puts last, with any NaN gap, and the slice below drops.
    across = np.asarray(tokens.starts)[1:-1] - 1
    gaps[across[(across >= 0) & (across < gaps.size)]] = np.nan
    gaps.sort()
    return gaps[: np.searchsorted(gaps, np.nan)]


def itl_cdf_figure(runset: RunSet, styles: dict[str, RunStyle]) -> Figure | None:
    """Inter-token latency CDF over every gap between consecutive tokens of a request, from
    `tokens.parquet`; None when no run has per-token times."""
    fig = Figure()
    for run in runset.runs:
        if run.token_times is None:
            continue
        # In seconds, scaled to ms at the kept ranks only: the same values (scaling keeps the
        # order), without a copy of the millions of gaps.
        tokens = run.token_times
        # A run's own times: its gaps as values with counts. A file's: every gap, sorted in
        # place (a count each, 8 bytes a gap, and sorted copies would double a long run's
        # memory).
        if tokens.in_memory:
            x, y = _weighted_cdf(tokens.gaps_s())
        else:
            x, y = _sorted_cdf(sorted_inter_token_gaps_s(tokens))
        if x.size == 0:
            continue
        x = x * 1e3
        style = styles[run.name]
        fig.add({"type": "scatter", "x": x, "y": y, "mode": "lines", "name": run.name,
                 "legendgroup": run.name,
                 "line": {"color": style.color, "dash": style.dash, "width": 2, "shape": "hv"},
                 "hovertemplate": "ITL %{x:.2f} ms: %{y:.0%} of gaps<extra>"
                                  "%{fullData.name}</extra>"})
    if not fig.data:
        return None
    fig.update_layout(**base_layout(
        "Inter-token latency CDF (gaps between consecutive tokens)", 360,
        xaxis={"title": {"text": "ITL (ms), log scale"}, "type": "log"},
        yaxis={"title": {"text": "share of gaps ≤ x"}, "range": [0, 1.02],
               "tickformat": ".0%"}))
    return fig


def ttft_split_figure(runset: RunSet, styles: dict[str, RunStyle]) -> Figure | None:
    """Mean TTFT as queueing (arrival to admission) + prefill (admission to first token),
    from `requests.csv`; None when no run has the columns."""
    need = {"queue_ms", "prefill_ms"}
    runs = [r for r in runset.runs if not r.requests.empty and need <= set(r.requests)][::-1]
    if not runs:
        return None
    names = [r.name for r in runs]
    colors = [styles[n].color for n in names]
    fig = Figure()
    # Each run in its own colour (as in every chart): queue pale, prefill solid; the bar text
    # names the part, so no legend entry has to stand for several colours.
    for column, part, opacity in (("queue_ms", "queue", 0.4), ("prefill_ms", "prefill", 1.0)):
        # Requests that never started have no value (NaN): left out.
        values = [r.requests.floats(column) for r in runs]
        means = [_nanmean(v) for v in values]
        present = [_present(v) for v in values]
        p99 = [float(np.quantile(v, 0.99)) if v.size else math.nan for v in present]
        fig.add({
            "type": "bar", "y": names, "x": means, "orientation": "h", "name": part,
            "marker": {"color": colors, "opacity": opacity,
                       "line": {"color": "#444", "width": 0.5}},
            "text": [f"{part} {v:.0f} ms" for v in means], "textposition": "inside",
            "insidetextanchor": "middle", "customdata": p99,
            "hovertemplate": f"{part}: mean %{{x:.1f}} ms, p99 %{{customdata:.1f}} ms"
                             "<extra>%{y}</extra>"})
    layout = base_layout("TTFT split: queue (arrival → admission) + prefill (admission → "
                         "first token), mean over requests", 110 + 46 * len(runs),
                         barmode="stack", bargap=0.3, showlegend=False,
                         xaxis={"title": {"text": "ms"}, "rangemode": "tozero"})
    layout["margin"]["b"] = 56
    layout["height"] = 110 + 46 * len(runs) + 8
    fig.update_layout(**layout)
    return fig


def _parts(run: RunData) -> dict[str, float] | None:
    """Mean memory split as fractions of the arena; `free` excludes the prefix cache."""
    split = run.summary.memory.breakdown_mean
    if all(split.get(p) is None for p in PART_COLORS):
        return None
    parts = {p: float(split.get(p) or 0.0) for p in PART_COLORS}
    parts["free"] = max(parts["free"] - parts["cached"], 0.0)  # cached is part of free
    return parts


def memory_figure(runset: RunSet) -> Figure:
    """Stacked bars: the whole arena (left) and the memory held for requests (right)."""
    runs = [r for r in runset.runs if _parts(r) is not None][::-1]  # first run on top
    fig = subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                   titles=("share of the KV arena", "share of memory held "
                           "for requests (PagedAttention Fig. 2)"))
    names = [r.name for r in runs]
    parts = [_parts(r) for r in runs]
    held = [sum(p[k] for k in ("token", "reserved", "internal", "external")) for p in parts]
    for part, color in PART_COLORS.items():
        panels = [(1, [p[part] for p in parts], "", {})]
        if part not in ("cached", "free"):  # (not held for requests)
            panels.append((2, [p[part] / h if h else 0.0 for p, h in zip(parts, held, strict=True)],
                           " of held", {"showlegend": False}))
        for col, shares, of, legend in panels:
            fig.add({"type": "bar", "y": names, "x": shares, "orientation": "h",
                     "name": PART_TITLES[part], "marker": {"color": color}, "legendgroup": part,
                     **legend, "text": [f"{v:.0%}" if v >= 0.05 else "" for v in shares],
                     "textposition": "inside", "insidetextanchor": "middle",
                     "hovertemplate": f"{PART_TITLES[part]}: %{{x:.1%}}{of}<extra>%{{y}}</extra>"},
                    row=1, col=col)
    fig.update_axes("x", {"range": [0, 1], "tickformat": ".0%"})
    fig.update_layout(**base_layout("KV memory split (time-weighted mean over steps)",
                                    150 + 46 * max(len(runs), 1), barmode="stack",
                                    bargap=0.3))
    fig.update_layout(legend={"traceorder": "normal"})
    return fig


def accuracy_figure(runs: list[RunData], styles: dict[str, RunStyle]) -> Figure | None:
    """Long lists of numbers in `summary['accuracy']` (per-layer scales, errors), a panel each."""
    series = [(run, key, value) for run in runs
              for key, value in flatten(run.summary.accuracy or {}) if is_long_series(value)]
    keys = list(dict.fromkeys(key for _, key, _ in series))
    if not series:
        return None
    fig = subplots(rows=len(keys), cols=1, titles=keys,
                   vertical_spacing=0.25 / len(keys) + 0.04)
    for run, key, value in series:
        fig.add({"type": "scatter", "y": value, "mode": "lines+markers", "name": run.name,
                 "legendgroup": run.name, "showlegend": keys.index(key) == 0,
                 "line": {"color": styles[run.name].color, "dash": styles[run.name].dash},
                 "hovertemplate": f"{key}[%{{x}}] = %{{y:.4g}}<extra>%{{fullData.name}}"
                                  "</extra>"}, row=keys.index(key) + 1, col=1)
    fig.update_axes("x", {"title": {"text": "index (layer, position, ...)"}}, row=len(keys),
                    col=1)
    fig.update_layout(**base_layout("fp8 accuracy: per-index values", 120 + 220 * len(keys)))
    return fig
