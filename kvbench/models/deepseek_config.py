"""DeepSeek-V2/V3's shape, latent attention (`MLAShape`) and expert routing (`DeepseekRouting`),
read from a `config.json` as transformers' DeepseekV2Config / DeepseekV3Config default them.

Keys that only matter to training (aux_loss_alpha, seq_aux, output_router_logits) or to
parallel layout (ep_size) are accepted; the multi-token-prediction layer is left out, as
transformers leaves it out; any other key that changes the arithmetic is refused naming it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvbench.errors import KvbenchInputError
from kvbench.models.config_values import (
    bad_values_refused,
    expert_counts,
    positive_int,
    positive_number,
    quantization,
    read_rope_theta,
    refuse_unimplemented,
    true_or_false,
)
from kvbench.models.rope_yarn import read_rope_scaling

if TYPE_CHECKING:
    from kvbench.models.config import ModelConfig

DEEPSEEK_MODEL_TYPES = ("deepseek_v2", "deepseek_v3")


@dataclass(frozen=True)
class MLAShape:
    """Multi-head latent attention: a query of `qk_nope_head_dim + qk_rope_head_dim` per head
    (through a `q_lora_rank` bottleneck, or one `q_proj` when None), and per token one latent
    of `kv_lora_rank` that `kv_b_proj` expands to every head's no-rope key and value, plus one
    rope key of `qk_rope_head_dim` shared by all heads."""

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None
    # DeepSeek's rope rotates pairs of neighbouring dimensions (x0, x1), (x2, x3) ...;
    # False: the halves (x_i, x_{i + d/2}) as Llama does.
    rope_interleave: bool = True

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """One token's cached row in one layer: the latent, then the rope key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class DeepseekRouting:
    """How a DeepSeek router picks `num_experts_per_tok` of the routed experts.

    V3: sigmoid scores plus `e_score_correction_bias` choose (the bias only chooses; the
    weights are the plain scores), within the `topk_group` groups of `n_group` whose two best
    biased scores sum highest. V2: softmax scores, top-k over all experts ("greedy") or within
    the `topk_group` groups whose best score is highest ("group_limited_greedy"). Then
    optionally renormalised (`ModelConfig.norm_topk_prob`), times `routed_scaling_factor`.
    """

    scoring: str  # "sigmoid" (V3) | "softmax" (V2)
    topk_method: str  # "noaux_tc" (V3) | "greedy" | "group_limited_greedy" (V2)
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0

    @property
    def has_correction_bias(self) -> bool:
        return self.topk_method == "noaux_tc"


def read_deepseek_config(cls: type[ModelConfig], hf: dict[str, Any], name: str) -> ModelConfig:
    """A `ModelConfig` of a deepseek_v2 or deepseek_v3 `config.json`."""
    v3 = hf["model_type"] == "deepseek_v3"
    refuse_unimplemented(hf, name, "hidden_act", ("silu", "swish"),
                         "kvbench's MLP is SwiGLU: hidden_act 'silu'", "silu")
    num_layers = positive_int(hf, "num_hidden_layers", name, 61 if v3 else 32)
    heads = positive_int(hf, "num_attention_heads", name, 128 if v3 else 32)
    mla = MLAShape(
        kv_lora_rank=positive_int(hf, "kv_lora_rank", name, 512),
        qk_nope_head_dim=positive_int(hf, "qk_nope_head_dim", name, 128),
        qk_rope_head_dim=positive_int(hf, "qk_rope_head_dim", name, 64),
        v_head_dim=positive_int(hf, "v_head_dim", name, 128),
        q_lora_rank=positive_int(hf, "q_lora_rank", name, 1536, nullable=True),
        # DeepSeek-V2 rotates neighbouring pairs as complex numbers, always
        rope_interleave=not v3 or true_or_false(hf, "rope_interleave", name, True),
    )
    experts, top_k = expert_counts(hf, name, "n_routed_experts", 256 if v3 else 64,
                                   8 if v3 else None)
    refuse_unimplemented(hf, name, "moe_layer_freq", (1,), "kvbench, as transformers, makes "
                         "every layer from first_k_dense_replace on a mixture: moe_layer_freq 1", 1)
    refuse_unimplemented(hf, name, "mlp_bias", (False, None), "DeepSeek MLPs without biases")
    first_dense = positive_int(hf, "first_k_dense_replace", name, 3 if v3 else 0, minimum=0)
    norm = true_or_false(hf, "norm_topk_prob", name, v3)
    if norm and not v3:
        raise KvbenchInputError(
            f"model {name}: config.json norm_topk_prob true is not implemented for "
            "deepseek_v2 (transformers' DeepseekV2 router never renormalises)")
    max_len = positive_int(hf, "max_position_embeddings", name, 4096 if v3 else 2048)
    with bad_values_refused(name):
        rope_scaling = read_rope_scaling({**hf, "max_position_embeddings": max_len}, name,
                                         ("default", "yarn"))
        return cls(
            name=name,
            vocab_size=positive_int(hf, "vocab_size", name, 129280 if v3 else 102400),
            hidden_size=positive_int(hf, "hidden_size", name, 7168 if v3 else 4096),
            intermediate_size=positive_int(hf, "intermediate_size", name,
                                           18432 if v3 else 11008),
            num_layers=num_layers,
            num_heads=heads,
            # MLA has no KV heads: every query head reads the one latent. The count is kept
            # as the query heads' so that head-count arithmetic stays whole; the KV cache's
            # shape comes from `mla` (`ModelConfig.kv_groups`).
            num_kv_heads=heads,
            head_dim=mla.qk_head_dim,
            max_position_embeddings=max_len,
            rope_theta=read_rope_theta(hf, 10000.0),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            attention_bias=bool(hf.get("attention_bias", False)),
            rope_scaling=rope_scaling,
            num_local_experts=experts,
            num_experts_per_tok=top_k,
            moe_intermediate_size=positive_int(hf, "moe_intermediate_size", name,
                                               2048 if v3 else 1407),
            norm_topk_prob=norm,
            dense_layers=tuple(range(min(first_dense, num_layers))),
            num_shared_experts=positive_int(hf, "n_shared_experts", name, 1 if v3 else 2,
                                            minimum=0),
            mla=mla,
            routing=_routing(hf, name, v3, experts),
            quantization=_quantization(hf, name),
        )


