"""Mixtral: a mixture of SwiGLU experts in place of the MLP (softmax router, top-k experts a
token, renormalised weights), its preset and its config.json fields, against transformers'
MixtralForCausalLM and MixtralConfig."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from kvbench.cli import main
from kvbench.cli.estimate import estimate_command
from kvbench.errors import KvbenchInputError
from kvbench.models.loader import load_model
from kvbench.models.presets import get_preset
from kvbench.models.resolve_config import resolve_model_config
from tests.conftest import random_prompts
from tests.models.engine_parity import (
    check_chunked_prefill,
    check_preemption,
    check_prefill_and_decode,
    check_prefix_hit,
)
from tests.models.test_config_fields import kvbench_prefill_logits

transformers = pytest.importorskip("transformers")

# Four experts, two a token: each token's pair differs, so a wrong router or a wrong weight
# renormalisation changes tokens.
TINY_MIXTRAL = dict(
    vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
    max_position_embeddings=512, initializer_range=0.15, bos_token_id=None, eos_token_id=None,
    pad_token_id=None,
)

# mistralai/Mixtral-8x7B-v0.1's config.json as published.
MIXTRAL_8X7B_CONFIG = {
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.36.0.dev0", "use_cache": True, "vocab_size": 32000,
}
MIXTRAL_8X7B_PARAMETERS = 46_702_792_704


def make_mixtral(folder, seed: int = 0, **fields):
    """A random MixtralForCausalLM saved to `folder` (per-expert w1/w2/w3 names); norm weights
    drawn away from 1 so a norm not loaded changes tokens."""
    torch.manual_seed(seed)
    config = transformers.MixtralConfig(**{**TINY_MIXTRAL, **fields})
    model = transformers.MixtralForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.5 * torch.randn_like(param))
    model.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def mixtral_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mixtral")
    return folder, make_mixtral(folder)


def test_config_reads_mixtral_fields(mixtral_checkpoint):
    folder, hf_model = mixtral_checkpoint
    config = resolve_model_config(str(folder))
    assert (config.num_local_experts, config.num_experts_per_tok) == (4, 2)
    assert config.sliding_window is None and config.rope_theta == 1e6
    assert config.num_parameters() == sum(p.numel() for p in hf_model.parameters())


def test_prefill_logits_match_transformers(mixtral_checkpoint):
    folder, hf_model = mixtral_checkpoint
    prompt = random_prompts(1, 512, seed=3, min_len=200, max_len=200)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    torch.testing.assert_close(kvbench_prefill_logits(folder, prompt), theirs,
                               atol=1e-4, rtol=1e-4)


def test_fused_expert_names_load_as_the_per_expert_ones(mixtral_checkpoint, tmp_path):
    """transformers 5's own module names (experts fused in [experts, ...] tensors under `mlp`)
    load into the same weights as the per-expert `block_sparse_moe` names."""
    from safetensors.torch import save_file

    folder, hf_model = mixtral_checkpoint
    state = {k: v.contiguous() for k, v in hf_model.state_dict().items()}
    assert "model.layers.0.mlp.experts.gate_up_proj" in state
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    per_expert, _ = load_model(str(folder))
    fused, _ = load_model(str(tmp_path))
    for (name, a), (_, b) in zip(per_expert.state_dict().items(), fused.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name


def test_prefill_and_decode_match_transformers(mixtral_checkpoint):
    check_prefill_and_decode(*mixtral_checkpoint, min_len=180, max_len=240)


def test_chunked_prefill_matches_transformers(mixtral_checkpoint):
    """Prompts of 180+ tokens under a 64-token step budget: every prefill takes 3+ chunks."""
    check_chunked_prefill(*mixtral_checkpoint, min_len=180, max_len=240)


def test_preemption_matches_transformers(mixtral_checkpoint):
    """Three ~190-token prompts growing 48 tokens each in 210 KiB (420 tokens of KV: 2 layers
    x 2 KV heads x 16 dims x K,V x 4 B = 512 B a token)."""
    check_preemption(*mixtral_checkpoint, kv_memory="210KiB")


def test_prefix_hit_matches_transformers(mixtral_checkpoint):
    check_prefix_hit(*mixtral_checkpoint)


# config.json fields -------------------------------------------------------------------------


def write_mixtral_config(folder, **fields) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    hf = {**TINY_MIXTRAL, "model_type": "mixtral", **fields}
    (folder / "config.json").write_text(json.dumps(hf))
    return str(folder)


REFUSED = {
    # name -> (fields over TINY_MIXTRAL, what the message names)
    "jitter": (dict(router_jitter_noise=0.1), "router_jitter_noise"),
    "top-k-over-experts": (dict(num_experts_per_tok=5), "num_experts_per_tok"),
    "experts-zero": (dict(num_local_experts=0), "num_local_experts"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_unimplemented_mixtral_field_is_refused_naming_the_key(case, tmp_path):
    fields, message = REFUSED[case]
    with pytest.raises(KvbenchInputError, match=message):
        resolve_model_config(write_mixtral_config(tmp_path / "m", **fields))


def test_a_window_applies_to_every_layer(tmp_path):
    """As transformers' MixtralAttention: one window for every layer."""
    config = resolve_model_config(write_mixtral_config(tmp_path / "m", sliding_window=32))
    assert [config.layer_window(i) for i in range(config.num_layers)] == [32] * config.num_layers


