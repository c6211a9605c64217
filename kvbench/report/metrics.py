"""Named metrics of a `summary.json`, their differences between runs, and `--fail-on` gates.

A metric name is what `kvbench compare --fail-on` takes: `output_tok_s`, `ttft.p99`,
`utilization_mean`, ... Each knows where it lives in `summary.json`, its unit and which
direction is better.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvbench.errors import KvbenchInputError


@dataclass(frozen=True)
class Metric:
    name: str
    title: str
    unit: str  # "tok/s", "req/s", "ms", "%" (a fraction shown as percent), "" (a count)
    higher_is_better: bool
    get: Callable[[dict[str, Any]], Any]

    def value(self, summary: dict[str, Any]) -> float | None:
        try:
            value = self.get(summary)
        except (KeyError, TypeError, AttributeError):
            return None
        if value is None or isinstance(value, bool):
            return None if value is None else float(value)
        try:
            value = float(value)
        except (TypeError, ValueError):
            return None
        return None if math.isnan(value) else value

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
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def _path(*keys: str) -> Callable[[dict[str, Any]], Any]:
    def get(summary: dict[str, Any]) -> Any:
        value: Any = summary
        for key in keys:
            value = value[key]
        return value

    return get


LATENCIES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E", "queue": "queue",
             "prefill": "prefill"}
STATS = ("mean", "p50", "p90", "p99", "max")


def _build() -> dict[str, Metric]:
    metrics = [
        Metric("output_tok_s", "output throughput", "tok/s", True,
               _path("throughput", "output_tok_s")),
        Metric("total_tok_s", "total throughput", "tok/s", True,
               _path("throughput", "total_tok_s")),
        Metric("requests_s", "request throughput", "req/s", True,
               _path("throughput", "requests_s")),
    ]
    for key, title in LATENCIES.items():
        for stat in STATS:
            metrics.append(Metric(f"{key}.{stat}", f"{title} {stat}", "ms", False,
                                  _path("latency_ms", key, stat)))
    metrics += [
        Metric("utilization_mean", "KV utilization", "%", True,
               _path("memory", "utilization_mean")),
        Metric("utilization_saturated", "KV utilization (saturated)", "%", True,
               _path("memory", "utilization_saturated")),
        Metric("kv_capacity_tokens", "KV capacity (tokens)", "", True,
               _path("memory", "kv_capacity_tokens")),
        Metric("preemptions", "preemptions", "", False, _path("scheduler", "preemptions")),
        Metric("prefix_hit_rate", "prefix-cache hit rate", "%", True,
               _path("scheduler", "prefix_hit_rate")),
        Metric("batch_size_mean", "running batch (mean)", "", True,
               _path("scheduler", "batch_size_mean")),
        Metric("batch_size_max", "running batch (max)", "", True,
               _path("scheduler", "batch_size_max")),
        Metric("waiting_mean", "waiting queue (mean)", "", False,
               _path("scheduler", "waiting_mean")),
        Metric("overhead_fraction", "step overhead share", "%", False,
               _path("scheduler", "overhead_fraction")),
        Metric("completed", "completed requests", "", True, _path("completed")),
        Metric("failed", "failed requests", "", False, _path("failed")),
        Metric("duration_s", "makespan", "s", False, _path("duration_s")),
        Metric("goodput_requests_s", "goodput", "req/s", True,
               _path("goodput", "goodput_requests_s")),
    ]
    return {m.name: m for m in metrics}


METRICS: dict[str, Metric] = _build()

# The rows `kvbench compare` prints and a report's differences table shows by default.
DEFAULT_DIFF = (
    "output_tok_s", "total_tok_s", "requests_s", "ttft.p50", "ttft.p99", "tpot.p50",
    "tpot.p99", "itl.p99", "e2e.p50", "e2e.p99", "utilization_mean", "utilization_saturated",
    "preemptions", "prefix_hit_rate", "batch_size_mean", "completed",
)


def metric(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        raise KvbenchInputError(
            f"unknown metric {name!r}; known: {', '.join(METRICS)}"
        ) from None


@dataclass
class Difference:
    metric: Metric
    base: float | None
    new: float | None

    @property
    def delta(self) -> float | None:
        if self.base is None or self.new is None:
            return None
        return self.new - self.base

    @property
    def ratio(self) -> float | None:
        """Relative change (new / base - 1); None when base is 0 or missing."""
        if self.delta is None or self.base == 0:
            return None
        return self.delta / abs(self.base)

    @property
    def verdict(self) -> str:
        """better / worse / same (within 0.5%) / n/a."""
        if self.delta is None:
            return "n/a"
        scale = max(abs(self.base or 0.0), abs(self.new or 0.0))
        if scale == 0 or abs(self.delta) <= 0.005 * scale:
            return "same"
        improved = (self.delta > 0) == self.metric.higher_is_better
        return "better" if improved else "worse"

    def format_delta(self) -> str:
        if self.delta is None:
            return "-"
        if self.delta == 0:
            return "0"
        if self.ratio is not None:
            return f"{self.ratio:+.1%}"
        if self.metric.unit == "%":
            return f"{self.delta * 100:+.1f} pp"
        return f"{self.delta:+g}"


def differences(base: dict[str, Any], new: dict[str, Any],
                names: tuple[str, ...] | list[str] = DEFAULT_DIFF) -> list[Difference]:
    return [Difference(METRICS[n], METRICS[n].value(base), METRICS[n].value(new)) for n in names]


@dataclass(frozen=True)
class Threshold:
    """`NAME:+10%` (fails when new > base x 1.10) or `NAME:-5%` (new < base x 0.95).

    Without `%` the number is an absolute change in the metric's unit (ms, tok/s, a count;
    fractions such as utilization_mean as fractions): `preemptions:+0` fails on any increase.
    """

    metric: Metric
    sign: int  # +1: the metric may rise by at most `amount`; -1: fall by at most `amount`
    amount: float
    relative: bool
    text: str

    def limit(self, base: float) -> float:
        if self.relative:
            return base * (1 + self.sign * self.amount / 100)
        return base + self.sign * self.amount

    def crossed(self, base: float | None, new: float | None) -> str | None:
        """Why this threshold fails for (base, new), or None when it holds."""
        m = self.metric
        if base is None:
            return None  # nothing to hold the new run to
        if new is None:
            return f"{m.format(base)} in base, missing in new"
        limit = self.limit(base)
        failed = new > limit if self.sign > 0 else new < limit
        if not failed:
            return None
        change = Difference(m, base, new).format_delta()
        return f"{m.format(base)} -> {m.format(new)} ({change}; limit {m.format(limit)})"


_THRESHOLD_RE = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*:\s*([+-])\s*([0-9]*\.?[0-9]+)\s*(%?)\s*$")


def parse_thresholds(text: str | None) -> list[Threshold]:
    """`output_tok_s:-5%,ttft.p99:+10%` -> thresholds (KvbenchInputError on bad input)."""
    if not text:
        return []
    out = []
    for item in (t for t in text.split(",") if t.strip()):
        match = _THRESHOLD_RE.match(item)
        if not match:
            raise KvbenchInputError(
                f"cannot read --fail-on item {item.strip()!r}: use METRIC:+N% or METRIC:-N% "
                "(e.g. output_tok_s:-5%,ttft.p99:+10%)"
            )
        name, sign, amount, pct = match.groups()
        out.append(Threshold(metric(name), 1 if sign == "+" else -1, float(amount), pct == "%",
                             f"{name}:{sign}{amount}{pct}"))
    return out
