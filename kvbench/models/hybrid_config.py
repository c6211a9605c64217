"""The `config.json` of a state-space hybrid: Qwen3-Next (`qwen3_next`), Granite-4.0-H
(`granitemoehybrid`) and Nemotron-H (`nemotron_h`), read as transformers' Qwen3NextConfig,
GraniteMoeHybridConfig and NemotronHConfig read them (docs/models.md, State-space hybrids). A
key whose value would change the sizes or the math and that kvbench does not model is refused
in one line naming it.
"""

from __future__ import annotations

from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.models.config_values import (
    bad_values_refused,
    checked_layer_types,
    dense_layers,
    expert_counts,
    positive_int,
    positive_number,
    quantization,
    read_rope_theta,
    refuse_unimplemented,
    true_or_false,
)
from kvbench.models.recurrent import HybridLayers, RecurrentMixer

HYBRID_MODEL_TYPES = ("qwen3_next", "granitemoehybrid", "nemotron_h")
# Granite's layer_types, as published ("mamba" / "attention") and as transformers 5 writes
# them (`_LEGACY_LAYER_TYPE_REMAP`: "linear_attention" / "full_attention")
GRANITE_LAYER_TYPES = {"mamba": "recurrent", "attention": "attention",
                       "linear_attention": "recurrent", "full_attention": "attention"}
# FLA's chunk length for the gated delta rule (fla/ops/gated_delta_rule/chunk.py, BT = 64),
# the prefill scan's chunk of a Gated DeltaNet layer (its config.json names none).
GDN_CHUNK_SIZE = 64
# Nemotron-H's `layers_block_type` (transformers 5 writes it instead of the pattern) as the
# pattern's characters ('E', "moe", is refused with the pattern's wording)
NEMOTRON_BLOCK_TYPES = {"linear_attention": "M", "full_attention": "*", "mlp": "-", "moe": "E"}
# vLLM's float32 default for Nemotron-H's SSM state (`NemotronHForCausalLMConfig`).
NEMOTRON_SSM_DTYPES = {"float32": "fp32", "bfloat16": None, "float16": None, "auto": None}


def read_hybrid_config(hf: dict[str, Any], name: str) -> dict[str, Any]:
    """`ModelConfig` fields of a hybrid's config.json (its model_type in HYBRID_MODEL_TYPES)."""
    quantization(hf, name)
    with bad_values_refused(name):
        fields = {"qwen3_next": _qwen3_next, "granitemoehybrid": _granite,
                  "nemotron_h": _nemotron_h}[hf["model_type"]](hf, name)
    return {"name": name, "rope_theta": read_rope_theta(hf, 10000.0),
            "tie_word_embeddings": bool(hf.get("tie_word_embeddings", False)), **fields}


