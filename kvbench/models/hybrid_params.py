"""Parameter counts of a state-space hybrid (`ModelConfig.hybrid`), layer by layer, as
transformers' Qwen3NextForCausalLM, GraniteMoeHybridForCausalLM and NemotronHForCausalLM hold
them (tests/models/test_hybrid_models.py checks each against the model built on the meta
device)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the config imports this module: the type only
    from kvbench.models.config import ModelConfig


def attention_parameters(model: ModelConfig) -> int:
    """One attention layer: q (twice as wide with Qwen3-Next's output gate), k, v, o and
    the per-head q/k norms."""
    hybrid = model.hybrid
    assert hybrid is not None
    h, q, kv = model.hidden_size, model.num_heads * model.head_dim, \
        model.num_kv_heads * model.head_dim
    q_out = 2 * q if hybrid.attention_output_gate else q
    return h * q_out + 2 * h * kv + q * h + (2 * model.head_dim if model.qk_norm else 0)


def ffn_parameters(model: ModelConfig, layer: int, active: bool = False) -> int:
    """One layer's feed-forward block: its experts (top-k of them where `active`), router and
    shared expert, or its dense MLP; none for a layer without one (Nemotron-H's mixers)."""
    hybrid = model.hybrid
    assert hybrid is not None
    if not hybrid.ffn[layer]:
        return 0
    h = model.hidden_size
    if model.is_moe_layer(layer):
        experts = model.num_experts_per_tok if active else model.num_local_experts
        shared = hybrid.shared_expert_intermediate_size
        return (experts * 3 * h * model.moe_intermediate_size + model.num_local_experts * h
                + 3 * h * shared + (h if hybrid.shared_expert_gate else 0))
    return (2 if hybrid.mlp_ungated else 3) * h * model.intermediate_size


def layer_parameters(model: ModelConfig, layer: int, active: bool = False) -> int:
    hybrid = model.hybrid
    assert hybrid is not None
    mixer = hybrid.mixers[layer]
    if mixer == "attention":
        mixing = attention_parameters(model)
    elif mixer == "recurrent":
        mixing = hybrid.recurrent.parameters(model.hidden_size)
    else:
        mixing = 0
    norms = hybrid.norms_per_layer * model.hidden_size
    return mixing + ffn_parameters(model, layer, active) + norms


def hybrid_parameters(model: ModelConfig, active: bool = False) -> int:
    """Every parameter (`active`: those one token computes with: top-k experts)."""
    h, v = model.hidden_size, model.vocab_size
    embed = v * h * (1 if model.tie_word_embeddings else 2)
    return sum(layer_parameters(model, i, active) for i in range(model.num_layers)) + embed + h


def hybrid_norm_parameters(model: ModelConfig) -> int:
    """The norms every GPU holds whole: the layers' RMSNorms, attention's q/k norms, the
    final norm. (The recurrent layers' gated norms split with their heads.)"""
    hybrid = model.hybrid
    assert hybrid is not None
    qk = 2 * model.head_dim if model.qk_norm else 0
    return (model.num_layers * hybrid.norms_per_layer * model.hidden_size
            + len(hybrid.attention_layers) * qk + model.hidden_size)
