"""docs/offload.md's finding, from what the commands it quotes produce (smaller traces, the
same shapes): on a multi-turn trace whose reuse exceeds the GPU's prefix cache, a host tier
raises the prefix hit rate and lowers TTFT against `prefix` at the same GPU budget; with short
prompts behind a PCIe 4 link (an L4) it raises the hit rate but not TTFT, since a request that
loads waits for its copy and a step boundary where recomputing its few blocks was as quick."""

from __future__ import annotations

import json

import pytest

from kvbench.cli import main

LONG_HISTORY = ["--model", "llama-2-13b", "--gpu", "a100-40gb", "--workload", "chat",
                "--workload-param", "think_time_s=30", "--workload-param", "system_prompt_len=2048",
                "--workload-param", "turns_per_conversation=8",
                "--workload-param", "num_system_prompts=64", "--num-requests", "240",
                "--request-rate", "1"]
SHORT_PROMPTS = ["--model", "llama-2-7b", "--gpu", "l4", "--workload", "chat",
                 "--workload-param", "think_time_s=30", "--workload-param", "num_system_prompts=64",
                 "--num-requests", "240", "--request-rate", "2"]


def _summary(tmp_path, name: str, args: list[str]) -> dict:
    out = tmp_path / name
    assert main(["simulate", "--defaults", "vllm", "--strategy", "prefix", "--quiet",
                 "--out", str(out), *args]) == 0
    (folder,) = out.iterdir()
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    summary["report"] = (folder / "report.html").read_text()
    return summary


def _figures(summary: dict) -> tuple[float, float]:
    return summary["scheduler"]["prefix_hit_rate"], summary["latency_ms"]["ttft"]["mean"]


@pytest.mark.parametrize("case, args, size, pays", [
    ("long-history", LONG_HISTORY, "64GiB", True),
    ("short-prompts-pcie4", SHORT_PROMPTS, "16GiB", False),
])
def test_a_host_tier_pays_on_long_returning_histories_only(tmp_path, case, args, size, pays):
    alone = _summary(tmp_path, "prefix", args)
    tiered = _summary(tmp_path, "offload", [*args, "--kv-offload", size])
    assert alone["memory"]["kv_budget_bytes"] == tiered["memory"]["kv_budget_bytes"]
    hit_alone, ttft_alone = _figures(alone)
    hit_tiered, ttft_tiered = _figures(tiered)
    scheduler = tiered["scheduler"]
    assert scheduler["host_hit_rate"] > 0 and scheduler["host_loaded_bytes"] > 0
    assert hit_tiered > hit_alone + 0.1  # the host tier serves returning histories either way
    assert (ttft_tiered < ttft_alone) is pays, (case, ttft_alone, ttft_tiered)
    # the report's section shows the tier's figures; a run without a tier has none
    assert "Host KV tier" in tiered["report"] and "Host KV tier" not in alone["report"]
    assert f"{100 * scheduler['host_hit_rate']:.1f}%" in tiered["report"]
