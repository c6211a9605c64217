"""The report's "KV block residency" section, from each run's summary
(`kvbench/results/residency_figures.py`): the residency percentiles and reuse distances, the
block lifetimes per tier, and the reuse-distance curve with the run's GPU cache and host tier
sizes marked. Empty when no run has a prefix cache (results/README.md, KV block residency).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvbench.report.figure import Figure, subplots
from kvbench.report.runs import RunSet
from kvbench.report.style import RunStyle, base_layout
from kvbench.report.tables import table_html

HEADERS = ("run", "tier", "blocks", "lifetime p50", "lifetime p90", "idle before evict p50",
           "reuse gap p50", "evictions timed", "reuse distance p50", "p90",
           "LRU hit rate at this size")

# (tier, its blocks' key in the curve, summary key prefix)
TIERS = (("GPU", "gpu_blocks", "kv_block"), ("host", "host_blocks", "host_block"))


def _s(stats: dict[str, Any] | None, key: str) -> str:
    value = (stats or {}).get(key)
    return "-" if value is None else f"{value / 1000:,.2f} s"


def _n(stats: dict[str, Any] | None, key: str) -> str:
    value = (stats or {}).get(key)
    return "-" if value is None else f"{value:,.0f}"


def curve_at(curve: dict[str, Any], blocks: int) -> float | None:
    """The curve's hit rate at `blocks` (one of its points, or the last point below)."""
    xs = np.asarray(curve.get("blocks") or [])
    if not xs.size:
        return None
    i = int(np.searchsorted(xs, blocks, side="right")) - 1
    return float(curve["hit_rate"][i]) if i >= 0 else 0.0


def residency_runs(runset: RunSet) -> list[tuple[Any, dict[str, Any]]]:
    """The runs that kept residency figures, with their summary's `scheduler` keys."""
    return [(run, run.summary.scheduler) for run in runset.runs
            if (run.summary.scheduler or {}).get("kv_block_lifetime_ms") is not None]


def residency_table_html(runset: RunSet) -> str:
    rows = []
    for run, sched in residency_runs(runset):
        curve = sched.get("kv_reuse_curve")
        distance = sched.get("kv_block_reuse_distance")
        for tier, size_key, prefix in TIERS:
            lifetime = sched.get(f"{prefix}_lifetime_ms")
            if lifetime is None:
                continue
            size = curve.get(size_key) if curve else sched.get("host_blocks")
            at = curve_at(curve, size) if curve and size else None
            rows.append([
                run.name, tier, "-" if size is None else f"{size:,}",
                _s(lifetime, "p50"), _s(lifetime, "p90"),
                _s(sched.get(f"{prefix}_idle_before_evict_ms"), "p50"),
                _s(sched.get(f"{prefix}_reuse_gap_ms"), "p50"), _n(lifetime, "count"),
                _n(distance, "p50") if tier == "GPU" else "",
                _n(distance, "p90") if tier == "GPU" else "",
                "-" if at is None else f"{100 * at:.1f}%",
            ])
    if not rows:
        return ""
    return table_html(HEADERS, rows)


def residency_figure(runset: RunSet, styles: dict[str, RunStyle]) -> Figure | None:
    """Left: block lifetime CDFs per run and tier. Right: the reuse-distance curve per run,
    the GPU cache's and host tier's sizes marked."""
    runs = residency_runs(runset)
    if not runs:
        return None
    fig = subplots(rows=1, cols=2, horizontal_spacing=0.09, titles=[
        "block lifetime: allocation to eviction (s)",
        "LRU cache of N blocks: prefix hit rate it would reach"])
    for run, sched in runs:
        style = styles[run.name]
        cdf = sched.get("kv_residency_cdf_ms") or {}
        for tier, _, prefix in TIERS:
            values = cdf.get(f"{prefix}_lifetime_ms")
            if not values:
                continue
            fig.add({"type": "scatter", "x": [v / 1000 for v in values], "y": cdf["q"],
                     "mode": "lines", "name": f"{run.name} {tier}", "legendgroup": run.name,
                     "line": {"color": style.color, "dash": "solid" if tier == "GPU" else "dot",
                              "width": 2},
                     "hovertemplate": f"{tier} block lifetime %{{x:.2f}} s: %{{y:.0%}} of "
                                      "evicted blocks<extra>%{fullData.name}</extra>"},
                    row=1, col=1)
        curve = sched.get("kv_reuse_curve")
        if not curve or not curve.get("blocks"):
            continue
        fig.add({"type": "scatter", "x": curve["blocks"], "y": curve["hit_rate"],
                 "mode": "lines", "name": f"{run.name} LRU curve", "legendgroup": run.name,
                 "line": {"color": style.color, "dash": style.dash, "width": 2, "shape": "hv"},
                 "hovertemplate": "%{x:,} blocks: %{y:.1%} hit rate"
                                  "<extra>%{fullData.name}</extra>"}, row=1, col=2)
        marks = [(tier, curve.get(size_key)) for tier, size_key, _ in TIERS
                 if curve.get(size_key)]
        fig.add({"type": "scatter", "mode": "markers+text",
                 "x": [size for _, size in marks],
                 "y": [curve_at(curve, size) for _, size in marks],
                 "text": [f"{tier} {size:,}" for tier, size in marks],
                 "textposition": "top left", "name": f"{run.name} tier sizes",
                 "legendgroup": run.name, "showlegend": False,
                 "marker": {"color": style.color, "size": 10, "symbol": "diamond"},
                 "hovertemplate": "%{text} blocks: %{y:.1%}<extra>%{fullData.name}</extra>"},
                row=1, col=2)
    fig.update_axes("y", {"range": [0, 1.02], "tickformat": ".0%"})
    fig.update_axes("y", {"title": {"text": "share of evicted blocks ≤ x"}}, row=1, col=1)
    fig.update_axes("x", {"type": "log", "title": {"text": "s, log scale"}}, row=1, col=1)
    fig.update_axes("x", {"type": "log", "title": {"text": "N (blocks), log scale"}},
                    row=1, col=2)
    fig.update_layout(**base_layout("KV block residency and reuse distance", 420))
    return fig
