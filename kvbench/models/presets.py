"""Model presets: `tiny` for the CPU, and the shapes of real models (random weights)."""

from __future__ import annotations

from kvbench.errors import KvbenchInputError
from kvbench.models.config import GPT_OSS_DEFAULT_ROPE, ModelConfig
from kvbench.models.config_values import periodic_layer_types
from kvbench.models.deepseek_config import DeepseekRouting, MLAShape
from kvbench.models.hybrid_config import GDN_CHUNK_SIZE
from kvbench.models.recurrent import HybridLayers, RecurrentMixer


def _model(name: str, vocab: int, hidden: int, intermediate: int, layers: int, heads: int,
           kv_heads: int, positions: int, **fields) -> ModelConfig:
    """A preset from its published config.json: vocab_size, hidden_size, intermediate_size,
    num_hidden_layers, num_attention_heads, num_key_value_heads, max_position_embeddings, then
    any other ModelConfig fields."""
    return ModelConfig(name=name, vocab_size=vocab, hidden_size=hidden,
                       intermediate_size=intermediate, num_layers=layers, num_heads=heads,
                       num_kv_heads=kv_heads, max_position_embeddings=positions, **fields)


# Qwen3's attention: per-head q/k norms, head_dim 128 whatever hidden / heads is (Qwen3-32B's
# 64 query heads make q 8192 wide on a 5120 hidden).
QWEN3 = dict(head_dim=128, rope_theta=1000000.0, rms_norm_eps=1e-6, qk_norm=True)


def _gpt_oss(name: str, num_layers: int, num_local_experts: int) -> ModelConfig:
    """gpt-oss's shape: the 20B and 120B differ only in layers and experts."""
    return _model(
        name, 201088, 2880, 2880, num_layers, 64, 8, 131072,
        head_dim=64, rope_theta=150000.0, attention_bias=True, o_proj_bias=True,
        rope_scaling=dict(GPT_OSS_DEFAULT_ROPE),
        sliding_window=128, layer_types=periodic_layer_types(num_layers, 2),
        num_local_experts=num_local_experts, num_experts_per_tok=4, attention_sinks=True,
        moe_bias=True, swiglu_limit=7.0, architecture="gpt_oss",
    )


def _pattern(layers: str) -> tuple[str, ...]:
    """Layer mixers from a pattern: 'R' recurrent, 'A' attention, '-' none."""
    return tuple({"R": "recurrent", "A": "attention", "-": "none"}[c] for c in layers)


# Qwen/Qwen3-Next-80B-A3B-Instruct's config.json (~79.7B parameters, ~3.9B active).
QWEN3_NEXT_80B = _model(
    "qwen3-next-80b-a3b", 151936, 2048, 5120, 48, 16, 2, 262144, head_dim=256,
    rope_theta=10000000.0, partial_rotary_factor=0.25, rms_norm_eps=1e-6, qk_norm=True,
    num_local_experts=512,
    num_experts_per_tok=10, moe_intermediate_size=512, norm_topk_prob=True,
    hybrid=HybridLayers(
        _pattern("RRRA" * 12), (True,) * 48,
        RecurrentMixer("gated_deltanet", num_heads=32, head_dim=128, state_size=128,
                       num_groups=16, conv_kernel=4, inner_size=4096,
                       chunk_size=GDN_CHUNK_SIZE),
        attention_output_gate=True, shared_expert_intermediate_size=512,
        shared_expert_gate=True))

# ibm-granite/granite-4.0-h-small's config.json (~32.2B parameters, ~8.8B active).
GRANITE_4_H_SMALL = _model(
    "granite-4.0-h-small", 100352, 4096, 1536, 40, 32, 8, 131072, rms_norm_eps=1e-5,
    tie_word_embeddings=True, num_local_experts=72, num_experts_per_tok=10,
    moe_intermediate_size=768, architecture="granite_hybrid",
    hybrid=HybridLayers(
        _pattern("RRRRRA" + "RRRRRRRRRA" * 3 + "RRRR"), (True,) * 40,
        RecurrentMixer("mamba2", num_heads=128, head_dim=64, state_size=128, num_groups=1,
                       conv_kernel=4, inner_size=8192, chunk_size=256, conv_bias=True),
        shared_expert_intermediate_size=1536, embedding_multiplier=12.0,
        residual_multiplier=0.22, logits_scaling=16.0, attention_multiplier=0.0078125,
        rope=False))

