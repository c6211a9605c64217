"""Granite-4.0-H, as transformers' GraniteMoeHybridForCausalLM computes it (docs/models.md,
State-space hybrids): Mamba-2 layers (mamba2.py) and llama.py's attention (rotated only where
position_embedding_type is "rope"), each followed by the experts (top-k of the router's
logits, softmaxed over those k) beside a shared SwiGLU MLP, and mu-P multipliers on the
embeddings, each residual branch, the logits and (the executor's softmax scale) the scores.

Parameter names are the checkpoint's (`block_sparse_moe.input_linear` holds each expert's
gate and up rows, `output_linear` its down projection, `router.layer` the router).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kvbench.models.config import ModelConfig
from kvbench.models.direct_call import DirectCall, Linear
from kvbench.models.llama import (
    Attention,
    AttentionFn,
    Backbone,
    FlatBatchDecoder,
    RMSNorm,
    mix_experts,
    silu_and_mul,
)
from kvbench.models.mamba2 import Mamba2Mixer
from kvbench.models.recurrent_states import RecurrentStates


class SharedMLP(DirectCall):
    """SwiGLU with gate and up in one matrix (`input_linear`: gate rows, then up rows)."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.input_linear = Linear(hidden, 2 * intermediate, bias=False)
        self.output_linear = Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.input_linear(x).chunk(2, dim=-1)
        return self.output_linear(F.silu(gate) * up)


class ExpertWeights(DirectCall):
    """Every expert's matrix of one projection, `[experts, out, in]` (the checkpoint's)."""

    def __init__(self, experts: int, out_features: int, in_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(experts, out_features, in_features))


class Router(DirectCall):
    def __init__(self, hidden: int, experts: int) -> None:
        super().__init__()
        self.layer = Linear(hidden, experts, bias=False)


class GraniteMoE(DirectCall):
    """The router's top-k logits softmaxed over the k (in float32, then the activations'
    dtype), each chosen expert a SwiGLU of its `input_linear` rows."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        e, h, i = config.num_local_experts, config.hidden_size, config.moe_intermediate_size
        self.top_k = config.num_experts_per_tok
        self.router = Router(h, e)
        self.input_linear = ExpertWeights(e, 2 * i, h)
        self.output_linear = ExpertWeights(e, h, i)

    def expert(self, index: int, x: torch.Tensor) -> torch.Tensor:
        gate, up = F.linear(x, self.input_linear.weight[index]).chunk(2, dim=-1)
        return F.linear(silu_and_mul(gate, up), self.output_linear.weight[index])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.router.layer(x).float()
        top, chosen = logits.topk(self.top_k, dim=-1)
        weights = torch.softmax(top, dim=-1).type_as(x)
        return mix_experts(x, weights, chosen, self.expert)


class GraniteHybridLayer(DirectCall):
    """A Mamba-2 or attention layer, then the experts beside the shared MLP, each branch
    scaled by the residual multiplier."""

    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__()
        hybrid = config.hybrid
        h, eps = config.hidden_size, config.rms_norm_eps
        self.recurrent = hybrid.mixers[layer_index] == "recurrent"
        if self.recurrent:
            self.mamba = Mamba2Mixer(hybrid.recurrent, h, eps, layer_index)
        else:
            self.self_attn = Attention(config, layer_index)
        self.has_experts = config.num_local_experts > 0
        if self.has_experts:
            self.block_sparse_moe = GraniteMoE(config)
        self.shared_mlp = SharedMLP(h, config.intermediate_size)
        self.input_layernorm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.residual_multiplier = hybrid.residual_multiplier

    def forward(self, x, cos, sin, attention: AttentionFn,
                states: RecurrentStates) -> torch.Tensor:
        normed = self.input_layernorm(x)
        if self.recurrent:
            mixed = self.mamba(normed, states)
        else:
            mixed = self.self_attn(normed, cos, sin, attention)
        x = x + mixed * self.residual_multiplier
        normed = self.post_attention_layernorm(x)
        out = self.shared_mlp(normed)
        if self.has_experts:
            out = self.block_sparse_moe(normed) + out
        return x + out * self.residual_multiplier


class GraniteHybridDecoder(FlatBatchDecoder):
    """Granite-4.0-H's flat-batch decoder: `forward` also takes the recurrent layers' states."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, Backbone(config, GraniteHybridLayer))
        self.rotates = config.hybrid.rope

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids) * self.config.hybrid.embedding_multiplier

    def rope(self, positions: torch.Tensor,
             dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor] | tuple[None, None]:
        return super().rope(positions, dtype) if self.rotates else (None, None)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return (self.lm_head(hidden) / self.config.hybrid.logits_scaling).float()
