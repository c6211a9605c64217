"""The metrics of docs/design.md computed from what ran: per-request rows (`Columns`, or a
pandas frame of `requests.csv`), per-step rows. `RunWriter.summarize` assembles
them into a `Summary`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from kvbench.results.columns import Columns, as_columns

if TYPE_CHECKING:
    import pandas as pd

PERCENTILES = (50, 90, 99)


def latency_stats(values_ms: np.ndarray | list[float] | pd.Series,
                  consume: bool = False) -> dict[str, float | None]:
    """mean, p50, p90, p99, max of a latency sample in milliseconds (None when empty).
    `consume`: `values_ms` is a float64 array the caller no longer reads, which may be
    reordered instead of copied (a long run's ITLs are GBs)."""
    arr = (values_ms if consume and isinstance(values_ms, np.ndarray)
           and values_ms.dtype == np.float64 and values_ms.ndim == 1
           else np.array(values_ms, dtype=np.float64))  # our own copy (None is NaN)
    missing = np.isnan(arr)
    if missing.any():
        arr = arr[~missing]
    if arr.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    mean, most = float(arr.mean()), float(arr.max())
    # One partition of a run's millions of ITLs, not three, in place (the copy is ours;
    # the mean is summed first, in the sample's order).
    p50, p90, p99 = np.percentile(arr, PERCENTILES, overwrite_input=True).tolist()
    return {"mean": mean, "p50": p50, "p90": p90, "p99": p99, "max": most}


def per_request(requests: Columns | pd.DataFrame) -> Columns | pd.DataFrame:
    """One row per request of a `requests.csv` table (its first sample's), as a client sees
    the request's response, one stream: `completed` true when every sample completed,
    `output_tokens` summed over the samples, `ttft_ms` the first sample's first token and
    `e2e_ms` the last sample's end (the samples share the arrival and the send time). The
    same kind of table as given, in the order of the first samples' rows."""
    table = as_columns(requests)
    if "sample" not in table or table.empty or table["n"].max() <= 1:
        return requests  # one row per request already (n = 1, or a folder from before)
    _, group = np.unique(table["request_id"], return_inverse=True)
    group = group.reshape(-1)
    order = np.argsort(group, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(group[order]) != 0])
    # A group's figures skip missing values (NaN), as pandas' group reductions do: fmin and
    # fmax keep the other operand; a group of NaN only stays NaN.
    completed = np.logical_and.reduceat(table["completed"].astype(bool)[order], starts)
    output_tokens = np.add.reduceat(table["output_tokens"][order], starts)
    ttft = np.fmin.reduceat(table.floats("ttft_ms")[order], starts)
    e2e = np.fmax.reduceat(table.floats("e2e_ms")[order], starts)
    first = np.flatnonzero(table["sample"] == 0)
    of_first = group[first]
    figures = {"completed": completed, "output_tokens": output_tokens, "ttft_ms": ttft,
               "e2e_ms": e2e}
    rows = Columns({name: figures[name][of_first] if name in figures else table[name][first]
                    for name in table})
    return rows if isinstance(requests, Columns) else rows.frame()


def send_rate(times_s: np.ndarray | list[float | None]) -> float | None:
    """An achieved rate, per second, from send times: (count − 1) / (last − first), the
    inverse of the mean gap between consecutive sends; None below two sends or when all went
    at one instant."""
    arr = np.array(times_s, dtype=np.float64)  # (None is NaN)
    arr = arr[~np.isnan(arr)]
    if arr.size < 2:
        return None
    span = float(arr.max() - arr.min())
    return (arr.size - 1) / span if span > 0 else None


def throughput(requests: Columns | pd.DataFrame) -> tuple[dict[str, float | None], float]:
    """Output tokens (every sample's), prompt + output tokens and completed requests per
    second of makespan (first arrival to last finish), over completed requests."""
    table = as_columns(requests)
    by_request = as_columns(per_request(table))
    done = by_request["completed"].astype(bool)
    if not done.any():
        return {"output_tok_s": None, "total_tok_s": None, "requests_s": None}, 0.0
    # Missing values skipped, as pandas' max and min skip them.
    makespan = float(np.nanmax(table.floats("finish_s")[table["completed"].astype(bool)])
                     - np.nanmin(table.floats("arrival_s")))
    if makespan <= 0:
        return {"output_tok_s": None, "total_tok_s": None, "requests_s": None}, makespan
    out_tokens = float(by_request["output_tokens"][done].sum())
    prompt_tokens = float(by_request["prompt_len"][done].sum())
    return {
        "output_tok_s": out_tokens / makespan,
        "total_tok_s": (out_tokens + prompt_tokens) / makespan,
        "requests_s": int(done.sum()) / makespan,
    }, makespan


def goodput(requests: Columns | pd.DataFrame, slo_ms: dict[str, float],
            makespan_s: float) -> dict:
    """Requests meeting every SLO (ttft, tpot, e2e in ms), as vLLM's `request_goodput`: a
    completed request whose every sample has each figure at or below its limit (a sample of
    one output token has no TPOT and meets a TPOT limit, as vLLM counts it 0); their share of
    all requests and their rate over the makespan."""
    table = as_columns(requests)
    ok = table["completed"].astype(bool)
    for metric, limit in slo_ms.items():
        values = table.floats(f"{metric}_ms")
        ok = ok & ((np.isnan(values) | (values <= limit)) if metric == "tpot"
                   else values <= limit)
    if "sample" in table:
        _, group = np.unique(table["request_id"], return_inverse=True)
        failed = np.bincount(group.reshape(-1), weights=~ok)
        ok = failed == 0
    met = int(ok.sum())
    total = len(ok)
    return {
        "slo_ms": slo_ms,
        "requests_meeting_slo": met,
        "fraction_meeting_slo": met / total if total else None,
        "goodput_requests_s": met / makespan_s if makespan_s > 0 else None,
    }


def nan_to_none(value: Any) -> Any:
    """`value` with NaN and infinities (outside numpy arrays) as None, numpy scalars as
    Python's, tuples as lists (as JSON writes them)."""
    if isinstance(value, dict):
        return {k: nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [nan_to_none(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.generic):
        return nan_to_none(value.item())
    return value
