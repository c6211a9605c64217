"""The residency figures of a prefix cache (vLLM's --kv-cache-metrics and the reuse
distances) in `kvbench_summary.json` and the report: present per tier with a host tier,
GPU-only without one, absent without a prefix cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from kvbench.cli import main
from kvbench.report.residency_section import residency_figure
from kvbench.report.runs import load_runs
from kvbench.report.style import run_styles

# Returning conversations whose histories outgrow the GPU cache: both tiers evict, and the
# host tier serves the returning turns.
CHAT = ["simulate", "--defaults", "vllm", "--model", "llama-2-13b", "--gpu", "a100-40gb",
        "--workload", "chat", "--workload-param", "think_time_s=10",
        "--workload-param", "system_prompt_len=1024",
        "--workload-param", "turns_per_conversation=4",
        "--workload-param", "num_system_prompts=16", "--num-requests", "120",
        "--request-rate", "2", "--quiet"]
GPU_KEYS = ("kv_block_lifetime_ms", "kv_block_idle_before_evict_ms", "kv_block_reuse_gap_ms")
HOST_KEYS = tuple(k.replace("kv_", "host_", 1) for k in GPU_KEYS)


def _run(tmp_path: Path, *args: str) -> tuple[Path, dict]:
    out = tmp_path / "out"
    assert main([*CHAT, *args, "--out", str(out)]) == 0
    (folder,) = out.iterdir()
    return folder, json.loads((folder / "kvbench_summary.json").read_text())


def _report(folder: Path) -> str:
    page = folder / "page.html"
    assert main(["report", str(folder), "--output", str(page)]) == 0
    return page.read_text()


def _check_distribution(stats: dict, most_ms: float) -> None:
    assert stats["count"] > 0
    assert 0 <= stats["p50"] <= stats["p90"] <= stats["p99"] <= stats["max"] <= most_ms
    assert 0 <= stats["mean"] <= stats["max"]


def test_with_a_host_tier_both_tiers_and_the_curve(tmp_path):
    folder, summary = _run(tmp_path, "--strategy", "prefix", "--kv-offload", "16GiB")
    sched = summary["scheduler"]
    run_ms = 1000 * summary["duration_s"] + 1
    for key in GPU_KEYS + HOST_KEYS:
        _check_distribution(sched[key], run_ms)
    for gpu, host in ((GPU_KEYS[0], GPU_KEYS[1]), (HOST_KEYS[0], HOST_KEYS[1])):
        # a block's idle time is part of its lifetime, so every quantile is below
        assert sched[host]["count"] == sched[gpu]["count"]
        for stat in ("mean", "p50", "p90", "max"):
            assert sched[host][stat] <= sched[gpu][stat] + 1e-9
    assert sched["kv_block_lifetime_ms"]["count"] == sched["evictions"]
    assert sched["host_block_lifetime_ms"]["count"] == sched["host_evictions"]

    curve = sched["kv_reuse_curve"]
    blocks, rates = np.array(curve["blocks"]), np.array(curve["hit_rate"])
    assert (np.diff(blocks) > 0).all() and (np.diff(rates) >= 0).all()
    assert curve["gpu_blocks"] in blocks and curve["host_blocks"] in blocks
    assert curve["host_blocks"] == sched["host_blocks"]
    assert rates[-1] == pytest.approx(curve["infinite_hit_rate"])
    # every block a tier served had been used before: an infinite cache serves at least them
    assert sched["cache_hit_rate"] <= curve["infinite_hit_rate"] + 1e-9
    distance = sched["kv_block_reuse_distance"]
    assert distance["count"] > 0 and 0 <= distance["p50"] <= distance["max"]

    page = _report(folder)
    assert "id='residency'" in page and "chart-residency" in page
    runset = load_runs([folder])
    fig = residency_figure(runset, run_styles(runset))
    go.Figure({"data": fig.data, "layout": fig.layout})  # plotly's schema accepts it
    names = {trace["name"] for trace in fig.data}
    assert any(n.endswith(" GPU") for n in names) and any(n.endswith(" host") for n in names)


def test_without_a_host_tier_the_gpu_tier_only(tmp_path):
    _, summary = _run(tmp_path, "--strategy", "prefix")
    sched = summary["scheduler"]
    assert all(sched[key]["count"] >= 0 for key in GPU_KEYS)
    assert not any(key in sched for key in HOST_KEYS)
    assert sched["kv_reuse_curve"]["host_blocks"] is None


def test_without_a_prefix_cache_nothing(tmp_path):
    folder, summary = _run(tmp_path, "--strategy", "paged")
    assert not any("residency" in key or "reuse" in key or key in GPU_KEYS
                   for key in summary["scheduler"])
    assert "id='residency'" not in _report(folder)


def test_hybrid_prefix_times_both_tiers_without_reuse_distances(tmp_path):
    out = tmp_path / "out"
    assert main(["simulate", "--model", "gemma-2-27b", "--gpu", "a100-80gb", "--workload",
                 "chat", "--workload-param", "num_system_prompts=8", "--workload-param",
                 "think_time_s=5", "--num-requests", "300", "--request-rate", "8",
                 "--strategy", "hybrid-prefix", "--kv-offload", "8GiB", "--kv-memory", "2GiB",
                 "--quiet", "--out", str(out)]) == 0
    (folder,) = out.iterdir()
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    sched = summary["scheduler"]
    for key in GPU_KEYS[:2] + HOST_KEYS[:2]:
        _check_distribution(sched[key], 1000 * summary["duration_s"] + 1)
    assert sched["kv_block_lifetime_ms"]["count"] == sched["evictions"]
    assert "kv_reuse_curve" not in sched and "kv_block_reuse_distance" not in sched
