"""`points.csv`: one row per point, its axis values and its summary's headline metrics (the
columns: docs/sweep.md, "The sweep folder").

Metric names, columns, titles and directions all come from kvbench.results.metric_catalogue
(`metric_column` maps `ttft.p99` to `ttft_p99_ms`). `TIMING_COLUMNS` depend on the wall clock
when a real model runs; two sweeps of the same grid agree on the others (`timing_free`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from kvbench.results.metric_catalogue import LATENCY_STATS, METRICS, find
from kvbench.results.summary import Summary, as_summary
from kvbench.sweep.options import display_name

# The metrics of the catalogue that `points.csv` carries, in column order (goodput's only
# when the run had an SLO).
POINT_METRICS = (
    "completed", "failed", "output_tok_s", "total_tok_s", "requests_s",
    *(f"{m}.{s}" for m in ("ttft", "tpot", "itl", "e2e") for s in LATENCY_STATS),
    "queue.p50", "queue.p99",
    "utilization_mean", "utilization_saturated", "kv_capacity_tokens", "kv_budget_bytes",
    "preemptions", "prefix_hit_rate", "batch_size_mean", "duration_s",
    "goodput_requests_s", "fraction_meeting_slo",
)
# Axes that the strategy label (`contiguous-pow2`, `paged-static`, `paged-sjf`, ...) sums up.
STRATEGY_AXES = frozenset({"strategy", "reserve", "batching", "queue_order", "kv_cache_dtype"})
IDENTITY = ("label", "strategy", "batching", "workload", "model", "device", "num_requests")
# Titles of sweep axes that are not metrics.
AXIS_TITLES = {"request_rate": "request rate (req/s)", "max_concurrency": "max concurrency"}


def metric_column(name: str) -> str:
    """`ttft.p99` -> `ttft_p99_ms`; `throughput.output_tok_s` -> `output_tok_s`; a column
    name is returned as it is."""
    name = name.strip()
    for section in ("throughput.", "memory.", "scheduler."):
        if name.startswith(section):
            name = name[len(section):]
    found = find(name)
    return found.column if found is not None else name


def metric_title(column: str) -> str:
    found = find(column)
    if found is not None:
        return found.axis_title
    return AXIS_TITLES.get(column, column.replace("_", " "))


def higher_is_better(column: str) -> bool:
    """The catalogue's direction for a column (False for what is not a metric)."""
    found = find(column)
    return found is not None and found.higher_is_better


def summary_row(summary: Summary | Mapping[str, Any] | None) -> dict[str, Any]:
    """The flattened headline metrics of one `kvbench_summary.json` (empty when there is none)."""
    summary = as_summary(summary) if summary else None
    if summary is None:
        return {}
    row: dict[str, Any] = {k: summary.get(k) for k in IDENTITY}
    for name in POINT_METRICS:
        m = METRICS[name]
        if m.path[0] == "goodput" and summary.goodput is None:
            continue
        row[m.column] = summary.lookup(m.path)
    return row


TIMING_COLUMNS = frozenset({
    *(METRICS[name].column for name in POINT_METRICS if METRICS[name].wall_clock),
    "meets_slo", "wall_s",
})


def points_frame(rows: list[dict[str, Any]], axes: list[str]) -> pd.DataFrame:
    """The table from rows of {point_id, values, source, status, summary, error, wall_s,
    meets_slo}; axis columns numeric where every value is a number."""
    frame = pd.DataFrame.from_records([{
        "point_id": row["point_id"], **{display_name(a): row["values"].get(a) for a in axes},
        "source": row.get("source", "grid"), "label": row.get("label"),
        "status": row.get("status", "pending"), **summary_row(row.get("summary")),
        **({"meets_slo": row["meets_slo"]} if "meets_slo" in row else {}),
        "wall_s": row.get("wall_s"), "error": row.get("error")} for row in rows])
    for axis in axes:
        column = display_name(axis)
        if column in frame:
            frame[column] = _maybe_numeric(frame[column])
    return frame


def _maybe_numeric(series: pd.Series) -> pd.Series:
    """The column as numbers when every value is one (integers when all are whole)."""
    if any(isinstance(v, bool) for v in series):
        return series
    numbers = pd.to_numeric(series, errors="coerce")
    if numbers.isna().any():
        return series
    whole = numbers.map(lambda v: math.isfinite(v) and float(v).is_integer())
    return numbers.astype("int64") if whole.all() else numbers.astype("float64")


def timing_free(frame: pd.DataFrame) -> pd.DataFrame:
    """The columns that do not depend on the wall clock (compare two sweeps on these)."""
    keep = [c for c in frame.columns if c not in TIMING_COLUMNS]
    return frame[keep]
