"""Qwen3-MoE: Qwen3's attention (per-head q/k norms) with a mixture of SwiGLU experts (softmax
router, top-k, renormalised only with norm_topk_prob) and dense layers (mlp_only_layers,
decoder_sparse_step), its presets and config.json fields, against transformers'
Qwen3MoeForCausalLM and Qwen3MoeConfig."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from kvbench.cli import main
from kvbench.cli.estimate import estimate_command
from kvbench.errors import KvbenchInputError
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

# Eight experts, two a token, scores not renormalised (transformers' default); layer 1 a dense
# MLP of its own width: a wrong router, renormalisation or layer kind changes tokens.
TINY_QWEN3_MOE = dict(
    vocab_size=512, hidden_size=64, intermediate_size=96, moe_intermediate_size=48,
    num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    num_experts=8, num_experts_per_tok=2, norm_topk_prob=False, mlp_only_layers=[1],
    max_position_embeddings=512, initializer_range=0.15, bos_token_id=None, eos_token_id=None,
    pad_token_id=None,
)

# Qwen/Qwen3-30B-A3B's config.json as published.
QWEN3_30B_A3B_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1,
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
    "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936,
}
# transformers' count on the meta device (every expert and router)
QWEN3_30B_A3B_PARAMETERS = 30_532_122_624
QWEN3_235B_A22B_PARAMETERS = 235_093_634_560


def make_qwen3_moe(folder, seed: int = 0, **fields):
    """A random Qwen3MoeForCausalLM saved to `folder`; norm weights drawn away from 1 so a
    norm not loaded changes tokens."""
    torch.manual_seed(seed)
    config = transformers.Qwen3MoeConfig(**{**TINY_QWEN3_MOE, **fields})
    model = transformers.Qwen3MoeForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.5 * torch.randn_like(param))
    model.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def qwen3_moe_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qwen3_moe")
    return folder, make_qwen3_moe(folder)


def test_config_reads_qwen3_moe_fields(qwen3_moe_checkpoint):
    folder, hf_model = qwen3_moe_checkpoint
    config = resolve_model_config(str(folder))
    assert (config.num_local_experts, config.num_experts_per_tok) == (8, 2)
    assert (config.moe_intermediate_size, config.norm_topk_prob) == (48, False)
    assert config.dense_layers == (1,) and config.qk_norm
    assert config.num_parameters() == sum(p.numel() for p in hf_model.parameters())


def test_prefill_and_decode_match_transformers(qwen3_moe_checkpoint):
    check_prefill_and_decode(*qwen3_moe_checkpoint, min_len=180, max_len=240)


@pytest.mark.parametrize("fields", [
    dict(norm_topk_prob=True, mlp_only_layers=[]),
    dict(decoder_sparse_step=2, mlp_only_layers=[]),  # layers 0 and 2 dense, 1 a mixture
])
def test_prefill_logits_match_transformers(fields, tmp_path):
    hf_model = make_qwen3_moe(tmp_path, seed=7, **fields)
    prompt = random_prompts(1, 512, seed=3, min_len=120, max_len=120)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    torch.testing.assert_close(kvbench_prefill_logits(tmp_path, prompt), theirs,
                               atol=1e-4, rtol=1e-4)


def test_chunked_prefill_matches_transformers(qwen3_moe_checkpoint):
    """Prompts of 180+ tokens under a 64-token step budget: every prefill takes 3+ chunks."""
    check_chunked_prefill(*qwen3_moe_checkpoint, min_len=180, max_len=240)


def test_preemption_matches_transformers(qwen3_moe_checkpoint):
    """Three ~190-token prompts growing 48 tokens each in 315 KiB (420 tokens of KV: 3 layers
    x 2 KV heads x 16 dims x K,V x 4 B = 768 B a token)."""
    check_preemption(*qwen3_moe_checkpoint, kv_memory="315KiB")


def test_prefix_hit_matches_transformers(qwen3_moe_checkpoint):
    check_prefix_hit(*qwen3_moe_checkpoint)


# config.json fields -------------------------------------------------------------------------


def write_qwen3_moe_config(folder, **fields) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    hf = {**TINY_QWEN3_MOE, "model_type": "qwen3_moe", **fields}
    (folder / "config.json").write_text(json.dumps(hf))
    return str(folder)


REFUSED = {
    # name -> (fields over TINY_QWEN3_MOE, what the message names)
    "top-k-over-experts": (dict(num_experts_per_tok=9), "num_experts_per_tok"),
    "experts-zero": (dict(num_experts=0), "num_experts"),
    "dense-layer-out-of-range": (dict(mlp_only_layers=[3]), "mlp_only_layers"),
    "sparse-step-zero": (dict(decoder_sparse_step=0), "decoder_sparse_step"),
    "norm-not-bool": (dict(norm_topk_prob="yes"), "norm_topk_prob"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_bad_qwen3_moe_field_is_refused_naming_the_key(case, tmp_path):
    fields, message = REFUSED[case]
    with pytest.raises(KvbenchInputError, match=message):
        resolve_model_config(write_qwen3_moe_config(tmp_path / "m", **fields))


def test_router_logits_output_is_accepted(tmp_path):
    """output_router_logits only adds a training loss: the tokens are the same."""
    config = resolve_model_config(write_qwen3_moe_config(
        tmp_path / "m", output_router_logits=True, router_aux_loss_coef=0.01))
    assert config.is_moe


def test_use_sliding_window_windows_every_layer(tmp_path):
    """transformers windows every layer once use_sliding_window is set."""
    config = resolve_model_config(write_qwen3_moe_config(
        tmp_path / "m", use_sliding_window=True, sliding_window=32))
    assert [config.layer_window(i) for i in range(config.num_layers)] == [32] * config.num_layers
    unset = resolve_model_config(write_qwen3_moe_config(tmp_path / "n", sliding_window=32))
    assert unset.sliding_window is None


# Presets and sizing -------------------------------------------------------------------------


def test_30b_preset_is_the_published_shape(tmp_path):
    config = get_preset("qwen3-30b-a3b")
    folder = write_qwen3_moe_config(tmp_path / "m", **QWEN3_30B_A3B_CONFIG)
    from_file = resolve_model_config(folder)
    assert {**config.to_dict(), "name": None} == {**from_file.to_dict(), "name": None}
    fields = {k: v for k, v in QWEN3_30B_A3B_CONFIG.items()
              if k not in ("architectures", "model_type", "torch_dtype", "transformers_version")}
    with torch.device("meta"):
        hf_model = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**fields))
    counted = sum(p.numel() for p in hf_model.parameters())
    assert config.num_parameters() == counted == QWEN3_30B_A3B_PARAMETERS
    idle = 48 * (128 - 8) * 3 * 2048 * 768  # all but 8 of 128 experts in each of 48 layers
    assert config.num_active_parameters() == QWEN3_30B_A3B_PARAMETERS - idle


def test_235b_preset_counts_what_transformers_counts():
    config = get_preset("qwen3-235b-a22b")
    fields = dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=94,
                  num_attention_heads=64, num_key_value_heads=4, head_dim=128,
                  moe_intermediate_size=1536, num_experts=128, num_experts_per_tok=8,
                  norm_topk_prob=True, vocab_size=151936)
    with torch.device("meta"):
        hf_model = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**fields))
    counted = sum(p.numel() for p in hf_model.parameters())
    assert config.num_parameters() == counted == QWEN3_235B_A22B_PARAMETERS
    assert config.num_active_parameters() == 22_190_763_520


def test_estimate_json_on_a_qwen3_30b_a3b_config_json(tmp_path):
    folder = write_qwen3_moe_config(tmp_path / "m", **QWEN3_30B_A3B_CONFIG)
    result = CliRunner().invoke(estimate_command, [
        "--model", folder, "--context", "32768", "--gpu-memory", "141GiB", "--json"])
    assert result.exit_code == 0, result.output
    est = json.loads(result.output)
    assert est["kv_bytes_per_token"] == 2 * 48 * 4 * 128 * 2  # K and V, bf16
    assert est["num_parameters"] == QWEN3_30B_A3B_PARAMETERS
    assert est["active_parameters"] == 3_353_032_704
    # as vLLM loads them: the parameters and the rotary cos/sin cache (positions x head dim)
    assert est["weights_bytes"] == 2 * QWEN3_30B_A3B_PARAMETERS + 40960 * 128 * 2


def test_simulate_on_a_qwen3_30b_a3b_config_json(tmp_path, capsys):
    folder = write_qwen3_moe_config(tmp_path / "m", **QWEN3_30B_A3B_CONFIG)
    out = tmp_path / "out"
    code = main(["simulate", "--model", folder, "--strategy", "paged", "--num-requests", "8",
                 "--warmup", "0", "--quiet", "--gpu", "h100-80gb", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    (run_dir,) = out.iterdir()
    saved = json.loads((run_dir / "config.json").read_text())["model_config"]
    assert (saved["num_local_experts"], saved["num_experts_per_tok"]) == (128, 8)
    assert saved["moe_intermediate_size"] == 768


def test_step_time_charges_the_experts_width():
    """A one-token decode's expert gemms are those of 768-wide experts, not 6144-wide ones."""
    from dataclasses import replace

    from kvbench.simulator.gpu_lookup import get_gpu
    from kvbench.simulator.step_time import StepTimeModel

    gpu = get_gpu("h200")
    qwen = get_preset("qwen3-30b-a3b")
    one = StepTimeModel(qwen, gpu, 2, 2).cost([1], [100], 1)
    wide = StepTimeModel(replace(qwen, moe_intermediate_size=6144), gpu, 2, 2).cost(
        [1], [100], 1)
    assert one.flops < 0.5 * wide.flops


def test_fused_expert_names_load_as_the_per_expert_ones(qwen3_moe_checkpoint, tmp_path):
    """transformers 5's module names (experts fused in [experts, ...] tensors) load into the
    same weights as the per-expert names save_pretrained writes."""
    from safetensors.torch import save_file

    from kvbench.models.loader import load_model

    folder, hf_model = qwen3_moe_checkpoint
    state = {k: v.contiguous() for k, v in hf_model.state_dict().items()}
    assert "model.layers.0.mlp.experts.gate_up_proj" in state
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    per_expert, _ = load_model(str(folder))
    fused, _ = load_model(str(tmp_path))
    for (name, a), (_, b) in zip(per_expert.state_dict().items(), fused.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name