# nvidia/Nemotron-H-8B-Base-8K's config.json (~8.1B parameters): 52 single-block layers,
# 24 Mamba-2 ('M'), 4 attention ('*') and 24 relu^2 MLPs ('-').
NEMOTRON_H_8B_PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
NEMOTRON_H_8B = _model(
    "nemotron-h-8b", 131072, 4096, 21504, 52, 32, 8, 8192, head_dim=128, rms_norm_eps=1e-5,
    architecture="nemotron_h",
    hybrid=HybridLayers(
        _pattern(NEMOTRON_H_8B_PATTERN.replace("M", "R").replace("*", "A")),
        tuple(c == "-" for c in NEMOTRON_H_8B_PATTERN),
        RecurrentMixer("mamba2", num_heads=128, head_dim=64, state_size=128, num_groups=8,
                       conv_kernel=4, inner_size=8192, chunk_size=128, conv_bias=True,
                       ssm_state_dtype="fp32"),
        mlp_ungated=True, norms_per_layer=1, rope=False))


# The CPU's state-space hybrid: Granite-4.0-H's layers at tiny's size. Four layers, the
# second attention (tiny's 8 query / 2 KV heads of 32, no rope, as the published models),
# the others Mamba-2 (8 heads of 64, d_state 64, one group, a 4-tap conv with bias, 64-token
# scan chunks), each with a shared SwiGLU MLP of tiny's width and no experts; the scores
# scaled by head_dim**-0.5 (Granite's attention_multiplier; transformers' default is 1).
TINY_GRANITE_H = _model(
    "tiny-granite-h", 2048, 256, 688, 4, 8, 2, 2048, architecture="granite_hybrid",
    hybrid=HybridLayers(
        _pattern("RARR"), (True,) * 4,
        RecurrentMixer("mamba2", num_heads=8, head_dim=64, state_size=64, num_groups=1,
                       conv_kernel=4, inner_size=512, chunk_size=64, conv_bias=True),
        attention_multiplier=32**-0.5, rope=False))


