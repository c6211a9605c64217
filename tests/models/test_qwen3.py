"""Qwen3: per-head q/k RMSNorm before rope, head_dim apart from hidden / heads, its presets, and
its config.json fields, against transformers' Qwen3ForCausalLM and Qwen3Config."""

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

# head_dim 32 while hidden / heads is 16: q is 128 wide on a 64 hidden.
TINY_QWEN3 = dict(
    vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
    initializer_range=0.15, bos_token_id=None, eos_token_id=None, pad_token_id=None,
)

# Qwen/Qwen3-8B's config.json as published.
QWEN3_8B_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
    "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
    "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}
# Qwen/Qwen3-14B's and Qwen/Qwen3-32B's differ in these fields.
QWEN3_14B_CONFIG = {
    **QWEN3_8B_CONFIG, "hidden_size": 5120, "intermediate_size": 17408,
    "num_attention_heads": 40, "num_hidden_layers": 40, "max_window_layers": 40,
}
QWEN3_32B_CONFIG = {
    **QWEN3_8B_CONFIG, "hidden_size": 5120, "intermediate_size": 25600,
    "num_attention_heads": 64, "num_hidden_layers": 64, "max_window_layers": 64,
}


def make_qwen3(folder, seed: int = 0, **fields):
    """A random Qwen3ForCausalLM saved to `folder`. Every norm weight is drawn away from 1
    (transformers inits them to ones) so a q/k norm left out or not loaded changes tokens."""
    torch.manual_seed(seed)
    config = transformers.Qwen3Config(**{**TINY_QWEN3, **fields})
    model = transformers.Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.5 * torch.randn_like(param))
            elif name.endswith("bias"):
                param.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    return model


@pytest.fixture(scope="module", params=["untied", "tied"])
def qwen3_checkpoint(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"qwen3-{request.param}")
    model = make_qwen3(folder, tie_word_embeddings=request.param == "tied")
    return folder, model


def test_config_reads_qwen3_fields(qwen3_checkpoint):
    folder, hf_model = qwen3_checkpoint
    config = resolve_model_config(str(folder))
    assert config.qk_norm and config.head_dim == 32 and config.sliding_window is None
    assert (config.attention_bias, config.o_proj_bias, config.mlp_bias) == (False, False, False)
    assert config.tie_word_embeddings == hf_model.config.tie_word_embeddings
    assert config.num_parameters() == sum(p.numel() for p in hf_model.parameters())


@pytest.mark.parametrize("fields", [{}, dict(attention_bias=True)], ids=["plain", "bias"])
def test_prefill_logits_match_transformers(fields, tmp_path):
    """300 tokens; Qwen3's attention_bias covers q, k, v and o_proj, as transformers'."""
    hf_model = make_qwen3(tmp_path, **fields)
    prompt = random_prompts(1, 512, seed=3, min_len=300, max_len=300)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    torch.testing.assert_close(kvbench_prefill_logits(tmp_path, prompt), theirs,
                               atol=1e-4, rtol=1e-4)


def test_prefill_and_decode_match_transformers(qwen3_checkpoint):
    check_prefill_and_decode(*qwen3_checkpoint, min_len=240, max_len=300)


def test_chunked_prefill_matches_transformers(qwen3_checkpoint):
    """Prompts of 240+ tokens under a 64-token step budget: every prefill takes 4+ chunks."""
    check_chunked_prefill(*qwen3_checkpoint, min_len=240, max_len=300)


def test_preemption_matches_transformers(qwen3_checkpoint):
    """Three ~190-token prompts growing 48 tokens each in 420 KiB (420 tokens of KV)."""
    check_preemption(*qwen3_checkpoint, kv_memory="420KiB")


def test_prefix_hit_matches_transformers(qwen3_checkpoint):
    """A 200-token shared prefix: later requests reuse its cached blocks (post-norm, post-rope
    keys), then decode past it."""
    check_prefix_hit(*qwen3_checkpoint)


# config.json fields -------------------------------------------------------------------------


def write_qwen3_config(folder, **fields) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    hf = {**TINY_QWEN3, "model_type": "qwen3", **fields}
    (folder / "config.json").write_text(json.dumps(hf))
    return str(folder)


WINDOW_FIELDS = {
    # name -> fields over TINY_QWEN3 (two layers)
    "window-off": dict(use_sliding_window=False, sliding_window=32, max_window_layers=0),
    "window-on-from-layer-0": dict(use_sliding_window=True, sliding_window=32,
                                   max_window_layers=0),
    "window-on-from-layer-1": dict(use_sliding_window=True, sliding_window=32,
                                   max_window_layers=1),
    "window-on-no-layer": dict(use_sliding_window=True, sliding_window=32, max_window_layers=2),
    "window-on-default-layers": dict(use_sliding_window=True, sliding_window=32),
    "layer-types-sliding": dict(use_sliding_window=True, sliding_window=32,
                                layer_types=["full_attention", "sliding_attention"]),
    "layer-types-full": dict(use_sliding_window=True, sliding_window=32,
                             layer_types=["full_attention", "full_attention"]),
}


