"""The comparison table `kvbench run` prints: one row per strategy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbench.report.text_table import fmt, format_table
from kvbench.results.repeat import format_mean_ci
from kvbench.results.summary import Summary
from kvbench.units import format_bytes

HEADERS = [
    "strategy", "done", "out tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
    "KV util", "util sat.", "held/token", "batch avg/max", "preempt", "prefix hit",
]


def _held_per_token(summary: Summary) -> str:
    util = summary.memory.utilization_mean
    return fmt(1 / util, ".2f", "x") if util else "-"


def summary_rows(summaries: list[Summary]) -> list[list[str]]:
    rows = []
    for s in summaries:
        lat, mem, sch = s.latency_ms, s.memory, s.scheduler
        rows.append([
            str(s.label),
            f"{s.completed}/{s.num_requests}",
            fmt(s.throughput.output_tok_s),
            fmt(lat.ttft.p50, ".1f", " ms"),
            fmt(lat.ttft.p99, ".1f", " ms"),
            fmt(lat.tpot.p50, ".2f", " ms"),
            fmt(lat.tpot.p99, ".2f", " ms"),
            fmt(mem.utilization_mean, ".1%"),
            fmt(mem.utilization_saturated, ".1%"),
            _held_per_token(s),
            f"{fmt(sch.batch_size_mean)}/{sch.batch_size_max or '-'}",
            str(sch.preemptions or 0),
            fmt(sch.prefix_hit_rate, ".1%"),
        ])
    return rows


def render_summary(summaries: list[Summary | Mapping[str, Any]]) -> str:
    runs = [s if isinstance(s, Summary) else Summary.from_dict(s) for s in summaries]
    first = runs[0]
    header = (
        f"model {first.model} ({first.dtype}) on {first.device}  |  workload "
        f"{first.workload}, {first.num_requests} requests, seed {first.seed}  |  KV "
        f"budget {format_bytes(first.memory.kv_budget_bytes)}"
    )
    caps = ", ".join(
        f"{s.label}: {s.memory.kv_capacity_tokens or 'n/a'}"
        + (" tokens" if s.memory.kv_capacity_tokens else "")
        for s in runs
    )
    lines = [header, f"KV capacity: {caps}", "", format_table(HEADERS, summary_rows(runs))]
    goodput = render_goodput(runs)
    return "\n".join([*lines, "", goodput] if goodput else lines)


def render_goodput(runs: list[Summary]) -> str | None:
    """The `--slo` goodput of each run (kvbench_summary.json's `goodput`), or None without an SLO."""
    with_slo = [s for s in runs if s.goodput is not None and s.goodput.slo_ms]
    if not with_slo:
        return None
    targets = ", ".join(f"{metric} <= {limit:g} ms"
                        for metric, limit in with_slo[0].goodput.slo_ms.items())
    rows = [[str(s.label),
             f"{s.goodput.requests_meeting_slo}/{s.num_requests}",
             fmt(s.goodput.fraction_meeting_slo, ".1%"),
             fmt(s.goodput.goodput_requests_s, ".2f", " req/s")]
            for s in with_slo]
    return (f"goodput under the SLO ({targets}):\n"
            + format_table(["strategy", "meet SLO", "share", "goodput"], rows))


def render_repeats(repeats: list[dict[str, Any]]) -> str:
    """Headline figures of `--repeat N` runs as mean ± 95% CI half-width."""
    headers = ["strategy", "runs", "out tok/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms",
               "KV util %"]
    rows = []
    for r in repeats:
        f = r["figures"]
        rows.append([
            r["label"], r["repeats"], format_mean_ci(f["output_tok_s"]),
            format_mean_ci(f["ttft_p50_ms"]), format_mean_ci(f["ttft_p99_ms"]),
            format_mean_ci(f["tpot_p50_ms"], ".2f"),
            format_mean_ci(f["utilization_mean"], ".1f", 100.0),
        ])
    return "mean ± 95% confidence interval over repeated runs\n" + format_table(headers, rows)
