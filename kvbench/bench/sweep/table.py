"""`points.csv`: one row per point, its axis values and its summary's headline metrics.

Columns: `point_id`, one column per axis (named as in point ids), `source` (grid or search),
`status` (complete, failed, interrupted, pending), then the flattened summary:
`output_tok_s`, `total_tok_s`, `requests_s`, `<latency>_<stat>_ms` for ttft, tpot, itl, e2e
(mean, p50, p90, p99, max) and queue (p50, p99), `utilization_mean`,
`utilization_saturated`, `preemptions`, `prefix_hit_rate`, `batch_size_mean`,
`kv_capacity_tokens`, `kv_budget_bytes`, `completed`, `failed`, `duration_s`, the goodput
under the sweep's SLO, `meets_slo` (when there is one), `wall_s` and `error`.

Metric names as `kvbench compare` spells them (`ttft.p99`, `output_tok_s`) map to columns
with `metric_column`. `TIMING_COLUMNS` are the columns that depend on the wall clock when a
real model runs (every measured latency and rate, and what the arrival interleaving changes);
two sweeps of the same grid agree on the others (`timing_free`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from kvbench.bench.sweep.options import display_name

LATENCY_STATS = {
    "ttft": ("mean", "p50", "p90", "p99", "max"),
    "tpot": ("mean", "p50", "p90", "p99", "max"),
    "itl": ("mean", "p50", "p90", "p99", "max"),
    "e2e": ("mean", "p50", "p90", "p99", "max"),
    "queue": ("p50", "p99"),
}
THROUGHPUT = ("output_tok_s", "total_tok_s", "requests_s")
# Axes that the strategy label (`contiguous-pow2`, `paged-static`, ...) sums up.
STRATEGY_AXES = frozenset({"strategy", "reserve", "batching", "kv_cache_dtype"})
IDENTITY = ("label", "strategy", "batching", "workload", "model", "device", "num_requests",
            "completed", "failed")
# Higher is better for these; lower for every latency, preemptions, duration.
HIGHER_IS_BETTER = frozenset({
    *THROUGHPUT, "utilization_mean", "utilization_saturated", "prefix_hit_rate",
    "goodput_requests_s", "fraction_meeting_slo", "kv_capacity_tokens", "completed",
    "batch_size_mean",
})
TITLES = {
    "output_tok_s": "output tok/s", "total_tok_s": "total tok/s", "requests_s": "requests/s",
    "utilization_mean": "KV utilization", "utilization_saturated": "KV utilization (saturated)",
    "preemptions": "preemptions", "prefix_hit_rate": "prefix hit rate",
    "goodput_requests_s": "goodput req/s", "fraction_meeting_slo": "share meeting SLO",
    "batch_size_mean": "mean batch size", "request_rate": "request rate (req/s)",
    "max_concurrency": "max concurrency",
}


def metric_column(name: str) -> str:
    """`ttft.p99` -> `ttft_p99_ms`; `throughput.output_tok_s` -> `output_tok_s`; a column
    name is returned as it is."""
    name = name.strip()
    if name.startswith("throughput."):
        return name.split(".", 1)[1]
    if name.startswith("memory.") or name.startswith("scheduler."):
        return name.split(".", 1)[1]
    metric, dot, stat = name.partition(".")
    if dot and metric in LATENCY_STATS:
        return f"{metric}_{stat}_ms"
    return name


def metric_title(column: str) -> str:
    if column in TITLES:
        return TITLES[column]
    if column.endswith("_ms"):
        metric, _, stat = column[:-3].partition("_")
        return f"{metric.upper() if metric != 'queue' else 'queue'} {stat} (ms)"
    return column.replace("_", " ")


def higher_is_better(column: str) -> bool:
    return column in HIGHER_IS_BETTER


def summary_row(summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """The flattened headline metrics of one `summary.json` (empty when there is none)."""
    if not summary:
        return {}
    row: dict[str, Any] = {k: summary.get(k) for k in IDENTITY}
    throughput = summary.get("throughput") or {}
    for key in THROUGHPUT:
        row[key] = throughput.get(key)
    latency = summary.get("latency_ms") or {}
    for metric, stats in LATENCY_STATS.items():
        values = latency.get(metric) or {}
        for stat in stats:
            row[f"{metric}_{stat}_ms"] = values.get(stat)
    memory = summary.get("memory") or {}
    scheduler = summary.get("scheduler") or {}
    row.update(
        utilization_mean=memory.get("utilization_mean"),
        utilization_saturated=memory.get("utilization_saturated"),
        kv_capacity_tokens=memory.get("kv_capacity_tokens"),
        kv_budget_bytes=memory.get("kv_budget_bytes"),
        preemptions=scheduler.get("preemptions"),
        prefix_hit_rate=scheduler.get("prefix_hit_rate"),
        batch_size_mean=scheduler.get("batch_size_mean"),
        duration_s=summary.get("duration_s"),
    )
    goodput = summary.get("goodput")
    if goodput:
        row["goodput_requests_s"] = goodput.get("goodput_requests_s")
        row["fraction_meeting_slo"] = goodput.get("fraction_meeting_slo")
    return row


TIMING_COLUMNS = frozenset({
    *THROUGHPUT,
    *(f"{m}_{s}_ms" for m, stats in LATENCY_STATS.items() for s in stats),
    "utilization_mean", "utilization_saturated", "preemptions", "prefix_hit_rate",
    "batch_size_mean", "duration_s", "goodput_requests_s", "fraction_meeting_slo",
    "meets_slo", "wall_s",
})


def points_frame(rows: list[dict[str, Any]], axes: list[str]) -> pd.DataFrame:
    """The table from rows of {point_id, values, source, status, summary, error, wall_s,
    meets_slo}; axis columns numeric where every value is a number."""
    records = []
    for row in rows:
        record: dict[str, Any] = {"point_id": row["point_id"]}
        for axis in axes:
            record[display_name(axis)] = row["values"].get(axis)
        record["source"] = row.get("source", "grid")
        record["label"] = row.get("label")
        record["status"] = row.get("status", "pending")
        record.update(summary_row(row.get("summary")))
        if "meets_slo" in row:
            record["meets_slo"] = row["meets_slo"]
        record["wall_s"] = row.get("wall_s")
        record["error"] = row.get("error")
        records.append(record)
    frame = pd.DataFrame.from_records(records)
    for axis in axes:
        column = display_name(axis)
        if column in frame:
            frame[column] = _maybe_numeric(frame[column])
    return frame


def _maybe_numeric(series: pd.Series) -> pd.Series:
    def number(value: Any) -> float | None:
        if isinstance(value, bool):
            return None
        if isinstance(value, int | float):
            return float(value)
        try:
            return float(str(value))
        except ValueError:
            return None

    converted = [number(v) for v in series]
    if series.notna().all() and all(c is not None for c in converted):
        if all(not math.isinf(c) and float(c).is_integer() for c in converted):
            return pd.Series([int(c) for c in converted], index=series.index)
        return pd.Series(converted, index=series.index, dtype="float64")
    return series


def timing_free(frame: pd.DataFrame) -> pd.DataFrame:
    """The columns that do not depend on the wall clock (compare two sweeps on these)."""
    keep = [c for c in frame.columns if c not in TIMING_COLUMNS]
    return frame[keep]


__all__ = [
    "STRATEGY_AXES",
    "TIMING_COLUMNS",
    "higher_is_better",
    "metric_column",
    "metric_title",
    "points_frame",
    "summary_row",
    "timing_free",
]
