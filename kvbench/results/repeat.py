"""`--repeat N`: the same configuration N times, headline figures as mean ± 95% CI."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kvbench.results.metric_catalogue import METRICS
from kvbench.results.summary import Summary, as_summary

# Catalogue metrics a repeat reports; `repeat.json` keys them by their column name
# (`ttft_p50_ms`).
HEADLINE = ("output_tok_s", "total_tok_s", "ttft.p50", "ttft.p99", "tpot.p50", "tpot.p99",
            "e2e.p99", "utilization_mean")


def t_critical_95(dof: int) -> float:
    """Two-sided 95% Student t critical value for `dof` degrees of freedom (>= 1)."""
    from scipy.stats import t  # imported here: scipy takes a while and only repeats need it

    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    return float(t.ppf(0.975, dof))


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
