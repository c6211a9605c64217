"""gpt-oss, as transformers' GptOssForCausalLM computes it: Llama's decoder with biases on q, k,
v and o, one learned sink logit per query head (`self_attn.sinks`, passed by the executor to
the attention ops), a biased router softmaxed over its top-k logits, and experts held fused as
the checkpoint stores them (gate and up in interleaved columns) with the clamped SwiGLU."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kvbench.models.config import ModelConfig
from kvbench.models.direct_call import DirectCall
from kvbench.models.llama import Attention, DecoderLayer, LlamaDecoder, mix_experts


class SinkAttention(Attention):
    """Llama's attention plus a learned `[heads]` logit that joins each softmax."""

    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__(config, layer_index)
        self.sinks = nn.Parameter(torch.zeros(config.num_heads))


class TopKRouter(DirectCall):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.weight = nn.Parameter(torch.zeros(config.num_local_experts, config.hidden_size))
        self.bias = nn.Parameter(torch.zeros(config.num_local_experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each token's `[T, k]` weights (a softmax over its top-k logits) and experts."""
        logits = F.linear(x, self.weight, self.bias)
        top, chosen = torch.topk(logits, self.top_k, dim=-1)
        return F.softmax(top, dim=-1, dtype=top.dtype), chosen


class FusedExperts(DirectCall):
    """Every expert's weights in one tensor per projection, in the checkpoint's layout."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        e, h, i = config.num_local_experts, config.hidden_size, config.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.zeros(e, h, 2 * i))
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(e, 2 * i))
        self.down_proj = nn.Parameter(torch.zeros(e, i, h))
        self.down_proj_bias = nn.Parameter(torch.zeros(e, h))
        self.alpha = config.swiglu_alpha
        self.limit = config.swiglu_limit

    def clamped_swiglu(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate = gate_up[..., ::2].clamp(max=self.limit)
        up = gate_up[..., 1::2].clamp(min=-self.limit, max=self.limit)
        return (up + 1) * (gate * torch.sigmoid(gate * self.alpha))

    def expert(self, expert: int, x: torch.Tensor) -> torch.Tensor:
        gate_up = x @ self.gate_up_proj[expert] + self.gate_up_proj_bias[expert]
        return self.clamped_swiglu(gate_up) @ self.down_proj[expert] + self.down_proj_bias[expert]

    def forward(self, x: torch.Tensor, weights: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        return mix_experts(x, weights, chosen, self.expert)


class GptOssMLP(DirectCall):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.router = TopKRouter(config)
        self.experts = FusedExperts(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = self.router(x)
        return self.experts(x, weights, chosen)


def gpt_oss_layer(config: ModelConfig, layer_index: int) -> DecoderLayer:
    return DecoderLayer(config, layer_index, SinkAttention(config, layer_index), GptOssMLP(config))


class GptOssDecoder(LlamaDecoder):
    layer_class = staticmethod(gpt_oss_layer)
