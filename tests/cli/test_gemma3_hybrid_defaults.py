"""`kvbench simulate --strategy paged,hybrid` on Gemma 3 with 16k-token prompts, under the
commands' defaults (vLLM v1's): hybrid runs, and holds several times paged's tokens.

Under kvbench's classic defaults (no chunked prefill, so a step's budget is the model's
131,072 positions) vLLM's start-up leaves no KV memory on an H100 next to that step's
activations; vLLM's defaults chunk prefills to 8,192 tokens a step, and `hybrid` frees its
window groups' blocks behind the window per chunk, as vLLM's hybrid KV cache manager does."""

from __future__ import annotations

import json
from pathlib import Path

from kvbench.cli import main
from kvbench.models.presets import get_preset

ARGV = ["simulate", "--model", "gemma-3-27b", "--gpu", "h100-80gb", "--strategy", "paged,hybrid",
        "--workload", "uniform", "--workload-param", "prompt_len=16384",
        "--workload-param", "output_len=64", "--num-requests", "12"]


def test_gemma3_16k_prompts_run_hybrid_with_its_capacity_gain(tmp_path, capsys):
    assert main([*ARGV, "--json", "--out", str(tmp_path)]) == 0
    runs = {s["strategy"]: s for s in json.loads(capsys.readouterr().out)}
    assert set(runs) == {"paged", "hybrid"}
    for summary in runs.values():
        assert summary["batching"] == "vllm-v1"  # vLLM's scheduler: the default
        assert summary["completed"] == 12 and summary["failed"] == 0
        assert summary["warmup_requests_excluded"] == 1  # vLLM's ready-check request
    (config,) = {json.loads(p.read_text())["run"]["defaults"]
                 for p in Path(tmp_path).rglob("config.json")}
    assert config == "vllm"

    paged, hybrid = (runs[name]["memory"]["kv_capacity_tokens"] for name in ("paged", "hybrid"))
    # The budget is the same; paged holds every layer for every token, hybrid its full-
    # attention layers only (a sixth of Gemma 3's), the window groups a window's blocks per
    # sequence: at least 5x paged's tokens (6.0x measured: 215,008 against 35,680).
    model = get_preset("gemma-3-27b")
    assert model.layer_types.count("full_attention") * 6 <= model.num_layers
    assert hybrid > 5 * paged
    # which turns into concurrency: more 16k-token sequences decode together
    assert runs["hybrid"]["scheduler"]["batch_size_max"] > 2 * runs["paged"]["scheduler"][
        "batch_size_max"]
    assert (runs["hybrid"]["throughput"]["output_tok_s"]
            > runs["paged"]["throughput"]["output_tok_s"])
