"""TTFT in three parts that add up, per sample in requests.csv and in the summary, under
`kvbench simulate` and `kvbench run`: queue (sent to admitted), host load (admitted to the end
of the load it waited for; 0 for a sample that loaded nothing, and for every sample without a
host tier) and prefill compute (the rest to the first token); host load + prefill compute is
`prefill_ms` (admitted to the first token), which keeps its meaning."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from kvbench.cli import main

HISTORIES = ["--defaults", "vllm", "--model", "llama-2-13b", "--gpu", "a100-40gb",
             "--workload", "chat", "--workload-param", "think_time_s=30",
             "--workload-param", "system_prompt_len=2048",
             "--workload-param", "turns_per_conversation=8",
             "--workload-param", "num_system_prompts=64", "--num-requests", "120",
             "--request-rate", "1"]
TINY_HISTORIES = ["--model", "tiny", "--kv-memory", "2MiB", "--max-model-len", "1024",
                  "--workload", "chat", "--workload-param", "think_time_s=0.2",
                  "--workload-param", "num_system_prompts=4",
                  "--workload-param", "turns_per_conversation=3", "--num-requests", "12",
                  "--request-rate", "40"]


def _results(tmp_path, command: str, args: list[str]) -> tuple[dict, pd.DataFrame]:
    out = tmp_path / "out"
    assert main([command, "--strategy", "prefix", "--quiet", "--out", str(out), *args]) == 0
    (folder,) = out.iterdir()
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    return summary, pd.read_csv(folder / "requests.csv")


def _check_parts_add_up(summary: dict, rows: pd.DataFrame) -> None:
    rows = rows[rows["completed"]]
    assert len(rows) and (rows["host_load_ms"] >= 0).all()
    assert (rows["prefill_compute_ms"] > 0).all()
    parts = rows["queue_ms"] + rows["host_load_ms"] + rows["prefill_compute_ms"]
    np.testing.assert_allclose(parts, rows["ttft_ms"], rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(rows["host_load_ms"] + rows["prefill_compute_ms"],
                               rows["prefill_ms"], rtol=1e-9, atol=1e-6)
    latency = summary["latency_ms"]
    for name in ("host_load", "prefill_compute"):
        assert latency[name]["mean"] == pytest.approx(rows[f"{name}_ms"].mean())
        assert latency[name]["max"] == pytest.approx(rows[f"{name}_ms"].max())
    assert (latency["queue"]["mean"] + latency["host_load"]["mean"]
            + latency["prefill_compute"]["mean"]) == pytest.approx(latency["ttft"]["mean"])


@pytest.mark.parametrize("command, args, size", [
    ("simulate", HISTORIES, "64GiB"),
    ("run", TINY_HISTORIES, "8MiB"),
])
def test_ttft_splits_into_queue_host_load_and_prefill_compute(tmp_path, command, args, size):
    summary, rows = _results(tmp_path / "tier", command, [*args, "--kv-offload", size])
    _check_parts_add_up(summary, rows)
    loaded = rows[rows["host_load_ms"] > 0]
    scheduler = summary["scheduler"]
    assert len(loaded) == scheduler["host_load_requests"] > 0
    # the tier's own figure is the same wait, over the samples that loaded
    assert loaded["host_load_ms"].mean() == pytest.approx(scheduler["host_load_wait_ms"]["mean"])
    assert loaded["cached_prompt_tokens"].gt(0).all()


def test_without_a_tier_nothing_loads(tmp_path):
    summary, rows = _results(tmp_path, "simulate", HISTORIES)
    _check_parts_add_up(summary, rows)
    assert (rows["host_load_ms"].dropna() == 0).all()
    assert summary["latency_ms"]["host_load"]["max"] == 0
