"""gpt-oss: attention with biases and learned sinks, alternating sliding-window and full layers,
YaRN rope, and a mixture of biased experts (router bias, top-k logits softmaxed over the k,
gate/up interleaved in the fused layout, the clamped SwiGLU); its presets, the published
config.json (mxfp4: sized, never loaded), against transformers' GptOssForCausalLM."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from kvbench.cli import main
from kvbench.cli.estimate import estimate_command
from kvbench.errors import KvbenchInputError
from kvbench.kernels import reference as ops
from kvbench.models.loader import load_model
from kvbench.models.memory_check import check_memory, memory_need
from kvbench.models.presets import get_preset
from kvbench.models.resolve_config import resolve_model_config
from tests.conftest import random_prompts
from tests.models.engine_parity import (
    check_chunked_prefill,
    check_preemption,
    check_prefill_and_decode,
    check_prefix_hit,
)

transformers = pytest.importorskip("transformers")

WINDOW = 16
# Four layers alternating a 16-token window and full attention, eight experts two a token, a
# clamp of 1 (random activations reach it, so a missing clamp changes tokens) and YaRN over
# 64 original positions (the prompts run 3-4 times past them).
TINY_GPT_OSS = dict(
    vocab_size=512, hidden_size=64, intermediate_size=48, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=8,
    num_experts_per_tok=2, sliding_window=WINDOW, swiglu_limit=1.0,
    max_position_embeddings=512, initializer_range=0.15,
    rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 8.0,
                     "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                     "original_max_position_embeddings": 64},
    bos_token_id=None, eos_token_id=None, pad_token_id=None,
)

# openai/gpt-oss-20b's config.json as published (the 120B: 36 layers, 128 experts).
GPT_OSS_20B_CONFIG = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
    "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8,
    "num_local_experts": 32, "output_router_logits": False, "pad_token_id": 199999,
    "quantization_config": {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
        "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                     "original_max_position_embeddings": 4096, "rope_type": "yarn",
                     "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
    "swiglu_limit": 7.0, "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0",
    "use_cache": True, "vocab_size": 201088,
}
GPT_OSS_120B_CONFIG = {**GPT_OSS_20B_CONFIG, "num_hidden_layers": 36, "num_local_experts": 128,
                       "layer_types": ["sliding_attention", "full_attention"] * 18}
# transformers' count on the meta device (every expert, bias, sink and router)
GPT_OSS_20B_PARAMETERS = 20_914_757_184
GPT_OSS_120B_PARAMETERS = 116_829_156_672


def make_gpt_oss(folder, seed: int = 0, **fields):
    """A random GptOssForCausalLM saved to `folder`: biases, sinks and norm weights drawn away
    from transformers' zeros and ones, so one not loaded or not applied changes tokens."""
    torch.manual_seed(seed)
    config = transformers.GptOssConfig(**{**TINY_GPT_OSS, **fields})
    model = transformers.GptOssForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.5 * torch.randn_like(param))
            elif name.endswith(("bias", "sinks")):
                param.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def gpt_oss_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt_oss")
    return folder, make_gpt_oss(folder)


def test_config_reads_gpt_oss_fields(gpt_oss_checkpoint):
    folder, hf_model = gpt_oss_checkpoint
    config = resolve_model_config(str(folder))
    assert [config.layer_window(i) for i in range(4)] == [WINDOW, None, WINDOW, None]
    assert (config.num_local_experts, config.num_experts_per_tok) == (8, 2)
    assert config.attention_sinks and config.moe_bias and config.swiglu_limit == 1.0
    assert config.num_parameters() == sum(p.numel() for p in hf_model.parameters())


def prefill_logits(folder, prompt: list[int]) -> torch.Tensor:
    """kvbench's logits for one prompt, each layer attending with its window and sinks."""
    model, config = load_model(str(folder))
    n = len(prompt)
    caches = [(torch.zeros(n, config.num_kv_heads, config.head_dim),) * 2
              for _ in range(config.num_layers)]
    caches = [(torch.zeros_like(k), torch.zeros_like(v)) for k, v in caches]

    def attend(layer, q, k, v):
        k_cache, v_cache = caches[layer]
        ops.write_kv(k, v, k_cache, v_cache, torch.arange(n))
        return ops.contiguous_attention(
            q, k_cache, v_cache, torch.tensor([0]), torch.tensor([0, n]), torch.tensor([n]),
            config.head_dim**-0.5, sliding_window=config.layer_window(layer),
            sinks=model.model.layers[layer].self_attn.sinks,
        )

    with torch.no_grad():
        return model.logits(model(torch.tensor(prompt), torch.arange(n), attend))


@pytest.mark.parametrize("fields", [{}, dict(attention_bias=False, swiglu_limit=7.0)])
def test_prefill_logits_match_transformers(fields, tmp_path):
    """A 100-token prompt (6 windows): logits within 1e-4."""
    hf_model = make_gpt_oss(tmp_path, seed=7, **fields)
    prompt = random_prompts(1, 512, seed=3, min_len=100, max_len=100)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    torch.testing.assert_close(prefill_logits(tmp_path, prompt), theirs, atol=1e-4, rtol=1e-4)


