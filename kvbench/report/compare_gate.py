"""What `kvbench compare` checks before it trusts a difference between two runs.

A gate is fooled by comparing what should not be compared: a run that did not finish, or two
runs that differ in more than the strategy (docs/design.md, "The question and the rule": only
the strategy changes between the runs of one comparison). It is also fooled by noise: a
single run on a loaded machine can rank strategies the wrong way round, so a difference means
something only when it is larger than the runs' own spread (`--repeat` confidence intervals).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvbench.core.engine_kind import EngineKind
from kvbench.errors import KvbenchInputError
from kvbench.report.metrics import Difference
from kvbench.report.runs import RunData
from kvbench.results.metric_catalogue import METRICS, Metric
from kvbench.results.summary import Summary

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