PRESETS: dict[str, ModelConfig] = {
    # CPU default: small enough that a chat workload runs quickly on a laptop CPU,
    # GQA (4 query heads per KV head) so the grouped-query path is always exercised.
    "tiny": _model("tiny", 2048, 256, 688, 4, 8, 2, 2048),
    # The CPU's mixture of experts: tiny's attention and KV cache (so a strategy comparison
    # on it is the dense one's with only the feed-forward changed), each layer's MLP eight
    # Mixtral-style SwiGLU experts, two a token. Experts of half tiny's width make the two
    # active ones compute exactly tiny's dense MLP per token (2 x 344 = 688).
    "tiny-moe": _model("tiny-moe", 2048, 256, 344, 4, 8, 2, 2048,
                       num_local_experts=8, num_experts_per_tok=2),
    # `tiny` with Gemma 3's layer pattern for the CPU: five 128-token sliding-window layers
    # to one full-attention layer, so `hybrid` and `paged` differ as they do on Gemma 3.
    "tiny-hybrid": _model("tiny-hybrid", 2048, 256, 688, 6, 8, 2, 8192, sliding_window=128,
                          layer_types=periodic_layer_types(6, 6)),
    "tiny-granite-h": TINY_GRANITE_H,
    "llama-2-7b": _model("llama-2-7b", 32000, 4096, 11008, 32, 32, 32, 4096),
    "llama-2-13b": _model("llama-2-13b", 32000, 5120, 13824, 40, 40, 40, 4096),
    # Llama-2-70B: grouped-query attention (8 KV heads), unlike the 7B and 13B.
    "llama-2-70b": _model("llama-2-70b", 32000, 8192, 28672, 80, 64, 8, 4096),
    "llama-3-8b": _model("llama-3-8b", 128256, 4096, 14336, 32, 32, 8, 8192,
                         rope_theta=500000.0),
    "llama-3-70b": _model("llama-3-70b", 128256, 8192, 28672, 80, 64, 8, 8192,
                          rope_theta=500000.0),
    "qwen2.5-7b": _model("qwen2.5-7b", 152064, 3584, 18944, 28, 28, 4, 32768,
                         rope_theta=1000000.0, rms_norm_eps=1e-6, attention_bias=True),
    "qwen3-8b": _model("qwen3-8b", 151936, 4096, 12288, 36, 32, 8, 40960, **QWEN3),
    "qwen3-14b": _model("qwen3-14b", 151936, 5120, 17408, 40, 40, 8, 40960, **QWEN3),
    "qwen3-32b": _model("qwen3-32b", 151936, 5120, 25600, 64, 64, 8, 40960, **QWEN3),
    # Mistral-7B v0.1 shapes: every layer attends to its last 4096 tokens.
    "mistral-7b": _model("mistral-7b", 32000, 4096, 14336, 32, 32, 8, 32768,
                         sliding_window=4096),
    # google/gemma-2-27b's config.json: Gemma 2 layers alternate a 4096-token window and full
    # attention; scores scaled by query_pre_attn_scalar 144 and soft-capped at 50, logits at 30.
    "gemma-2-27b": _model(
        "gemma-2-27b", 256000, 4608, 36864, 46, 32, 16, 8192, architecture="gemma",
        head_dim=128, rms_norm_eps=1e-6, tie_word_embeddings=True, sliding_window=4096,
        layer_types=periodic_layer_types(46, 2), query_pre_attn_scalar=144,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0),
    # google/gemma-3-27b-it's text_config: five 1024-token window layers to one global layer,
    # per-head q/k norms, local rope base 1e4, global 1e6 scaled 8x (linear).
    "gemma-3-27b": _model(
        "gemma-3-27b", 262208, 5376, 21504, 62, 32, 16, 131072, architecture="gemma",
        head_dim=128, rope_theta=1000000.0, rope_local_theta=10000.0,
        rope_scaling={"rope_type": "linear", "factor": 8.0}, rms_norm_eps=1e-6,
        tie_word_embeddings=True, qk_norm=True, sliding_window=1024,
        layer_types=periodic_layer_types(62, 6), query_pre_attn_scalar=168),
    # mistralai/Mixtral-8x7B-v0.1's config.json: Mistral-7B's attention without a window, and
    # eight SwiGLU experts a layer, two of them a token (~46.7B parameters, ~12.9B active).
    "mixtral-8x7b": _model("mixtral-8x7b", 32000, 4096, 14336, 32, 32, 8, 32768,
                           rope_theta=1000000.0, num_local_experts=8, num_experts_per_tok=2),
    # Qwen/Qwen3-30B-A3B's config.json: Qwen3 attention (per-head q/k norms) and 128 experts
    # of 768 a layer, eight a token, their scores renormalised (norm_topk_prob true).
    "qwen3-30b-a3b": _model("qwen3-30b-a3b", 151936, 2048, 6144, 48, 32, 4, 40960, **QWEN3,
                            num_local_experts=128, num_experts_per_tok=8,
                            moe_intermediate_size=768, norm_topk_prob=True),
    # Qwen/Qwen3-235B-A22B's config.json: 94 layers of 128 experts of 1536, eight a token.
    "qwen3-235b-a22b": _model("qwen3-235b-a22b", 151936, 4096, 12288, 94, 64, 4, 40960, **QWEN3,
                              num_local_experts=128, num_experts_per_tok=8,
                              moe_intermediate_size=1536, norm_topk_prob=True),
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
    "deepseek-v3": _model(
        "deepseek-v3", 129280, 7168, 18432, 61, 128, 128, 163840,
        head_dim=192, rope_theta=10000.0, rms_norm_eps=1e-6,
        rope_scaling={"rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                      "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
        num_local_experts=256, num_experts_per_tok=8, moe_intermediate_size=2048,
        norm_topk_prob=True, dense_layers=(0, 1, 2), num_shared_experts=1,
        mla=MLAShape(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                     v_head_dim=128, q_lora_rank=1536),
        routing=DeepseekRouting("sigmoid", "noaux_tc", n_group=8, topk_group=4,
                                routed_scaling_factor=2.5),
        quantization="fp8"),
    # State-space hybrids: KV in their attention layers, a constant state in the others.
    "qwen3-next-80b-a3b": QWEN3_NEXT_80B,
    "granite-4.0-h-small": GRANITE_4_H_SMALL,
    "nemotron-h-8b": NEMOTRON_H_8B,
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