def test_prefill_and_decode_match_transformers(gpt_oss_checkpoint):
    """Prompts of 180-240 tokens (11+ windows) and 24 decoded tokens each."""
    check_prefill_and_decode(*gpt_oss_checkpoint, min_len=180, max_len=240)


def test_chunked_prefill_matches_transformers(gpt_oss_checkpoint):
    """Every prefill takes 3+ chunks of a 64-token budget, each crossing window edges."""
    check_chunked_prefill(*gpt_oss_checkpoint, min_len=180, max_len=240)


def test_preemption_matches_transformers(gpt_oss_checkpoint):
    """420 tokens of KV at 1 KiB a token (4 layers x 2 KV heads x 16 dims x K,V x 4 B)."""
    check_preemption(*gpt_oss_checkpoint, kv_memory="420KiB")


def test_prefix_hit_matches_transformers(gpt_oss_checkpoint):
    check_prefix_hit(*gpt_oss_checkpoint)


# config.json fields -------------------------------------------------------------------------


def write_gpt_oss_config(folder, **fields) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt_oss", **fields}))
    return str(folder)


REFUSED = {
    # name -> (fields over the published 20B, what the message names)
    "other-quantization": (dict(quantization_config={"quant_method": "gptq"}),
                           "quantization_config"),
    "unknown-layer-type": (dict(layer_types=["chunked_attention"] * 24), "layer_types"),
    "top-k-over-experts": (dict(num_experts_per_tok=33), "num_experts_per_tok"),
    "yarn-unknown-key": (dict(rope_scaling={**GPT_OSS_20B_CONFIG["rope_scaling"],
                                            "low_freq_factor": 1.0}), "low_freq_factor"),
    "yarn-no-factor": (dict(rope_scaling={"rope_type": "yarn", "beta_fast": 32.0}), "factor"),
    "partial-rotary": (dict(partial_rotary_factor=0.5), "partial_rotary_factor"),
    "bad-limit": (dict(swiglu_limit=0), "swiglu_limit"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_bad_gpt_oss_field_is_refused_naming_the_key(case, tmp_path):
    fields, message = REFUSED[case]
    with pytest.raises(KvbenchInputError, match=message):
        resolve_model_config(write_gpt_oss_config(tmp_path / "m",
                                                  **{**GPT_OSS_20B_CONFIG, **fields}))


def test_defaults_are_transformers_gpt_oss_config(tmp_path):
    """A config.json naming only its model_type is GptOssConfig's defaults: the 120B shape."""
    config = resolve_model_config(write_gpt_oss_config(tmp_path / "m"))
    preset = get_preset("gpt-oss-120b")
    assert {**config.to_dict(), "name": None} == {**preset.to_dict(), "name": None}
    assert config.rope_scaling == preset.rope_scaling


def test_mxfp4_weights_are_refused_naming_the_key(tmp_path, capsys):
    """The published checkpoint's experts are mxfp4 blocks and scales: a run is refused before
    anything is read or allocated, with one line naming quantization_config."""
    folder = write_gpt_oss_config(tmp_path / "m", **GPT_OSS_20B_CONFIG)
    with pytest.raises(KvbenchInputError, match="quantization_config"):
        load_model(folder)
    code = main(["run", "--model", folder, "--num-requests", "1", "--quiet",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "quantization_config (mxfp4)" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


# Presets and sizing -------------------------------------------------------------------------


@pytest.mark.parametrize(("preset", "published", "parameters"), [
    ("gpt-oss-20b", GPT_OSS_20B_CONFIG, GPT_OSS_20B_PARAMETERS),
    ("gpt-oss-120b", GPT_OSS_120B_CONFIG, GPT_OSS_120B_PARAMETERS),
])
def test_presets_are_the_published_shapes(preset, published, parameters, tmp_path):
    config = get_preset(preset)
    from_file = resolve_model_config(write_gpt_oss_config(tmp_path / "m", **published))
    assert from_file.quantization == "mxfp4"
    skip = {"name": None, "quantization": None}
    assert {**config.to_dict(), **skip} == {**from_file.to_dict(), **skip}
    fields = {k: v for k, v in published.items()
              if k not in ("architectures", "model_type", "transformers_version",
                           "quantization_config")}
    with torch.device("meta"):
        hf_model = transformers.GptOssForCausalLM(transformers.GptOssConfig(**fields))
    assert config.num_parameters() == sum(p.numel() for p in hf_model.parameters()) == parameters


def test_active_parameters_are_four_experts_a_layer():
    """OpenAI's 3.6B and 5.1B active leave the input embedding out (a lookup, 201088 x 2880);
    kvbench counts it, as for every family (Mixtral's 12.9B, Qwen3's 3.3B count it)."""
    embedding = 201088 * 2880
    expert = 3 * 2880 * 2880 + 2 * 2880 + 2880  # gate, up, down and their biases
    for preset, layers, experts, openai_active in [("gpt-oss-20b", 24, 32, 3.6e9),
                                                   ("gpt-oss-120b", 36, 128, 5.1e9)]:
        config = get_preset(preset)
        active = config.num_active_parameters()
        assert active == config.num_parameters() - layers * (experts - 4) * expert
        assert abs(active - embedding - openai_active) < 0.05e9


def test_memory_check_counts_every_expert():
    """The 120B in bfloat16: 234 GB of weights, all 128 experts of 36 layers, refused on a
    machine with 100 GB however few of them a token uses."""
    need = memory_need(get_preset("gpt-oss-120b"), "bf16")
    assert need.weights_bytes == 2 * GPT_OSS_120B_PARAMETERS
    with pytest.raises(KvbenchInputError, match="needs 2"):
        check_memory(need, torch.device("cpu"), available=lambda _device: 100 * 10**9)


def _estimate(model: str, gpu_memory: str = "141GiB") -> dict:
    result = CliRunner().invoke(estimate_command, [
        "--model", model, "--context", "32768", "--gpu-memory", gpu_memory, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_estimate_json_on_the_published_config_json(tmp_path):
    """The published config.json estimates as the preset does: weights as vLLM loads them (its
    MXFP4 experts; vLLM logs 13.47 GiB for the 20B), KV per window and full group."""
    est = _estimate(write_gpt_oss_config(tmp_path / "m", **GPT_OSS_20B_CONFIG))
    per_layer = 2 * 8 * 64 * 2  # K and V, 8 KV heads of 64, bf16
    assert [(g["attention"], g["window"], g["num_layers"], g["bytes_per_token"])
            for g in est["kv_groups"]] == [
        ("full", None, 12, 12 * per_layer), ("sliding", 128, 12, 12 * per_layer)]
    assert est["kv_bytes_per_token"] == 24 * per_layer
    assert est["num_parameters"] == GPT_OSS_20B_PARAMETERS
    assert 13.3 < est["weights_bytes"] / 2**30 < 13.6  # not 2 B a parameter (39 GiB)
    assert est == {**_estimate("gpt-oss-20b"), "model": est["model"]}


def test_estimate_json_on_the_120b_preset():
    est = _estimate("gpt-oss-120b", gpu_memory="320GiB")  # bfloat16 weights: 218 GiB
    assert [(g["attention"], g["window"], g["bytes_per_token"]) for g in est["kv_groups"]] \
        == [("full", None, 18 * 2048), ("sliding", 128, 18 * 2048)]
    assert est["active_parameters"] == get_preset("gpt-oss-120b").num_active_parameters()


@pytest.mark.parametrize("model", ["gpt-oss-20b", "published"])
def test_simulate_runs_on_an_h100(model, tmp_path, capsys):
    if model == "published":
        model = write_gpt_oss_config(tmp_path / "m", **GPT_OSS_20B_CONFIG)
    out = tmp_path / "out"
    code = main(["simulate", "--model", model, "--strategy", "paged", "--num-requests", "8",
                 "--warmup", "0", "--quiet", "--gpu", "h100-80gb", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    (run_dir,) = out.iterdir()
    saved = json.loads((run_dir / "config.json").read_text())["model_config"]
    assert (saved["num_local_experts"], saved["architecture"]) == (32, "gpt_oss")


def test_models_md_capacity_of_the_mxfp4_120b_on_one_h100():
    """docs/models.md's figures: the published mxfp4 experts (17/32 bytes a parameter, the
    rest bfloat16) as vLLM loads them leave 4.35 GiB of KV on one H100 at 32,768 tokens, and
    vLLM would not start at the model's own 131,072."""
    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "models.md")
                    .read_text(encoding="utf-8").split())
    m = re.search(r"`(kvbench estimate --model gpt-oss-120b [^`]+)` shows ([\d.]+) GiB of "
                  r"weights and leaves ([\d.]+) GiB of KV on one H100 .*?, ([\d,]+) tokens at "
                  r"72 KiB a token", text)
    assert m, "docs/models.md: the gpt-oss-120b sizing's prose changed shape"
    command, weights, budget, tokens = m.groups()
    config = get_preset("gpt-oss-120b")
    expert_weights = 36 * 128 * 3 * 2880 * 2880
    experts_mxfp4 = expert_weights * 17 // 32
    result = CliRunner().invoke(estimate_command, [*command.split()[2:], "--json"])
    assert result.exit_code == 0, result.output
    est = json.loads(result.output)
    assert est["weights_bytes"] >= experts_mxfp4 + 2 * (config.num_parameters() - expert_weights)
    assert f"{est['weights_bytes'] / 2**30:.2f}" == weights
    assert f"{est['kv_budget_bytes'] / 2**30:.2f}" == budget
    assert est["kv_capacity_tokens"] == int(tokens.replace(",", ""))
    assert est["kv_bytes_per_token"] == 72 * 1024
    refused = CliRunner().invoke(estimate_command, ["--model", "gpt-oss-120b", "--gpu",
                                                    "h100-80gb"])
    assert refused.exit_code == 2 and "--max-model-len" in refused.output
