"""Reading a Gemma 2 or Gemma 3 (text) `config.json` into `ModelConfig`'s fields.

Defaults are transformers' Gemma2Config and Gemma3TextConfig ones. Both formats transformers
writes are read: the published one (`rope_theta`, Gemma 3's `rope_local_base_freq` and
`rope_scaling`) and transformers 5's `rope_parameters` (Gemma 3: one entry per layer type).
Every field that changes the arithmetic and that kvbench's `gemma.py` does not compute is
refused with one line naming the key.
"""

from __future__ import annotations

from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.models.config_values import (
    bad_values_refused,
    checked_layer_types,
    checked_window,
    periodic_layer_types,
    positive_int,
    positive_number,
    quantization,
    refuse_partial_rotary,
    refuse_unimplemented,
    true_or_false,
)

# "gemma3" is Gemma 3's multimodal config: its text_config is the text model, and its vision
# tower is counted in the weights (`vision_parameters`) but never run.
GEMMA_MODEL_TYPES = ("gemma2", "gemma3_text", "gemma3")
GEMMA_ACTIVATION = "gelu_pytorch_tanh"  # gelu with the tanh approximation


def gemma_fields(hf: dict[str, Any], name: str) -> dict[str, Any]:
    """`ModelConfig`'s keyword arguments (all but `name`) for a Gemma `config.json`."""
    model_type = hf["model_type"]
    if model_type == "gemma3":
        return _multimodal_gemma3(hf, name)
    gemma3 = model_type == "gemma3_text"
    _refuse_unimplemented(hf, name, gemma3)
    with bad_values_refused(name):
        num_layers = positive_int(hf, "num_hidden_layers", name, default=26)
        num_heads = positive_int(hf, "num_attention_heads", name, default=8)
        bias = true_or_false(hf, "attention_bias", name, False)
        window = hf.get("sliding_window", 4096)
        layer_types = _layer_types(hf, name, num_layers, gemma3)
        window = checked_window(window, name) if "sliding_attention" in layer_types else None
        theta, local_theta, scaling = _rope(hf, name, gemma3)
        return dict(
            architecture="gemma",
            vocab_size=positive_int(hf, "vocab_size", name,
                                     default=262_208 if gemma3 else 256_000),
            hidden_size=positive_int(hf, "hidden_size", name, default=2304),
            intermediate_size=positive_int(hf, "intermediate_size", name, default=9216),
            num_layers=num_layers,
            num_heads=num_heads,
            num_kv_heads=positive_int(hf, "num_key_value_heads", name, default=4),
            head_dim=positive_int(hf, "head_dim", name, default=256),
            max_position_embeddings=positive_int(
                hf, "max_position_embeddings", name, default=131_072 if gemma3 else 8192),
            rope_theta=theta,
            rope_local_theta=local_theta,
            rope_scaling=scaling,
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", True)),
            attention_bias=bias,
            o_proj_bias=bias,  # Gemma's attention_bias covers o_proj too
            qk_norm=gemma3,
            sliding_window=window,
            layer_types=layer_types if window is not None else (),
            query_pre_attn_scalar=positive_number(hf, "query_pre_attn_scalar", name, 256),
            attn_logit_softcapping=_cap(hf, "attn_logit_softcapping", name,
                                        None if gemma3 else 50.0),
            final_logit_softcapping=_cap(hf, "final_logit_softcapping", name,
                                         None if gemma3 else 30.0),
        )


def _multimodal_gemma3(hf: dict[str, Any], name: str) -> dict[str, Any]:
    """The text model of a multimodal Gemma 3, with its SigLIP vision tower and projector's
    parameters as transformers' Gemma3ForConditionalGeneration holds them."""
    text, vision = hf.get("text_config") or {}, hf.get("vision_config") or {}
    if not isinstance(text, dict) or not isinstance(vision, dict):
        raise KvbenchInputError(
            f"model {name}: config.json text_config and vision_config must be JSON objects")
    quantization = hf.get("quantization_config")
    fields = gemma_fields({**text, "model_type": "gemma3_text",
                           **({"quantization_config": quantization} if quantization else {})},
                          name)
    fields["vision_parameters"] = _siglip_parameters(vision, name, fields["hidden_size"])
    return fields


