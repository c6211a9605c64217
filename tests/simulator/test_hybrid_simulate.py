"""`kvbench simulate` of a state-space hybrid: the engine pages as vLLM (the raised block,
state blocks held per sequence), and the step model charges the recurrent layers' state
streaming and chunked scan (kvbench.simulator.recurrent_cost)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvbench.build.engines import build_engine
from kvbench.build.simulated_executors import SimulatedExecutors
from kvbench.cli import main
from kvbench.config import EngineConfig
from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.presets import PRESETS
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.simulator.step_time import StepTimeModel
from tests.models.published_hybrid_configs import (
    GRANITE_4_H_SMALL_CONFIG,
    NEMOTRON_H_8B_CONFIG,
    QWEN3_NEXT_80B_A3B_CONFIG,
)

GiB = 2**30
H100 = get_gpu("h100-80gb")


def test_the_engine_pages_a_hybrid_as_vllm_does():
    config = EngineConfig(model="granite-4.0-h-small", dtype="bfloat16", strategy="paged",
                          max_model_len=8192, kv_memory=10 * GiB)
    built = build_engine(config, SimulatedExecutors("h100-80gb"))
    strategy = built.engine.strategy
    # 528-token blocks of the 4 attention layers (4 x 4,096 B a token): one vLLM block of a
    # group of 4 layers; the 36 Mamba-2 layers' states fill 9 of them
    assert strategy.block_size == 528 and strategy.state_blocks == 9
    assert strategy.pool.num_blocks == 10 * GiB // (528 * 16384)
    assert built.bytes_per_slot == 16384


@pytest.mark.parametrize("strategy", ["contiguous", "prefix", "hybrid", "hybrid-prefix", "fp8"])
def test_every_strategy_holds_the_state(strategy):
    config = EngineConfig(model="nemotron-h-8b", dtype="bfloat16", strategy=strategy,
                          max_model_len=8192, kv_memory=10 * GiB)
    strategy = build_engine(config, SimulatedExecutors("h100-80gb")).engine.strategy
    if hasattr(strategy, "state_slots"):  # a range: the state's bytes over a token's
        assert strategy.state_slots == -(-24 * 4_255_744 // (4 * 4096))  # 4 attention layers
    else:  # pages of the pool, as vLLM's state groups (4 layers a group: 6 of them)
        assert strategy.state_blocks == 6


def test_a_checkpoint_mode_without_a_prefix_cache_is_refused_in_one_line():
    config = EngineConfig(model="nemotron-h-8b", dtype="bfloat16", strategy="paged",
                          mamba_cache_mode="align")
    with pytest.raises(KvbenchInputError, match="--mamba-cache-mode") as err:
        build_engine(config, SimulatedExecutors("h100-80gb"))
    assert "\n" not in str(err.value)


def _model(preset: str, **changes) -> StepTimeModel:
    return StepTimeModel(replace(PRESETS[preset], **changes) if changes else PRESETS[preset],
                         H100, 2, 2)


def test_a_longer_context_costs_only_the_attention_layers_more():
    model = _model("nemotron-h-8b")
    short, long = model.cost([1] * 32, [1000] * 32, 32), model.cost([1] * 32, [3000] * 32, 32)
    attention_read = 4 * 32 * 2000 * 4096  # 4 attention layers' K and V of 2,000 more tokens
    assert long.bytes - short.bytes == attention_read
    # the state streams whatever the context: 24 layers read and write 4,255,744 B a sequence
    assert short.bytes > model.weight_bytes + 24 * 32 * 4_255_744


def test_a_float32_ssm_state_streams_twice_the_bytes_of_bfloat16():
    fp32 = _model("nemotron-h-8b")
    bf16_config = dict(NEMOTRON_H_8B_CONFIG, mamba_ssm_cache_dtype="bfloat16")
    bf16 = StepTimeModel(ModelConfig.from_hf_config(bf16_config, "m"), H100, 2, 2)
    a, b = fp32.cost([1] * 64, [500] * 64, 64), bf16.cost([1] * 64, [500] * 64, 64)
    ssm = 128 * 64 * 128 * 2  # the SSM state's bytes in bf16; fp32 doubles them
    assert a.bytes - b.bytes == 24 * 64 * ssm
    assert a.parts["attention_decode"] > b.parts["attention_decode"]


def test_the_prefill_scan_flops_are_the_ssd_algorithms():
    model = _model("nemotron-h-8b")
    step = model.cost([512], [512], 1)
    q, n, p, heads = 128, 128, 64, 128  # chunk_size, d_state, head dim, heads
    ssd = heads * (2 * q * (n + p) + 4 * n * p)  # per token and layer: 2Q(N + P) + 4NP
    no_scan = StepTimeModel(PRESETS["nemotron-h-8b"], H100, 2, 2)
    no_scan.recurrent.scan_flops_per_token = 0
    assert step.flops - no_scan.cost([512], [512], 1).flops == 24 * 512 * ssd


def test_gdn_scan_flops_follow_the_chunkwise_delta_rule():
    mixer = PRESETS["qwen3-next-80b-a3b"].hybrid.recurrent
    q, n, p = 64, 128, 128  # FLA's chunk, key dim, value dim
    assert mixer.scan_flops_per_token() == 32 * (q * q + 6 * q * n + 4 * q * p + 6 * n * p)
    assert mixer.scan_flops_per_token(2) == mixer.scan_flops_per_token() // 2


def test_matmul_weights_count_each_layer_kind_once():
    model = _model("nemotron-h-8b")
    cfg = PRESETS["nemotron-h-8b"]
    h, v = cfg.hidden_size, cfg.vocab_size
    attention = h * 4096 + 2 * h * 1024 + 4096 * h
    mamba = h * (2 * 8192 + 2 * 8 * 128 + 128) + 8192 * h
    mlp = 2 * h * 21504
    assert model.weight_bytes == 2 * (4 * attention + 24 * mamba + 24 * mlp + h * v)


# name -> (published config.json, options)
FAMILIES = {
    "qwen3-next-80b-a3b": (QWEN3_NEXT_80B_A3B_CONFIG, ["--gpu", "h200",
                                                        "--tensor-parallel-size", "2"]),
    "granite-4.0-h-small": (GRANITE_4_H_SMALL_CONFIG, ["--gpu", "h100-80gb"]),
    "nemotron-h-8b": (NEMOTRON_H_8B_CONFIG, ["--gpu", "h100-80gb"]),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_simulate_the_published_config_under_the_default_strategy(family, tmp_path, capsys):
    config, options = FAMILIES[family]
    folder = tmp_path / family
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    code = main(["simulate", "--model", str(folder), "--workload", "chat",
                 "--num-requests", "40", "--max-model-len", "8192", *options, "--json",
                 "--out", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    run = json.loads(capsys.readouterr().out)
    # vLLM's defaults: prefix caching, its `align` mode (Qwen3-Next's block a multiple of
    # FlashInfer's 64-token Gated DeltaNet checkpoints: 576, not 544)
    assert run["strategy"] == "prefix" and run["completed"] == 40
    assert run["block_size"] == {"qwen3-next-80b-a3b": 576, "granite-4.0-h-small": 528,
                                 "nemotron-h-8b": 1040}[family]
    # the attention layers' KV of a token, across the tensor-parallel group
    assert run["memory"]["kv_bytes_per_token"] == PRESETS[family].kv_bytes_per_token(2)