def _qwen3_next(hf: dict[str, Any], name: str) -> dict[str, Any]:
    """Qwen3NextForCausalLM: `layer_types` ("linear_attention" / "full_attention") or every
    `full_attention_interval`-th layer full; every layer a mixture of experts (but
    `mlp_only_layers` and those `decoder_sparse_step` skips) with one gated shared expert."""
    num_layers = positive_int(hf, "num_hidden_layers", name)
    refuse_unimplemented(hf, name, "hidden_act", ("silu",), "the experts are SwiGLU", "silu")
    refuse_unimplemented(hf, name, "use_sliding_window", (False, None),
                         "Qwen3-Next's attention layers attend to the whole context")
    given = hf.get("layer_types")
    if given is not None:
        kinds = {"linear_attention": "recurrent", "full_attention": "attention"}
        checked_layer_types(given, name, num_layers, tuple(kinds))
        mixers = tuple(kinds[t] for t in given)
    else:
        interval = positive_int(hf, "full_attention_interval", name, default=4)
        mixers = tuple("attention" if (i + 1) % interval == 0 else "recurrent"
                       for i in range(num_layers))
    _need_both(mixers, name, "layer_types")
    key_heads = positive_int(hf, "linear_num_key_heads", name)
    value_heads = positive_int(hf, "linear_num_value_heads", name)
    value_dim = positive_int(hf, "linear_value_head_dim", name)
    _check_heads(value_heads, key_heads, name, "linear_num_value_heads", "linear_num_key_heads")
    recurrent = RecurrentMixer(
        "gated_deltanet", num_heads=value_heads, head_dim=value_dim,
        state_size=positive_int(hf, "linear_key_head_dim", name), num_groups=key_heads,
        conv_kernel=positive_int(hf, "linear_conv_kernel_dim", name),
        inner_size=value_heads * value_dim, chunk_size=GDN_CHUNK_SIZE)
    experts, top_k = expert_counts(hf, name, "num_experts", 512, 10, minimum=0)
    dense = dense_layers(hf, name, num_layers)
    shared = positive_int(hf, "shared_expert_intermediate_size", name, default=512, minimum=0)
    num_heads = positive_int(hf, "num_attention_heads", name, default=16)
    rope = _qwen3_next_rope(hf, name)
    return {
        **rope,
        "vocab_size": positive_int(hf, "vocab_size", name, default=151936),
        "hidden_size": positive_int(hf, "hidden_size", name, default=2048),
        "intermediate_size": positive_int(hf, "intermediate_size", name, default=5632),
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": positive_int(hf, "num_key_value_heads", name, default=2),
        "head_dim": positive_int(hf, "head_dim", name, default=256),
        "max_position_embeddings": positive_int(hf, "max_position_embeddings", name,
                                                default=32768),
        "rms_norm_eps": float(hf.get("rms_norm_eps", 1e-6)),
        "attention_bias": _no_bias(hf, name, "attention_bias"),
        "qk_norm": True,
        "num_local_experts": experts,
        "num_experts_per_tok": top_k if experts else 0,
        "moe_intermediate_size": positive_int(hf, "moe_intermediate_size", name, default=512),
        "norm_topk_prob": true_or_false(hf, "norm_topk_prob", name, True),
        "dense_layers": dense if experts else (),
        "hybrid": HybridLayers(mixers, (True,) * num_layers, recurrent,
                               attention_output_gate=True,
                               shared_expert_intermediate_size=shared if experts else 0,
                               shared_expert_gate=bool(experts and shared)),
    }


def _qwen3_next_rope(hf: dict[str, Any], name: str) -> dict[str, Any]:
    """Qwen3-Next's partial rope (`partial_rotary_factor`, 0.25 by default, at the top level
    or in transformers 5's `rope_parameters`) and its scaling dict where it names a rope type
    other than the default (kept for the decoder, which refuses it: it rotates plainly)."""
    rope = hf.get("rope_scaling") or hf.get("rope_parameters") or {}
    if not isinstance(rope, dict):
        raise KvbenchInputError(f"model {name}: config.json rope_parameters is not a JSON object")
    partial = float(hf.get("partial_rotary_factor", rope.get("partial_rotary_factor", 0.25)))
    if not 0.0 < partial <= 1.0:
        raise KvbenchInputError(
            f"model {name}: config.json partial_rotary_factor {partial} must be in (0, 1]")
    kind = rope.get("rope_type", rope.get("type", "default"))
    return {"partial_rotary_factor": partial,
            "rope_scaling": None if kind == "default" else dict(rope)}


