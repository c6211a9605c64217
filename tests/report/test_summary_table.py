"""The table `kvbench run` / `kvbench simulate` print: readable units, a legend."""

from __future__ import annotations

import json
from pathlib import Path

from kvbench.report.summary_table import render_summary

DATA = Path(__file__).parent / "data" / "compare-chat"


def _summary(**changes) -> dict:
    path = next(DATA.rglob("kvbench_summary.json"))
    data = json.loads(path.read_text())
    data["latency_ms"]["ttft"].update(p50=820.2, p99=1527025.2)
    data["memory"]["kv_capacity_tokens"] = 75484992
    data["num_requests"] = data["completed"] = 10000
    data["scheduler"]["preemptions"] = 12345
    data.update(changes)
    return data


def test_long_latencies_print_in_seconds_and_counts_with_separators():
    text = render_summary([_summary()])
    assert "1527025.2" not in text and "1,527.0 s" in text  # TTFT p99 past 10 s
    assert "820.2 ms" in text  # under 10 s stays in ms
    assert "75,484,992 tokens" in text
    assert "10,000 requests" in text and "10,000/10,000" in text
    assert "12,345" in text


def test_a_legend_follows_the_table():
    lines = render_summary([_summary()]).splitlines()
    rows = [i for i, line in enumerate(lines) if line.startswith("--------")]
    legend = lines[rows[0] + 2]
    assert legend.startswith("KV util:")
    for column in ("util sat.", "held/token", "batch", "preempt", "prefix hit"):
        assert column in legend
