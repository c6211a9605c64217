"""A Llama-architecture decoder: RMSNorm, RoPE, grouped-query attention, SwiGLU MLP; with
Qwen3's per-head q/k RMSNorm where the config has it, and Mixtral's mixture of SwiGLU experts
in place of the MLP.

Parameter names follow Hugging Face's `LlamaForCausalLM` so a local checkpoint's state dict
loads as it is. The model holds weights only: attention over the KV cache is a callable the
executor passes to `forward`, so the same model serves every strategy and backend.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from kvbench.models.config import ModelConfig
from kvbench.models.direct_call import DirectCall, Embedding, Linear
from kvbench.models.rope_yarn import yarn_attention_factor, yarn_inv_freq

# attention(layer_index, q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D]) -> [T, Hq, D]
AttentionFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class RMSNorm(DirectCall):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # transformers' `weight * (x * rsqrt(mean(x^2) + eps))`, the same float operations,
        # with the products written into the one fresh tensor (`x.float()` may be `x`).
        xf = x.float()
        normed = xf * xf.pow(2).mean(-1, keepdim=True).add_(self.eps).rsqrt_()
        # a `to` that converts nothing still pays its dispatch, on every norm of every step
        out = normed if normed.dtype == x.dtype else normed.to(x.dtype)
        # a weight of another dtype promotes the product, which an in-place one cannot
        return out.mul_(self.weight) if self.weight.dtype == out.dtype else self.weight * out


def plain_inv_freq(dim: int, base: float) -> torch.Tensor:
    """RoPE's `[dim / 2]` inverse frequencies, base**(-2i / dim), in float32."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype,
                 factor: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) `[T, 1, D]` of `positions` (broadcast over heads), times `factor`, in
    `dtype`; sin signed for `apply_rope`."""
    freqs = positions.float()[:, None] * inv_freq.float()[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    if cos.dtype != dtype:
        cos, sin = cos.to(dtype), sin.to(dtype)
    return cos[:, None, :], signed_sin(sin)[:, None, :]


def rope_frequencies(dim: int, base: float,
                     scaling: dict | None) -> tuple[torch.Tensor, float]:
    """RoPE's `[dim / 2]` float32 inverse frequencies and what cos and sin are multiplied by:
    plain, YaRN's (its attention factor), or Llama 3.1's long-context scaling."""
    kind = scaling and scaling.get("rope_type", scaling.get("type"))
    if kind == "yarn":
        return yarn_inv_freq(dim, base, scaling), yarn_attention_factor(scaling)
    inv_freq = plain_inv_freq(dim, base)
    if kind == "llama3":
        # Llama 3.1 long-context scaling: low frequencies divided by `factor`, high ones kept,
        # a smooth blend between.
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_len = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_len / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        inv_freq = torch.where(medium, blended, scaled)
    return inv_freq, 1.0


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """RoPE's sin `[..., D]` with its first half negated, as `apply_rope` takes it: made
    once a step, so that each layer rotates with one `roll` where `rotate_half` would take
    a negation and a concatenation."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """`x * cos + rotate_half(x) * sin` (rotate_half(x) = cat(-x2, x1)), bit for bit:
    roll(x) = cat(x2, x1), and -x2 * s and x2 * -s are the same float. The products and
    the sum go into two fresh tensors, not four."""
    rotated = x.roll(x.shape[-1] // 2, -1)
    if sin_signed.dtype != x.dtype:  # promoted products: out of place
        return x * cos + rotated * sin_signed
    return (x * cos).add_(rotated.mul_(sin_signed))


class Attention(DirectCall):
    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__()
        self.layer_index = layer_index
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        bias = config.attention_bias
        h, d = config.hidden_size, config.head_dim
        self.q_proj = Linear(h, self.num_heads * d, bias=bias)
        self.k_proj = Linear(h, self.num_kv_heads * d, bias=bias)
        self.v_proj = Linear(h, self.num_kv_heads * d, bias=bias)
        self.o_proj = Linear(self.num_heads * d, h, bias=config.o_proj_bias)
        self.qk_norm = config.qk_norm
        if self.qk_norm:  # one weight of head_dim shared by every head (Qwen3)
            self.q_norm = RMSNorm(d, config.rms_norm_eps)
            self.k_norm = RMSNorm(d, config.rms_norm_eps)

    def forward(self, x, cos, sin, attention: AttentionFn) -> torch.Tensor:
        tokens = x.shape[0]
        q = self.q_proj(x).view(tokens, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(tokens, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(tokens, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if cos is not None:  # None: attention without positions (Granite's "nope", Nemotron-H)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = attention(self.layer_index, q, k, v)
        return self.o_proj(out.reshape(tokens, self.num_heads * self.head_dim))


def silu_and_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """`silu(gate) * up`, written over `gate` (a projection's fresh output): a prompt's
    [T, intermediate] temporaries are the largest a layer allocates."""
    return F.silu(gate, inplace=True).mul_(up)


class MLP(DirectCall):
    def __init__(self, config: ModelConfig, intermediate_size: int | None = None) -> None:
        super().__init__()
        h, bias = config.hidden_size, config.mlp_bias
        i = config.intermediate_size if intermediate_size is None else intermediate_size
        self.gate_proj = Linear(h, i, bias=bias)
        self.up_proj = Linear(h, i, bias=bias)
        self.down_proj = Linear(i, h, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(silu_and_mul(self.gate_proj(x), self.up_proj(x)))


def mix_experts(x: torch.Tensor, weights: torch.Tensor, chosen: torch.Tensor,
                expert: Callable[[int, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Each token's chosen experts' outputs `expert(e, tokens)`, summed under its `[T, k]`
    routing weights. Only the experts some token chose run, each on its own tokens, in
    expert order."""
    out = torch.zeros_like(x)
    for expert_index in torch.unique(chosen).tolist():
        token_index, slot = torch.where(chosen == expert_index)
        expert_out = expert(expert_index, x[token_index])
        weighted = expert_out * weights[token_index, slot, None]
        out.index_add_(0, token_index, weighted.to(out.dtype))
    return out


class Expert(DirectCall):
    """One Mixtral expert: a SwiGLU MLP under the checkpoint's names (w1 gate, w3 up, w2 down)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        h, i = config.hidden_size, config.moe_intermediate_size
        self.w1 = Linear(h, i, bias=False)
        self.w2 = Linear(i, h, bias=False)
        self.w3 = Linear(h, i, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(silu_and_mul(self.w1(x), self.w3(x)))


class SparseMoE(DirectCall):
    """Mixtral's and Qwen3-MoE's block: softmax router, top-k experts a token, their weights
    renormalised to 1 where the config says so (`norm_topk_prob`)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.gate = Linear(config.hidden_size, config.num_local_experts, bias=False)
        self.experts = nn.ModuleList(Expert(config) for _ in range(config.num_local_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Routing in float32 whatever the weights' dtype, as transformers routes.
        scores = F.softmax(self.gate(x).float(), dim=-1)
        weights, chosen = torch.topk(scores, self.top_k, dim=-1)  # [T, k]
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return mix_experts(x, weights, chosen, lambda e, tokens: self.experts[e](tokens))


class DecoderLayer(DirectCall):
    """Pre-norm attention and feed-forward with residuals: Llama's attention and its dense MLP
    or (Mixtral, Qwen3-MoE) `block_sparse_moe`, or a family's own (gpt_oss.py, deepseek.py),
    named as in the checkpoint so its state dict loads as it is."""

    def __init__(self, config: ModelConfig, layer_index: int, self_attn: nn.Module | None = None,
                 feed_forward: nn.Module | None = None) -> None:
        super().__init__()
        self.self_attn = self_attn or Attention(config, layer_index)
        self.is_moe = feed_forward is None and config.is_moe_layer(layer_index)
        if self.is_moe:
            self.block_sparse_moe = SparseMoE(config)
        else:
            self.mlp = feed_forward or MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, cos, sin, attention: AttentionFn) -> torch.Tensor:
        # Each residual sum goes into its branch's fresh output (y + x is x + y, bit for bit).
        x = self.self_attn(self.input_layernorm(x), cos, sin, attention).add_(x)
        feed_forward = self.block_sparse_moe if self.is_moe else self.mlp
        return feed_forward(self.post_attention_layernorm(x)).add_(x)


class Backbone(DirectCall):
    def __init__(self, config: ModelConfig, layer_class: Callable[[ModelConfig, int], nn.Module],
                 norm_class: type[nn.Module] = RMSNorm) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(layer_class(config, i) for i in range(config.num_layers))
        self.norm = norm_class(config.hidden_size, config.rms_norm_eps)


class FlatBatchDecoder(DirectCall):
    """A decoder whose `forward` runs the flattened tokens of a batch (prefills and decodes
    together), every layer under the same rope: a family gives its backbone (`embed_tokens`,
    `layers`, `norm`), and where they differ its `rotary_dim`, `config_buffers`, `embed` and
    `rope`."""

    def __init__(self, config: ModelConfig, backbone: nn.Module) -> None:
        super().__init__()
        self.config = config
        self.model = backbone
        self.softmax_scale = config.softmax_scale
        # what cos and sin are multiplied by (YaRN's attention factor)
        self.rope_attention_factor = self.rope_frequencies()[1]
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        for name, value in self.config_buffers().items():
            self.register_buffer(name, value, persistent=False)

    def rotary_dim(self) -> int:
        """The dimensions of a head rope rotates."""
        return self.config.head_dim

    def rope_frequencies(self) -> tuple[torch.Tensor, float]:
        config = self.config
        return rope_frequencies(self.rotary_dim(), config.rope_theta, config.rope_scaling)

    def config_buffers(self) -> dict[str, torch.Tensor]:
        """The buffers no checkpoint holds, computed from the config (RoPE frequencies, in
        float32)."""
        return {"inv_freq": self.rope_frequencies()[0]}

    def reset_buffers(self, device: torch.device) -> None:
        """`config_buffers` on `device` (`to_empty` leaves buffers uninitialised)."""
        for name, value in self.config_buffers().items():
            setattr(self, name, value.to(device))

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) of `positions` as the family's layers take them (llama's `Attention`:
        `[T, 1, D]`, sin signed by `signed_sin`; None: no positions)."""
        return rope_cos_sin(positions, self.inv_freq, dtype, self.rope_attention_factor)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attention: AttentionFn,
                *states: object) -> torch.Tensor:
        """Hidden states `[T, hidden]` after the final norm. A hybrid's layers also take its
        recurrent layers' states (a `kvbench.models.recurrent_states.RecurrentStates`:
        `states.query_lens` splits the flat batch into its sequences)."""
        x = self.embed(input_ids)
        cos, sin = self.rope(positions, x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin, attention, *states)
        return self.model.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


class LlamaDecoder(FlatBatchDecoder):
    """Llama's decoder (and Qwen's, Mistral's, Mixtral's): one rope, YaRN or Llama 3's scaling."""

    # The decoder layer; a family with other layers (gpt_oss.py) swaps its own in.
    layer_class: Callable[[ModelConfig, int], nn.Module] = DecoderLayer
    # Names of expert E's projections and of the router (kvbench.models.loader maps a
    # checkpoint's per-expert or fused expert tensors onto them).
    EXPERT_WEIGHT = "block_sparse_moe.experts.{expert}.{proj}.weight"
    EXPERT_PROJ = {"gate": "w1", "up": "w3", "down": "w2"}
    ROUTER_WEIGHT = "block_sparse_moe.gate.weight"

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, Backbone(config, self.layer_class))