def _granite(hf: dict[str, Any], name: str) -> dict[str, Any]:
    """GraniteMoeHybridForCausalLM: `layer_types` ("mamba" / "attention"); every layer a
    mixture of experts (none where num_local_experts is 0) beside a shared MLP of
    shared_intermediate_size. Its mu-P multipliers scale activations only."""
    num_layers = positive_int(hf, "num_hidden_layers", name)
    refuse_unimplemented(hf, name, "hidden_act", ("silu",), "the MLPs are SwiGLU", "silu")
    given = hf.get("layer_types")
    if given is None:
        raise KvbenchInputError(f"model {name}: config.json lacks 'layer_types'")
    checked_layer_types(given, name, num_layers, tuple(GRANITE_LAYER_TYPES))
    mixers = tuple(GRANITE_LAYER_TYPES[t] for t in given)
    _need_both(mixers, name, "layer_types")
    hidden = positive_int(hf, "hidden_size", name)
    heads = positive_int(hf, "mamba_n_heads", name)
    head_dim = positive_int(hf, "mamba_d_head", name)
    inner = positive_int(hf, "mamba_expand", name) * hidden
    if heads * head_dim != inner:
        raise KvbenchInputError(
            f"model {name}: config.json mamba_d_head {head_dim} x mamba_n_heads {heads} must "
            f"equal mamba_expand x hidden_size {inner}")
    groups = positive_int(hf, "mamba_n_groups", name)
    _check_heads(heads, groups, name, "mamba_n_heads", "mamba_n_groups")
    recurrent = RecurrentMixer(
        "mamba2", num_heads=heads, head_dim=head_dim,
        state_size=positive_int(hf, "mamba_d_state", name), num_groups=groups,
        conv_kernel=positive_int(hf, "mamba_d_conv", name), inner_size=inner,
        chunk_size=positive_int(hf, "mamba_chunk_size", name, default=256),
        conv_bias=true_or_false(hf, "mamba_conv_bias", name, True),
        proj_bias=true_or_false(hf, "mamba_proj_bias", name, False))
    experts = positive_int(hf, "num_local_experts", name, default=0, minimum=0)
    top_k = positive_int(hf, "num_experts_per_tok", name, default=2, minimum=0) if experts else 0
    if experts and not 0 < top_k <= experts:
        raise KvbenchInputError(
            f"model {name}: config.json num_experts_per_tok {top_k} must be 1 to "
            f"num_local_experts {experts}")
    shared = positive_int(hf, "shared_intermediate_size", name)
    rope = _granite_rope(hf, name)
    _default_time_step_limit(hf, name, "Granite")
    return {
        "vocab_size": positive_int(hf, "vocab_size", name),
        "hidden_size": hidden,
        "intermediate_size": shared,  # the dense MLP: the shared one
        "num_layers": num_layers,
        "num_heads": positive_int(hf, "num_attention_heads", name),
        "num_kv_heads": positive_int(hf, "num_key_value_heads", name),
        "max_position_embeddings": positive_int(hf, "max_position_embeddings", name),
        "rms_norm_eps": float(hf.get("rms_norm_eps", 1e-6)),
        "attention_bias": _no_bias(hf, name, "attention_bias"),
        "num_local_experts": experts,
        "num_experts_per_tok": top_k,
        "moe_intermediate_size": (positive_int(hf, "intermediate_size", name) if experts
                                  else 0),
        "architecture": "granite_hybrid",
        "hybrid": HybridLayers(mixers, (True,) * num_layers, recurrent,
                               shared_expert_intermediate_size=shared if experts else 0,
                               embedding_multiplier=_multiplier(hf, name, "embedding_multiplier"),
                               residual_multiplier=_multiplier(hf, name, "residual_multiplier"),
                               logits_scaling=_multiplier(hf, name, "logits_scaling"),
                               attention_multiplier=_multiplier(hf, name,
                                                                "attention_multiplier"),
                               rope=rope),
    }


def _multiplier(hf: dict[str, Any], name: str, key: str) -> float:
    """One of Granite's mu-P multipliers: a positive number, 1 when absent or null (as
    GraniteMoeHybridConfig defaults them)."""
    return 1.0 if hf.get(key) is None else positive_number(hf, key, name, 1.0)