@pytest.mark.parametrize("case", list(WINDOW_FIELDS))
def test_window_applies_where_transformers_applies_it(case, tmp_path):
    """kvbench windows exactly the layers transformers' Qwen3Config makes sliding-window
    layers."""
    fields = WINDOW_FIELDS[case]
    config = resolve_model_config(write_qwen3_config(tmp_path / "m", **fields))
    hf_config = transformers.Qwen3Config(**{**TINY_QWEN3, **fields})
    assert [config.layer_window(i) for i in range(config.num_layers)] == [
        32 if t == "sliding_attention" else None for t in hf_config.layer_types]


REFUSED = {
    # name -> (fields over TINY_QWEN3, what the message names)
    "layer-type-unknown": (dict(layer_types=["full_attention", "linear_attention"]),
                           "layer_types linear_attention"),
    "layer-types-length": (dict(layer_types=["full_attention"]), "layer_types"),
    "sliding-layers-without-window": (
        dict(use_sliding_window=False, layer_types=["sliding_attention", "full_attention"]),
        "layer_types"),
    "window-not-an-int": (dict(use_sliding_window=True, sliding_window="32",
                               max_window_layers=0), "sliding_window"),
    "rope-linear": (dict(rope_scaling={"rope_type": "linear", "factor": 4.0}), "rope_scaling"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_unimplemented_qwen3_field_is_refused_naming_the_key(case, tmp_path):
    fields, message = REFUSED[case]
    folder = write_qwen3_config(tmp_path / "m", **fields)
    with pytest.raises(KvbenchInputError, match=message):
        resolve_model_config(folder)


# Presets and sizing -------------------------------------------------------------------------


@pytest.mark.parametrize(("preset", "hf", "published"), [
    ("qwen3-8b", QWEN3_8B_CONFIG, 8_190_735_360),
    ("qwen3-14b", QWEN3_14B_CONFIG, 14_768_307_200),
    ("qwen3-32b", QWEN3_32B_CONFIG, 32_762_123_264),
])
def test_preset_is_the_published_shape(preset, hf, published, tmp_path):
    """Same shape as the published config.json, and transformers counts the same parameters
    (q/k norms included: 2 x 128 a layer); the hf engine builds the preset as a Qwen3."""
    from kvbench.execution.transformers_engine import hf_config_for

    config = get_preset(preset)
    from_file = resolve_model_config(write_qwen3_config(tmp_path / "m", **hf))
    assert {**config.to_dict(), "name": None} == {**from_file.to_dict(), "name": None}
    fields = {k: v for k, v in hf.items()
              if k not in ("architectures", "model_type", "torch_dtype", "transformers_version")}
    with torch.device("meta"):
        hf_model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**fields))
        engine_model = transformers.AutoModelForCausalLM.from_config(
            hf_config_for(config, preset))
    assert config.num_parameters() == sum(p.numel() for p in hf_model.parameters()) == published
    assert type(engine_model).__name__ == "Qwen3ForCausalLM"
    assert sum(p.numel() for p in engine_model.parameters()) == published


def test_estimate_json_on_a_qwen3_config_json(tmp_path):
    folder = write_qwen3_config(tmp_path / "m", **QWEN3_8B_CONFIG)
    result = CliRunner().invoke(estimate_command, [
        "--model", folder, "--context", "8192", "--gpu-memory", "80GiB", "--json"])
    assert result.exit_code == 0, result.output
    est = json.loads(result.output)
    assert est["kv_bytes_per_token"] == 2 * 36 * 8 * 128 * 2  # K and V, bf16
    assert est["num_parameters"] == 8_190_735_360
    # as vLLM loads them: the parameters and the rotary cos/sin cache (positions x head dim)
    assert est["weights_bytes"] == 2 * 8_190_735_360 + 40960 * 128 * 2


def test_simulate_paged_on_a_qwen3_config_json(tmp_path, capsys):
    folder = write_qwen3_config(tmp_path / "m", **QWEN3_8B_CONFIG)
    out = tmp_path / "out"
    code = main(["simulate", "--model", folder, "--strategy", "paged", "--num-requests", "8",
                 "--warmup", "0", "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    (run_dir,) = out.iterdir()
    saved = json.loads((run_dir / "config.json").read_text())["model_config"]
    assert saved["qk_norm"] is True and saved["head_dim"] == 128


def test_step_time_counts_the_qk_norms():
    """Two more elementwise kernels a layer, each reading and writing q or k."""
    from dataclasses import replace

    from kvbench.simulator.gpu_lookup import get_gpu
    from kvbench.simulator.step_time import StepTimeModel, elementwise_s

    gpu = get_gpu("h100-80gb")
    qwen3 = get_preset("qwen3-8b")
    with_norms = StepTimeModel(qwen3, gpu, 2, 2)
    without = StepTimeModel(replace(qwen3, qk_norm=False), gpu, 2, 2)
    tokens = 512
    extra = qwen3.num_layers * elementwise_s(
        gpu.constants, with_norms.hw, 2, tokens * 2 * 2 * (32 * 128 + 8 * 128))
    got = with_norms.cost([tokens], [tokens], 1).parts["elementwise"]
    assert got - without.cost([tokens], [tokens], 1).parts["elementwise"] == pytest.approx(extra)
