"""Qwen3-Next, as transformers' Qwen3NextForCausalLM computes it (docs/models.md, State-space
hybrids): Gated DeltaNet layers (gated_deltanet.py) or gated full attention (q/k norms, rope
over the first `partial_rotary_factor` of each head, a sigmoid gate on the output projected
beside q); every layer a mixture of SwiGLU experts with a sigmoid-gated shared expert (or a
dense MLP where mlp_only_layers / decoder_sparse_step say); zero-centred (1 + w) RMSNorms.
Parameter names follow the checkpoint's, so a local folder's state dict loads as it is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.direct_call import DirectCall, Linear
from kvbench.models.gated_deltanet import GatedDeltaNet
from kvbench.models.gemma import GemmaRMSNorm
from kvbench.models.llama import (
    MLP,
    Attention,
    AttentionFn,
    Backbone,
    FlatBatchDecoder,
    apply_rope,
    mix_experts,
)
from kvbench.models.recurrent_states import RecurrentStates

# Qwen3-Next's (1 + w) RMSNorm in float32 is Gemma's, operation for operation.
ZeroCenteredRMSNorm = GemmaRMSNorm


def rotary_dim(config: ModelConfig) -> int:
    """The dimensions of a head rope rotates (its first ones), as transformers rounds them."""
    return int(config.head_dim * config.partial_rotary_factor)


class GatedAttention(Attention):
    """Full attention whose q_proj also gives, per head, a gate on that head's output
    (`[q | gate]` per head, 2 x head_dim wide); (1 + w) q/k norms; partial rope."""

    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__(config, layer_index)
        d = self.head_dim
        self.rotary_dim = rotary_dim(config)
        self.q_proj = Linear(config.hidden_size, 2 * self.num_heads * d, bias=False)
        self.q_norm = ZeroCenteredRMSNorm(d, config.rms_norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(d, config.rms_norm_eps)

    def rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.rotary_dim == self.head_dim:
            return apply_rope(x, cos, sin)
        rotated = apply_rope(x[..., : self.rotary_dim], cos, sin)
        return torch.cat((rotated, x[..., self.rotary_dim :]), dim=-1)

    def forward(self, x, cos, sin, attention: AttentionFn) -> torch.Tensor:
        tokens = x.shape[0]
        q, gate = self.q_proj(x).view(tokens, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)
        k = self.k_proj(x).view(tokens, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(tokens, self.num_kv_heads, self.head_dim)
        q = self.rope(self.q_norm(q), cos, sin)
        k = self.rope(self.k_norm(k), cos, sin)
        out = attention(self.layer_index, q, k, v).reshape(tokens, -1)
        return self.o_proj(out * torch.sigmoid(gate.reshape(tokens, -1)))


class SharedExpertMoE(DirectCall):
    """Softmax router over `num_local_experts` SwiGLU experts, top-k (renormalised with
    norm_topk_prob), plus a shared expert every token runs, scaled by sigmoid(a learned
    logit of the token)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.gate = Linear(h, config.num_local_experts, bias=False)
        self.experts = nn.ModuleList(MLP(config, config.moe_intermediate_size)
                                     for _ in range(config.num_local_experts))
        shared = config.hybrid.shared_expert_intermediate_size
        self.shared_expert = MLP(config, shared)
        self.shared_expert_gate = Linear(h, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.gate(x)
        scores = F.softmax(logits, dim=-1, dtype=torch.float)  # routing in float32
        weights, chosen = torch.topk(scores, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        # transformers weighs the experts' outputs in the model's dtype
        routed = mix_experts(x, weights.to(logits.dtype), chosen,
                             lambda e, tokens: self.experts[e](tokens))
        return routed + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)


class Qwen3NextDecoderLayer(DirectCall):
    """Pre-norm mixer (`linear_attn` or `self_attn`) and feed-forward (`mlp`), residuals."""

    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__()
        self.recurrent = config.hybrid.mixers[layer_index] == "recurrent"
        if self.recurrent:
            self.linear_attn = GatedDeltaNet(config, layer_index)
        else:
            self.self_attn = GatedAttention(config, layer_index)
        self.mlp = SharedExpertMoE(config) if config.is_moe_layer(layer_index) else MLP(config)
        self.input_layernorm = ZeroCenteredRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = ZeroCenteredRMSNorm(config.hidden_size,
                                                            config.rms_norm_eps)

    def forward(self, x, cos, sin, attention: AttentionFn,
                states: RecurrentStates) -> torch.Tensor:
        normed = self.input_layernorm(x)
        if self.recurrent:
            x = x + self.linear_attn(normed, states)
        else:
            x = x + self.self_attn(normed, cos, sin, attention)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3NextDecoder(FlatBatchDecoder):
    """Qwen3-Next's flat-batch decoder. `forward(input_ids, positions, attention, states)`:
    the attention layers call `attention(layer, q, k, v)` as every kvbench decoder's do; the
    Gated DeltaNet layers read and write their states through `states` (layer indices are the
    model's: `config.hybrid.recurrent_layers`)."""

    # (1 + w) norms' identity is 0; the Gated DeltaNet's gated norm has a plain weight (1)
    identity_norm_weight = 0.0
    # Names of expert E's projections and of the router, as kvbench.models.loader maps a
    # checkpoint's fused experts onto them (transformers 5 may save them fused).
    EXPERT_WEIGHT = "mlp.experts.{expert}.{proj}.weight"
    EXPERT_PROJ = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
    ROUTER_WEIGHT = "mlp.gate.weight"
    # the multi-token-prediction head published checkpoints carry (transformers skips it too)
    IGNORED_WEIGHTS = ("mtp.",)

    def __init__(self, config: ModelConfig) -> None:
        if config.rope_scaling is not None:
            raise KvbenchInputError(
                f"model {config.name}: config.json rope type "
                f"{config.rope_scaling.get('rope_type', config.rope_scaling.get('type'))!r} is "
                "not implemented for Qwen3-Next (kvbench rotates with the default rope)")
        super().__init__(config, Backbone(config, Qwen3NextDecoderLayer, ZeroCenteredRMSNorm))

    def identity_norm_weight_of(self, name: str) -> float:
        """The weight that makes norm `name` leave its input as it is (dummy weights)."""
        return 1.0 if name.endswith("linear_attn.norm.weight") else self.identity_norm_weight

    def rotary_dim(self) -> int:
        return rotary_dim(self.config)