# Presets and sizing -------------------------------------------------------------------------


def test_preset_is_the_published_shape(tmp_path):
    """Same shape as the published config.json, and transformers counts the same parameters
    (every expert, and the routers)."""
    config = get_preset("mixtral-8x7b")
    from_file = resolve_model_config(write_mixtral_config(tmp_path / "m", **MIXTRAL_8X7B_CONFIG))
    assert {**config.to_dict(), "name": None} == {**from_file.to_dict(), "name": None}
    fields = {k: v for k, v in MIXTRAL_8X7B_CONFIG.items()
              if k not in ("architectures", "model_type", "torch_dtype", "transformers_version")}
    with torch.device("meta"):
        hf_model = transformers.MixtralForCausalLM(transformers.MixtralConfig(**fields))
    counted = sum(p.numel() for p in hf_model.parameters())
    assert config.num_parameters() == counted == MIXTRAL_8X7B_PARAMETERS
    # Active: all but 6 of 8 experts' w1, w2, w3 in each of 32 layers.
    idle = 32 * 6 * 3 * 4096 * 14336
    assert config.num_active_parameters() == MIXTRAL_8X7B_PARAMETERS - idle


def test_estimate_json_on_a_mixtral_config_json(tmp_path):
    folder = write_mixtral_config(tmp_path / "m", **MIXTRAL_8X7B_CONFIG)
    result = CliRunner().invoke(estimate_command, [
        "--model", folder, "--context", "32768", "--gpu-memory", "141GiB", "--json"])
    assert result.exit_code == 0, result.output
    est = json.loads(result.output)
    assert est["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2  # K and V, bf16
    assert est["num_parameters"] == MIXTRAL_8X7B_PARAMETERS
    assert est["active_parameters"] == 12_879_925_248
    # as vLLM loads them: the parameters and the rotary cos/sin cache (positions x head dim)
    assert est["weights_bytes"] == 2 * MIXTRAL_8X7B_PARAMETERS + 32768 * 128 * 2


def test_estimate_json_of_a_dense_model_has_active_equal_to_total():
    result = CliRunner().invoke(estimate_command, [
        "--model", "llama-3-8b", "--gpu-memory", "80GiB", "--json"])
    est = json.loads(result.output)
    assert est["active_parameters"] == est["num_parameters"] > 0


def test_simulate_on_a_mixtral_config_json(tmp_path, capsys):
    """Mixtral-8x7B's 87 GiB of bf16 weights (every expert) fit two H100s, not one A100."""
    folder = write_mixtral_config(tmp_path / "m", **MIXTRAL_8X7B_CONFIG)
    common = ["simulate", "--model", folder, "--strategy", "paged", "--num-requests", "8",
              "--warmup", "0", "--quiet"]
    out = tmp_path / "out"
    code = main([*common, "--gpu", "h100-80gb", "--tensor-parallel-size", "2",
                 "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    (run_dir,) = out.iterdir()
    saved = json.loads((run_dir / "config.json").read_text())["model_config"]
    assert (saved["num_local_experts"], saved["num_experts_per_tok"]) == (8, 2)
    capsys.readouterr()
    refused = tmp_path / "refused"
    assert main([*common, "--gpu", "a100-80gb", "--out", str(refused)]) == 2
    err = capsys.readouterr().err
    # vLLM's refusal, the weights as vLLM loads them (every expert, bf16)
    assert err.count("\n") == 1 and "weights 87.00 GiB" in err
    assert not refused.exists() or not any(refused.iterdir())


# Step-time model ----------------------------------------------------------------------------


def test_expected_active_experts():
    """One token activates its top_k; many tokens activate every expert."""
    from kvbench.simulator.step_time import expected_active_experts

    assert expected_active_experts(1, 8, 2) == pytest.approx(2.0)
    assert expected_active_experts(2, 8, 2) == pytest.approx(8 * (1 - 0.75**2))
    assert expected_active_experts(4096, 8, 2) == pytest.approx(8.0)


def test_step_time_charges_the_active_experts():
    """A one-token decode of Mixtral-8x7B costs about what a dense model of its two active
    experts' width costs (plus the router), far less than one reading all eight; its FLOPs
    are the active parameters'; with thousands of tokens every expert's weights are read."""
    from dataclasses import replace

    from kvbench.simulator.gpu_lookup import get_gpu
    from kvbench.simulator.step_time import StepTimeModel

    gpu = get_gpu("h200")
    mixtral = get_preset("mixtral-8x7b")
    moe = StepTimeModel(mixtral, gpu, 2, 2)
    dense = replace(mixtral, num_local_experts=0, num_experts_per_tok=0)
    two_wide = StepTimeModel(replace(dense, intermediate_size=2 * 14336), gpu, 2, 2)
    eight_wide = StepTimeModel(replace(dense, intermediate_size=8 * 14336), gpu, 2, 2)
    one = moe.cost([1], [100], 1)
    assert one.parts["gemm"] == pytest.approx(two_wide.cost([1], [100], 1).parts["gemm"],
                                              rel=0.05)
    assert one.parts["gemm"] < 0.5 * eight_wide.cost([1], [100], 1).parts["gemm"]
    active = mixtral.num_active_parameters() - 2 * 32000 * 4096 - 4096 - 32 * 2 * 4096
    lm_head = 2 * 4096 * 32000
    assert one.flops - lm_head - 32 * 4 * 32 * 128 * 100 == pytest.approx(2 * active)
    weights_all = 2 * (mixtral.num_parameters() - 32000 * 4096 - 4096 - 32 * 2 * 4096)
    many = moe.cost([4096], [4096], 1)
    assert many.bytes > weights_all
    assert one.bytes < 0.4 * weights_all


def test_hf_engine_refuses_a_mixture_of_experts(mixtral_checkpoint, tmp_path, capsys):
    """One line naming the way out, nothing written: transformers fuses the experts kvbench
    keeps apart, and sharing them would copy every expert."""
    folder, _ = mixtral_checkpoint
    out = tmp_path / "out"
    code = main(["run", "--engine", "hf", "--model", str(folder), "--num-requests", "2",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "--engine kvbench" in err
    assert not out.exists() or not any(out.iterdir())
