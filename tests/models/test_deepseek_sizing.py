"""DeepSeek's config.json fields (V3 and V2, refusals), the deepseek-v3 preset, its sizing
(`kvbench estimate`, `kvbench simulate`) and the step-time model of latent attention."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from kvbench.cli import main
from kvbench.cli.estimate import estimate_command
from kvbench.core.kv_groups import kv_bytes_per_token
from kvbench.errors import KvbenchInputError
from kvbench.models.presets import get_preset
from kvbench.models.resolve_config import resolve_model_config
from tests.conftest import random_prompts
from tests.models.engine_parity import check_prefill_and_decode
from tests.models.test_deepseek_v3 import TINY_DEEPSEEK_V3, latent_prefill_logits

transformers = pytest.importorskip("transformers")

# deepseek-ai/DeepSeek-V3's config.json as published (auto_map left out).
DEEPSEEK_V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1,
    "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
    "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
    "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1, "pretraining_tp": 1, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                            "quant_method": "fp8", "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
    "seq_aux": True, "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": True,
    "v_head_dim": 128, "vocab_size": 129280,
}
# transformers' count on the meta device (the multi-token-prediction layer left out)
DEEPSEEK_V3_PARAMETERS = 671_026_404_352
# 61 layers x (512 latent + 64 rope) x 2 B
DEEPSEEK_V3_KV_BYTES_PER_TOKEN = 70_272


def write_config(folder, hf: dict) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(hf))
    return str(folder)


def test_preset_is_the_published_shape(tmp_path):
    """Same shape as the published config.json, and transformers counts the same parameters."""
    preset = get_preset("deepseek-v3")
    from_file = resolve_model_config(write_config(tmp_path / "m", DEEPSEEK_V3_CONFIG))
    assert {**preset.to_dict(), "name": None} == {**from_file.to_dict(), "name": None}
    fields = {k: v for k, v in DEEPSEEK_V3_CONFIG.items()
              if k not in ("architectures", "model_type", "torch_dtype", "transformers_version",
                           "quantization_config")}
    with torch.device("meta"):
        hf_model = transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(**fields))
    counted = sum(p.numel() for p in hf_model.parameters())
    assert preset.num_parameters() == counted == DEEPSEEK_V3_PARAMETERS
    # Active: all but 8 of 256 routed experts in each of the 58 mixture layers.
    idle = 58 * 248 * 3 * 7168 * 2048
    assert preset.num_active_parameters() == DEEPSEEK_V3_PARAMETERS - idle
    assert 36e9 < preset.num_active_parameters() < 38e9


def test_latent_cache_is_one_576_wide_row_whole_on_every_gpu():
    model = get_preset("deepseek-v3")
    (group,) = model.kv_groups(2)
    assert group.attention == "mla" and group.slot_shape == (1, 576) and group.value_dim == 512
    assert group.bytes_per_token == DEEPSEEK_V3_KV_BYTES_PER_TOKEN
    assert group.formula() == "61 layers x (512 latent + 64 rope) x 2 B"
    assert kv_bytes_per_token(model.kv_groups(2, tensor_parallel_size=8)) == 70_272
    assert model.kv_bytes_per_token(1) == 35_136  # fp8
    with pytest.raises(KvbenchInputError, match="does not divide"):
        model.kv_groups(2, tensor_parallel_size=3)


def test_estimate_json_on_the_published_config_json(tmp_path):
    """8 x H200 (141 GiB each): fp8 weights (the checkpoint's quantization_config) sharded 8
    ways beside the norms and latent down-projections every GPU holds; 32k-token requests."""
    folder = write_config(tmp_path / "m", DEEPSEEK_V3_CONFIG)
    common = ["--model", folder, "--context", "32768", "--gpu-memory", "141GiB",
              "--tensor-parallel-size", "8", "--json"]
    result = CliRunner().invoke(estimate_command, common)
    assert result.exit_code == 0, result.output
    est = json.loads(result.output)
    assert est["kv_bytes_per_token"] == DEEPSEEK_V3_KV_BYTES_PER_TOKEN
    assert (est["num_kv_heads"], est["head_dim"]) == (1, 576)
    assert est["num_parameters"] == DEEPSEEK_V3_PARAMETERS
    # fp8 linear layers; as vLLM loads them, the embedding and LM head stay bf16 (2 B), each
    # GPU holding 1/8 of their vocabulary rows beside the replicated norms and down-projections
    assert est["dtype"] == "fp8"
    replicated = 61 * (7168 * (1536 + 576) + 1536 + 512 + 2 * 7168) + 7168
    tables = 2 * 129280 * 7168
    assert est["weights_bytes_per_gpu"] > -(-(DEEPSEEK_V3_PARAMETERS - replicated) // 8) + (
        replicated) + tables // 8 // 2
    # the budget is the pool vLLM would allocate: its tokens at 70,272 B each
    budget = est["kv_budget_bytes"]
    assert budget == est["vllm"]["kv_cache_tokens"] * 70_272
    assert budget <= est["vllm"]["available_kv_cache_bytes"]
    assert est["max_concurrency"] == budget // 70_272 // 32768 == 20
    mha = est["mha_equivalent"]
    assert mha["kv_bytes_per_token"] == 61 * (128 // 8) * (192 + 128) * 2
    assert mha["max_concurrency"] == budget // mha["kv_bytes_per_token"] // 32768 == 2
    # the model's 163,840-token max length: contiguous reserves it for every request
    assert est["strategies"]["contiguous"]["max_concurrency"] == budget // 70_272 // 163840
    fp8 = json.loads(CliRunner().invoke(estimate_command,
                                        [*common, "--kv-cache-dtype", "fp8"]).output)
    assert fp8["kv_bytes_per_token"] == 35_136 and fp8["max_concurrency"] == 41  # 2 x 20.6


def test_simulate_on_the_published_config_json(tmp_path, capsys):
    """8 x H200 runs; one H200 is refused (its share of the weights does not fit)."""
    folder = write_config(tmp_path / "m", DEEPSEEK_V3_CONFIG)
    common = ["simulate", "--model", folder, "--gpu", "h200", "--num-requests", "8",
              "--warmup", "0", "--quiet"]
    out = tmp_path / "out"
    assert main([*common, "--tensor-parallel-size", "8", "--out", str(out)]) == 0, (
        capsys.readouterr().err)
    (run_dir,) = out.iterdir()
    saved = json.loads((run_dir / "config.json").read_text())["model_config"]
    assert saved["mla"]["kv_lora_rank"] == 512 and saved["quantization"] == "fp8"
    capsys.readouterr()
    refused = tmp_path / "refused"
    assert main([*common, "--out", str(refused)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert not refused.exists() or not any(refused.iterdir())


def test_simulated_capacity_holds_one_latent_per_gpu():
    """Under TP the group holds what one GPU's budget holds of whole latent rows (not 8 x)."""
    from kvbench.build.engines import build_engine
    from kvbench.build.simulated_executors import SimulatedExecutors
    from kvbench.config import EngineConfig

    built = build_engine(EngineConfig(
        model="deepseek-v3", tensor_parallel_size=8, dtype="bfloat16",
        kv_memory=8 * 70_272 * 1000), SimulatedExecutors("h200"))
    assert built.engine.strategy.num_slots == 1000


def test_engine_refuses_fp8_weights(tmp_path):
    folder = write_config(tmp_path / "m", {**DEEPSEEK_V3_CONFIG, "num_hidden_layers": 1})
    from kvbench.models.loader import load_model

    with pytest.raises(KvbenchInputError, match="quantization_config"):
        load_model(folder)


# config.json fields ---------------------------------------------------------------------

TINY_V3_JSON = {**TINY_DEEPSEEK_V3, "model_type": "deepseek_v3"}

REFUSED = {
    # name -> (fields over the tiny V3 config, what the message names)
    "scoring": (dict(scoring_func="softmax"), "scoring_func"),
    "topk-method": (dict(topk_method="greedy"), "topk_method"),
    "moe-layer-freq": (dict(moe_layer_freq=2), "moe_layer_freq"),
    "groups": (dict(n_group=3), "n_group"),
    "one-expert-groups": (dict(n_group=8, topk_group=2), "n_group"),
    "topk-group": (dict(topk_group=5), "topk_group"),
    "rope": (dict(rope_scaling={"type": "dynamic", "factor": 2.0}), "rope_scaling"),
    "partial-rope": (dict(partial_rotary_factor=0.5), "partial_rotary_factor"),
    "quantization": (dict(quantization_config={"quant_method": "awq"}), "quantization_config"),
    "activation": (dict(hidden_act="gelu"), "hidden_act"),
    "mlp-bias": (dict(mlp_bias=True), "mlp_bias"),
    "top-k": (dict(num_experts_per_tok=9), "num_experts_per_tok"),
    "v2-norm": (dict(model_type="deepseek_v2", topk_method="greedy", norm_topk_prob=True),
                "norm_topk_prob"),
    "v2-method": (dict(model_type="deepseek_v2", topk_method="noaux_tc"), "topk_method"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_unimplemented_deepseek_field_is_refused_naming_the_key(case, tmp_path):
    fields, message = REFUSED[case]
    hf = {**TINY_V3_JSON, **fields}
    with pytest.raises(KvbenchInputError, match=message) as err:
        resolve_model_config(write_config(tmp_path / "m", hf))
    assert "\n" not in str(err.value)


# DeepSeek-V2: softmax routing, greedy or group-limited, complex-number rope ---------------

TINY_DEEPSEEK_V2 = dict(
    vocab_size=512, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
    num_hidden_layers=3, num_attention_heads=4, kv_lora_rank=32, q_lora_rank=48,
    qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=8, n_group=4,
    topk_group=2, num_experts_per_tok=2, first_k_dense_replace=1, n_shared_experts=2,
    routed_scaling_factor=1.5, topk_method="group_limited_greedy",
    max_position_embeddings=512, initializer_range=0.15, bos_token_id=None, eos_token_id=None,
    pad_token_id=None,
)


def make_deepseek_v2(folder, seed: int = 0, **fields):
    torch.manual_seed(seed)
    config = transformers.DeepseekV2Config(**{**TINY_DEEPSEEK_V2, **fields})
    model = transformers.DeepseekV2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.5 * torch.randn_like(param))
    model.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def deepseek_v2_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deepseek_v2")
    return folder, make_deepseek_v2(folder)


def test_v2_config_reads_softmax_routing(deepseek_v2_checkpoint):
    folder, hf_model = deepseek_v2_checkpoint
    config = resolve_model_config(str(folder))
    assert config.routing.scoring == "softmax" and not config.routing.has_correction_bias
    assert config.routing.topk_method == "group_limited_greedy" and not config.norm_topk_prob
    assert config.num_parameters() == sum(p.numel() for p in hf_model.parameters())


@pytest.mark.parametrize("fields", [
    {},
    {"topk_method": "greedy", "q_lora_rank": None,
     "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                      "mscale": 0.707, "mscale_all_dim": 0.707}},
], ids=["group-limited", "greedy-yarn-no-q-lora"])
def test_v2_prefill_logits_match_transformers(fields, tmp_path):
    hf_model = make_deepseek_v2(tmp_path, seed=1, **fields)
    prompt = random_prompts(1, 512, seed=3, min_len=200, max_len=200)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    torch.testing.assert_close(latent_prefill_logits(tmp_path, prompt), theirs,
                               atol=1e-4, rtol=1e-4)


def test_v2_prefill_and_decode_match_transformers(deepseek_v2_checkpoint):
    check_prefill_and_decode(*deepseek_v2_checkpoint, min_len=100, max_len=160)


# Step-time model ------------------------------------------------------------------------


def _model(gpu="h200", tp=8, kv_bytes=2, **fields):
    from kvbench.simulator.gpu_lookup import get_gpu
    from kvbench.simulator.step_time import StepTimeModel

    return StepTimeModel(replace(get_preset("deepseek-v3"), **fields), get_gpu(gpu), 1,
                         kv_bytes, tp)


def test_mla_decode_reads_the_whole_latent_on_every_gpu():
    """Decode attention reads 576 x element bytes a token and layer, whatever the TP size;
    an fp8 latent halves it."""
    for tp in (1, 8):
        assert _model(tp=tp).kv_layer_token_bytes == 576 * 2
    assert _model(kv_bytes=1).kv_layer_token_bytes == 576
    many, few = _model().cost([1] * 64, [32768] * 64, 64), _model().cost([1] * 64, [1024] * 64, 64)
    read = 64 * (32768 - 1024) * 576 * 2 * 61
    assert many.bytes - few.bytes == pytest.approx(read)


def test_mla_charges_the_absorbed_projections():
    """FLOPs of one decode token: the active weights' (attention with W_UK and W_UV absorbed,
    the router, the shared and 8 routed experts, dense first layers) plus attention over the
    latent; a shared expert more costs more."""
    m = _model(tp=1)
    h, heads = 7168, 128
    attention = (h * 1536 + 1536 * heads * 192 + h * 576 + 128 * heads * 512
                 + 512 * heads * 128 + heads * 128 * h)
    expert = 3 * h * 2048
    moe = attention + h * 256 + expert + 8 * expert
    dense = attention + 3 * h * 18432
    lm_head = 2 * h * 129280
    context = 1000
    pair = 2 * heads * (576 + 512)
    one = m.cost([1], [context], 1)
    assert one.flops == pytest.approx(2 * (58 * moe + 3 * dense) + lm_head + 61 * pair * context)
    no_shared = _model(tp=1, num_shared_experts=0).cost([1], [context], 1)
    assert no_shared.flops == pytest.approx(one.flops - 2 * 58 * expert)
    assert no_shared.time_s < one.time_s


# docs/findings.md's DeepSeek-V3 figures, rerun by the commands it gives -----------------

FINDINGS = Path(__file__).resolve().parents[2] / "docs" / "findings.md"


def _findings_section() -> str:
    text = FINDINGS.read_text(encoding="utf-8")
    start = text.index("## DeepSeek-V3 on 8 × H200")
    return text[start:text.index("\n## ", start + 1)]


def test_findings_deepseek_estimate_figures(capsys):
    section = _findings_section()
    command = re.search(r"^(kvbench estimate [^\n]+)$", section, re.M).group(1)
    prose = " ".join(section.split())
    m = re.search(r"prints ([\d,]+) bytes per token .*?, ([\d.]+) GiB of weights per GPU .*?"
                  r"a ([\d.]+) GiB KV budget per GPU, so (\d+) concurrent ([\d,]+)-token "
                  r"requests paged against (\d+) with contiguous .*? the same command gives "
                  r"(\d+) paged and (\d+) contiguous\. .*?, ([\d,]+) bytes per token per GPU\) "
                  r"would hold (\d+) such requests \((\d+) in fp8\)", prose)
    assert m, "docs/findings.md: the DeepSeek-V3 estimate's prose changed shape"
    (per_token, weights, budget, paged, context, contiguous, paged_fp8, contiguous_fp8,
     mha_per_token, mha, mha_fp8) = m.groups()
    argv = shlex.split(command)[1:]
    results = []
    for extra in ([], ["--kv-cache-dtype", "fp8"]):
        assert main([*argv, *extra, "--json"]) == 0
        results.append(json.loads(capsys.readouterr().out))
    est, fp8 = results
    gib = 1024**3
    assert est["kv_bytes_per_token"] == int(per_token.replace(",", ""))
    assert f"{est['weights_bytes_per_gpu'] / gib:.2f}" == weights
    assert f"{est['kv_budget_bytes'] / gib:.2f}" == budget
    assert est["context"] == int(context.replace(",", ""))
    assert (est["strategies"]["paged"]["max_concurrency"],
            est["strategies"]["contiguous"]["max_concurrency"]) == (int(paged), int(contiguous))
    assert (fp8["strategies"]["paged"]["max_concurrency"],
            fp8["strategies"]["contiguous"]["max_concurrency"]) == (int(paged_fp8),
                                                                    int(contiguous_fp8))
    assert est["mha_equivalent"]["kv_bytes_per_token"] == int(mha_per_token.replace(",", ""))
    assert est["mha_equivalent"]["max_concurrency"] == int(mha)
    assert fp8["mha_equivalent"]["max_concurrency"] == int(mha_fp8)


def test_findings_deepseek_simulated_figures(tmp_path, capsys, monkeypatch):
    import kvbench.session.session

    monkeypatch.setattr(kvbench.session.session, "write_reports", lambda *_a, **_k: None)
    section = _findings_section()
    command = re.search(r"^(kvbench simulate [^\n]+)$", section, re.M).group(1)
    rows = [line.strip("|").split("|") for line in section.splitlines()
            if line.startswith(("| bf16", "| fp8"))]
    assert len(rows) == 2
    for (label, capacity, paged, contiguous), kv in zip(rows, ("auto", "fp8"), strict=True):
        assert f"--kv-cache-dtype {kv}" in label
        out = tmp_path / kv
        argv = [*shlex.split(command)[1:], "--kv-cache-dtype", kv, "--json", "--out", str(out)]
        assert main(argv) == 0
        summaries = {s["strategy"]: s for s in json.loads(capsys.readouterr().out)}
        got_paged, got_contiguous = summaries["paged"], summaries["contiguous"]
        assert got_paged["memory"]["kv_capacity_tokens"] == int(capacity.replace(",", ""))
        assert got_paged["scheduler"]["batch_size_max"] == int(paged)
        assert got_contiguous["scheduler"]["batch_size_max"] == int(contiguous)


def test_memory_check_counts_every_expert(tmp_path):
    """bf16 DeepSeek-V3 weights (every routed expert: 1.22 TiB) are refused before a byte
    is allocated, in one line."""
    from kvbench.models.loader import load_model

    hf = {k: v for k, v in DEEPSEEK_V3_CONFIG.items() if k != "quantization_config"}
    with pytest.raises(KvbenchInputError, match=r"weights 1\.22 TiB") as err:
        load_model(write_config(tmp_path / "m", hf), dtype=torch.bfloat16)
    assert "\n" not in str(err.value)
