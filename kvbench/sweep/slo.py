"""Service-level objectives over a run's latency percentiles: `ttft.p99=500ms,tpot.p99=50ms`.

A target is METRIC.STAT <= LIMIT, in milliseconds: METRIC one of ttft, tpot, itl, e2e, queue,
prefill (the `latency_ms` keys of `kvbench_summary.json`), STAT one of mean, p50, p90, p99, max
(p99 when left out). A run meets the SLO when it completed, served every request, and every
target holds. Units as `kvbench run --slo`: `500ms`, `0.5s`, or a bare number of ms.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.results.metric_catalogue import LATENCY_METRICS, LATENCY_STATS, METRICS
from kvbench.results.summary import Summary, as_summary
from kvbench.units import parse_duration_s

# The per-request goodput of `kvbench_summary.json` knows these (kvbench.results.metrics.goodput).
GOODPUT_METRICS = ("ttft", "tpot", "e2e")


def parse_slo_targets(spec: str | Mapping[str, Any] | None) -> dict[str, float]:
    """`"ttft.p99=500ms,tpot=50ms"` (or a mapping) -> {"ttft.p99": 500.0, "tpot.p99": 50.0}."""
    if not spec:
        return {}
    if isinstance(spec, str):
        items = []
        for item in (p.strip() for p in spec.split(",") if p.strip()):
            key, sep, value = item.partition("=")
            if not sep:
                raise KvbenchInputError(
                    f"cannot read --slo item {item!r}: use e.g. ttft.p99=500ms,tpot.p99=50ms"
                )
            items.append((key, value))
    else:
        items = list(spec.items())
    targets: dict[str, float] = {}
    for key, value in items:
        metric, _, stat = str(key).strip().partition(".")
        stat = stat or "p99"
        if metric not in LATENCY_METRICS or stat not in LATENCY_STATS:
            raise KvbenchInputError(
                f"unknown SLO metric {key!r}: use METRIC.STAT with METRIC in "
                f"{', '.join(LATENCY_METRICS)} and STAT in {', '.join(LATENCY_STATS)} "
                "(e.g. ttft.p99)"
            )
        if isinstance(value, int | float) and not isinstance(value, bool):
            limit_ms = float(value)
        else:
            limit_ms = parse_duration_s(str(value).strip()) * 1e3
        targets[f"{metric}.{stat}"] = limit_ms
    return targets


def format_slo(targets: Mapping[str, float]) -> str:
    return ",".join(f"{k}={v:g}ms" for k, v in targets.items())


def per_request_slo(targets: Mapping[str, float]) -> dict[str, float]:
    """The targets as `RunConfig.slo_ms` (per-request goodput): the tightest per metric."""
    slo: dict[str, float] = {}
    for key, limit in targets.items():
        metric = key.partition(".")[0]
        if metric in GOODPUT_METRICS:
            slo[metric] = min(limit, slo.get(metric, limit))
    return slo


def slo_violations(summary: Summary | Mapping[str, Any] | None,
                   targets: Mapping[str, float]) -> list[str]:
    """What keeps a run from meeting the SLO (empty: it meets it)."""
    summary = as_summary(summary)
    if summary is None:
        return ["no result"]
    problems = []
    if (summary.status or "complete") != "complete":
        problems.append(f"status {summary.status}")
    if summary.failed:
        problems.append(f"{summary.failed} requests not served")
    for key, limit in targets.items():
        value = METRICS[key].value(summary)
        if value is None:
            problems.append(f"{key} missing")
        elif value > limit:
            problems.append(f"{key} {value:.1f} ms > {limit:g} ms")
    return problems


def meets_slo(summary: Summary | Mapping[str, Any] | None, targets: Mapping[str, float]) -> bool:
    return not slo_violations(summary, targets)
