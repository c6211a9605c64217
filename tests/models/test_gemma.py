"""Gemma 2 and Gemma 3 (text): alternating / 5:1 local and global layers, their rope bases,
attention and final logit soft-caps, query_pre_attn_scalar, the (1 + w) norms, pre/post
feed-forward norms, scaled embeddings and gelu-tanh, against transformers' Gemma2ForCausalLM
and Gemma3ForCausalLM; their presets and config.json fields."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from kvbench.cli import main
from kvbench.cli.estimate import estimate_command
from kvbench.errors import KvbenchInputError
from kvbench.kernels import reference as ops
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

transformers = pytest.importorskip("transformers")

# A 16-token window: every scenario's prompts are 4+ windows long. query_pre_attn_scalar 24
# is not head_dim (16), and the soft-caps are small enough to bite on these scores.
TINY_GEMMA = dict(
    vocab_size=512, hidden_size=64, intermediate_size=160, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=512, initializer_range=0.15,
    bos_token_id=None, eos_token_id=None, pad_token_id=None, query_pre_attn_scalar=24,
    sliding_window=16,
)
# name -> (config class, model class, fields over TINY_GEMMA, KV memory holding 420 tokens)
FAMILIES = {
    # four layers: sliding, full, sliding, full
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(num_hidden_layers=4, attn_logit_softcapping=2.0,
                    final_logit_softcapping=3.0), "420KiB"),
    # seven layers: five sliding, one full, one sliding; global rope 1e6 scaled 8x (linear),
    # local rope 1e4, as Gemma-3-27B
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               dict(num_hidden_layers=7, rope_theta=1e6, rope_local_base_freq=1e4,
                    rope_scaling={"rope_type": "linear", "factor": 8.0},
                    final_logit_softcapping=3.0), "735KiB"),
}


def make_gemma(folder, family: str, seed: int = 0, **fields):
    """A random Gemma saved to `folder`; norm weights drawn away from 0 (transformers inits
    them to zeros, the (1 + w) norm's identity) so a norm left out or not loaded changes
    tokens."""
    config_class, model_class, family_fields, _ = FAMILIES[family]
    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(**{**TINY_GEMMA, **family_fields, **fields})
    model = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    return model


@pytest.fixture(scope="module", params=list(FAMILIES))
def gemma_checkpoint(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    return folder, make_gemma(folder, request.param), request.param


def reference_prefill_logits(folder, prompt: list[int]) -> torch.Tensor:
    """One prefill through kvbench's model with the reference kernel, each layer's window,
    soft-cap and softmax scale taken from the config as the executor takes them."""
    model, config = load_model(str(folder))
    k_cache = torch.zeros(len(prompt), config.num_kv_heads, config.head_dim)
    v_cache = torch.zeros_like(k_cache)

    def attend(layer, q, k, v):
        ops.write_kv(k, v, k_cache, v_cache, torch.arange(len(prompt)))
        return ops.contiguous_attention(
            q, k_cache, v_cache, torch.tensor([0]), torch.tensor([0, len(prompt)]),
            torch.tensor([len(prompt)]), config.softmax_scale,
            sliding_window=config.layer_window(layer), softcap=config.attn_logit_softcapping,
        )

    with torch.no_grad():
        return model.logits(model(torch.tensor(prompt), torch.arange(len(prompt)), attend))


def test_config_reads_gemma_fields(gemma_checkpoint):
    folder, hf_model, family = gemma_checkpoint
    config = resolve_model_config(str(folder))
    hf = hf_model.config
    assert [config.layer_window(i) for i in range(config.num_layers)] == [
        16 if t == "sliding_attention" else None for t in hf.layer_types]
    assert config.softmax_scale == 24**-0.5
    assert config.final_logit_softcapping == 3.0
    assert config.attn_logit_softcapping == (2.0 if family == "gemma2" else None)
    assert config.qk_norm == (family == "gemma3")
    assert config.num_parameters() == sum(p.numel() for p in hf_model.parameters())


def test_prefill_logits_match_transformers(gemma_checkpoint):
    """300 tokens (18 windows): logits within 1e-4 of transformers'."""
    folder, hf_model, _ = gemma_checkpoint
    prompt = random_prompts(1, 512, seed=3, min_len=300, max_len=300)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    torch.testing.assert_close(reference_prefill_logits(folder, prompt), theirs,
                               atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("fields", [dict(attention_bias=True, tie_word_embeddings=False)],
                         ids=["bias-untied"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_bias_and_untied_head_match_transformers(family, fields, tmp_path):
    """Gemma's attention_bias covers q, k, v and o_proj; an untied lm_head loads on its own."""
    hf_model = make_gemma(tmp_path, family, **fields)
    with torch.no_grad():
        for name, param in hf_model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.5)
    hf_model.save_pretrained(tmp_path)
    prompt = random_prompts(1, 512, seed=3, min_len=100, max_len=100)[0]
    with torch.no_grad():
        theirs = hf_model(torch.tensor([prompt])).logits[0].float()
    torch.testing.assert_close(reference_prefill_logits(tmp_path, prompt), theirs,
                               atol=1e-4, rtol=1e-4)


def test_contiguous_matches_transformers(gemma_checkpoint):
    """The contiguous cache's window attention too (the scenarios below run paged/prefix)."""
    from tests.models.engine_parity import engine_tokens
    from tests.models.test_parity_hf import hf_greedy

    folder, hf_model, _ = gemma_checkpoint
    prompts = random_prompts(3, 512, seed=7, min_len=64, max_len=120)
    got, _ = engine_tokens(folder, prompts, 24, strategy="contiguous", reserve="exact",
                           kv_memory="4MiB")
    assert got == hf_greedy(hf_model, prompts, 24)


def test_prefill_and_decode_match_transformers(gemma_checkpoint):
    folder, hf_model, _ = gemma_checkpoint
    check_prefill_and_decode(folder, hf_model, min_len=64, max_len=120)


def test_chunked_prefill_matches_transformers(gemma_checkpoint):
    """64-token chunks of 16-token windows: each chunk's queries see the previous chunk's
    keys, and no further."""
    folder, hf_model, _ = gemma_checkpoint
    check_chunked_prefill(folder, hf_model, min_len=150, max_len=220)


def test_preemption_matches_transformers(gemma_checkpoint):
    folder, hf_model, family = gemma_checkpoint
    check_preemption(folder, hf_model, kv_memory=FAMILIES[family][3])


def test_prefix_hit_matches_transformers(gemma_checkpoint):
    folder, hf_model, _ = gemma_checkpoint
    check_prefix_hit(folder, hf_model)


# config.json fields -------------------------------------------------------------------------


def write_gemma_config(folder, model_type: str, **fields) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    hf = {**TINY_GEMMA, "num_hidden_layers": 6, "model_type": model_type, **fields}
    (folder / "config.json").write_text(json.dumps(hf))
    return str(folder)


@pytest.mark.parametrize(("model_type", "fields"), [
    ("gemma2", {}),
    ("gemma3_text", {}),
    ("gemma3_text", dict(sliding_window_pattern=3)),
    ("gemma3_text", dict(layer_types=["full_attention"] * 5 + ["sliding_attention"])),
], ids=["gemma2-default", "gemma3-default", "gemma3-pattern-3", "gemma3-layer-types"])
def test_layer_types_are_transformers(model_type, fields, tmp_path):
    """kvbench windows exactly the layers transformers' config makes sliding."""
    config_class = {"gemma2": "Gemma2Config", "gemma3_text": "Gemma3TextConfig"}[model_type]
    config = resolve_model_config(write_gemma_config(tmp_path / "m", model_type, **fields))
    hf = getattr(transformers, config_class)(**{**TINY_GEMMA, "num_hidden_layers": 6, **fields})
    assert [config.layer_window(i) for i in range(6)] == [
        16 if t == "sliding_attention" else None for t in hf.layer_types]


def test_gemma3_rope_parameters_of_transformers_5_are_read(tmp_path):
    """transformers 5 saves one rope entry per layer type: the same config as the published
    rope_theta / rope_local_base_freq / rope_scaling keys."""
    published = resolve_model_config(write_gemma_config(
        tmp_path / "a", "gemma3_text", rope_theta=1e6, rope_local_base_freq=1e4,
        rope_scaling={"rope_type": "linear", "factor": 8.0}))
    saved = resolve_model_config(write_gemma_config(tmp_path / "b", "gemma3_text", rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}))
    assert (published.rope_theta, published.rope_local_theta) == (1e6, 1e4)
    assert {**published.to_dict(), "name": ""} == {**saved.to_dict(), "name": ""}
    assert published.rope_scaling == {"rope_type": "linear", "factor": 8.0}


REFUSED = {
    # name -> (model_type, fields, what the message names)
    "activation": ("gemma2", dict(hidden_activation="gelu"), "hidden_activation"),
    "layer-type": ("gemma3_text", dict(layer_types=["chunked_attention"] * 6), "layer_types"),
    "layer-types-length": ("gemma2", dict(layer_types=["full_attention"]), "layer_types"),
    "gemma2-rope-linear": ("gemma2", dict(rope_scaling={"rope_type": "linear", "factor": 2.0}),
                           "rope_scaling"),
    "gemma3-rope-yarn": ("gemma3_text", dict(rope_scaling={"rope_type": "yarn", "factor": 8.0}),
                         "rope_scaling"),
    "gemma3-local-rope-linear": ("gemma3_text", dict(rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}),
        "rope_scaling"),
    "gemma3-attn-softcap": ("gemma3_text", dict(attn_logit_softcapping=50.0),
                            "attn_logit_softcapping"),
    "bidirectional": ("gemma3_text", dict(use_bidirectional_attention=True),
                      "use_bidirectional_attention"),
    "window-text": ("gemma2", dict(sliding_window="16"), "sliding_window"),
    "scalar-zero": ("gemma2", dict(query_pre_attn_scalar=0), "query_pre_attn_scalar"),
    "partial-rotary": ("gemma2", dict(partial_rotary_factor=0.5), "partial_rotary_factor"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_unimplemented_gemma_field_is_refused_naming_the_key(case, tmp_path):
    model_type, fields, key = REFUSED[case]
    folder = write_gemma_config(tmp_path / "m", model_type, **fields)
    with pytest.raises(KvbenchInputError, match=key):
        resolve_model_config(folder)


def test_cli_refuses_an_unimplemented_field_in_one_line(tmp_path):
    folder = write_gemma_config(tmp_path / "m", "gemma2", hidden_activation="gelu")
    result = CliRunner().invoke(estimate_command, ["--model", folder, "--context", "1024"])
    assert result.exit_code == 2
    assert "hidden_activation" in result.output and "Traceback" not in result.output


# Presets and sizing -------------------------------------------------------------------------

# google/gemma-2-27b's config.json as published.
GEMMA2_27B_CONFIG = {
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
    "eos_token_id": 1, "final_logit_softcapping": 30.0, "head_dim": 128,
    "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 4608, "initializer_range": 0.02, "intermediate_size": 36864,
    "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 32,
    "num_hidden_layers": 46, "num_key_value_heads": 16, "pad_token_id": 0,
    "query_pre_attn_scalar": 144, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "sliding_window": 4096, "sliding_window_size": 4096, "torch_dtype": "float32",
    "transformers_version": "4.42.0.dev0", "use_cache": True, "vocab_size": 256000,
}
# google/gemma-3-27b-it's config.json holds the text model as its text_config (the rest of
# Gemma3TextConfig's fields are defaults: rope_theta 1e6, rope_local_base_freq 1e4,
# sliding_window_pattern 6, vocab_size 262208).
GEMMA3_27B_CONFIG = {
    "head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504,
    "model_type": "gemma3_text", "num_attention_heads": 32, "num_hidden_layers": 62,
    "num_key_value_heads": 16, "query_pre_attn_scalar": 168,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024,
}
# google/gemma-3-27b-it's config.json itself: the multimodal model, the text model above as its
# text_config beside a SigLIP vision tower.
GEMMA3_27B_IT_CONFIG = {
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
    "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
    "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
    "text_config": GEMMA3_27B_CONFIG, "torch_dtype": "bfloat16",
    "transformers_version": "4.50.0.dev0",
    "vision_config": {
        "hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
        "model_type": "siglip_vision_model", "num_attention_heads": 16,
        "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False,
    },
}
UNSAVED_KEYS = ("architectures", "model_type", "torch_dtype", "transformers_version",
                "cache_implementation", "sliding_window_size", "hidden_act")


def write_published(folder, hf: dict) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(hf))
    return str(folder)


@pytest.mark.parametrize(("preset", "hf", "config_class", "model_class"), [
    ("gemma-2-27b", GEMMA2_27B_CONFIG, "Gemma2Config", "Gemma2ForCausalLM"),
    ("gemma-3-27b", GEMMA3_27B_CONFIG, "Gemma3TextConfig", "Gemma3ForCausalLM"),
])
def test_preset_is_the_published_shape(preset, hf, config_class, model_class, tmp_path):
    """Same fields as the published config.json, and the parameters transformers counts."""
    config = get_preset(preset)
    from_file = resolve_model_config(write_published(tmp_path / "m", hf))
    assert {**config.to_dict(), "name": None} == {**from_file.to_dict(), "name": None}
    fields = {k: v for k, v in hf.items() if k not in UNSAVED_KEYS}
    with torch.device("meta"):
        hf_model = getattr(transformers, model_class)(
            getattr(transformers, config_class)(**fields))
    assert config.num_parameters() == sum(p.numel() for p in hf_model.parameters())
    assert [config.layer_window(i) for i in range(config.num_layers)] == [
        hf["sliding_window"] if t == "sliding_attention" else None
        for t in hf_model.config.layer_types]


@pytest.mark.parametrize(("hf", "context", "groups"), [
    # (layers, window) of each group: Gemma 2 alternates, Gemma 3 is 5 local : 1 global
    (GEMMA2_27B_CONFIG, 8192, [(23, None), (23, 4096)]),
    (GEMMA3_27B_CONFIG, 32768, [(10, None), (52, 1024)]),
], ids=["gemma-2-27b", "gemma-3-27b"])
def test_estimate_json_gives_each_group(hf, context, groups, tmp_path):
    """At its context a window layer needs its W tokens; a full layer the whole context (what
    paged holds in every layer)."""
    folder = write_published(tmp_path / "m", hf)
    result = CliRunner().invoke(estimate_command, [
        "--model", folder, "--context", str(context), "--gpu-memory", "80GiB", "--json"])
    assert result.exit_code == 0, result.output
    est = json.loads(result.output)
    layer_token = 2 * 16 * 128 * 2  # K and V, 16 KV heads of 128, bf16
    got = [(g["num_layers"], g["window"]) for g in est["kv_groups"]]
    assert got == groups
    for group, (layers, window) in zip(est["kv_groups"], groups, strict=True):
        assert group["attention"] == ("full" if window is None else "sliding")
        assert group["bytes_per_token"] == layers * layer_token
        assert group["bytes_per_sequence"] == layers * layer_token * min(context, window or context)
        assert group["bytes_per_sequence_whole_context"] == layers * layer_token * context
    assert est["kv_bytes_per_token"] == sum(layers for layers, _ in groups) * layer_token


@pytest.mark.parametrize(("hf", "scalar"), [
    (GEMMA2_27B_CONFIG, 144), (GEMMA3_27B_CONFIG, 168), (GEMMA3_27B_IT_CONFIG, 168),
], ids=["gemma-2-27b", "gemma-3-27b", "gemma-3-27b-it"])
def test_simulate_on_a_published_config_json(hf, scalar, tmp_path, capsys):
    folder = write_published(tmp_path / "m", hf)
    out = tmp_path / "out"
    code = main(["simulate", "--model", folder, "--strategy", "paged", "--num-requests", "8",
                 "--max-model-len", "8192", "--warmup", "0", "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    (run_dir,) = out.iterdir()
    saved = json.loads((run_dir / "config.json").read_text())["model_config"]
    assert saved["architecture"] == "gemma"
    assert saved["query_pre_attn_scalar"] == scalar


def test_estimate_text_shows_each_group():
    result = CliRunner().invoke(estimate_command, [
        "--model", "gemma-3-27b", "--context", "32768"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    sliding = next(line for line in lines if line.startswith("sliding (window 1,024)"))
    # 52 layers x 8,192 B a token, 1,024 tokens needed; 13 GiB over the whole context
    assert sliding.split()[3:7] == ["52", "425,984", "1,024", "436,207,616"]
    assert sliding.endswith("13.00 GiB")


def test_multimodal_gemma3_is_sized_with_its_vision_tower(tmp_path):
    """The published gemma-3-27b-it config.json: its text model's shape and KV, and the
    parameters transformers' Gemma3ForConditionalGeneration holds (vision tower included);
    running it is refused in one line (kvbench runs the text model only)."""
    folder = write_published(tmp_path / "m", GEMMA3_27B_IT_CONFIG)
    config = resolve_model_config(folder)
    text = get_preset("gemma-3-27b")
    assert {**config.to_dict(), "name": None, "vision_parameters": 0} == {
        **text.to_dict(), "name": None}
    hf = transformers.Gemma3Config(
        text_config=GEMMA3_27B_CONFIG, vision_config=GEMMA3_27B_IT_CONFIG["vision_config"])
    with torch.device("meta"):
        hf_model = transformers.Gemma3ForConditionalGeneration(hf)
    assert config.num_parameters() == sum(p.numel() for p in hf_model.parameters())
    assert config.num_active_parameters() == text.num_parameters()
    result = CliRunner().invoke(estimate_command, [
        "--model", folder, "--context", "32768", "--gpu-memory", "80GiB", "--json"])
    assert result.exit_code == 0, result.output
    est = json.loads(result.output)
    assert est["num_parameters"] == config.num_parameters()
    assert est["kv_bytes_per_token"] == text.kv_bytes_per_token(2)
    with pytest.raises(KvbenchInputError, match="multimodal Gemma 3"):
        load_model(folder)


def test_dummy_weights_leave_gemma_norms_at_identity(tmp_path):
    """Random weights for a shape without a checkpoint: Gemma's (1 + w) norms get w = 0."""
    from kvbench.models.gemma import GemmaDecoder
    from kvbench.models.loader import init_dummy_weights

    config = resolve_model_config(write_gemma_config(tmp_path / "m", "gemma3_text"))
    decoder = GemmaDecoder(config)
    init_dummy_weights(decoder, seed=0)
    norms = {n: p for n, p in decoder.named_parameters() if n.endswith("norm.weight")}
    assert len(norms) == 6 * 6 + 1  # 4 hidden norms and q/k norms a layer, the final norm
    assert all(bool((p == 0).all()) for p in norms.values())
