"""Model presets: `tiny` for the CPU, and the shapes of real models (random weights)."""

from __future__ import annotations

from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig

PRESETS: dict[str, ModelConfig] = {
    # CPU default: small enough that a chat workload runs in seconds on 2 cores,
    # GQA (4 query heads per KV head) so the grouped-query path is always exercised.
    "tiny": ModelConfig(
        name="tiny",
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=688,
        num_layers=4,
        num_heads=8,
        num_kv_heads=2,
        max_position_embeddings=2048,
    ),
    # `tiny` with Gemma 3's layer pattern for the CPU: five 128-token sliding-window layers
    # to one full-attention layer, so `hybrid` and `paged` differ as they do on Gemma 3.
    "tiny-hybrid": ModelConfig(
        name="tiny-hybrid",
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=688,
        num_layers=6,
        num_heads=8,
        num_kv_heads=2,
        max_position_embeddings=8192,
        sliding_window=128,
        layer_types=("sliding_attention",) * 5 + ("full_attention",),
    ),
    "llama-2-7b": ModelConfig(
        name="llama-2-7b",
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        max_position_embeddings=4096,
    ),
    "llama-2-13b": ModelConfig(
        name="llama-2-13b",
        vocab_size=32000,
        hidden_size=5120,
        intermediate_size=13824,
        num_layers=40,
        num_heads=40,
        num_kv_heads=40,
        max_position_embeddings=4096,
    ),
    # Llama-2-70B: grouped-query attention (8 KV heads), unlike the 7B and 13B.
    "llama-2-70b": ModelConfig(
        name="llama-2-70b",
        vocab_size=32000,
        hidden_size=8192,
        intermediate_size=28672,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        max_position_embeddings=4096,
    ),
    "llama-3-8b": ModelConfig(
        name="llama-3-8b",
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        max_position_embeddings=8192,
        rope_theta=500000.0,
    ),
    "llama-3-70b": ModelConfig(
        name="llama-3-70b",
        vocab_size=128256,
        hidden_size=8192,
        intermediate_size=28672,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        max_position_embeddings=8192,
        rope_theta=500000.0,
    ),
    "qwen2.5-7b": ModelConfig(
        name="qwen2.5-7b",
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_layers=28,
        num_heads=28,
        num_kv_heads=4,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        attention_bias=True,
    ),
    # Qwen3 dense shapes (the published config.json files): per-head q/k norms, head_dim 128
    # whatever hidden / heads is (Qwen3-32B's 64 query heads make q 8192 wide on a 5120 hidden).
    "qwen3-8b": ModelConfig(
        name="qwen3-8b",
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=12288,
        num_layers=36,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        qk_norm=True,
    ),
    "qwen3-32b": ModelConfig(
        name="qwen3-32b",
        vocab_size=151936,
        hidden_size=5120,
        intermediate_size=25600,
        num_layers=64,
        num_heads=64,
        num_kv_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        qk_norm=True,
    ),
    # Mistral-7B v0.1 shapes: every layer attends to its last 4096 tokens.
    "mistral-7b": ModelConfig(
        name="mistral-7b",
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=14336,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        max_position_embeddings=32768,
        sliding_window=4096,
    ),
    # mistralai/Mixtral-8x7B-v0.1's config.json: Mistral-7B's attention without a window, and
    # eight SwiGLU experts a layer, two of them a token (~46.7B parameters, ~12.9B active).
    "mixtral-8x7b": ModelConfig(
        name="mixtral-8x7b",
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=14336,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        num_local_experts=8,
        num_experts_per_tok=2,
    ),
    # Qwen/Qwen3-30B-A3B's config.json: Qwen3 attention (per-head q/k norms) and 128 experts
    # of 768 a layer, eight a token, their scores renormalised (norm_topk_prob true).
    "qwen3-30b-a3b": ModelConfig(
        name="qwen3-30b-a3b",
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=6144,
        num_layers=48,
        num_heads=32,
        num_kv_heads=4,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        qk_norm=True,
        num_local_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=768,
        norm_topk_prob=True,
    ),
    # Qwen/Qwen3-235B-A22B's config.json: 94 layers of 128 experts of 1536, eight a token.
    "qwen3-235b-a22b": ModelConfig(
        name="qwen3-235b-a22b",
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=12288,
        num_layers=94,
        num_heads=64,
        num_kv_heads=4,
        head_dim=128,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        qk_norm=True,
        num_local_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=1536,
        norm_topk_prob=True,
    ),
}


def looks_like_path(name: str) -> bool:
    """`./m`, `/models/x`, `~/x` or `org/model`: a folder was meant, not a preset."""
    return "/" in name or name.startswith((".", "~")) or "\\" in name


def get_preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        if looks_like_path(name):
            raise KvbenchInputError(
                f"model {name!r}: no such folder (kvbench reads local folders holding config.json "
                "and *.safetensors, or a preset: " + ", ".join(PRESETS) + ")"
            ) from None
        raise KvbenchInputError(
            f"unknown model preset {name!r} (presets: {', '.join(PRESETS)}; "
            "or give a local Hugging Face folder)"
        ) from None