def _granite_rope(hf: dict[str, Any], name: str) -> bool:
    """Whether Granite's attention rotates by position: transformers' GraniteMoeHybridModel
    builds a rotary embedding only for position_embedding_type "rope" (the published
    Granite-4.0-H files say "nope"), and kvbench rotates with the plain rope only."""
    kind = hf.get("position_embedding_type")
    if kind not in (None, "nope", "rope"):
        raise KvbenchInputError(
            f"model {name}: config.json position_embedding_type {kind!r} is not implemented "
            "(supported: \"rope\", \"nope\" or null)")
    if kind != "rope":
        return False
    rope = hf.get("rope_scaling") or hf.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(
        rope, dict) else rope
    if rope_type != "default":
        raise KvbenchInputError(
            f"model {name}: config.json rope type {rope_type!r} is not implemented for "
            "Granite-4.0-H (kvbench rotates its attention with the default rope)")
    return True


def _default_time_step_limit(hf: dict[str, Any], name: str, family: str) -> None:
    """`time_step_limit` (Granite's, Nemotron-H's) clamps the Mamba-2 time step in
    transformers' prefill scan but not in its one-token update; only the default (0, inf),
    which clamps nothing, is computed the same both ways."""
    limit = hf.get("time_step_limit")
    if limit is None:
        return
    inf = float("inf")
    values = [inf if v == {"__float__": "Infinity"} or v == "Infinity" else v
              for v in limit] if isinstance(limit, list | tuple) else None
    if values != [0, inf]:
        raise KvbenchInputError(
            f"model {name}: config.json time_step_limit {limit!r:.60} is not implemented "
            f"(kvbench runs {family}'s Mamba-2 layers unclamped: (0.0, inf))")


