"""`--repeat N`: the same configuration N times, headline figures as mean ± 95% CI."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kvbench.bench.metric_catalogue import METRICS
from kvbench.bench.summary import Summary, as_summary

# Two-sided 95% Student t critical values by degrees of freedom (1..30); 1.96 beyond.
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]

# Catalogue metrics a repeat reports; `repeat.json` keys them by their column name
# (`ttft_p50_ms`).
HEADLINE = ("output_tok_s", "total_tok_s", "ttft.p50", "ttft.p99", "tpot.p50", "tpot.p99",
            "e2e.p99", "utilization_mean")


def t_critical_95(dof: int) -> float:
    return _T95[dof - 1] if 1 <= dof <= len(_T95) else 1.96


def mean_ci95(values: list[float]) -> dict[str, Any]:
    """Mean and the half-width of its 95% confidence interval (Student t)."""
    n = len(values)
    if n == 0:
        return {"mean": None, "ci95": None, "n": 0, "values": []}
    mean = sum(values) / n
    if n == 1:
        return {"mean": mean, "ci95": None, "n": 1, "values": values}
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return {"mean": mean, "ci95": t_critical_95(n - 1) * math.sqrt(var / n), "n": n,
            "values": values}


def repeat_summary(summaries: list[Summary | Mapping[str, Any]]) -> dict[str, Any]:
    """`repeat.json`: each headline metric's mean ± CI over the runs that have it."""
    runs = [as_summary(s) for s in summaries]
    figures = {}
    for name in HEADLINE:
        metric = METRICS[name]
        values = [v for v in (metric.value(s) for s in runs) if v is not None]
        figures[metric.column] = mean_ci95(values)
    return {"label": runs[0].label, "repeats": len(runs), "figures": figures}


def format_mean_ci(stat: dict[str, Any], spec: str = ".1f", scale: float = 1.0) -> str:
    if stat["mean"] is None:
        return "-"
    mean = stat["mean"] * scale
    if stat["ci95"] is None:
        return f"{mean:{spec}}"
    return f"{mean:{spec}} ± {stat['ci95'] * scale:{spec}}"
