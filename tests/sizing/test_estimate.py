"""`kvbench estimate`: the worked examples of issue 8 as exact integers, and the CLI."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from click.testing import CliRunner

from kvbench.cli.estimate import estimate_command
from kvbench.core.kv_groups import full_attention_group
from kvbench.errors import KvbenchInputError
from kvbench.models.presets import get_preset
from kvbench.models.sizes import weights_bytes
from kvbench.sizing.estimate import (
    EstimateInputs,
    compare_kv_utilization,
    estimate_kv,
    round_up_to_blocks,
)
from kvbench.sizing.kv_budget import kv_budget_bytes, parse_fraction

GiB = 1024**3
MiB = 1024**2
SHAPE = {"num_layers": 32, "num_kv_heads": 40, "head_dim": 128}


# --- the four worked examples --------------------------------------------------------------


def test_bytes_per_token_32_layers_40_kv_heads_head_dim_128_bf16():
    assert full_attention_group(32, 40, 128, 2).bytes_per_token == 655_360
    est = estimate_kv(EstimateInputs(**SHAPE, kv_cache_dtype="bf16", context=2048))
    assert est.kv_bytes_per_token == 655_360
    assert est.kv_bytes_per_token == 0.625 * MiB


def test_2048_tokens_times_2000_concurrent_requests():
    est = estimate_kv(
        EstimateInputs(**SHAPE, kv_cache_dtype="bf16", context=2048, concurrency=2000)
    )
    assert est.kv_bytes_per_request == 2048 * 655_360
    assert est.kv_bytes_total == 2_684_354_560_000


def test_80GiB_at_0_92_minus_20GiB_fits_21_requests_of_4096_tokens():
    assert kv_budget_bytes(80 * GiB, 0.92, 20 * GiB) == (80 * GiB * 92) // 100 - 20 * GiB
    est = estimate_kv(EstimateInputs(
        **SHAPE,
        kv_cache_dtype="bf16",
        context=4096,
        gpu_memory=80 * GiB,
        gpu_memory_utilization=0.92,
        weights_memory=20 * GiB,
    ))
    assert est.kv_bytes_per_request == 4096 * 655_360 == int(2.5 * GiB)
    assert est.kv_budget_bytes == 57_552_561_766
    assert est.max_concurrency == 21
    assert est.kv_capacity_tokens == 57_552_561_766 // 655_360


def test_60GiB_at_40_vs_90_percent_is_2_25x():
    comp = compare_kv_utilization(60 * GiB, 0.4, 0.9)
    assert comp.capacity_gain == Fraction(9, 4)
    assert float(comp.capacity_gain) == 2.25
    assert comp.effective_bytes_from == 24 * GiB
    assert comp.effective_bytes_to == 54 * GiB
    assert comp.effective_bytes_to / comp.effective_bytes_from == 2.25


# --- pieces ----------------------------------------------------------------------------------


def test_utilization_is_read_exactly():
    assert parse_fraction(0.92) == Fraction(23, 25)
    assert parse_fraction("92%") == Fraction(23, 25)
    for bad in ("0", "1.5", "abc", "-0.1"):
        with pytest.raises(KvbenchInputError):
            parse_fraction(bad)


def test_block_rounding_and_paged_vs_contiguous():
    assert round_up_to_blocks(1000, 16) == 1008
    model = get_preset("llama-3-8b")  # max_position_embeddings 8192
    est = estimate_kv(EstimateInputs(model=model, context=1000, block_size=16, kv_memory=60 * GiB))
    per_token = 2 * 32 * 8 * 128 * 2
    assert est.kv_bytes_per_token == per_token
    assert est.tokens_per_request == 1008
    assert est.kv_bytes_per_request == 1008 * per_token
    contiguous, paged = est.strategies["contiguous"], est.strategies["paged"]
    assert contiguous.tokens_per_request == 8192
    assert contiguous.max_concurrency == 60 * GiB // (8192 * per_token) == 60
    assert paged.blocks_per_request == 63
    assert paged.num_blocks == 60 * GiB // (16 * per_token)
    assert paged.max_concurrency == paged.num_blocks // 63 == 487


def test_no_block_size_leaves_request_unrounded_but_paged_uses_16():
    est = estimate_kv(
        EstimateInputs(**SHAPE, kv_cache_dtype="fp8", context=1000, mean_len=500, kv_memory=GiB)
    )
    assert est.block_size is None
    assert est.kv_bytes_per_request == 1000 * full_attention_group(32, 40, 128, 1).bytes_per_token
    assert est.strategies["paged"].block_size == 16
    assert est.strategies["paged"].blocks_per_request == 32  # ceil(500 / 16)
    assert est.strategies["contiguous"].tokens_per_request == 1000  # max_model_len = context


def test_weights_computed_from_parameters_and_dtype():
    model = get_preset("llama-2-13b")
    assert weights_bytes(model, "bf16") == model.num_parameters() * 2
    assert weights_bytes(model, "fp32") == model.num_parameters() * 4
    est = estimate_kv(
        EstimateInputs(model=model, context=2048, gpu_memory=40 * GiB, gpu_memory_utilization="0.9")
    )
    assert est.weights_source == "computed"
    # as vLLM loads them: the parameters and the rotary cos/sin cache (positions x head dim)
    rotary = model.max_position_embeddings * model.head_dim * 2
    assert est.weights_bytes == model.num_parameters() * 2 + rotary
    # the budget is the pool vLLM would allocate: what its profiler leaves, in whole blocks
    stage, pool = est.vllm.stages[0], est.vllm.pool
    assert stage.requested == (40 * GiB * 9) // 10 and stage.weights == est.weights_bytes
    assert stage.available == (stage.requested - stage.weights - stage.activation
                               - stage.non_torch - stage.cuda_graphs)
    assert est.kv_budget_bytes == pool.tokens * est.kv_bytes_per_token
    assert est.kv_budget_bytes <= stage.available < est.kv_budget_bytes + pool.block_bytes
    assert est.kv_cache_dtype == "bf16"  # auto follows the weights dtype


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # neither model nor shapes
        {"num_layers": 32, "num_kv_heads": 40},  # head_dim missing
        {**SHAPE, "context": 0},
        {**SHAPE, "context": 4096, "max_model_len": 2048},
        {**SHAPE, "context": 2048, "gpu_memory": 80 * GiB},  # weights unknown
        {**SHAPE, "context": 2048, "kv_memory": GiB, "gpu_memory": 80 * GiB, "weights_memory": 1},
        {**SHAPE, "context": 2048, "compare_utilization": ("0.4", "0.9")},  # no budget
        {**SHAPE, "context": 2048, "kv_cache_dtype": "int3"},
        {**SHAPE, "context": 2048, "gpu_memory_utilization": 0.9},  # no --gpu-memory
    ],
)
def test_bad_inputs_raise_input_error(kwargs):
    with pytest.raises(KvbenchInputError):
        estimate_kv(EstimateInputs(**kwargs))


# --- CLI -------------------------------------------------------------------------------------


def run(*args: str):
    return CliRunner().invoke(estimate_command, list(args))


def test_cli_table():
    result = run(
        "--model", "llama-2-13b", "--gpu-memory", "40GiB", "--gpu-util", "0.9", "--context", "2048"
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "819,200" in out and "800.00 KiB" in out  # bytes per token, exact and binary
    assert "2 (K,V) x 40 layers x 40 KV heads x 128 head dim x 2 B (bf16)" in out
    assert "floor(budget / per request)" in out
    assert "contiguous (reserve max)" in out and "paged (block 16)" in out


def test_cli_worked_example_explicit_shapes():
    result = run(
        "--layers", "32", "--kv-heads", "40", "--head-dim", "128", "--kv-dtype", "bf16",
        "--context", "4096", "--gpu-memory", "80GiB", "--gpu-util", "0.92",
        "--weights-memory", "20GiB", "--compare-kv-utilization", "0.4,0.9", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["kv_bytes_per_token"] == 655_360
    assert data["kv_bytes_per_request"] == 2_684_354_560
    assert data["kv_bytes_total"] == 2_684_354_560
    assert data["kv_budget_bytes"] == 57_552_561_766
    assert data["max_concurrency"] == 21
    assert data["strategies"]["contiguous"]["max_concurrency"] == 21
    assert data["kv_utilization_comparison"]["capacity_gain"] == 2.25


def test_cli_json_keys():
    result = run("--model", "tiny", "--concurrency", "8", "--kv-memory", "64MiB", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)  # nothing but JSON on stdout
    for key in ("kv_bytes_per_token", "kv_bytes_per_request", "kv_bytes_total", "kv_budget_bytes",
                "max_concurrency"):  # fmt: skip
        assert isinstance(data[key], int), key
    assert data["kv_bytes_total"] == 8 * data["kv_bytes_per_request"]
    assert set(data["strategies"]) == {"contiguous", "paged"}
    assert all(isinstance(s["max_concurrency"], int) for s in data["strategies"].values())


def test_cli_capacity_comparison_60GiB():
    result = run(
        "--model", "llama-3-8b", "--kv-memory", "60GiB", "--compare-kv-utilization", "40%,90%"
    )
    assert result.exit_code == 0, result.output
    assert "2.25x" in result.output
    assert "24.00 GiB" in result.output and "54.00 GiB" in result.output


def test_cli_local_folder(tmp_path):
    hf = {
        "model_type": "llama",
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 4096,
    }
    (tmp_path / "config.json").write_text(json.dumps(hf))
    result = run("--model", str(tmp_path), "--context", "4096", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2


def assert_usage_error(result, *fragments: str):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, KvbenchInputError | KeyError | ValueError)
    for fragment in fragments:
        assert fragment in result.output


def test_cli_unknown_preset():
    assert_usage_error(run("--model", "llama-9-999b", "--context", "2048"), "unknown model preset")


def test_cli_folder_without_config_json(tmp_path):
    assert_usage_error(run("--model", str(tmp_path)), "has no config.json")


def test_cli_negative_budget():
    # llama-3-70b weights (~131 GiB in bf16) exceed 80 GiB x 0.9.
    assert_usage_error(
        run("--model", "llama-3-70b", "--gpu-memory", "80GiB", "--context", "2048"),
        "No available memory for the cache blocks",
        "weights 131.42 GiB",
    )


@pytest.mark.parametrize(
    "args",
    [
        ("--context", "2048"),  # no model, no shapes
        ("--model", "tiny", "--layers", "4"),
        ("--model", "tiny", "--gpu-memory", "lots"),
        ("--model", "tiny", "--kv-memory", "1GiB", "--compare-kv-utilization", "0.4"),
        ("--model", "tiny", "--kv-dtype", "int4"),
    ],
)
def test_cli_bad_input(args):
    assert_usage_error(run(*args))


# --step: modelled step times ----------------------------------------------------------------


def test_step_json_gives_each_step_its_parts():
    result = run(
        "--model", "llama-2-70b", "--gpu", "a100-80gb", "--tensor-parallel-size", "2",
        "--step", "decode:32x1024", "--step", "prefill:2048", "--json",
    )
    assert result.exit_code == 0, result.output
    steps = json.loads(result.output)["steps"]
    decode, prefill = steps
    assert (decode["kind"], decode["batch"], decode["context"], decode["tokens"]) == (
        "decode", 32, 1024, 32)
    assert (prefill["kind"], prefill["batch"], prefill["context"], prefill["tokens"]) == (
        "prefill", 1, 2048, 2048)
    for step in steps:
        assert step["ms"] == pytest.approx(sum(step["parts"].values()))
        assert step["parts"]["all_reduce"] > 0  # two GPUs
    assert decode["parts"]["attention_decode"] > 0 and decode["parts"]["attention_prefill"] == 0
    assert prefill["parts"]["attention_prefill"] > 0
    # Llama-2-70B on 2 x A100-80GB: a decode step streams ~69 GB of weights per GPU (~40-60
    # ms), a 2,048-token prefill is compute-bound (~0.5-1 s); measured vLLM runs sit there.
    assert 35 < decode["ms"] < 70 and 400 < prefill["ms"] < 1000


def test_step_table_and_bad_steps():
    result = run("--model", "llama-2-7b", "--gpu", "h100-80gb", "--step", "decode:8x512")
    assert result.exit_code == 0, result.output
    assert "decode 8 x 512" in result.output and "gemm" in result.output
    for bad in ("decode:8", "decode:0x10", "beam:4", "prefill:x"):
        result = run("--model", "llama-2-7b", "--step", bad)
        assert result.exit_code == 2 and "--step" in result.output
    result = run("--model", "llama-3-70b", "--tensor-parallel-size", "3", "--step", "prefill:8")
    assert result.exit_code == 2 and "does not divide" in result.output
    result = run("--step", "prefill:8")
    assert result.exit_code == 2 and "needs --model" in result.output


def test_step_with_a_gpu_file(tmp_path):
    path = tmp_path / "gpu.toml"
    # the L4 preset's figures: the A100's constants but its GDDR weight-read rate
    path.write_text("memory = '24GiB'\nbandwidth_gb_s = 300\n[peak_tflops]\nbf16 = 121\n"
                    "[efficiency]\ngemm_bandwidth_efficiency = 0.9\n")
    mine = json.loads(run("--model", "llama-2-7b", "--gpu-spec", str(path),
                           "--step", "decode:1x100", "--json").output)
    l4 = json.loads(run("--model", "llama-2-7b", "--gpu", "l4",
                         "--step", "decode:1x100", "--json").output)
    assert mine["steps"][0]["ms"] == pytest.approx(l4["steps"][0]["ms"])


@pytest.mark.parametrize("step", ["decode:1000000000x1000000000", "decode:65537x16",
                                  "decode:1x16777217", "prefill:16777217"])
def test_a_step_past_the_bounds_is_refused_before_any_work(step):
    result = CliRunner().invoke(estimate_command, ["--model", "llama-2-13b", "--gpu",
                                                   "h100-80gb", "--step", step])
    assert result.exit_code == 2
    assert "at most 65,536 sequences of at most 16,777,216 tokens" in result.output
    ok = CliRunner().invoke(estimate_command, ["--model", "llama-2-13b", "--gpu", "h100-80gb",
                                               "--step", "decode:65536x16", "--step",
                                               "prefill:16777216"])
    assert ok.exit_code == 0, ok.output


def test_estimate_refuses_a_kv_budget_beyond_the_gpus_memory():
    result = CliRunner().invoke(estimate_command, ["--model", "llama-2-13b", "--gpu",
                                                   "h100-80gb", "--kv-memory", "1TiB"])
    assert result.exit_code == 2
    assert "more than the memory of h100-80gb (79.19 GiB)" in result.output
