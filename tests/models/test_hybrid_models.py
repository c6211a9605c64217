"""State-space hybrids' config.json (Qwen3-Next, Granite-4.0-H, Nemotron-H): read as
transformers reads them, parameters counted as its models hold them, the recurrent state as
vLLM sizes it, and bad values refused in one line naming the key."""

from __future__ import annotations

import copy

import pytest

from kvbench.core.kv_groups import KVGroup, state_group
from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.presets import PRESETS
from tests.models.published_hybrid_configs import (
    GRANITE_4_H_SMALL_CONFIG,
    NEMOTRON_H_8B_CONFIG,
    QWEN3_NEXT_80B_A3B_CONFIG,
)

PUBLISHED = {
    "qwen3-next-80b-a3b": QWEN3_NEXT_80B_A3B_CONFIG,
    "granite-4.0-h-small": GRANITE_4_H_SMALL_CONFIG,
    "nemotron-h-8b": NEMOTRON_H_8B_CONFIG,
}


@pytest.mark.parametrize("preset", list(PUBLISHED))
def test_each_preset_is_its_published_config(preset):
    assert ModelConfig.from_hf_config(PUBLISHED[preset], preset) == PRESETS[preset]


@pytest.mark.parametrize("preset", list(PUBLISHED))
def test_parameter_count_is_transformers_model_built_on_meta(preset):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fields = dict(PUBLISHED[preset])
    model_type = fields.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **fields)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert PRESETS[preset].num_parameters() == sum(p.numel() for p in model.parameters())


def test_qwen3_next_active_parameters_are_the_published_figure():
    # the top 10 of 512 experts a token: 3,874,929,408 of 79,674,391,296
    assert PRESETS["qwen3-next-80b-a3b"].num_active_parameters() == 3_874_929_408


@pytest.mark.parametrize("preset, mixer, layers, attention", [
    ("qwen3-next-80b-a3b", "gated_deltanet", 36, (3, 7, 11)),
    ("granite-4.0-h-small", "mamba2", 36, (5, 15, 25, 35)),
    ("nemotron-h-8b", "mamba2", 24, (7, 18, 29, 40)),
])
def test_attention_layers_hold_kv_and_recurrent_layers_a_state(preset, mixer, layers, attention):
    model = PRESETS[preset]
    (kv,) = model.kv_groups(2)
    assert kv.layers[:len(attention)] == attention and kv.attention == "full"
    (state,) = model.state_groups(2)
    assert state.is_state and state.attention == mixer and state.num_layers == layers
    assert state.bytes_per_token == 0 and not set(state.layers) & set(kv.layers)
    # the KV per token is the attention layers' only
    assert model.kv_bytes_per_token(2) == kv.num_layers * 2 * model.num_kv_heads * \
        model.head_dim * 2


def test_state_bytes_are_vllm_mamba_spec_pages():
    """vLLM's MambaStateShapeCalculator shapes, bytes as MambaSpec.page_size_bytes sums them
    (conv state (K - 1, conv dim) + recurrent state), written out by hand."""
    gdn = PRESETS["qwen3-next-80b-a3b"].state_groups(2)[0].state_bytes_per_layer
    conv = 3 * (2 * 16 * 128 + 32 * 128)  # q, k (16 heads of 128) and v (32 of 128)
    assert gdn == conv * 2 + 32 * 128 * 128 * 2 == 1_097_728
    granite = PRESETS["granite-4.0-h-small"].state_groups(2)[0].state_bytes_per_layer
    assert granite == 3 * (8192 + 2 * 1 * 128) * 2 + 128 * 64 * 128 * 2 == 2_147_840
    # Nemotron-H's SSM state is float32 in vLLM (NemotronHForCausalLMConfig)
    nemotron = PRESETS["nemotron-h-8b"].state_groups(2)[0].state_bytes_per_layer
    assert nemotron == 3 * (8192 + 2 * 8 * 128) * 2 + 128 * 64 * 128 * 4 == 4_255_744


def test_state_under_tensor_parallelism_splits_heads_and_pads_groups():
    granite = PRESETS["granite-4.0-h-small"]
    # one group padded to 4 for 4 GPUs (vLLM's extra_groups_for_head_shards), then split
    conv = 3 * (8192 + 2 * 4 * 128) // 4
    assert granite.state_groups(2, 4)[0].state_bytes_per_layer == \
        conv * 2 + 32 * 64 * 128 * 2
    qwen = PRESETS["qwen3-next-80b-a3b"]
    assert qwen.state_groups(2, 2)[0].state_bytes_per_layer == 1_097_728 // 2
    with pytest.raises(KvbenchInputError, match="tensor-parallel-size 3"):
        qwen.state_groups(2, 3)


def test_an_attention_only_model_has_no_state_group():
    assert PRESETS["llama-3-8b"].state_groups(2) == ()
    assert PRESETS["llama-3-8b"].attention_layers == tuple(range(32))


def test_a_state_group_holds_bytes_per_sequence_not_per_token():
    group = state_group((0, 1, 2), "mamba2", 1000)
    assert group.state_bytes_per_sequence == 3000 and group.bytes_per_token == 0
    assert "3 mamba2 layers" in group.formula()
    with pytest.raises(ValueError):
        group.sharded(2)
    with pytest.raises(ValueError):
        KVGroup((0,), 0, 0, 0, attention="full", kind="state", state_bytes_per_layer=10)
    with pytest.raises(ValueError):
        KVGroup((0,), 8, 128, 2, state_bytes_per_layer=10)


