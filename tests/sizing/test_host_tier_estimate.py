"""`kvbench estimate --kv-offload SIZE`: tokens per tier, capacity, and load vs recompute."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from kvbench.cli.estimate import estimate_command
from kvbench.errors import KvbenchInputError
from kvbench.models.presets import get_preset
from kvbench.simulator.gpus import GPU_PRESETS
from kvbench.simulator.host_link import HostLink
from kvbench.simulator.host_transfer import transfer_seconds
from kvbench.simulator.step_time import StepTimeModel
from kvbench.sizing.estimate import EstimateInputs, estimate_kv
from kvbench.sizing.host_tier_estimate import (
    estimate_host_tier,
    format_host_tier,
)

GiB = 2**30
H100 = GPU_PRESETS["h100-80gb"]


def _llama3(context=8192, gpu=H100, **kw):
    model = get_preset("llama-3-8b")
    return model, estimate_kv(EstimateInputs(model=model, context=context, gpu=gpu, **kw))


def test_host_blocks_are_the_size_over_a_page_aligned_block_of_every_rank():
    # llama-3-8b: 128 KiB a token, 2 MiB a block of 16 (already page-aligned)
    _, est = _llama3()
    host = estimate_host_tier(est, 200 * GiB)
    assert (host.block_bytes_per_gpu, host.host_block_bytes) == (2 * 2**20, 2 * 2**20)
    assert (host.host_blocks, host.host_tokens) == (102_400, 1_638_400)
    # the GPU tier is vLLM's pool on the H100, in whole blocks
    assert host.gpu_blocks == est.vllm.pool.num_blocks and host.gpu_tokens == est.vllm.pool.tokens
    assert host.tokens_exclusive == host.gpu_tokens + host.host_tokens
    assert host.tokens_inclusive == max(host.gpu_tokens, host.host_tokens)
    assert host.requests(host.host_tokens) == 1_638_400 // 8192


def test_a_tensor_parallel_group_shares_one_host_block_per_block_of_every_rank():
    # explicit shapes: 3 layers x 1 head x 40 dims x 2 B x 2 = 480 B a token, 7,680 B a block
    est = estimate_kv(EstimateInputs(num_layers=3, num_kv_heads=1, head_dim=40, context=100,
                                     kv_memory=10**6))
    host = estimate_host_tier(est, 10**6)
    assert host.host_block_bytes == 8192  # 7,680 rounded up to the 4 KiB page
    assert host.host_blocks == 10**6 // 8192
    assert host.gpu_blocks == 10**6 // 7680
    model = get_preset("llama-3-70b")
    tp4 = estimate_kv(EstimateInputs(model=model, context=4096, tensor_parallel_size=4,
                                     kv_memory=40 * GiB))
    host4 = estimate_host_tier(tp4, 64 * GiB)
    # each rank holds 2 of the 8 KV heads: a quarter of a block each, four in a host block
    assert host4.host_block_bytes == 4 * host4.block_bytes_per_gpu
    assert host4.host_blocks == 64 * GiB // (4 * host4.block_bytes_per_gpu)


def test_load_time_is_the_transfer_model_over_the_presets_link():
    model, est = _llama3()
    load = estimate_host_tier(est, 64 * GiB, model, H100).load
    block_bytes = est.kv_bytes_per_token * 16
    assert load.blocks == 512 and load.bytes_per_gpu == 512 * block_bytes
    assert load.link == "pcie5"
    assert load.load_s == pytest.approx(transfer_seconds(H100.host_link, "load", 512, block_bytes))
    # a K and a V fragment per layer: 64 descriptors a block instead of one
    assert load.load_per_layer_s == pytest.approx(
        transfer_seconds(H100.host_link, "load", 512, block_bytes, 64))
    assert load.load_per_layer_s > load.load_s


def test_recompute_is_the_step_time_models_prefill_in_chunks():
    model, est = _llama3(context=8192, max_num_batched_tokens=2048)
    load = estimate_host_tier(est, 64 * GiB, model, H100, max_num_batched_tokens=2048).load
    time_model = StepTimeModel(model, H100, 2, 2)
    chunks = sum(time_model.cost([2048], [end], 1).time_s for end in (2048, 4096, 6144, 8192))
    assert load.chunk_tokens == 2048
    assert load.recompute_s == pytest.approx(chunks)
    assert load.last_token_s == pytest.approx(time_model.cost([1], [8192], 1).time_s)
    assert load.speedup == pytest.approx(load.recompute_s / (load.load_s + load.last_token_s))


def test_a_fast_link_makes_loading_win_and_a_slow_one_makes_recomputing_win():
    model, est = _llama3(context=2048)
    fast = estimate_host_tier(est, 64 * GiB, model, H100).load
    assert fast.speedup > 1
    slow_gpu = replace(H100, host_link=HostLink("slow", "a slow link", 1e9, 1e9))
    slow = estimate_host_tier(est, 64 * GiB, model, slow_gpu).load
    assert slow.speedup < 1 < fast.speedup
    assert "recomputing wins" in format_host_tier(estimate_host_tier(est, 64 * GiB, model,
                                                                     slow_gpu))


def test_a_gpu_without_a_host_link_is_refused_and_no_gpu_leaves_the_load_out():
    model, est = _llama3()
    with pytest.raises(KvbenchInputError, match="no host link"):
        estimate_host_tier(est, GiB, model, replace(H100, host_link=None))
    host = estimate_host_tier(est, GiB)
    assert host.load is None and "give --model and --gpu" in format_host_tier(host)
    with pytest.raises(KvbenchInputError, match="positive"):
        estimate_host_tier(est, 0)


def test_cli_prints_the_tiers_and_the_load_against_recomputing():
    result = CliRunner().invoke(estimate_command, [
        "--model", "llama-3-8b", "--gpu", "h100-80gb", "--context", "8192",
        "--kv-offload", "200GiB"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "host KV tier (--kv-offload 200.00 GiB)" in out
    assert "102,400" in out and "1,638,400" in out
    assert "load, cross-layer blocks" in out and "recompute: prefill" in out
    assert "cross-layer blocks: loading wins" in out


def test_cli_json_has_the_host_tier():
    result = CliRunner().invoke(estimate_command, [
        "--model", "llama-3-8b", "--gpu", "h100-80gb", "--context", "8192",
        "--kv-offload", "200GiB", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    tier = data["host_tier"]
    assert tier["host_blocks"] == 102_400
    assert tier["tokens"]["host"] == 1_638_400
    assert tier["tokens"]["exclusive"] == tier["tokens"]["gpu"] + 1_638_400
    assert tier["load_vs_recompute"]["link"] == "pcie5"
    assert tier["load_vs_recompute"]["speedup"] > 1


def test_cli_a_gpu_spec_file_gives_the_link(tmp_path):
    spec = tmp_path / "lab.toml"
    spec.write_text('memory = "80GiB"\nbandwidth_gb_s = 2039\n[peak_tflops]\nbf16 = 312\n'
                    '[host_link]\nload_gb_s = 2\nstore_gb_s = 2\n', encoding="utf-8")
    result = CliRunner().invoke(estimate_command, [
        "--model", "llama-3-8b", "--kv-memory", "40GiB", "--context", "4096",
        "--gpu-spec", str(spec), "--kv-offload", "100GiB", "--json"])
    assert result.exit_code == 0, result.output
    load = json.loads(result.output)["host_tier"]["load_vs_recompute"]
    assert load["link"] == "custom" and load["gpu"] == "lab"
    bad = CliRunner().invoke(estimate_command, ["--model", "llama-3-8b", "--kv-memory", "40GiB",
                                                "--kv-offload", "lots"])
    assert bad.exit_code == 2


def test_docs_small_model_case_recomputing_beats_per_layer_loads():
    """docs/estimate.md: Qwen2.5-0.5B on an H100 at 4,096 tokens loads in 4.2 ms with
    cross-layer blocks (6.0x) and 28.3 ms with per-layer ones (0.89x against 25.2 ms)."""
    from pathlib import Path

    from kvbench.models.resolve_config import resolve_model_config

    folder = Path(__file__).resolve().parents[1] / "simulator/published_data/qwen2.5-0.5b-instruct"
    model = resolve_model_config(str(folder))
    est = estimate_kv(EstimateInputs(model=model, context=4096, gpu=H100))
    load = estimate_host_tier(est, 64 * GiB, model, H100).load
    assert f"{(load.load_s + load.last_token_s) * 1e3:.1f}" == "4.2"
    assert f"{(load.load_per_layer_s + load.last_token_s) * 1e3:.1f}" == "28.3"
    assert f"{load.recompute_s * 1e3:.1f}" == "25.2"
    assert f"{load.speedup:.1f}" == "6.0" and f"{load.speedup_per_layer:.2f}" == "0.89"
