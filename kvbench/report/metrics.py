"""Differences of catalogue metrics between two runs, `--fail-on` gates, and what `kvbench
compare` checks before it trusts a difference.

Metric names (`output_tok_s`, `ttft.p99`, ...), units and directions come from
kvbench.results.metric_catalogue; this module compares two runs' values. A gate is fooled by
comparing what should not be compared: a run that did not finish, or two runs that differ in
more than the strategy (docs/design.md, "The question and the rule": only the strategy changes
between the runs of one comparison). It is also fooled by noise: a single run on a loaded
machine can rank strategies the wrong way round, so a difference means something only when it
is larger than the runs' own spread (`--repeat` confidence intervals).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvbench.core.engine_kind import EngineKind
from kvbench.errors import KvbenchInputError
from kvbench.report.runs import RunData
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


SINGLE_RUN_WARNING = (
    "single-run comparison: it cannot tell noise from change; run both sides with "
    "--repeat 3 to get confidence intervals"
)


# The inputs two compared runs must share: (name, where the summary holds it, where
# config.json does, read when the summary does not); the strategy (and what comes with it:
# reserve, block size, batching) is what a comparison is about and may differ.
SETTINGS = (
    ("workload", ("workload",), ("run", "workload")),
    ("workload params", (), ("run", "workload_params")),
    ("num_requests", ("num_requests",), ("run", "num_requests")),
    # the seed draws the workload (lengths, arrivals): another seed is another workload
    ("seed", ("seed",), ("run", "engine", "seed")),
    ("request_rate", (), ("run", "request_rate")),
    ("conversation_rate", (), ("run", "conversation_rate")),
    ("max_concurrency", (), ("run", "max_concurrency")),
    ("model", ("model",), ("run", "engine", "model")),
    ("dtype", ("dtype",), ("run", "engine", "dtype")),
    ("kv_cache_dtype", ("memory", "kv_cache_dtype"), ("kv_cache_dtype",)),
    ("KV budget", ("memory", "kv_budget_bytes"), ("kv_budget_bytes",)),
)


def _setting(summary: Summary, config: Mapping[str, Any], in_summary: tuple[str, ...],
             in_config: tuple[str, ...]) -> Any:
    value = summary.lookup(in_summary) if in_summary else None
    if value is None:
        value = config
        for key in in_config:
            value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _show(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}={v}" for k, v in value.items()) + "}"
    return str(value)


def mismatches(base: tuple[Summary, Mapping[str, Any]],
               new: tuple[Summary, Mapping[str, Any]]) -> list[str]:
    """`name (base vs new)` for each setting known on both sides that differs.

    A setting an older folder does not record is not held against it.
    """
    out = []
    for name, *where in SETTINGS:
        a, b = _setting(*base, *where), _setting(*new, *where)
        if name == "workload params":
            a, b = a or {}, b or {}  # no params and empty params are the same input
        elif a is None or b is None:
            continue
        if a != b:
            out.append(f"{name} ({_show(a)} vs {_show(b)})")
    return out


@dataclass(frozen=True)
class Noise:
    """Both sides' mean ± 95% CI half-width of one metric, and whether the intervals overlap."""

    base_mean: float
    base_ci: float
    new_mean: float
    new_ci: float

    @property
    def overlap(self) -> bool:
        return abs(self.new_mean - self.base_mean) <= self.base_ci + self.new_ci

    def describe(self) -> str:
        return "within noise (CIs overlap)" if self.overlap else "beyond noise"


def noise(metric: Metric, base_repeat: Mapping[str, Any] | None,
          new_repeat: Mapping[str, Any] | None) -> Noise | None:
    """The metric's confidence intervals on both sides, when both ran with `--repeat`."""
    if not base_repeat or not new_repeat:
        return None
    a, b = base_repeat.get(metric.column), new_repeat.get(metric.column)
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return None
    if None in (a.get("mean"), a.get("ci95"), b.get("mean"), b.get("ci95")):
        return None
    return Noise(float(a["mean"]), float(a["ci95"]), float(b["mean"]), float(b["ci95"]))


def check_pairs(pairs: list[tuple[RunData, RunData]], allow_mismatch: bool) -> list[str]:
    """Refuse mismatched runs unless `allow_mismatch` (KvbenchInputError, one line); returns
    the warnings to print. (Unfinished folders are refused before, by `check_finished`.)"""
    warnings = []
    for base, new in pairs:
        differ = mismatches((base.summary, base.config), (new.summary, new.config))
        if differ and not allow_mismatch:
            raise KvbenchInputError(
                f"runs {base.label} and {new.label} differ in more than the strategy: "
                + "; ".join(differ) + " (--allow-mismatch to compare anyway)")
        if differ:
            warnings.append(f"{base.label} vs {new.label} differ in " + "; ".join(differ)
                            + "; compared anyway (--allow-mismatch)")
    # A simulated clock has no noise: two simulated runs differ only by what changed.
    measured = [(b, n) for b, n in pairs
                if EngineKind.SIMULATED not in (b.summary.executor, n.summary.executor)]
    if any(base.repeat is None or new.repeat is None for base, new in measured):
        warnings.append(SINGLE_RUN_WARNING)
    return warnings


def differences_with_noise(base: RunData, new: RunData, names: list[str]):
    """(Difference, Noise or None) per metric; where both sides ran with `--repeat`, the
    values compared (and held to thresholds) are the means over the repeats, and a change is
    better or worse only when their confidence intervals are apart. Between simulated runs
    every change is the change; between single measured runs it is not tested."""
    simulated = EngineKind.SIMULATED in (base.summary.executor, new.summary.executor)
    rows = []
    for name in names:
        m = METRICS[name]
        spread = noise(m, base.repeat, new.repeat)
        if spread is not None:
            rows.append((Difference(m, spread.base_mean, spread.new_mean,
                                    beyond_noise=not spread.overlap), spread))
        else:
            rows.append((Difference(m, m.value(base.summary), m.value(new.summary),
                                    beyond_noise=True if simulated else None), None))
    return rows
