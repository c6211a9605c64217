"""The comparison table `kvbench run` and `kvbench simulate` print: one row per strategy.

Numbers are for reading, not parsing (the results folder holds them exact): latencies in ms up
to 10 s and in seconds past it, counts with thousands separators.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbench.report.text_table import fmt, format_table
from kvbench.results.repeat import format_mean_ci
from kvbench.results.summary import Summary, as_summary
from kvbench.units import format_bytes

HEADERS = [
    "strategy", "done", "out tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
    "KV util", "util sat.", "held/token", "batch avg/max", "preempt", "prefix hit",
]
LEGEND = (
    "KV util: token state / KV held (util sat.: while requests wait); held/token: 1 / KV "
    "util; batch: sequences per step; preempt: sequences evicted; prefix hit: prompt tokens "
    "from cache (of: the most the block layout allows)"
)


def duration(ms: float | None, spec: str = ".1f") -> str:
    """`820.2 ms`; `1,527.0 s` from 10 s on."""
    if ms is None:
        return "-"
    return f"{ms / 1e3:,.1f} s" if abs(ms) >= 10_000 else f"{ms:{spec}} ms"


def count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def summary_rows(summaries: list[Summary]) -> list[list[str]]:
    rows = []
    for s in summaries:
        lat, mem, sch = s.latency_ms, s.memory, s.scheduler
        util = mem.utilization_mean
        rows.append([
            str(s.label),
            f"{count(s.completed)}/{count(s.num_requests)}",
            fmt(s.throughput.output_tok_s, ",.1f"),
            duration(lat.ttft.p50),
            duration(lat.ttft.p99),
            duration(lat.tpot.p50, ".2f"),
            duration(lat.tpot.p99, ".2f"),
            fmt(mem.utilization_mean, ".1%"),
            fmt(mem.utilization_saturated, ".1%"),
            fmt(1 / util, ".2f", "x") if util else "-",
            f"{fmt(sch.batch_size_mean)}/{count(sch.batch_size_max) if sch.batch_size_max else '-'}",
            count(sch.preemptions or 0),
            fmt(sch.prefix_hit_rate, ".1%") + (
                f" (of {sch.prefix_hit_ceiling:.1%})" if sch.prefix_hit_ceiling else ""),
        ])
    return rows


def render_summary(summaries: list[Summary | Mapping[str, Any]]) -> str:
    runs = [as_summary(s) for s in summaries]
    first = runs[0]
    header = (
        f"model {first.model} ({first.dtype}) on {first.device}  |  workload "
        f"{first.workload}, {count(first.num_requests)} requests, seed {first.seed}  |  KV "
        f"budget {format_bytes(first.memory.kv_budget_bytes)}"
    )
    caps = ", ".join(
        f"{s.label}: " + (f"{s.memory.kv_capacity_tokens:,} tokens"
                          if s.memory.kv_capacity_tokens else "n/a")
        for s in runs
    )
    lines = [header, f"KV capacity: {caps}", "", format_table(HEADERS, summary_rows(runs)),
             LEGEND]
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
             f"{count(s.goodput.requests_meeting_slo)}/{count(s.num_requests)}",
             fmt(s.goodput.fraction_meeting_slo, ".1%"),
             fmt(s.goodput.goodput_requests_s, ".2f", " req/s")]
            for s in with_slo]
    return (f"goodput under the SLO ({targets}):\n"
            + format_table(["strategy", "meet SLO", "share", "goodput"], rows))


# (repeat.json figure, column title, format, scale): the headline figures of `--repeat`.
REPEAT_COLUMNS = (("output_tok_s", "out tok/s", ".1f", 1.0),
                  ("ttft_p50_ms", "TTFT p50 ms", ".1f", 1.0),
                  ("ttft_p99_ms", "TTFT p99 ms", ".1f", 1.0),
                  ("tpot_p50_ms", "TPOT p50 ms", ".2f", 1.0),
                  ("utilization_mean", "KV util %", ".1f", 100.0))


def render_repeats(repeats: list[dict[str, Any]]) -> str:
    """Headline figures of `--repeat N` runs as mean ± 95% CI half-width."""
    headers = ["strategy", "runs", *(title for _, title, _, _ in REPEAT_COLUMNS)]
    rows = [[r["label"], r["repeats"], *(format_mean_ci(r["figures"][key], spec, scale)
                                         for key, _, spec, scale in REPEAT_COLUMNS)]
            for r in repeats]
    return "mean ± 95% confidence interval over repeated runs\n" + format_table(headers, rows)