def _quantization(hf: dict[str, Any], name: str) -> str | None:
    """"fp8" for DeepSeek's published fp8 checkpoints (e4m3 weights, 128 x 128 block scales:
    quant_method fp8), None for float weights; any other scheme is refused."""
    method = quantization(hf, name, "fp8")
    fmt = hf["quantization_config"].get("fmt", "e4m3") if method else None
    if method and fmt != "e4m3":
        raise KvbenchInputError(f"model {name}: config.json quantization_config (fp8, {fmt}) "
                                "is not implemented (kvbench sizes fp8 e4m3 weights)")
    return method


def _routing(hf: dict[str, Any], name: str, v3: bool, experts: int) -> DeepseekRouting:
    """V3's sigmoid, bias-corrected group-limited routing; V2's softmax greedy or
    group-limited routing. Anything else is refused naming the key."""
    scoring = "sigmoid" if v3 else "softmax"
    given = hf.get("scoring_func", scoring)
    if given != scoring:
        raise KvbenchInputError(
            f"model {name}: config.json scoring_func {given!r} is not implemented for "
            f"{hf['model_type']} (kvbench, as transformers: {scoring!r})")
    methods = ("noaux_tc",) if v3 else ("greedy", "group_limited_greedy")
    method = hf.get("topk_method", methods[0])
    if method not in methods:
        raise KvbenchInputError(
            f"model {name}: config.json topk_method {method!r} is not implemented for "
            f"{hf['model_type']} (supported: {', '.join(methods)})")
    grouped = method != "greedy"
    n_group = positive_int(hf, "n_group", name, 8 if v3 else (None if grouped else 1))
    topk_group = positive_int(hf, "topk_group", name, 4 if v3 else (None if grouped else 1))
    if grouped:
        if experts % n_group:
            raise KvbenchInputError(
                f"model {name}: config.json n_group {n_group} does not divide "
                f"n_routed_experts {experts}")
        if topk_group > n_group:
            raise KvbenchInputError(
                f"model {name}: config.json topk_group {topk_group} exceeds n_group {n_group}")
        if v3 and experts // n_group < 2:  # a group scores by its two best experts
            raise KvbenchInputError(
                f"model {name}: config.json n_group {n_group} leaves fewer than 2 of "
                f"n_routed_experts {experts} a group")
        top_k = hf.get("num_experts_per_tok", 8)
        if v3 and isinstance(top_k, int) and top_k > topk_group * (experts // n_group):
            raise KvbenchInputError(
                f"model {name}: config.json num_experts_per_tok {top_k} exceeds the experts "
                f"of topk_group {topk_group} groups")
    scale = positive_number(hf, "routed_scaling_factor", name, 2.5 if v3 else 1.0)
    return DeepseekRouting(scoring, method, n_group if grouped else 1,
                           topk_group if grouped else 1, scale)
