"""One metric catalogue: every path resolves, and every consumer reads the same direction."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kvbench.errors import KvbenchInputError
from kvbench.report.metrics import Difference
from kvbench.results.metric_catalogue import METRICS, find, metric
from kvbench.results.repeat import repeat_summary
from kvbench.results.summary import Summary
from kvbench.sweep.report import pareto_front
from kvbench.sweep.slo import slo_violations
from kvbench.sweep.table import (
    POINT_METRICS,
    TIMING_COLUMNS,
    higher_is_better,
    metric_column,
    summary_row,
)

DATA = Path(__file__).with_name("data")
FP8 = json.loads((DATA / "summary_fp8_slo.json").read_text())  # has every section


@pytest.mark.parametrize("name", list(METRICS))
def test_every_catalogue_path_resolves_in_a_real_summary(name):
    m = METRICS[name]
    value: object = FP8
    for key in m.path:
        assert isinstance(value, dict) and key in value, f"{name}: {m.path} not in summary"
        value = value[key]
    assert isinstance(value, int | float) and not isinstance(value, bool)
    assert m.value(FP8) == float(value)
    assert m.value(Summary.from_dict(FP8)) == float(value)
    assert m.format(m.value(FP8)) != "-"


def test_names_and_columns_are_unique_and_found_both_ways():
    columns = [m.column for m in METRICS.values()]
    assert len(set(columns)) == len(columns)
    for m in METRICS.values():
        assert find(m.name) is m and find(m.column) is m
    with pytest.raises(KvbenchInputError, match="unknown metric 'ttft.p98'"):
        metric("ttft.p98")


@pytest.mark.parametrize("name", list(METRICS))
def test_compare_and_sweep_tables_use_the_same_direction(name):
    m = METRICS[name]
    assert higher_is_better(m.column) == m.higher_is_better
    rise = Difference(m, 100.0, 150.0).verdict
    assert rise == ("better" if m.higher_is_better else "worse")
    # The sweep's Pareto front keeps the point that is better in the catalogue's direction.
    frame = pd.DataFrame({m.column: [1.0, 2.0], "other": [0.0, 0.0]})
    (kept,) = pareto_front(frame, m.column, "other")[m.column]
    assert kept == (2.0 if m.higher_is_better else 1.0)


def test_latency_is_lower_is_better_and_throughput_higher():
    assert not METRICS["ttft.p99"].higher_is_better and not METRICS["preemptions"].higher_is_better
    assert METRICS["output_tok_s"].higher_is_better
    assert METRICS["utilization_mean"].higher_is_better


def test_points_csv_columns_keep_their_names():
    """Existing sweep folders are read back by these names."""
    row = summary_row(FP8)
    assert list(row) == [
        "label", "strategy", "batching", "workload", "model", "device", "num_requests",
        "completed", "failed", "output_tok_s", "total_tok_s", "requests_s",
        *(f"{m}_{s}_ms" for m in ("ttft", "tpot", "itl", "e2e")
          for s in ("mean", "p50", "p90", "p99", "max")),
        "queue_p50_ms", "queue_p99_ms", "utilization_mean", "utilization_saturated",
        "kv_capacity_tokens", "kv_budget_bytes", "preemptions", "prefix_hit_rate",
        "batch_size_mean", "duration_s", "goodput_requests_s", "fraction_meeting_slo",
    ]
    assert row["ttft_p99_ms"] == FP8["latency_ms"]["ttft"]["p99"]
    assert summary_row(Summary.from_dict(FP8)) == row
    no_slo = {k: v for k, v in FP8.items() if k != "goodput"}
    assert "goodput_requests_s" not in summary_row(no_slo)
    # Figures fixed by the seed on any machine are not timing columns.
    assert {"completed", "failed", "kv_capacity_tokens"}.isdisjoint(TIMING_COLUMNS)
    assert {"ttft_p99_ms", "output_tok_s", "meets_slo"} <= TIMING_COLUMNS
    assert {METRICS[n].column for n in POINT_METRICS} <= set(row)


def test_metric_column_accepts_names_paths_and_columns():
    assert metric_column("ttft.p99") == "ttft_p99_ms"
    assert metric_column("throughput.output_tok_s") == "output_tok_s"
    assert metric_column("memory.utilization_mean") == "utilization_mean"
    assert metric_column("tpot_p50_ms") == "tpot_p50_ms"
    assert metric_column("request_rate") == "request_rate"


def test_repeat_json_keeps_its_figure_names():
    stats = repeat_summary([FP8, Summary.from_dict(FP8)])
    assert list(stats["figures"]) == ["output_tok_s", "total_tok_s", "ttft_p50_ms",
                                      "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
                                      "e2e_p99_ms", "utilization_mean"]
    assert stats["figures"]["ttft_p99_ms"]["mean"] == FP8["latency_ms"]["ttft"]["p99"]
    assert stats["label"] == "fp8" and stats["repeats"] == 2


def test_slo_reads_latencies_through_the_catalogue():
    p99 = FP8["latency_ms"]["ttft"]["p99"]
    assert slo_violations(FP8, {"ttft.p99": p99 + 1}) == []
    (problem,) = slo_violations(Summary.from_dict(FP8), {"ttft.p99": p99 - 1})
    assert problem.startswith("ttft.p99")
    assert slo_violations({**FP8, "latency_ms": {}}, {"ttft.p99": 1.0}) == ["ttft.p99 missing"]