def test_full_attention_interval_places_qwen3_next_attention_layers():
    config = {k: v for k, v in QWEN3_NEXT_80B_A3B_CONFIG.items()}
    config["full_attention_interval"] = 2
    model = ModelConfig.from_hf_config(config, "m")
    assert model.attention_layers == tuple(range(1, 48, 2))
    config["layer_types"] = ["linear_attention"] * 46 + ["full_attention"] * 2
    assert ModelConfig.from_hf_config(config, "m").attention_layers == (46, 47)


def _with(config, **changes):
    out = copy.deepcopy(config)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


@pytest.mark.parametrize("config, key", [
    (_with(QWEN3_NEXT_80B_A3B_CONFIG, linear_num_key_heads=None), "linear_num_key_heads"),
    (_with(QWEN3_NEXT_80B_A3B_CONFIG, linear_value_head_dim=0), "linear_value_head_dim"),
    (_with(QWEN3_NEXT_80B_A3B_CONFIG, linear_conv_kernel_dim="4"), "linear_conv_kernel_dim"),
    (_with(QWEN3_NEXT_80B_A3B_CONFIG, linear_num_value_heads=24), "linear_num_value_heads"),
    (_with(QWEN3_NEXT_80B_A3B_CONFIG, layer_types=["full_attention"] * 47), "layer_types"),
    (_with(QWEN3_NEXT_80B_A3B_CONFIG, layer_types=["mamba"] * 48), "layer_types"),
    (_with(QWEN3_NEXT_80B_A3B_CONFIG, full_attention_interval=0), "full_attention_interval"),
    (_with(QWEN3_NEXT_80B_A3B_CONFIG, full_attention_interval=100), "layer_types"),
    (_with(QWEN3_NEXT_80B_A3B_CONFIG, use_sliding_window=True), "use_sliding_window"),
    (_with(QWEN3_NEXT_80B_A3B_CONFIG, num_experts_per_tok=600), "num_experts_per_tok"),
    (_with(GRANITE_4_H_SMALL_CONFIG, layer_types=None), "layer_types"),
    (_with(GRANITE_4_H_SMALL_CONFIG, layer_types=["mamba"] * 40), "layer_types"),
    (_with(GRANITE_4_H_SMALL_CONFIG, mamba_d_state=None), "mamba_d_state"),
    (_with(GRANITE_4_H_SMALL_CONFIG, mamba_n_heads=-1), "mamba_n_heads"),
    (_with(GRANITE_4_H_SMALL_CONFIG, mamba_d_head=32), "mamba_d_head"),
    (_with(GRANITE_4_H_SMALL_CONFIG, mamba_n_groups=3), "mamba_n_groups"),
    (_with(GRANITE_4_H_SMALL_CONFIG, mamba_d_conv=None), "mamba_d_conv"),
    (_with(GRANITE_4_H_SMALL_CONFIG, mamba_expand=None), "mamba_expand"),
    (_with(GRANITE_4_H_SMALL_CONFIG, mamba_conv_bias="yes"), "mamba_conv_bias"),
    (_with(NEMOTRON_H_8B_CONFIG, hybrid_override_pattern="M*" * 25), "hybrid_override_pattern"),
    (_with(NEMOTRON_H_8B_CONFIG, hybrid_override_pattern="E" * 52), "hybrid_override_pattern"),
    (_with(NEMOTRON_H_8B_CONFIG, hybrid_override_pattern="M-" * 26), "hybrid_override_pattern"),
    (_with(NEMOTRON_H_8B_CONFIG, ssm_state_size=None), "ssm_state_size"),
    (_with(NEMOTRON_H_8B_CONFIG, n_groups=0), "n_groups"),
    (_with(NEMOTRON_H_8B_CONFIG, mamba_ssm_cache_dtype="int8"), "mamba_ssm_cache_dtype"),
    (_with(NEMOTRON_H_8B_CONFIG, attention_bias=True), "attention_bias"),
    (_with(NEMOTRON_H_8B_CONFIG, quantization_config={"quant_method": "fp8"}),
     "quantization_config"),
])
def test_a_bad_value_is_refused_in_one_line_naming_its_key(config, key):
    with pytest.raises(KvbenchInputError) as err:
        ModelConfig.from_hf_config(config, "m")
    message = str(err.value)
    assert key in message and "\n" not in message


def test_nemotron_h_ssm_state_dtype_follows_its_config():
    config = _with(NEMOTRON_H_8B_CONFIG, mamba_ssm_cache_dtype="bfloat16")
    state = ModelConfig.from_hf_config(config, "m").state_groups(2)[0]
    assert state.state_bytes_per_layer == 3 * 10240 * 2 + 128 * 64 * 128 * 2


@pytest.mark.parametrize("name", ["qwen3-next-80b-a3b", "granite-4.0-h-small",
                                  "nemotron-h-8b"])
def test_the_engine_builds_each_hybrid_family(name):
    """Every sized hybrid family has a decoder in the engine (`computes_recurrent_layers`),
    built on the meta device with the parameters kvbench sizes (transformers' count)."""
    torch = pytest.importorskip("torch")
    from kvbench.models.loader import computes_recurrent_layers, decoder_class

    config = PRESETS[name]
    assert computes_recurrent_layers(config)
    with torch.device("meta"):
        decoder = decoder_class(config)(config)
    assert sum(p.numel() for p in decoder.parameters()) == config.num_parameters()
