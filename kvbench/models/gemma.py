"""Gemma 2 and Gemma 3 (text) decoders on `llama.py`'s attention and rope, as transformers'
Gemma2ForCausalLM / Gemma3ForCausalLM compute them: (1 + w) RMSNorms in float32, post-attention
and pre/post feed-forward norms, embeddings times sqrt(hidden) in their dtype, GeGLU with
tanh-approximated gelu, soft-capped logits; Gemma 3's per-head q/k norms and sliding layers'
own rope base (its linear `rope_scaling` on full-attention layers only). The softmax scale and
the attention soft-cap are the executor's (`ModelConfig.softmax_scale`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kvbench.models.config import ModelConfig
from kvbench.models.direct_call import DirectCall
from kvbench.models.llama import (
    MLP,
    Attention,
    AttentionFn,
    Backbone,
    FlatBatchDecoder,
    plain_inv_freq,
    rope_cos_sin,
)


class GemmaRMSNorm(DirectCall):
    """x / rms(x) x (offset + w), in float32, cast to x's dtype: Gemma's (1 + w) norm, whose
    weights' identity value is 0 (Qwen3-Next's too); with offset 0 Nemotron-H's, which
    multiplies the weight in float32 where Llama's casts first (the same in float32 only)."""

    def __init__(self, size: int, eps: float, offset: float = 1.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.full((size,), 1.0 - offset))
        self.eps = eps
        self.offset = offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (self.offset + self.weight.float())).to(x.dtype)


class GemmaMLP(MLP):
    """GeGLU: llama.py's MLP with tanh-approximated gelu in place of silu."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class GemmaDecoderLayer(DirectCall):
    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__()
        h, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = Attention(config, layer_index)
        if config.qk_norm:  # Gemma 3's q/k norms are (1 + w) norms
            self.self_attn.q_norm = GemmaRMSNorm(config.head_dim, eps)
            self.self_attn.k_norm = GemmaRMSNorm(config.head_dim, eps)
        self.mlp = GemmaMLP(config)
        self.input_layernorm = GemmaRMSNorm(h, eps)
        self.post_attention_layernorm = GemmaRMSNorm(h, eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(h, eps)
        self.post_feedforward_layernorm = GemmaRMSNorm(h, eps)

    def forward(self, x, cos, sin, attention: AttentionFn) -> torch.Tensor:
        attended = self.self_attn(self.input_layernorm(x), cos, sin, attention)
        x = x + self.post_attention_layernorm(attended)
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


def gemma_inv_freq(config: ModelConfig, sliding: bool) -> torch.Tensor:
    """RoPE inverse frequencies of a sliding-window layer (Gemma 3's local base) or of a
    full-attention one (divided by the linear `rope_scaling` factor, if any)."""
    dim = config.head_dim
    base = config.rope_local_theta if sliding and config.rope_local_theta else config.rope_theta
    inv_freq = plain_inv_freq(dim, base)
    if not sliding and config.rope_scaling:
        inv_freq = inv_freq / config.rope_scaling["factor"]
    return inv_freq


class GemmaDecoder(FlatBatchDecoder):
    """Gemma's flat-batch decoder: sliding-window layers rotate with their own rope, the
    embeddings are scaled and the logits may be soft-capped."""

    # the value of a norm weight that leaves its input as it is ((1 + w) norms: 0)
    identity_norm_weight = 0.0

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, Backbone(config, GemmaDecoderLayer, GemmaRMSNorm))
        self.sliding_layers = [config.layer_window(i) is not None
                               for i in range(config.num_layers)]
        # sliding layers' own rope: Gemma 3's local base, or full layers' scaling to skip
        self.local_rope = any(self.sliding_layers) and (
            config.rope_local_theta is not None or config.rope_scaling is not None)

    def config_buffers(self) -> dict[str, torch.Tensor]:
        """RoPE frequencies in float32, and sqrt(hidden) rounded to the embeddings' dtype
        (transformers scales in that dtype)."""
        dtype = self.model.embed_tokens.weight.dtype
        return {"embed_scale": torch.tensor(self.config.hidden_size**0.5).to(dtype),
                "inv_freq": gemma_inv_freq(self.config, False),
                "local_inv_freq": gemma_inv_freq(self.config, True)}

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attention: AttentionFn
    ) -> torch.Tensor:
        """Hidden states `[T, hidden]` after the final norm."""
        x = self.embed(input_ids) * self.embed_scale
        full = rope_cos_sin(positions, self.inv_freq, x.dtype)
        local = rope_cos_sin(positions, self.local_inv_freq, x.dtype) if self.local_rope else full
        for layer, sliding in zip(self.model.layers, self.sliding_layers, strict=True):
            cos, sin = local if sliding else full
            x = layer(x, cos, sin, attention)
        return self.model.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(hidden).float()
        cap = self.config.final_logit_softcapping
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits
