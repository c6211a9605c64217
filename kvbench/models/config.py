"""`ModelConfig`: the shape of a Llama-architecture decoder (Llama, Qwen2/3, Mistral; Mixtral and
Qwen3-MoE's experts; gpt-oss's sinks and biased experts), of DeepSeek-V2/V3 (`mla`, `routing`:
deepseek_config.py), of Gemma 2 / 3 (gemma_config.py) and of the state-space hybrids
Qwen3-Next, Granite-4.0-H and Nemotron-H (`hybrid`: hybrid_config.py).

`from_hf_config` reads a Hugging Face `config.json`: every field that changes the arithmetic is
implemented (with a parity test against transformers in tests/models/) or refused in one line
naming the key, so a model that runs computes what transformers computes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kvbench.core.kv_groups import KVGroup, kv_bytes_per_token, mla_group, state_group
from kvbench.errors import KvbenchInputError
from kvbench.models.bounds import check_model_bounds, derived_head_dim
from kvbench.models.config_values import (
    bad_values_refused,
    checked_layer_types,
    checked_window,
    dense_layers,
    expert_counts,
    periodic_layer_types,
    positive_int,
    positive_number,
    quantization,
    read_rope_theta,
    refuse_unimplemented,
    true_or_false,
)
from kvbench.models.deepseek_config import (
    DEEPSEEK_MODEL_TYPES,
    DeepseekRouting,
    MLAShape,
    read_deepseek_config,
)
from kvbench.models.gemma_config import GEMMA_MODEL_TYPES, gemma_fields
from kvbench.models.hybrid_config import HYBRID_MODEL_TYPES, read_hybrid_config
from kvbench.models.recurrent import HybridLayers
from kvbench.models.rope_yarn import read_rope_scaling

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "mixtral",
                         "gpt_oss", *DEEPSEEK_MODEL_TYPES, *GEMMA_MODEL_TYPES,
                         *HYBRID_MODEL_TYPES)
SUPPORTED_ACTIVATIONS = ("silu", "swish")  # the same function under two names


@dataclass(frozen=True)
class ModelConfig:
    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    max_position_embeddings: int
    head_dim: int = 0  # 0: hidden_size // num_heads
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # biases on q, k and v (Qwen2; Llama's attention_bias)
    o_proj_bias: bool = False  # a bias on o_proj too (Llama's attention_bias, not Qwen2)
    mlp_bias: bool = False  # biases on gate, up and down (Llama's mlp_bias)
    # A per-head RMSNorm (weights of head_dim) on each head's q and k before rope (Qwen3).
    qk_norm: bool = False
    rope_scaling: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    # the share of each head's dimensions rope rotates (its first ones; Qwen3-Next's 0.25)
    partial_rotary_factor: float = 1.0
    # Attention only reaches this many tokens back (a query at i sees keys i - W < j <= i), in
    # the layers `layer_types` names "sliding_attention" (every layer when it is empty).
    sliding_window: int | None = None
    # One of LAYER_TYPES per layer, as transformers' `layer_types`; empty: every layer is
    # "sliding_attention" when there is a window, else "full_attention".
    layer_types: tuple[str, ...] = ()
    # Mixture of experts (Mixtral): each layer's MLP is `num_local_experts` SwiGLU experts of
    # `intermediate_size`, of which a softmax router picks `num_experts_per_tok` a token and
    # weighs them by their renormalised scores. 0 experts: one dense MLP.
    num_local_experts: int = 0
    num_experts_per_tok: int = 0
    # Qwen3-MoE: each expert's width (0: intermediate_size), whether the top-k scores are
    # renormalised to 1 (Mixtral always), and the layers that keep a dense MLP of
    # `intermediate_size` (its mlp_only_layers and the layers decoder_sparse_step skips).
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = True
    dense_layers: tuple[int, ...] = ()
    # gpt-oss: a learned logit per query head that joins each softmax's denominator.
    attention_sinks: bool = False
    # gpt-oss's experts: biases on the router and on each expert's projections, and the
    # clamped SwiGLU (gate clamped above, up on both sides, at swiglu_limit; then
    # (up + 1) * gate * sigmoid(swiglu_alpha * gate)). None: the plain SwiGLU.
    moe_bias: bool = False
    swiglu_limit: float | None = None
    swiglu_alpha: float = 1.702
    # DeepSeek: experts every token runs beside the routed ones, one SwiGLU MLP of
    # num_shared_experts x moe_intermediate_size; the latent attention (None: Llama's); the
    # router (None: softmax top-k as above).
    num_shared_experts: int = 0
    mla: MLAShape | None = None
    routing: DeepseekRouting | None = None
    # The checkpoint's weight quantization (its quantization_config): "fp8", float8 e4m3 with
    # block scales (DeepSeek-V3), sized at 1 B a weight by `kvbench estimate` and `simulate`;
    # "mxfp4" (gpt-oss's published experts), sized at --dtype from the shape alone. The
    # engine loads float weights only and refuses either (kvbench.models.loader).
    quantization: str | None = None
    # Gemma 2 and 3 (`gemma.py`'s decoder; `gemma_config.py` reads their config.json): the
    # (1 + w) RMSNorm, pre/post feed-forward norms, embeddings scaled by sqrt(hidden), gelu-tanh.
    # The decoder that computes it: "llama" (llama.py), "gpt_oss"
    # (gpt_oss.py), "gemma" (gemma.py), "granite_hybrid" (granite_hybrid.py, Granite-4.0-H)
    # or "nemotron_h" (nemotron_h.py);
    # DeepSeek's is chosen by `mla`.
    architecture: str = "llama"
    query_pre_attn_scalar: float | None = None  # softmax scale = this**-0.5 (None: head_dim)
    attn_logit_softcapping: float | None = None  # scores -> c tanh(s / c)
    final_logit_softcapping: float | None = None  # logits -> c tanh(l / c)
    # the rope base of sliding-window layers (Gemma 3; None: rope_theta); `rope_scaling`
    # (linear) then applies to full-attention layers only, as transformers' Gemma 3
    rope_local_theta: float | None = None
    # Parameters a multimodal checkpoint holds beside the text model (Gemma 3's vision tower
    # and projector): counted in the weights' memory, never run (kvbench runs text only).
    vision_parameters: int = 0
    # A state-space hybrid (Qwen3-Next, Granite-4.0-H, Nemotron-H; hybrid_config.py): which
    # layers attend (a KV cache), which run a recurrent mixer (a constant state per
    # sequence: `state_groups`) and which have a feed-forward block. None: every layer
    # attends and has one. Sized, simulated, and run by the engine (each family's decoder).
    hybrid: HybridLayers | None = None

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim",
                               derived_head_dim(self.hidden_size, self.num_heads, self.name))
        check_model_bounds(self)
        if self.moe_intermediate_size == 0:
            object.__setattr__(self, "moe_intermediate_size", self.intermediate_size)
        if self.layer_types:
            checked_layer_types(list(self.layer_types), self.name, self.num_layers)
        if "sliding_attention" in self.layer_types and self.sliding_window is None:
            raise KvbenchInputError(
                f"model {self.name}: layer_types lists sliding_attention layers but no "
                "sliding_window is set"
            )
        if self.num_heads % self.num_kv_heads:
            raise KvbenchInputError(
                f"model {self.name}: num_heads={self.num_heads} is not a multiple of "
                f"num_kv_heads={self.num_kv_heads}"
            )

    @property
    def softmax_scale(self) -> float:
        """The attention scores' scale: Gemma's query_pre_attn_scalar**-0.5, Granite's
        attention_multiplier, else head_dim**-0.5."""
        if self.hybrid is not None and self.hybrid.attention_multiplier is not None:
            return self.hybrid.attention_multiplier
        return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

    @property
    def norms_per_layer(self) -> int:
        """Hidden-size RMSNorms a layer holds (Gemma adds pre/post feed-forward norms)."""
        if self.hybrid is not None:
            return self.hybrid.norms_per_layer
        return 4 if self.architecture == "gemma" else 2

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """The layers that attend (hold a KV cache): every layer but a hybrid's others."""
        if self.hybrid is not None:
            return self.hybrid.attention_layers
        return tuple(range(self.num_layers))

    @property
    def is_moe(self) -> bool:
        return self.num_local_experts > 0

    def is_moe_layer(self, layer_index: int) -> bool:
        return self.is_moe and layer_index not in self.dense_layers

    @property
    def num_moe_layers(self) -> int:
        return sum(1 for i in range(self.num_layers) if self.is_moe_layer(i))

    def layer_window(self, layer_index: int) -> int | None:
        """The tokens layer `layer_index` attends back (None: the whole context)."""
        if self.sliding_window is None:
            return None
        if self.layer_types and self.layer_types[layer_index] != "sliding_attention":
            return None
        return self.sliding_window

    def window_shorter_than(self, max_model_len: int) -> int | None:
        """The window when some layer's is shorter than `max_model_len` tokens, else None."""
        windows = [self.layer_window(i) for i in range(self.num_layers)]
        bites = [w for w in windows if w is not None and w < max_model_len]
        return min(bites) if bites else None

    def kv_groups(
        self, kv_element_bytes: int, tensor_parallel_size: int = 1
    ) -> tuple[KVGroup, ...]:
        """The KV cache's layer groups, as one GPU of `tensor_parallel_size` holds them: the
        full-attention layers, then the sliding-window layers of each window length; a
        latent-attention model (DeepSeek) is one "mla" group, whole on every GPU."""
        if self.mla is not None:
            groups = [mla_group(self.num_layers, self.mla.kv_lora_rank,
                                self.mla.qk_rope_head_dim, kv_element_bytes)]
        else:
            groups = self._attention_groups(kv_element_bytes)
        if tensor_parallel_size != 1:
            self.check_tensor_parallel(tensor_parallel_size)
            groups = [group.sharded(tensor_parallel_size) for group in groups]
        return tuple(groups)

    def state_groups(
        self, model_element_bytes: int, tensor_parallel_size: int = 1
    ) -> tuple[KVGroup, ...]:
        """A hybrid's recurrent layers as one "state" group (constant bytes per sequence, as
        one GPU of `tensor_parallel_size` holds them; `model_element_bytes` is the model's
        dtype, which vLLM keeps the state in whatever the KV-cache dtype); () otherwise."""
        if self.hybrid is None:
            return ()
        recurrent = self.hybrid.recurrent
        recurrent.check_tensor_parallel(tensor_parallel_size)
        return (state_group(self.hybrid.recurrent_layers, recurrent.kind,
                            recurrent.state_bytes(model_element_bytes, tensor_parallel_size)),)

    def _attention_groups(self, kv_element_bytes: int) -> list[KVGroup]:
        by_window: dict[int | None, list[int]] = {}
        for i in self.attention_layers:
            by_window.setdefault(self.layer_window(i), []).append(i)
        return [
            KVGroup(tuple(by_window[window]), self.num_kv_heads, self.head_dim,
                    kv_element_bytes, attention="full" if window is None else "sliding",
                    window=window)
            for window in sorted(by_window, key=lambda w: -1 if w is None else w)
        ]

    def kv_bytes_per_token(self, kv_element_bytes: int) -> int:
        """K and V for one token across all layers (the sum over `kv_groups`)."""
        return kv_bytes_per_token(self.kv_groups(kv_element_bytes))

    def _attention_parameters(self) -> int:
        h = self.hidden_size
        if self.mla is not None:
            return _mla_parameters(self.mla, h, self.num_heads, self.attention_bias)
        q = self.num_heads * self.head_dim
        kv = self.num_kv_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h
        if self.attention_bias:
            attn += q + 2 * kv
        if self.o_proj_bias:
            attn += h
        return attn

    def layer_parameters(self, layer: int, active: bool = False) -> int:
        """Layer `layer`'s weights (`active`: those one token computes with, the router's top-k
        experts, not all of them), as transformers' modules hold them: its norms, its mixer
        (attention with q/k norms, sinks and Qwen3-Next's output gate; a recurrent mixer;
        none) and its feed-forward block (a hybrid's Nemotron-H mixers have none)."""
        h, hybrid = self.hidden_size, self.hybrid
        mixer = "attention" if hybrid is None else hybrid.mixers[layer]
        total = self.norms_per_layer * h
        if mixer == "attention":
            total += self._attention_parameters() + (2 * self.head_dim if self.qk_norm else 0)
            total += self.num_heads if self.attention_sinks else 0
            if hybrid is not None and hybrid.attention_output_gate:  # q_proj twice as wide
                total += h * self.num_heads * self.head_dim
        elif mixer == "recurrent":
            total += hybrid.recurrent.parameters(h)
        if hybrid is not None and not hybrid.ffn[layer]:
            return total
        if not self.is_moe_layer(layer):
            i = self.intermediate_size
            if hybrid is not None and hybrid.mlp_ungated:  # Nemotron-H's relu^2: two matmuls
                return total + 2 * h * i
            return total + 3 * h * i + (2 * i + h if self.mlp_bias else 0)
        # the routed experts (each expert's gate, up and down biases with moe_bias), the
        # router's [experts, hidden] weight (and bias) and the shared experts (DeepSeek's
        # e_score_correction_bias is a buffer, not a parameter, as in transformers)
        width = self.moe_intermediate_size
        expert = 3 * h * width + (2 * width + h if self.moe_bias else 0)
        router = self.num_local_experts * (h + (1 if self.moe_bias else 0))
        shared = self.num_shared_experts * width
        if hybrid is not None:
            shared += hybrid.shared_expert_intermediate_size
            total += h if hybrid.shared_expert_gate else 0
        experts = self.num_experts_per_tok if active else self.num_local_experts
        return total + experts * expert + router + 3 * h * shared

    def num_parameters(self) -> int:
        return self._text_parameters(active=False) + self.vision_parameters

    def num_active_parameters(self) -> int:
        """Parameters one token computes with: the router's top-k experts, not all of them
        (and no vision tower)."""
        return self._text_parameters(active=True)

    def _text_parameters(self, active: bool) -> int:
        h = self.hidden_size
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        layers = sum(self.layer_parameters(i, active) for i in range(self.num_layers))
        return layers + embed + h

    def num_norm_parameters(self) -> int:
        """The RMSNorm weights: every GPU of a tensor-parallel group holds all of them (a
        recurrent layer's gated norm splits with its heads)."""
        per_layer = self.norms_per_layer * self.hidden_size
        if self.mla is not None:  # q_a_layernorm and kv_a_layernorm
            per_layer += (self.mla.q_lora_rank or 0) + self.mla.kv_lora_rank
        qk = 2 * self.head_dim if self.qk_norm else 0
        return (self.num_layers * per_layer + len(self.attention_layers) * qk
                + self.hidden_size)

    def check_tensor_parallel(self, tensor_parallel_size: int) -> None:
        """Heads must split evenly over the GPUs (KV heads too: no KV-head replication; a
        latent-attention model's latent is whole on every GPU)."""
        tp = tensor_parallel_size
        if tp < 1:
            raise KvbenchInputError(f"--tensor-parallel-size must be >= 1, got {tp}")
        if self.hybrid is not None:
            self.hybrid.recurrent.check_tensor_parallel(tp)
        if self.mla is not None:
            if self.num_heads % tp:
                raise KvbenchInputError(
                    f"--tensor-parallel-size {tp} does not divide {self.name}'s "
                    f"{self.num_heads} attention heads"
                )
            return
        if self.num_heads % tp or self.num_kv_heads % tp:
            raise KvbenchInputError(
                f"--tensor-parallel-size {tp} does not divide {self.name}'s {self.num_heads} "
                f"attention heads and {self.num_kv_heads} KV heads"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_hf_config(cls, hf: Any, name: str) -> ModelConfig:
        """Read a Hugging Face `config.json` of a Llama, Qwen2, Qwen3, Qwen3-MoE, Mistral,
        Mixtral, gpt-oss, DeepSeek-V2/V3, Gemma 2 or Gemma 3 model, or of a state-space hybrid
        (Qwen3-Next, Granite-4.0-H, Nemotron-H)."""
        if not isinstance(hf, dict):
            raise KvbenchInputError(f"model {name}: config.json is not a JSON object")
        model_type = hf.get("model_type")
        if model_type in GEMMA_MODEL_TYPES:
            return cls(name=name, **gemma_fields(hf, name))
        if model_type in HYBRID_MODEL_TYPES:
            return cls(**read_hybrid_config(hf, name))
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise KvbenchInputError(
                f"model {name}: model_type {model_type!r} is not supported "
                f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
            )
        if model_type == "gpt_oss":
            return _gpt_oss_config(hf, name)
        if model_type in DEEPSEEK_MODEL_TYPES:  # its fp8 checkpoints are read, for sizing
            return read_deepseek_config(cls, hf, name)
        refuse_unimplemented(hf, name, "hidden_act", SUPPORTED_ACTIVATIONS,
                             "kvbench's MLP is SwiGLU: hidden_act 'silu'", "silu")
        quantization(hf, name)
        qwen3_like = model_type in ("qwen3", "qwen3_moe")
        with bad_values_refused(name):
            num_heads = positive_int(hf, "num_attention_heads", name)
            # Llama's and Qwen3's attention_bias covers q, k, v and o_proj; Qwen2 always has
            # q/k/v biases and no o_proj bias (its config has no such key); Mistral has none.
            llama_bias = (model_type == "llama" or qwen3_like) and bool(
                hf.get("attention_bias", False))
            return cls(
                name=name,
                vocab_size=positive_int(hf, "vocab_size", name),
                hidden_size=positive_int(hf, "hidden_size", name),
                intermediate_size=positive_int(
                    hf, "intermediate_size", name,
                    default=6144 if model_type == "qwen3_moe" else None),
                num_layers=positive_int(hf, "num_hidden_layers", name),
                num_heads=num_heads,
                num_kv_heads=positive_int(hf, "num_key_value_heads", name, default=num_heads),
                # transformers' Qwen3Config defaults head_dim to 128, not hidden // heads (0:
                # derived, and checked, by __post_init__)
                head_dim=positive_int(hf, "head_dim", name,
                                      default=128 if model_type == "qwen3" else 0),
                max_position_embeddings=positive_int(
                    hf, "max_position_embeddings", name,
                    default={"qwen3": 32768, "qwen3_moe": 32768,
                             "mixtral": 131072}.get(model_type, 2048)),
                rope_theta=read_rope_theta(hf, 1e6 if model_type == "mixtral" else 10000.0),
                rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6 if qwen3_like else 1e-5)),
                tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
                attention_bias=llama_bias or model_type == "qwen2",
                o_proj_bias=llama_bias,
                mlp_bias=model_type == "llama" and bool(hf.get("mlp_bias", False)),
                qk_norm=qwen3_like,
                rope_scaling=read_rope_scaling(hf, name),
                **_windows(hf, name, model_type),
                **_experts(hf, name, model_type),
            )


def _mla_parameters(mla: MLAShape, hidden: int, heads: int, bias: bool) -> int:
    """q (q_proj, or q_a_proj + q_a_layernorm + q_b_proj), kv_a_proj_with_mqa, kv_a_layernorm,
    kv_b_proj and o_proj, as transformers' DeepseekV3Attention holds them (attention_bias:
    biases on q_a_proj, kv_a_proj_with_mqa and o_proj)."""
    h, q_out = hidden, heads * mla.qk_head_dim
    if mla.q_lora_rank is None:
        q = h * q_out
    else:
        q = h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * q_out
        q += mla.q_lora_rank if bias else 0
    kv_a = h * mla.latent_dim + (mla.latent_dim if bias else 0) + mla.kv_lora_rank
    kv_b = mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    o = heads * mla.v_head_dim * h + (h if bias else 0)
    return q + kv_a + kv_b + o


def _experts(hf: dict[str, Any], name: str, model_type: str) -> dict[str, Any]:
    """Mixtral's or Qwen3-MoE's experts as transformers' MixtralConfig and Qwen3MoeConfig
    default them. A Qwen3-MoE layer is a mixture unless mlp_only_layers names it or
    decoder_sparse_step skips it ((i + 1) % step != 0); its output_router_logits and
    router_aux_loss_coef only add a training loss: accepted."""
    if model_type == "mixtral":
        # Router jitter multiplies the MoE input by noise in training only; any other value
        # means a config meant for training, refused rather than silently run as inference.
        refuse_unimplemented(hf, name, "router_jitter_noise", (0, None),
                             "kvbench runs inference: router_jitter_noise 0")
        experts, top_k = expert_counts(hf, name, "num_local_experts", 8, 2)
        return {"num_local_experts": experts, "num_experts_per_tok": top_k}
    if model_type != "qwen3_moe":
        return {}
    # Published configs say num_experts; transformers 5 saves it as num_local_experts.
    experts_key = "num_local_experts" if "num_local_experts" in hf else "num_experts"
    experts, top_k = expert_counts(hf, name, experts_key, 128, 8)
    num_layers = positive_int(hf, "num_hidden_layers", name)
    return {
        "num_local_experts": experts,
        "num_experts_per_tok": top_k,
        "moe_intermediate_size": positive_int(hf, "moe_intermediate_size", name, default=768),
        "norm_topk_prob": true_or_false(hf, "norm_topk_prob", name, False),
        "dense_layers": dense_layers(hf, name, num_layers),
    }


def _windows(hf: dict[str, Any], name: str, model_type: str) -> dict[str, Any]:
    """`sliding_window` and `layer_types` as transformers applies them to the model type.

    Llama has no window (its config's key is ignored); Mistral's defaults to 4096. Qwen2,
    Qwen3 and Qwen3-MoE window only with `use_sliding_window` (Qwen3-MoE every layer, 4096 by
    default); Qwen2's and Qwen3's windowed layers are those `layer_types` names
    `sliding_attention`, or without that key those from `max_window_layers` on (Qwen3: no
    window when that is none).
    """
    windowed = hf.get("use_sliding_window", False) or not model_type.startswith("qwen")
    window = hf.get("sliding_window", 4096 if model_type in ("mistral", "qwen3_moe") else None)
    if model_type == "llama" or not windowed:
        window = None
    layer_types = hf.get("layer_types")
    if model_type == "qwen3" and layer_types is not None:
        layer_types = checked_layer_types(layer_types, name, hf.get("num_hidden_layers"))
        if "sliding_attention" in layer_types and window is None:
            raise KvbenchInputError(
                f"model {name}: config.json layer_types lists sliding_attention layers but no "
                "window is set (sliding_window with use_sliding_window true)")
    if window is None:
        return {"sliding_window": None, "layer_types": ()}
    if layer_types is None and model_type in ("qwen2", "qwen3"):
        first = hf.get("max_window_layers", 28)
        layer_types = ["full_attention" if i < first else "sliding_attention"
                       for i in range(hf["num_hidden_layers"])]
    if model_type == "qwen3" and "sliding_attention" not in layer_types:
        return {"sliding_window": None, "layer_types": ()}
    return {"sliding_window": checked_window(window, name), "layer_types": tuple(layer_types or ())}


# transformers' GptOssConfig rope when config.json gives none (truncate false, unlike YaRN's).
GPT_OSS_DEFAULT_ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                        "truncate": False, "original_max_position_embeddings": 4096}


def _gpt_oss_config(hf: dict[str, Any], name: str) -> ModelConfig:
    """gpt-oss as transformers' GptOssConfig and GptOssForCausalLM read it (defaults: the 120B).

    Every layer is a mixture of biased experts with the clamped SwiGLU; attention has biases
    on q, k, v and o (attention_bias) and learned sinks; layers alternate sliding-window and
    full attention unless layer_types says otherwise. hidden_act is not read (the experts'
    activation is fixed), nor are the training-only router_aux_loss_coef,
    output_router_logits and attention_dropout. The published checkpoints' mxfp4
    quantization_config is kept in `quantization`: sizing needs the shape only.
    """
    with bad_values_refused(name):
        num_layers = positive_int(hf, "num_hidden_layers", name, default=36)
        experts_key = "num_experts" if "num_experts" in hf else "num_local_experts"
        experts, top_k = expert_counts(hf, name, experts_key, 128, 4)
        bias = true_or_false(hf, "attention_bias", name, True)
        rope_given = hf.get("rope_scaling") or hf.get("rope_parameters")
        max_positions = positive_int(hf, "max_position_embeddings", name, default=131072)
        rope_hf = {**hf, "max_position_embeddings": max_positions,
                   "rope_scaling": rope_given or GPT_OSS_DEFAULT_ROPE}
        return ModelConfig(
            name=name,
            vocab_size=positive_int(hf, "vocab_size", name, default=201088),
            hidden_size=positive_int(hf, "hidden_size", name, default=2880),
            intermediate_size=positive_int(hf, "intermediate_size", name, default=2880),
            num_layers=num_layers,
            num_heads=positive_int(hf, "num_attention_heads", name, default=64),
            num_kv_heads=positive_int(hf, "num_key_value_heads", name, default=8),
            head_dim=positive_int(hf, "head_dim", name, default=64),
            max_position_embeddings=max_positions,
            rope_theta=read_rope_theta(hf, 150000.0),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-5)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            attention_bias=bias,
            o_proj_bias=bias,
            rope_scaling=read_rope_scaling(rope_hf, name),
            **_gpt_oss_windows(hf, name, num_layers),
            num_local_experts=experts,
            num_experts_per_tok=top_k,
            norm_topk_prob=True,  # softmax over the chosen k logits: weights sum to 1
            attention_sinks=True,
            moe_bias=True,
            swiglu_limit=positive_number(hf, "swiglu_limit", name, 7.0),
            swiglu_alpha=positive_number(hf, "swiglu_alpha", name, 1.702),
            quantization=quantization(hf, name, "mxfp4"),
            architecture="gpt_oss",
        )


def _gpt_oss_windows(hf: dict[str, Any], name: str, num_layers: int) -> dict[str, Any]:
    """The window (default 128) and layer_types (default: even layers sliding, odd full)."""
    window = hf.get("sliding_window", 128)
    given = hf.get("layer_types")
    layer_types = (periodic_layer_types(num_layers, 2) if given is None
                   else checked_layer_types(given, name, num_layers))
    if window is None:  # transformers' sliding layers attend to everything without a window
        return {"sliding_window": None, "layer_types": ()}
    return {"sliding_window": checked_window(window, name), "layer_types": layer_types}
