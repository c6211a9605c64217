"""Model presets: `tiny` for the CPU, and the shapes of real models (random weights)."""

from __future__ import annotations

from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.deepseek_config import DeepseekRouting, MLAShape


def _gpt_oss(name: str, num_layers: int, num_local_experts: int) -> ModelConfig:
    """gpt-oss's shape: the 20B and 120B differ only in layers and experts."""
    return ModelConfig(
        name=name,
        vocab_size=201088,
        hidden_size=2880,
        intermediate_size=2880,
        num_layers=num_layers,
        num_heads=64,
        num_kv_heads=8,
        head_dim=64,
        max_position_embeddings=131072,
        rope_theta=150000.0,
        attention_bias=True,
        o_proj_bias=True,
        rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                      "truncate": False, "original_max_position_embeddings": 4096},
        sliding_window=128,
        layer_types=tuple("sliding_attention" if i % 2 == 0 else "full_attention"
                          for i in range(num_layers)),
        num_local_experts=num_local_experts,
        num_experts_per_tok=4,
        attention_sinks=True,
        moe_bias=True,
        swiglu_limit=7.0,
        architecture="gpt_oss",
    )


PRESETS: dict[str, ModelConfig] = {
    # CPU default: small enough that a chat workload runs quickly on a laptop CPU,
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
    # The CPU's mixture of experts: tiny's attention and KV cache (so a strategy comparison
    # on it is the dense one's with only the feed-forward changed), each layer's MLP eight
    # Mixtral-style SwiGLU experts, two a token. Experts of half tiny's width make the two
    # active ones compute exactly tiny's dense MLP per token (2 x 344 = 688).
    "tiny-moe": ModelConfig(
        name="tiny-moe",
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=344,
        num_layers=4,
        num_heads=8,
        num_kv_heads=2,
        max_position_embeddings=2048,
        num_local_experts=8,
        num_experts_per_tok=2,
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
    "qwen3-14b": ModelConfig(
        name="qwen3-14b",
        vocab_size=151936,
        hidden_size=5120,
        intermediate_size=17408,
        num_layers=40,
        num_heads=40,
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
    # google/gemma-2-27b's config.json: Gemma 2 layers alternate a 4096-token window and full
    # attention; scores scaled by query_pre_attn_scalar 144 and soft-capped at 50, logits at 30.
    "gemma-2-27b": ModelConfig(
        name="gemma-2-27b",
        architecture="gemma",
        vocab_size=256000,
        hidden_size=4608,
        intermediate_size=36864,
        num_layers=46,
        num_heads=32,
        num_kv_heads=16,
        head_dim=128,
        max_position_embeddings=8192,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        sliding_window=4096,
        layer_types=("sliding_attention", "full_attention") * 23,
        query_pre_attn_scalar=144,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
    ),
    # google/gemma-3-27b-it's text_config: five 1024-token window layers to one global layer,
    # per-head q/k norms, local rope base 1e4, global 1e6 scaled 8x (linear).
    "gemma-3-27b": ModelConfig(
        name="gemma-3-27b",
        architecture="gemma",
        vocab_size=262208,
        hidden_size=5376,
        intermediate_size=21504,
        num_layers=62,
        num_heads=32,
        num_kv_heads=16,
        head_dim=128,
        max_position_embeddings=131072,
        rope_theta=1000000.0,
        rope_local_theta=10000.0,
        rope_scaling={"rope_type": "linear", "factor": 8.0},
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        qk_norm=True,
        sliding_window=1024,
        layer_types=tuple("full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                          for i in range(62)),
        query_pre_attn_scalar=168,
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
    # openai/gpt-oss-20b's and -120b's config.json: attention with biases and sinks on 64
    # query heads of 64, layers alternating a 128-token window and full attention, YaRN
    # (factor 32 over 4096 positions), every layer a mixture of biased experts with the
    # clamped SwiGLU. Published with mxfp4 experts; a preset runs on random float weights.
    "gpt-oss-20b": _gpt_oss(name="gpt-oss-20b", num_layers=24, num_local_experts=32),
    "gpt-oss-120b": _gpt_oss(name="gpt-oss-120b", num_layers=36, num_local_experts=128),
    # deepseek-ai/DeepSeek-V3's config.json: latent attention (one 576-wide latent + rope row a
    # token and layer), 3 dense layers then 58 of 256 routed experts (8 a token, sigmoid
    # scores, 4 of 8 groups) and one shared expert; YaRN x40 over 4,096 positions. ~671B
    # parameters without the multi-token-prediction layer, ~37B active, published as fp8
    # weights (its quantization_config): sized at 1 B a weight, not loadable by the engine.
    "deepseek-v3": ModelConfig(
        name="deepseek-v3",
        vocab_size=129280,
        hidden_size=7168,
        intermediate_size=18432,
        num_layers=61,
        num_heads=128,
        num_kv_heads=128,
        head_dim=192,
        max_position_embeddings=163840,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        rope_scaling={"rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                      "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
        num_local_experts=256,
        num_experts_per_tok=8,
        moe_intermediate_size=2048,
        norm_topk_prob=True,
        dense_layers=(0, 1, 2),
        num_shared_experts=1,
        mla=MLAShape(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                     v_head_dim=128, q_lora_rank=1536),
        routing=DeepseekRouting("sigmoid", "noaux_tc", n_group=8, topk_group=4,
                                routed_scaling_factor=2.5),
        quantization="fp8",
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
