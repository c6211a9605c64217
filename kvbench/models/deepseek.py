"""DeepSeek-V2/V3: multi-head latent attention (MLA) and routed plus shared experts.

Parameter names follow transformers' `DeepseekV3ForCausalLM` (and DeepSeek's checkpoints: one
module per expert, `mlp.experts.E.{gate,up,down}_proj`), so a checkpoint loads as it is.

Attention runs over the latent with the up-projections absorbed (docs/design.md says why):
`kv_b_proj` is split per head into W_UK (latent -> no-rope key) and W_UV (latent -> value);
the query's no-rope part is taken into latent space (q_nope . W_UK), so that one head's
scores are q_latent . latent + q_pe . k_pe over the cached row [latent, k_pe], and the
attention output, a mix of latents, is taken out through W_UV before o_proj. The executor's
attention callable therefore sees multi-query attention with one KV head of
kv_lora_rank + qk_rope_head_dim (576 for V3) whose value is its first kv_lora_rank elements.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kvbench.models.config import ModelConfig
from kvbench.models.direct_call import DirectCall, Linear
from kvbench.models.llama import (
    MLP,
    AttentionFn,
    Backbone,
    DecoderLayer,
    FlatBatchDecoder,
    RMSNorm,
    mix_experts,
)
from kvbench.models.rope_yarn import yarn_mscale

# transformers builds q_a_layernorm and kv_a_layernorm with its RMSNorm's default epsilon,
# not the config's rms_norm_eps.
LATENT_NORM_EPS = 1e-6


def deepseek_softmax_scale(config: ModelConfig) -> float:
    """1 / sqrt(qk head dim), times YaRN's mscale(factor, mscale_all_dim)^2 (transformers)."""
    scale = config.mla.qk_head_dim**-0.5
    scaling = config.rope_scaling
    if scaling and scaling.get("mscale_all_dim"):
        scale *= yarn_mscale(scaling["factor"], scaling["mscale_all_dim"]) ** 2
    return scale


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleave: bool):
    """Rope on `x` [T, heads, d] with cos/sin [T, 1, d/2] (one angle per rotated pair)."""
    if interleave:  # pairs (x0, x1), (x2, x3) ...; out: the pairs' firsts, then seconds
        x1, x2 = x[..., 0::2], x[..., 1::2]
    else:  # pairs (x_i, x_{i + d/2})
        x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class LatentAttention(DirectCall):
    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__()
        mla = config.mla
        self.layer_index = layer_index
        self.mla = mla
        self.num_heads = config.num_heads
        h, heads, bias = config.hidden_size, config.num_heads, config.attention_bias
        if mla.q_lora_rank is None:
            self.q_proj = Linear(h, heads * mla.qk_head_dim, bias=False)
        else:
            self.q_a_proj = Linear(h, mla.q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(mla.q_lora_rank, LATENT_NORM_EPS)
            self.q_b_proj = Linear(mla.q_lora_rank, heads * mla.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = Linear(h, mla.latent_dim, bias=bias)
        self.kv_a_layernorm = RMSNorm(mla.kv_lora_rank, LATENT_NORM_EPS)
        self.kv_b_proj = Linear(
            mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + mla.v_head_dim), bias=False)
        self.o_proj = Linear(heads * mla.v_head_dim, h, bias=bias)

    def forward(self, x, cos, sin, attention: AttentionFn) -> torch.Tensor:
        mla, heads, tokens = self.mla, self.num_heads, x.shape[0]
        if mla.q_lora_rank is None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q_nope, q_pe = q.view(tokens, heads, mla.qk_head_dim).split(
            [mla.qk_nope_head_dim, mla.qk_rope_head_dim], dim=-1)
        latent, k_pe = self.kv_a_proj_with_mqa(x).split(
            [mla.kv_lora_rank, mla.qk_rope_head_dim], dim=-1)
        latent = self.kv_a_layernorm(latent)
        q_pe = _rotate(q_pe, cos, sin, mla.rope_interleave)
        k_pe = _rotate(k_pe[:, None, :], cos, sin, mla.rope_interleave)
        # kv_b_proj per head: rows [nope key | value], columns the latent.
        w_kv = self.kv_b_proj.weight.view(heads, mla.qk_nope_head_dim + mla.v_head_dim,
                                          mla.kv_lora_rank)
        w_uk, w_uv = w_kv.split([mla.qk_nope_head_dim, mla.v_head_dim], dim=1)
        q_latent = torch.einsum("thn,hnc->thc", q_nope, w_uk)
        query = torch.cat((q_latent, q_pe), dim=-1)  # [T, heads, latent + rope]
        row = torch.cat((latent[:, None, :], k_pe), dim=-1)  # [T, 1, latent + rope]
        out_latent = attention(self.layer_index, query, row, row[..., : mla.kv_lora_rank])
        out = torch.einsum("thc,hvc->thv", out_latent, w_uv)
        return self.o_proj(out.reshape(tokens, heads * mla.v_head_dim))


class Router(DirectCall):
    """DeepSeek's router (`DeepseekRouting`): the top-k experts of each token and their
    weights, in float32 whatever the weights' dtype, as transformers routes."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        routing = config.routing
        self.routing = routing
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        experts = config.num_local_experts
        self.weight = nn.Parameter(torch.empty(experts, config.hidden_size))
        if routing.has_correction_bias:
            # Learnt load balancing: it shifts which experts are chosen, never their weights.
            self.e_score_correction_bias = nn.Parameter(torch.zeros(experts),
                                                        requires_grad=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        routing, tokens = self.routing, x.shape[0]
        logits = F.linear(x.float(), self.weight.float())
        experts = logits.shape[-1]
        groups, per_group = routing.n_group, experts // routing.n_group
        if routing.scoring == "sigmoid":
            scores = logits.sigmoid()
            choice = scores + self.e_score_correction_bias.float()
            group_scores = choice.view(tokens, groups, per_group).topk(2, dim=-1)[0].sum(-1)
            fill = float("-inf")
        else:
            scores = choice = logits.softmax(dim=-1)
            group_scores = choice.view(tokens, groups, per_group).amax(dim=-1)
            fill = 0.0
        if routing.topk_method != "greedy":
            kept = torch.topk(group_scores, routing.topk_group, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores).scatter_(1, kept, 1.0).bool()
            expert_mask = group_mask[:, :, None].expand(-1, -1, per_group).reshape(tokens, -1)
            choice = choice.masked_fill(~expert_mask, fill)
        chosen = torch.topk(choice, self.top_k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, chosen)
        if self.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * routing.routed_scaling_factor, chosen


class DeepseekMoE(DirectCall):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        width = config.moe_intermediate_size
        self.gate = Router(config)
        self.experts = nn.ModuleList(
            MLP(config, width) for _ in range(config.num_local_experts))
        self.has_shared = config.num_shared_experts > 0
        if self.has_shared:
            self.shared_experts = MLP(config, width * config.num_shared_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = self.gate(x)
        out = mix_experts(x, weights, chosen, lambda e, tokens: self.experts[e](tokens))
        if self.has_shared:
            out = out + self.shared_experts(x)
        return out


def deepseek_layer(config: ModelConfig, layer_index: int) -> DecoderLayer:
    feed_forward = DeepseekMoE(config) if config.is_moe_layer(layer_index) else MLP(config)
    return DecoderLayer(config, layer_index, LatentAttention(config, layer_index), feed_forward)


class DeepseekDecoder(FlatBatchDecoder):
    """`forward` runs the flattened tokens of a batch, as `LlamaDecoder` does; the attention
    callable gets the absorbed query `[T, heads, latent + rope]`, the cached row
    `[T, 1, latent + rope]` and its latent view as the value, and returns `[T, heads, latent]`."""

    # Checkpoint names of expert E's projections and of the router (kvbench.models.loader).
    EXPERT_WEIGHT = "mlp.experts.{expert}.{proj}.weight"
    EXPERT_PROJ = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
    ROUTER_WEIGHT = "mlp.gate.weight"

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, Backbone(config, deepseek_layer))
        self.softmax_scale = deepseek_softmax_scale(config)

    def rotary_dim(self) -> int:
        return self.config.mla.qk_rope_head_dim

    def rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[:, None] * self.inv_freq.float()[None, :]
        factor = self.rope_attention_factor
        # [T, 1, d/2]: broadcast over heads
        return ((freqs.cos() * factor).to(dtype)[:, None, :],
                (freqs.sin() * factor).to(dtype)[:, None, :])
