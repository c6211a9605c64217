"""Differences of catalogue metrics between two runs, and `--fail-on` gates.

Metric names (`output_tok_s`, `ttft.p99`, ...), units and directions come from
kvbench.results.metric_catalogue; this module compares two runs' values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.results.metric_catalogue import METRICS, Metric, metric
from kvbench.results.summary import Summary

# The rows `kvbench compare` prints and a report's differences table shows by default.
DEFAULT_DIFF = (
    "output_tok_s", "total_tok_s", "requests_s", "ttft.p50", "ttft.p99", "tpot.p50",
    "tpot.p99", "itl.p99", "e2e.p50", "e2e.p99", "utilization_mean", "utilization_saturated",
    "preemptions", "prefix_hit_rate", "batch_size_mean", "completed",
)


@dataclass
class Difference:
    metric: Metric
    base: float | None
    new: float | None
    # Whether the change stands out of the runs' noise: True (simulated runs, whose clock has
    # no noise, or repeats whose 95% confidence intervals are apart), False (the intervals
    # overlap), None (one measured run a side: nothing to tell noise by).
    beyond_noise: bool | None = True

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
        """better / worse only for a change beyond noise; same (within 0.5%), within noise
        (the repeats' intervals overlap), not tested (single measured runs) or n/a."""
        if self.delta is None:
            return "n/a"
        scale = max(abs(self.base or 0.0), abs(self.new or 0.0))
        if scale == 0 or abs(self.delta) <= 0.005 * scale:
            return "same"
        if self.beyond_noise is None:
            return "not tested"
        if not self.beyond_noise:
            return "within noise"
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


def differences(base: Summary | Mapping[str, Any], new: Summary | Mapping[str, Any],
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


_THRESHOLD_RE = re.compile(
    r"^\s*([A-Za-z_][\w.]*)\s*:\s*([+-])\s*([0-9]*\.?[0-9]+)\s*(%|ms)?\s*$")


def parse_thresholds(text: str | None) -> list[Threshold]:
    """`output_tok_s:-5%,ttft.p99:+10%` (relative) or `ttft.p99:+10ms`, `preemptions:+0`
    (absolute, in the metric's unit) -> thresholds (KvbenchInputError on bad input)."""
    if not text:
        return []
    out = []
    for item in (t for t in text.split(",") if t.strip()):
        match = _THRESHOLD_RE.match(item)
        if not match:
            raise KvbenchInputError(
                f"cannot read --fail-on item {item.strip()!r}: use METRIC:+N% or METRIC:-N% "
                "(relative) or METRIC:+N (absolute, in the metric's unit), e.g. "
                "output_tok_s:-5%,ttft.p99:+10ms"
            )
        name, sign, amount, suffix = match.groups()
        suffix = suffix or ""
        found = metric(name)
        if suffix == "ms" and found.unit != "ms":
            unit = f"in {found.unit}" if found.unit else "a count"
            raise KvbenchInputError(
                f"--fail-on item {item.strip()!r}: {name} is {unit}, not milliseconds")
        out.append(Threshold(found, 1 if sign == "+" else -1, float(amount), suffix == "%",
                             f"{name}:{sign}{amount}{suffix}"))
    return out
