"""Every named metric of a `kvbench_summary.json`: where it lives, its unit, which way is better.

The one catalogue that `kvbench compare`, reports, `--repeat`, sweep tables and SLOs read.
A metric's `name` is what users type (`output_tok_s`, `ttft.p99`, `utilization_mean`); its
`column` is how flat tables spell it (`points.csv`, `repeat.json`: `ttft_p99_ms`); its `path`
is the key path in `kvbench_summary.json` (see kvbench.results.summary and docs/design.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.results.summary import Summary, as_summary
from kvbench.units import format_bytes

LATENCY_METRICS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E",
                   "queue": "queue", "prefill": "prefill"}
LATENCY_STATS = ("mean", "p50", "p90", "p99", "max")


@dataclass(frozen=True)
class Metric:
    name: str
    path: tuple[str, ...]
    # "tok/s", "req/s", "ms", "s", "bytes", "%" (a fraction shown as percent), "" (a count)
    unit: str
    higher_is_better: bool
    title: str
    column: str
    # False when a CPU run's value is fixed by the seed whatever the machine's speed; True
    # when it depends on the wall clock or on how arrivals interleave with steps.
    wall_clock: bool = True

    def value(self, summary: Summary | Mapping[str, Any] | None) -> float | None:
        """The metric of one run as a float (None when missing or not a number)."""
        if summary is None:
            return None
        try:
            value = float(as_summary(summary).lookup(self.path))
        except (TypeError, ValueError):  # (None too)
            return None
        return None if math.isnan(value) else value

    @property
    def axis_title(self) -> str:
        """The title with its unit, for a chart axis or a table header."""
        unit = {"%": "", "": "", "bytes": "bytes"}.get(self.unit, self.unit)
        return f"{self.title} ({unit})" if unit else self.title

    def format(self, value: float | None) -> str:
        if value is None:
            return "-"
        if self.unit == "%":
            return f"{value:.1%}"
        if self.unit == "ms":
            return f"{value:.1f} ms" if abs(value) >= 10 else f"{value:.2f} ms"
        if self.unit in ("tok/s", "req/s"):
            return f"{value:.1f} {self.unit}" if abs(value) >= 10 else f"{value:.3g} {self.unit}"
        if self.unit == "s":
            return f"{value:.2f} s"
        if self.unit == "bytes":
            return format_bytes(value)
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def _build() -> list[Metric]:
    metrics = [
        Metric("output_tok_s", ("throughput", "output_tok_s"), "tok/s", True,
               "output throughput", "output_tok_s"),
        Metric("total_tok_s", ("throughput", "total_tok_s"), "tok/s", True,
               "total throughput", "total_tok_s"),
        Metric("requests_s", ("throughput", "requests_s"), "req/s", True,
               "request throughput", "requests_s"),
    ]
    for key, title in LATENCY_METRICS.items():
        for stat in LATENCY_STATS:
            metrics.append(Metric(f"{key}.{stat}", ("latency_ms", key, stat), "ms", False,
                                  f"{title} {stat}", f"{key}_{stat}_ms"))
    metrics += [
        Metric("utilization_mean", ("memory", "utilization_mean"), "%", True,
               "KV utilization", "utilization_mean"),
        Metric("utilization_saturated", ("memory", "utilization_saturated"), "%", True,
               "KV utilization (saturated)", "utilization_saturated"),
        Metric("kv_capacity_tokens", ("memory", "kv_capacity_tokens"), "", True,
               "KV capacity (tokens)", "kv_capacity_tokens", wall_clock=False),
        # An input more than an outcome: a smaller budget for the same figures is cheaper.
        Metric("kv_budget_bytes", ("memory", "kv_budget_bytes"), "bytes", False,
               "KV budget", "kv_budget_bytes", wall_clock=False),
        Metric("preemptions", ("scheduler", "preemptions"), "", False,
               "preemptions", "preemptions"),
        Metric("prefix_hit_rate", ("scheduler", "prefix_hit_rate"), "%", True,
               "prefix-cache hit rate", "prefix_hit_rate"),
        # Mean over engine steps of the sequences each step ran (prefill + decode), each
        # step counted once; see kvbench.results.summary.Scheduler.
        Metric("batch_size_mean", ("scheduler", "batch_size_mean"), "", True,
               "batch size (mean sequences scheduled per step)", "batch_size_mean"),
        Metric("batch_size_max", ("scheduler", "batch_size_max"), "", True,
               "batch size (most sequences scheduled in a step)", "batch_size_max"),
        Metric("waiting_mean", ("scheduler", "waiting_mean"), "", False,
               "waiting queue (mean)", "waiting_mean"),
        Metric("overhead_fraction", ("scheduler", "overhead_fraction"), "%", False,
               "step overhead share", "overhead_fraction"),
        Metric("completed", ("completed",), "", True, "completed requests", "completed",
               wall_clock=False),
        Metric("failed", ("failed",), "", False, "failed requests", "failed",
               wall_clock=False),
        Metric("duration_s", ("duration_s",), "s", False, "makespan", "duration_s"),
        Metric("goodput_requests_s", ("goodput", "goodput_requests_s"), "req/s", True,
               "goodput", "goodput_requests_s"),
        Metric("fraction_meeting_slo", ("goodput", "fraction_meeting_slo"), "%", True,
               "share meeting SLO", "fraction_meeting_slo"),
    ]
    return metrics


METRICS: dict[str, Metric] = {m.name: m for m in _build()}
BY_COLUMN: dict[str, Metric] = {m.column: m for m in METRICS.values()}


def metric(name: str) -> Metric:
    """The metric called `name` (KvbenchInputError naming the known ones otherwise)."""
    try:
        return METRICS[name]
    except KeyError:
        raise KvbenchInputError(
            f"unknown metric {name!r}; known: {', '.join(METRICS)}"
        ) from None


def find(name_or_column: str) -> Metric | None:
    """A metric by its name (`ttft.p99`) or its column (`ttft_p99_ms`); None if neither."""
    return METRICS.get(name_or_column) or BY_COLUMN.get(name_or_column)
