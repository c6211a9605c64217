"""`RecurrentMixer` and `HybridLayers`: the layers of a state-space hybrid that keep a
recurrent state beside (or instead of) a KV cache, and what each layer of such a model holds.

The states' shapes and dtypes are vLLM's (`MambaStateShapeCalculator`,
`MambaStateDtypeCalculator`; docs/estimate.md, State-space hybrids): per sequence, constant in
its length, a conv state and a recurrent state of "gated_deltanet" (Qwen3-Next) or "mamba2"
(Granite-4.0-H, Nemotron-H) layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvbench.errors import KvbenchInputError


@dataclass(frozen=True)
class RecurrentMixer:
    """One recurrent layer's shape (every recurrent layer of a model has the same).

    gated_deltanet: `num_heads` value heads of `head_dim`, `num_groups` key heads of
    `state_size` (the key dim), `inner_size` = value heads x value dim.
    mamba2: `num_heads` heads of `head_dim`, `num_groups` B/C groups of `state_size`
    (d_state), `inner_size` the mixer's width (Granite: mamba_expand x hidden; Nemotron-H:
    heads x head dim).
    """

    kind: str  # "gated_deltanet" | "mamba2"
    num_heads: int
    head_dim: int
    state_size: int
    num_groups: int
    conv_kernel: int
    inner_size: int
    chunk_size: int  # the prefill scan's chunk (Mamba-2's mamba_chunk_size; FLA's 64 for GDN)
    conv_bias: bool = False
    proj_bias: bool = False
    # the recurrent (SSM) state's dtype name where the model fixes it ("fp32"); None: the
    # model's dtype, as vLLM's `mamba_ssm_cache_dtype` "auto"
    ssm_state_dtype: str | None = None

    @property
    def conv_dim(self) -> int:
        """Channels of the causal conv: q, k and v (GDN), or x, B and C (Mamba-2)."""
        if self.kind == "gated_deltanet":
            return 2 * self.num_groups * self.state_size + self.num_heads * self.head_dim
        return self.inner_size + 2 * self.num_groups * self.state_size

    def _conv_channels(self, tensor_parallel_size: int) -> int:
        """The conv's channels before the split over `tensor_parallel_size` GPUs: Mamba-2's
        groups padded to shard with the heads (vLLM's `extra_groups_for_head_shards`)."""
        groups, tp = self.num_groups, tensor_parallel_size
        if self.kind == "gated_deltanet" or groups % tp == 0:
            return self.conv_dim
        return self.inner_size + 2 * (groups + tp - groups) * self.state_size

    def state_shapes(self, tensor_parallel_size: int = 1) -> tuple[tuple[int, ...], ...]:
        """(conv state, recurrent state) of one layer and sequence on one GPU, as vLLM's
        `MambaStateShapeCalculator` shapes them (conv state in its default "SD" layout)."""
        tp = tensor_parallel_size
        return ((self.conv_kernel - 1, _split(self._conv_channels(tp), tp)),
                (_split(self.num_heads, tp), self.head_dim, self.state_size))

    def check_tensor_parallel(self, tensor_parallel_size: int) -> None:
        tp = tensor_parallel_size
        conv = self._conv_channels(tp)
        if self.num_heads % tp or conv % tp:
            raise KvbenchInputError(
                f"--tensor-parallel-size {tp} does not divide the {self.kind} layers' "
                f"{self.num_heads} heads and {conv} conv channels")

    def state_bytes(self, model_element_bytes: int, tensor_parallel_size: int = 1) -> int:
        """One layer's state for one sequence on one GPU: vLLM's `MambaSpec`
        `state_content_size_bytes` (state alignment 1: no FlashInfer ReplaySSM)."""
        conv, temporal = self.state_shapes(tensor_parallel_size)
        ssm_bytes = 4 if self.ssm_state_dtype == "fp32" else model_element_bytes
        return math.prod(conv) * model_element_bytes + math.prod(temporal) * ssm_bytes

    def parameters(self, hidden: int) -> int:
        """One layer's weights, as transformers' Qwen3NextGatedDeltaNet, GraniteMoeHybridMambaLayer
        and NemotronHMamba2Mixer hold them: the projections (`projections`), the conv, then
        the GDN's dt_bias, A_log and gated RMSNorm over one value head, or Mamba-2's dt_bias,
        A_log and D per head and gated RMSNorm over the inner width (and biases)."""
        (k_in, n_in), (k_out, n_out) = self.projections(hidden)
        weights = k_in * n_in + k_out * n_out + self.conv_dim * self.conv_kernel
        if self.kind == "gated_deltanet":
            return weights + 2 * self.num_heads + self.head_dim
        biases = (n_in + n_out if self.proj_bias else 0) + (self.conv_dim if self.conv_bias
                                                            else 0)
        return weights + biases + 3 * self.num_heads + self.inner_size

    def projections(self, hidden: int) -> tuple[tuple[int, int], ...]:
        """The layer's matmuls as (k, n): its input projection(s) and its output projection."""
        h, heads = hidden, self.num_heads
        if self.kind == "gated_deltanet":
            value, key = heads * self.head_dim, self.num_groups * self.state_size
            return ((h, 2 * key + 2 * value + 2 * heads), (value, h))
        return ((h, 2 * self.inner_size + 2 * self.num_groups * self.state_size + heads),
                (self.inner_size, h))

    def scan_flops_per_token(self, tensor_parallel_size: int = 1) -> int:
        """FLOPs one prompt token costs the chunked scan of one layer on one GPU (its heads'
        share), chunk size Q, per head of value dim P and state/key dim N:

        mamba2, the SSD algorithm (Dao & Gu 2024, "Transformers are SSMs", section 6; the
        chunked kernels of mamba_ssm's ssd_combined / vLLM's mamba_chunk_scan_combined):
        C B^T within the chunk 2QN, its product with X 2QP, each chunk's state B^T X 2NP and
        the states' output C h 2NP:  2Q(N + P) + 4NP.

        gated_deltanet, the chunkwise WY form of the delta rule (Yang, Kautz & Hatamizadeh
        2024, "Gated Delta Networks", section 3.3; FLA's chunk_gated_delta_rule, vLLM's
        fla/ops): K K^T 2QN, the triangular inverse T about Q^2, W = T (beta K) 2QN,
        U = T (beta V) 2QP, U - W S 2NP, the output Q S + (Q K^T) U: 2NP + 2QN + 2QP, the
        state update K^T U 2NP:  Q^2 + 6QN + 4QP + 6NP.
        """
        heads = _split(self.num_heads, tensor_parallel_size)
        q, p, n = self.chunk_size, self.head_dim, self.state_size
        if self.kind == "mamba2":
            per_head = 2 * q * (n + p) + 4 * n * p
        else:
            per_head = q * q + 6 * q * n + 4 * q * p + 6 * n * p
        return heads * per_head

    def step_flops_per_token(self, tensor_parallel_size: int = 1) -> int:
        """FLOPs one decoded token costs the state update of one layer on one GPU: the
        state decays and takes an outer product (2NP), the output reads it (2NP); the
        delta rule also reads it for the correction (2NP)."""
        heads = _split(self.num_heads, tensor_parallel_size)
        per_head = (6 if self.kind == "gated_deltanet" else 4) * self.head_dim * self.state_size
        return heads * per_head


@dataclass(frozen=True)
class HybridLayers:
    """What each layer of a state-space hybrid holds: its mixer ("attention", a KV cache;
    "recurrent", a state; "none": Nemotron-H's MLP-only layers, '-' in its pattern), whether
    it has a feed-forward block (`ffn`; Nemotron-H's are their own layers), the recurrent
    layers' shape, and the attention and MLP details these families add."""

    mixers: tuple[str, ...]
    ffn: tuple[bool, ...]
    recurrent: RecurrentMixer
    # Qwen3-Next: q_proj also computes a sigmoid gate on the attention output (2x its width)
    attention_output_gate: bool = False
    # a shared expert beside the routed ones, of this width (Qwen3-Next, Granite-4.0-H)
    shared_expert_intermediate_size: int = 0
    shared_expert_gate: bool = False  # Qwen3-Next's sigmoid gate on the shared expert
    # the dense MLP is two matmuls (Nemotron-H's relu^2), not SwiGLU's three
    mlp_ungated: bool = False
    norms_per_layer: int = 2  # Nemotron-H: one (its layers are single blocks)
    # Granite-4.0-H's mu-P multipliers (they scale activations, no size): the embeddings
    # times `embedding_multiplier`, each residual branch times `residual_multiplier`, the
    # logits divided by `logits_scaling`, the attention scores scaled by
    # `attention_multiplier` (None: head_dim**-0.5); `rope` False: attention without
    # positions (its position_embedding_type "nope")
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    logits_scaling: float = 1.0
    attention_multiplier: float | None = None
    rope: bool = True

    def layers_of(self, mixer: str) -> tuple[int, ...]:
        return tuple(i for i, m in enumerate(self.mixers) if m == mixer)

    @property
    def attention_layers(self) -> tuple[int, ...]:
        return self.layers_of("attention")

    @property
    def recurrent_layers(self) -> tuple[int, ...]:
        return self.layers_of("recurrent")

    @property
    def ffn_layers(self) -> tuple[int, ...]:
        return tuple(i for i, has in enumerate(self.ffn) if has)


def _split(value: int, tensor_parallel_size: int) -> int:
    """vLLM's `divide`: exact, else refused."""
    if value % tensor_parallel_size:
        raise KvbenchInputError(
            f"--tensor-parallel-size {tensor_parallel_size} does not divide {value}")
    return value // tensor_parallel_size