def _siglip_parameters(vision: dict[str, Any], name: str, text_hidden: int) -> int:
    """SigLIP's encoder (SiglipVisionConfig's defaults) and Gemma 3's projector onto the text
    hidden size: patch and position embeddings, layers of biased q/k/v/out, two LayerNorms
    and a biased MLP, a post LayerNorm; the projector's matrix and its RMSNorm."""
    if vision.get("vision_use_head"):
        raise KvbenchInputError(
            f"model {name}: config.json vision_config.vision_use_head is not counted "
            "(Gemma 3's vision tower has no pooling head)")
    h = positive_int(vision, "hidden_size", name, default=768)
    i = positive_int(vision, "intermediate_size", name, default=3072)
    layers = positive_int(vision, "num_hidden_layers", name, default=12)
    channels = positive_int(vision, "num_channels", name, default=3)
    image = positive_int(vision, "image_size", name, default=224)
    patch = positive_int(vision, "patch_size", name, default=16)
    embeddings = channels * patch * patch * h + h + (image // patch) ** 2 * h
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 4 * h
    return embeddings + layers * layer + 2 * h + h * text_hidden + h


def _refuse_unimplemented(hf: dict[str, Any], name: str, gemma3: bool) -> None:
    refuse_unimplemented(hf, name, "hidden_activation", (GEMMA_ACTIVATION,), "kvbench's Gemma "
                         f"MLP is GeGLU: hidden_activation {GEMMA_ACTIVATION!r}", GEMMA_ACTIVATION)
    refuse_unimplemented(hf, name, "use_bidirectional_attention", (None, False),
                         "kvbench's attention is causal")
    if gemma3:  # transformers' Gemma 3 never applies it: which arithmetic was meant is unclear
        refuse_unimplemented(hf, name, "attn_logit_softcapping", (None,),
                             "transformers' Gemma 3 ignores it; published configs set null")
    refuse_partial_rotary(hf, name)
    quantization(hf, name)


def _layer_types(hf: dict[str, Any], name: str, num_layers: int,
                 gemma3: bool) -> tuple[str, ...]:
    """transformers' default: Gemma 2 alternates sliding and full layers (sliding first);
    Gemma 3 makes every `sliding_window_pattern`-th layer full (default 6: 5 local, 1 global)."""
    layer_types = hf.get("layer_types")
    if layer_types is None:
        pattern = positive_int(hf, "sliding_window_pattern", name, default=6) if gemma3 else 2
        return periodic_layer_types(num_layers, pattern)
    return checked_layer_types(layer_types, name, num_layers)


def _rope(hf: dict[str, Any], name: str,
          gemma3: bool) -> tuple[float, float | None, dict[str, Any] | None]:
    """(full-attention layers' rope base, sliding layers' base (Gemma 3), full layers' linear
    scaling or None)."""
    params = hf.get("rope_parameters")
    if params is not None and not isinstance(params, dict):
        raise KvbenchInputError(f"model {name}: config.json rope_parameters is not a JSON object")
    if not gemma3:
        rope = params or hf.get("rope_scaling") or {}
        _rope_kind(rope, name, ("default",))
        return float(rope.get("rope_theta") or hf.get("rope_theta") or 10_000.0), None, None
    if params is not None and "full_attention" in params:
        full = params.get("full_attention") or {}
        local = params.get("sliding_attention") or {}
    else:
        full = {**(hf.get("rope_scaling") or params or {})}
        local = {}
    kind = _rope_kind(full, name, ("default", "linear"))
    _rope_kind(local, name, ("default",))
    theta = float(full.get("rope_theta") or hf.get("rope_theta") or 1_000_000.0)
    local_theta = float(local.get("rope_theta") or hf.get("rope_local_base_freq") or 10_000.0)
    scaling = None
    if kind == "linear":
        factor = full.get("factor")
        if isinstance(factor, bool) or not isinstance(factor, int | float) or factor <= 0:
            raise KvbenchInputError(
                f"model {name}: config.json rope_scaling (linear) needs a positive factor, "
                f"got {factor!r}")
        scaling = {"rope_type": "linear", "factor": float(factor)}
    return theta, local_theta, scaling


def _rope_kind(rope: Any, name: str, supported: tuple[str, ...]) -> str:
    if not isinstance(rope, dict):
        raise KvbenchInputError(f"model {name}: config.json rope_scaling is not a JSON object")
    kind = rope.get("rope_type") or rope.get("type") or "default"
    if kind not in supported:
        raise KvbenchInputError(
            f"model {name}: config.json rope_scaling type {kind!r} is not implemented here "
            f"(supported: {', '.join(supported)})")
    refuse_partial_rotary(rope, name)
    return kind


def _cap(hf: dict[str, Any], key: str, name: str, default: float | None) -> float | None:
    if hf.get(key, default) is None:
        return None
    return positive_number(hf, key, name, default or 0.0)