def _nemotron_h(hf: dict[str, Any], name: str) -> dict[str, Any]:
    """NemotronHForCausalLM: one block a layer, by `hybrid_override_pattern` (or
    transformers 5's `layers_block_type`): 'M' Mamba-2, '*' attention (no rope), '-' a
    relu^2 MLP (two matmuls). Its SSM state is float32 in vLLM unless config.json's
    `mamba_ssm_cache_dtype` says otherwise."""
    pattern = _nemotron_pattern(hf, name)
    num_layers = len(pattern)
    unknown = sorted(set(pattern) - set("M*-"))
    if unknown:
        raise KvbenchInputError(
            f"model {name}: config.json hybrid_override_pattern {''.join(unknown)!r} is not "
            "implemented (supported: 'M' Mamba-2, '*' attention, '-' MLP)")
    mixers = tuple({"M": "recurrent", "*": "attention", "-": "none"}[c] for c in pattern)
    _need_both(mixers, name, "hybrid_override_pattern")
    refuse_unimplemented(hf, name, "mlp_bias", (False, None), "the MLP has no biases")
    refuse_unimplemented(hf, name, "mlp_hidden_act", ("relu2",), "the MLP is relu^2", "relu2")
    refuse_unimplemented(hf, name, "mamba_hidden_act", ("silu",),
                         "the Mamba-2 conv is followed by silu", "silu")
    _default_time_step_limit(hf, name, "Nemotron-H")
    ssm_dtype = hf.get("mamba_ssm_cache_dtype", "float32")
    if ssm_dtype not in NEMOTRON_SSM_DTYPES:
        raise KvbenchInputError(
            f"model {name}: config.json mamba_ssm_cache_dtype {ssm_dtype!r} is not one of "
            f"{', '.join(NEMOTRON_SSM_DTYPES)}")
    heads = positive_int(hf, "mamba_num_heads", name)
    head_dim = positive_int(hf, "mamba_head_dim", name)
    groups = positive_int(hf, "n_groups", name)
    _check_heads(heads, groups, name, "mamba_num_heads", "n_groups")
    recurrent = RecurrentMixer(
        "mamba2", num_heads=heads, head_dim=head_dim,
        state_size=positive_int(hf, "ssm_state_size", name), num_groups=groups,
        conv_kernel=positive_int(hf, "conv_kernel", name), inner_size=heads * head_dim,
        chunk_size=positive_int(hf, "chunk_size", name, default=128),
        conv_bias=true_or_false(hf, "use_conv_bias", name, True),
        # transformers' and vLLM's NemotronHMamba2Mixer bias in_proj and out_proj by
        # `use_bias` (`mamba_proj_bias` is written beside it and read by neither)
        proj_bias=true_or_false(hf, "use_bias", name, False),
        ssm_state_dtype=NEMOTRON_SSM_DTYPES[ssm_dtype])
    num_heads = positive_int(hf, "num_attention_heads", name)
    hidden = positive_int(hf, "hidden_size", name)
    return {
        "vocab_size": positive_int(hf, "vocab_size", name),
        "hidden_size": hidden,
        "intermediate_size": positive_int(hf, "intermediate_size", name),
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": positive_int(hf, "num_key_value_heads", name),
        # transformers 5 writes `head_dim`, the published files `attention_head_dim`
        "head_dim": positive_int(hf, "head_dim" if "head_dim" in hf else "attention_head_dim",
                                 name, default=hidden // num_heads),
        "max_position_embeddings": positive_int(hf, "max_position_embeddings", name),
        "rms_norm_eps": float(hf.get("layer_norm_epsilon", hf.get("rms_norm_eps", 1e-5))),
        "attention_bias": _no_bias(hf, name, "attention_bias"),
        "architecture": "nemotron_h",
        "hybrid": HybridLayers(mixers, tuple(m == "none" for m in mixers), recurrent,
                               mlp_ungated=True, norms_per_layer=1, rope=False),
    }


def _nemotron_pattern(hf: dict[str, Any], name: str) -> str:
    """The layers as pattern characters: `hybrid_override_pattern`, else `layers_block_type`
    (transformers 5), one a layer (`num_hidden_layers`, where given, must agree)."""
    pattern = hf.get("hybrid_override_pattern")
    if pattern is None and isinstance(types := hf.get("layers_block_type"), list):
        unknown = sorted({t for t in types if t not in NEMOTRON_BLOCK_TYPES}, key=str)
        if unknown:
            raise KvbenchInputError(
                f"model {name}: config.json layers_block_type {unknown[0]!r:.40} is not one of "
                f"{', '.join(NEMOTRON_BLOCK_TYPES)}")
        pattern = "".join(NEMOTRON_BLOCK_TYPES[t] for t in types)
    layers = hf.get("num_hidden_layers")
    if not isinstance(pattern, str) or not pattern or (
            layers is not None and len(pattern) != layers):
        expected = ("one or more" if layers is None
                    else positive_int(hf, "num_hidden_layers", name))
        raise KvbenchInputError(
            f"model {name}: config.json hybrid_override_pattern must be a string of one "
            f"character per layer (num_hidden_layers {expected}), got {pattern!r:.80}")
    return pattern



def _need_both(mixers: tuple[str, ...], name: str, key: str) -> None:
    """A hybrid here has attention and recurrent layers both (vLLM's page unification
    needs an attention page to raise; a pure state-space model is another slice)."""
    for mixer in ("attention", "recurrent"):
        if mixer not in mixers:
            raise KvbenchInputError(
                f"model {name}: config.json {key} has no {mixer} layer (kvbench sizes hybrids "
                "of attention and recurrent layers)")


def _check_heads(value_heads: int, key_heads: int, name: str, value_key: str,
                 key_key: str) -> None:
    if value_heads % key_heads:
        raise KvbenchInputError(
            f"model {name}: config.json {value_key} {value_heads} is not a multiple of "
            f"{key_key} {key_heads}")


def _no_bias(hf: dict[str, Any], name: str, key: str) -> bool:
    refuse_unimplemented(hf, name, key, (False, None), "these attention layers have no biases")
    return False
