"""The vLLM start-up model's behaviour: weights as loaded, the profile's terms, versions,
defaults per GPU, refusals, and the estimate CLI that prints them."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvbench.cli import main
from kvbench.cli.estimate import estimate_command
from kvbench.errors import KvbenchInputError
from kvbench.models.presets import get_preset
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.sizing.checkpoint import resolve_checkpoint
from kvbench.sizing.loaded_weights import (
    loaded_weights,
    pipeline_layers,
    quantization_from_config,
    quantization_from_flag,
)
from kvbench.sizing.vllm_startup import (
    VllmFlags,
    cuda_graph_counts,
    serving_defaults,
    vllm_startup,
)
from kvbench.sizing.vllm_versions import vllm_release

GiB = 2**30
H100 = get_gpu("h100-80gb")


def startup(model: str = "llama-3-8b", **flags):
    return vllm_startup(get_preset(model), H100.reported_memory_bytes,
                        VllmFlags(max_model_len=8192, **flags), gpu_name=H100.description)


def test_tensor_parallel_shards_all_but_norms():
    model = get_preset("llama-3-8b")
    one, two = (loaded_weights(model, "bf16", None, tp)[0].bytes for tp in (1, 2))
    rotary = model.max_position_embeddings * model.head_dim * 2
    norms = model.num_norm_parameters() * 2
    assert one == model.num_parameters() * 2 + rotary
    assert two == (model.num_parameters() * 2 - norms) // 2 + norms + rotary


def test_pipeline_stages_split_layers_as_vllm():
    assert [len(s) for s in pipeline_layers(32, 3)] == [11, 11, 10]  # the last stage: fewer
    stages = loaded_weights(get_preset("llama-3-8b"), "bf16", None, 1, 2)
    assert stages[0].first and stages[1].last and stages[0].layers == tuple(range(16))
    with pytest.raises(KvbenchInputError, match="pipeline-parallel-size"):
        pipeline_layers(4, 5)


def test_quantization_schemes_store_their_bytes_per_weight():
    def ct(bits, kind, group=None):
        weights = {"num_bits": bits, "type": kind, "strategy": "group" if group else "channel"}
        if group:
            weights["group_size"] = group
        return {"quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": weights}}}
    assert quantization_from_config(ct(8, "float")).bytes_per_weight == 1
    assert quantization_from_config(ct(8, "int")).scheme == "int8"
    assert quantization_from_config(ct(4, "int", 128)).bytes_per_weight == Fraction(1, 2) + Fraction(5, 256)
    assert quantization_from_config({"quant_method": "awq", "bits": 4, "group_size": 128}).scheme == "int4"
    mxfp4 = quantization_from_config({"quant_method": "mxfp4"})
    assert mxfp4.experts_only and mxfp4.bytes_per_weight == Fraction(17, 32)
    assert quantization_from_flag("fp8").scheme == "fp8" and quantization_from_flag(None) is None
    with pytest.raises(KvbenchInputError, match="bitsandbytes"):
        quantization_from_config({"quant_method": "bitsandbytes"})


def test_gpt_oss_presets_are_sized_from_their_mxfp4_weights():
    checkpoint = resolve_checkpoint("gpt-oss-20b")
    assert checkpoint.quantization.scheme == "mxfp4"
    weights = loaded_weights(checkpoint.model, "bf16", checkpoint.quantization)[0].bytes
    assert 13 * GiB < weights < 14 * GiB  # vLLM logs 13.47 GiB; bf16 would be ~39
    with pytest.raises(KvbenchInputError, match="already quantized"):
        resolve_checkpoint("gpt-oss-20b", "fp8")


def test_the_terms_add_up_to_the_available_memory():
    stage = startup().stages[0]
    assert stage.requested == int(H100.reported_memory_bytes * Fraction(23, 25))  # 0.92
    assert stage.available == (stage.requested - stage.weights - stage.activation
                               - stage.non_torch - stage.cuda_graphs)
    assert stage.activation == (max(stage.forward, stage.sampler) + stage.moe_workspace
                                + stage.request_buffers)


def test_versions_change_the_defaults_and_what_is_subtracted():
    current, old = startup(), startup(vllm_version="0.19.0")
    assert current.release.name == "0.21" and old.release.name == "0.18"
    assert old.utilization == Fraction(9, 10) and current.utilization == Fraction(23, 25)
    assert current.stages[0].cuda_graphs_subtracted and not old.stages[0].cuda_graphs_subtracted
    assert startup(vllm_version="0.11").stages[0].sampler > 2 * old.stages[0].sampler
    assert vllm_release("0.8").name == "0.11"
    with pytest.raises(KvbenchInputError, match="vllm-version"):
        vllm_release("latest")


def test_enforce_eager_captures_no_graph():
    eager = startup(enforce_eager=True)
    assert eager.cuda_graph_sizes == (0, 0) and eager.stages[0].cuda_graphs == 0
    assert eager.available - startup().available == startup().stages[0].cuda_graphs
    assert cuda_graph_counts(1024, False) == (51, 35)
    assert cuda_graph_counts(128, False) == (35, 19)


def test_serving_defaults_follow_the_gpu():
    assert serving_defaults(H100.reported_memory_bytes, H100.description) == (1024, 8192)
    a100 = get_gpu("a100-80gb")
    assert serving_defaults(a100.reported_memory_bytes, a100.description) == (256, 2048)
    assert serving_defaults(get_gpu("l4").reported_memory_bytes, "NVIDIA L4") == (256, 2048)


def test_too_long_a_max_model_len_is_refused_with_the_length_that_fits():
    refused = vllm_startup(get_preset("qwen3-32b"), H100.reported_memory_bytes,
                           VllmFlags(max_model_len=32768, vllm_version="0.11"))
    assert refused.pool is None and "estimated maximum model length is" in refused.refusal
    fits = int(refused.refusal.split("--max-model-len ")[1].split(")")[0])
    assert vllm_startup(get_preset("qwen3-32b"), H100.reported_memory_bytes,
                        VllmFlags(max_model_len=fits, vllm_version="0.11")).pool is not None
    assert vllm_startup(get_preset("qwen3-32b"), H100.reported_memory_bytes,
                        VllmFlags(max_model_len=fits + 64, vllm_version="0.11")).pool is None


def test_hybrid_models_pad_their_pages_and_count_tokens_per_group():
    gemma = vllm_startup(get_preset("gemma-3-27b"), H100.reported_memory_bytes,
                         VllmFlags(max_model_len=8192))
    pool = gemma.pool
    assert (pool.num_groups, pool.layers_per_block, pool.padding_layers) == (7, 10, 8)
    assert pool.tokens == pool.num_blocks // 7 * 16


def run(*args: str):
    return CliRunner().invoke(estimate_command, list(args))


def test_cli_gpu_preset_sizes_vllms_start_up_and_prints_its_lines():
    result = run("--model", "llama-3-8b", "--gpu", "h100-80gb", "--max-model-len", "8192")
    assert result.exit_code == 0, result.output
    assert "79.19 GiB  as CUDA reports it" in result.output
    for line in ("Available KV cache memory: ", "GPU KV cache size: ",
                 "Maximum concurrency for 8,192 tokens per request: "):
        assert line in result.output


def test_cli_json_carries_every_term():
    result = run("--model", "llama-3-8b", "--gpu", "a100-80gb", "--max-model-len", "4096",
                 "-tp", "2", "--max-num-seqs", "64", "--max-num-batched-tokens", "1024",
                 "--enforce-eager", "--vllm-version", "0.19", "--json")
    vllm = json.loads(result.output)["vllm"]
    assert (vllm["max_num_seqs"], vllm["max_num_batched_tokens"]) == (64, 1024)
    assert vllm["cuda_graphs_captured"] == {"piecewise": 0, "full": 0}
    stage = vllm["stages"][0]
    assert set(stage) >= {"total", "requested", "weights", "activation", "non_torch",
                          "cuda_graphs", "available"}
    assert vllm["kv_cache_tokens"] and vllm["refusal"] is None


def test_cli_refusal_is_one_line_and_exit_2(capsys):
    assert main(["estimate", "--model", "llama-3-70b", "--gpu", "h100-80gb"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvbench: error: No available memory for "
                                                  "the cache blocks")


def test_cli_reads_a_quantized_checkpoint_folder(tmp_path):
    """A w4a16 checkpoint's config.json: its weights as vLLM loaded them (5.38 GiB logged)."""
    configs = json.loads((Path(__file__).parent / "data" / "vllm-model-configs.json").read_text())
    config = configs["RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = run("--model", str(tmp_path), "--gpu", "l4", "--max-model-len", "8192", "--json")
    assert result.exit_code == 0, result.output
    estimate = json.loads(result.output)
    assert estimate["dtype"] == "int4"  # the linear layers as stored
    assert abs(estimate["weights_bytes_per_gpu"] / GiB / 5.38 - 1) < 0.02
    assert "datasheet" in run("--model", str(tmp_path), "--gpu", "l4",
                              "--max-model-len", "8192").output  # L4: CUDA's total not known
