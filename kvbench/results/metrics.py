"""The metrics of docs/design.md computed with pandas from what ran: per-request rows, per-step
rows. `kvbench.session.runner.summarize` assembles them into a `Summary`."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.results.token_times import pooled_gaps_s

PERCENTILES = (50, 90, 99)


def latency_stats(values_ms: pd.Series | np.ndarray | list[float]) -> dict[str, float | None]:
    """mean, p50, p90, p99, max of a latency sample in milliseconds (None when empty)."""
    arr = np.asarray(pd.Series(values_ms, dtype="float64").dropna())
    if arr.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    out: dict[str, float | None] = {"mean": float(arr.mean())}
    for p, value in zip(PERCENTILES, np.percentile(arr, PERCENTILES), strict=True):
        out[f"p{p}"] = float(value)  # one partition of a run's millions of ITLs, not three
    out["max"] = float(arr.max())
    return out


def request_rows(requests: list[Request], samples: dict[int, list[Sequence]]) -> pd.DataFrame:
    """One row per request (all its samples together): the `requests.csv` contract."""
    return pd.DataFrame(list(request_records(requests, samples)))


def request_records(requests: list[Request],
                    samples: dict[int, list[Sequence]]) -> Iterator[dict[str, Any]]:
    """`request_rows`' rows one by one, as dicts in column order: the runner streams those of
    finished requests to disk as they finish (`kvbench.results.request_writer`)."""
    for request in requests:
        seqs = samples.get(request.request_id, [])
        done = [s for s in seqs if s.finish_s is not None]
        complete = len(done) == request.n and request.n > 0
        admitted = min((s.admitted_s for s in seqs if s.admitted_s is not None), default=None)
        first = min((s.first_token_s for s in seqs if s.first_token_s is not None), default=None)
        finish = max((s.finish_s for s in done), default=None) if complete else None
        tpots = [
            (s.finish_s - s.first_token_s) / (s.num_generated - 1)
            for s in done
            if s.num_generated > 1 and s.first_token_s is not None
        ]

        def ms(a, b):
            return (b - a) * 1e3 if a is not None and b is not None else None

        yield (
            {
                "request_id": request.request_id,
                "arrival_s": request.arrival_s,
                "prompt_len": request.prompt_len,
                "output_len": request.output_len,
                "n": request.n,
                "admitted_s": admitted,
                "first_token_s": first,
                "finish_s": finish,
                "queue_ms": ms(request.arrival_s, admitted),
                "prefill_ms": ms(admitted, first),
                "ttft_ms": ms(request.arrival_s, first),
                # One sample (n=1) is its own mean; numpy's mean costs 7 µs a request.
                "tpot_ms": (tpots[0] if len(tpots) == 1 else float(np.mean(tpots))) * 1e3
                if tpots else None,
                "e2e_ms": ms(request.arrival_s, finish),
                "preemptions": sum(s.preemptions for s in seqs),
                "cached_prompt_tokens": seqs[0].cached_prompt_tokens if seqs else 0,
                "output_tokens": sum(s.num_generated for s in seqs),
                "completed": complete,
            }
        )


def inter_token_latencies_ms(samples: dict[int, list[Sequence]]) -> np.ndarray:
    """Every gap between consecutive output tokens of each sample, pooled (docs/design.md,
    ITL), in milliseconds: `pooled_gaps_s`, as the report's, over the samples laid end to end (a
    10,000-request run has millions of gaps)."""
    series = [seq.token_times_s for seqs in samples.values() for seq in seqs]
    counts = np.array([len(times) for times in series], dtype=np.int64)
    if not counts.sum():
        return np.empty(0)
    times_s = np.concatenate([np.asarray(times, dtype=float) for times in series])
    return pooled_gaps_s(times_s, np.concatenate([[0], np.cumsum(counts)])) * 1e3


def throughput(requests_df: pd.DataFrame) -> tuple[dict[str, float | None], float]:
    done = requests_df[requests_df["completed"]]
    if done.empty:
        return {"output_tok_s": None, "total_tok_s": None, "requests_s": None}, 0.0
    makespan = float(done["finish_s"].max() - requests_df["arrival_s"].min())
    if makespan <= 0:
        return {"output_tok_s": None, "total_tok_s": None, "requests_s": None}, makespan
    out_tokens = float(done["output_tokens"].sum())
    prompt_tokens = float(done["prompt_len"].sum())
    return {
        "output_tok_s": out_tokens / makespan,
        "total_tok_s": (out_tokens + prompt_tokens) / makespan,
        "requests_s": len(done) / makespan,
    }, makespan


def goodput(requests_df: pd.DataFrame, slo_ms: dict[str, float], makespan_s: float) -> dict:
    """Share of requests meeting every SLO (ttft, tpot, e2e in ms) and their rate."""
    done = requests_df[requests_df["completed"]]
    ok = pd.Series(True, index=done.index)
    for metric, limit in slo_ms.items():
        values = done[f"{metric}_ms"].astype(float)
        ok &= values.isna() | (values <= limit) if metric == "tpot" else values <= limit
    met = int(ok.sum())
    total = len(requests_df)
    return {
        "slo_ms": slo_ms,
        "requests_meeting_slo": met,
        "fraction_meeting_slo": met / total if total else None,
        "goodput_requests_s": met / makespan_s if makespan_s > 0 else None,
    }


def nan_to_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [nan_to_none(v) for v in value]
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, np.generic):
        return nan_to_none(value.item())
    return value
