"""Step-time model of `kvbench simulate`: one decoder step, operation by operation, per GPU
of a tensor-parallel group.

docs/simulator.md gives the model's formulas (matmuls, attention by window group, the
mixture of experts' grouped matmuls, state-space layers, all-reduce, the host overhead and
its overlap under async scheduling) and where each constant of `StepTimeConstants` comes
from (fitted in `scripts/simulator_calibration.py` against measured kernel profiles).
New tokens' KV is written once (kv_write) and read by attention as part of the context:
never counted twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from functools import lru_cache

from kvbench.core.kv_groups import kv_bytes_per_token
from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.simulator.recurrent_cost import RecurrentCost

MS = 1e-3
US = 1e-6


@dataclass(frozen=True)
class StepTimeConstants:
    """Efficiencies and floors of one GPU type. Defaults: fitted on A100-80GB (see module doc)."""

    gemm_peak_efficiency: float = 0.80  # share of dense peak a large matmul reaches
    gemm_half_tokens: float = 40.0  # tokens at which a matmul reaches half that share
    gemm_bandwidth_efficiency: float = 0.80  # share of HBM bandwidth a weight-bound matmul reaches
    gemm_launch_s: float = 4 * US  # per matmul kernel
    attn_decode_bandwidth_efficiency: float = 0.80  # KV read rate of decode attention
    attn_decode_floor_s: float = 13 * US  # per layer, per decode batch
    attn_decode_per_seq_s: float = 0.08 * US  # per decoding sequence (block-table walk)
    attn_prefill_efficiency: float = 0.25  # share of peak the prefill attention kernel reaches
    attn_prefill_floor_s: float = 13 * US  # per layer, per prefill batch
    attn_prefill_per_token_s: float = 0.0  # per prefill query token
    elementwise_bandwidth_efficiency: float = 0.70  # norms, rope, activation, adds, KV write
    elementwise_floor_s: float = 3 * US  # per elementwise kernel
    layer_floor_s: float = 0.0  # no layer runs faster than this (launch-bound decode)
    cpu_overhead_s: float = 1 * MS  # scheduling, input preparation, sampling: per step
    # Share of the FLOP rate of kernels timed one at a time that a GPU keeps through a serving
    # run (minutes of back-to-back prefills): fitted on published end-to-end runs, not on the
    # kernel profiles, which the other constants reproduce with it left out.
    sustained_compute_fraction: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or value < 0:
                raise KvbenchInputError(f"step-time constant {f.name} must be >= 0, got {value!r}")
        for name in ("gemm_peak_efficiency", "gemm_bandwidth_efficiency",
                     "attn_decode_bandwidth_efficiency", "attn_prefill_efficiency",
                     "elementwise_bandwidth_efficiency", "sustained_compute_fraction"):
            if not 0 < getattr(self, name) <= 1:
                raise KvbenchInputError(f"step-time constant {name} must be in (0, 1]")

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class Interconnect:
    """The link of a tensor-parallel group: bus bandwidth of a ring all-reduce, a latency per
    ring step and a fixed cost per collective (kernel launch and synchronisation)."""

    name: str
    bandwidth_bytes_s: float  # achieved ring bus bandwidth per GPU (NCCL's "busbw")
    hop_latency_s: float
    call_latency_s: float = 0.0

    def __post_init__(self) -> None:
        if self.bandwidth_bytes_s <= 0 or self.hop_latency_s < 0 or self.call_latency_s < 0:
            raise KvbenchInputError(f"interconnect {self.name}: bandwidth must be > 0 and "
                                    "latency >= 0")

    def all_reduce_s(self, num_bytes: float, num_gpus: int) -> float:
        """Ring all-reduce: reduce-scatter then all-gather, 2 (N-1) steps of bytes / N each."""
        if num_gpus <= 1:
            return 0.0
        steps = 2 * (num_gpus - 1)
        return (self.call_latency_s + steps / num_gpus * num_bytes / self.bandwidth_bytes_s
                + steps * self.hop_latency_s)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Hardware:
    """What the step model needs of a GPU (a `GPUSpec` provides it)."""

    peak_flops: float  # dense FLOP/s for the weights' dtype
    hbm_bandwidth_bytes_s: float
    constants: StepTimeConstants
    interconnect: Interconnect | None


# Per-operation times (seconds, one GPU) ---------------------------------------------------


def gemm_s(c: StepTimeConstants, hw: Hardware, tokens: int, k: int, n: int,
           weight_bytes: int, act_bytes: int) -> float:
    """`[tokens, k] x [k, n]`: compute-bound when tokens are many, weight-read-bound when few."""
    if tokens <= 0 or k <= 0 or n <= 0:
        return 0.0
    return _matmul_s(c, hw, tokens, tokens, 1, k, n, weight_bytes, act_bytes)


def _matmul_s(c: StepTimeConstants, hw: Hardware, rows: float, rows_per_matrix: float,
              matrices: float, k: int, n: int, weight_bytes: int, act_bytes: int) -> float:
    """`rows` rows through `matrices` `[k, n]` weight matrices (read once each), at the
    efficiency of `rows_per_matrix` rows a matrix: a GEMM is one matrix, a grouped GEMM one a
    chosen expert."""
    eff = c.gemm_peak_efficiency * rows_per_matrix / (rows_per_matrix + c.gemm_half_tokens)
    compute = 2.0 * rows * k * n / (hw.peak_flops * eff)
    moved = matrices * k * n * weight_bytes + rows * (k + n) * act_bytes
    memory = moved / (hw.hbm_bandwidth_bytes_s * c.gemm_bandwidth_efficiency)
    return c.gemm_launch_s + max(compute, memory)


def expected_active_experts(tokens: int, experts: int, top_k: int) -> float:
    """Distinct experts `tokens` tokens choose, each picking `top_k` of `experts` uniformly."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def grouped_gemm_s(c: StepTimeConstants, hw: Hardware, tokens: int, k: int, n: int,
                   weight_bytes: int, act_bytes: int, experts: int, top_k: int) -> float:
    """One launch of `[rows, k] x [k, n]` for each expert the step's `tokens` activate: FLOPs
    for `tokens x top_k` rows at the efficiency of each expert's share of them; every active
    expert's weights read once."""
    if tokens <= 0 or k <= 0 or n <= 0:
        return 0.0
    active = expected_active_experts(tokens, experts, top_k)
    rows = tokens * top_k
    return _matmul_s(c, hw, rows, rows / active, active, k, n, weight_bytes, act_bytes)


def attention_decode_s(c: StepTimeConstants, hw: Hardware, batch: int, kv_bytes_read: float) -> float:
    if batch <= 0:
        return 0.0
    return (c.attn_decode_floor_s + c.attn_decode_per_seq_s * batch
            + kv_bytes_read / (hw.hbm_bandwidth_bytes_s * c.attn_decode_bandwidth_efficiency))


def attention_prefill_s(c: StepTimeConstants, hw: Hardware, tokens: int, flops: float) -> float:
    if tokens <= 0:
        return 0.0
    return (c.attn_prefill_floor_s + c.attn_prefill_per_token_s * tokens
            + flops / (hw.peak_flops * c.attn_prefill_efficiency))


def elementwise_s(c: StepTimeConstants, hw: Hardware, kernels: int, num_bytes: float) -> float:
    if kernels <= 0:
        return 0.0
    return kernels * c.elementwise_floor_s + num_bytes / (
        hw.hbm_bandwidth_bytes_s * c.elementwise_bandwidth_efficiency)


# The step ---------------------------------------------------------------------------------


class StepTime:
    """Modelled time of one step and its parts (seconds, one GPU of the group).

    The parts are kept as a tuple in `PART_NAMES` order and `parts` builds their dict on
    request: a simulation makes one of these per step and reads only the total."""

    __slots__ = ("_values", "bytes", "compute_bound", "flops", "time_s")

    def __init__(self, values: tuple[float, ...], flops: float, num_bytes: float,
                 compute_bound: bool) -> None:
        self._values = values
        self.time_s = sum(values)
        self.flops = flops  # per GPU
        self.bytes = num_bytes  # HBM bytes per GPU
        self.compute_bound = compute_bound  # matmuls limited by FLOPs, not weight reads

    @property
    def parts(self) -> dict[str, float]:
        return dict(zip(PART_NAMES, self._values, strict=True))

    def parts_ms(self) -> dict[str, float]:
        return {name: s * 1e3 for name, s in self.parts.items()}

    @property
    def gpu_s(self) -> float:
        """The step's time on the GPU: every part but `cpu_overhead` (the last), summed in
        the order `time_s` sums them."""
        return sum(self._values[:-1])

    def with_cpu_overhead(self, cpu_overhead_s: float) -> StepTime:
        """The same step charged `cpu_overhead_s` of host time instead of its own."""
        return StepTime((*self._values[:-1], cpu_overhead_s), self.flops, self.bytes,
                        self.compute_bound)

    def __repr__(self) -> str:
        return (f"StepTime(time_s={self.time_s!r}, parts={self.parts!r}, flops={self.flops!r}, "
                f"bytes={self.bytes!r}, compute_bound={self.compute_bound!r})")


def overlapped_cpu_overhead_s(cpu_overhead_s: float, previous_gpu_s: float) -> float:
    """A step's host overhead left showing under async scheduling: vLLM schedules and
    prepares step n+1 while step n runs on the GPU, so step n+1 starts on the GPU
    `max(previous_gpu_s, cpu_overhead_s)` after step n did, and only the part of the host's
    work longer than step n's GPU time adds to the clock."""
    return cpu_overhead_s - previous_gpu_s if cpu_overhead_s > previous_gpu_s else 0.0


PART_NAMES = ("gemm", "attention_decode", "attention_prefill", "elementwise", "kv_write",
              "all_reduce", "layer_floor", "lm_head", "kv_copy", "cpu_overhead")


class StepTimeModel:
    """Per-operation step time of `model` on `tensor_parallel_size` GPUs of one kind.

    `cost(query_lens, seq_lens, num_sample_rows, num_copied_slots)` times one step; `gpu` is a
    `GPUSpec` (see `kvbench.simulator.gpus`).
    """

    def __init__(
        self,
        model: ModelConfig,
        gpu,
        weight_element_bytes: int,
        kv_element_bytes: int,
        tensor_parallel_size: int = 1,
        state_element_bytes: int = 2,
    ) -> None:
        tp = int(tensor_parallel_size)
        model.check_tensor_parallel(tp)
        if tp > 1 and gpu.interconnect is None:
            raise KvbenchInputError(
                f"GPU {gpu.name} has no interconnect: --tensor-parallel-size {tp} needs one"
            )
        self.model = model
        self.gpu = gpu
        self.tensor_parallel_size = tp
        self.weight_element_bytes = weight_element_bytes
        self.kv_element_bytes = kv_element_bytes
        self.hw = Hardware(
            gpu.peak_flops(weight_element_bytes) * gpu.constants.sustained_compute_fraction,
            gpu.hbm_bandwidth_bytes_s,
            gpu.constants,
            gpu.interconnect,
        )
        h, hd = model.hidden_size, model.head_dim
        self.heads = model.num_heads // tp
        self.kv_heads = model.num_kv_heads // tp
        self.q_dim = self.heads * hd
        self.kv_dim = self.kv_heads * hd
        # a mixture's expert width (Qwen3-MoE's moe_intermediate_size)
        width = model.moe_intermediate_size if model.is_moe else model.intermediate_size
        self.inter = -(-width // tp)
        self.vocab = -(-model.vocab_size // tp)
        # One token's K and V on one GPU: all layers (the sum over the KV groups), and one
        # layer's mean share, exact while every layer has the same KV shape.
        groups = model.kv_groups(kv_element_bytes, tp)
        self.kv_bytes_per_token = kv_bytes_per_token(groups)
        self.kv_layer_token_bytes = self.kv_bytes_per_token // model.num_layers
        # Attention groups as (window or None, layers, one layer's KV bytes a token): a window
        # layer's attention reads and scores its last W tokens only. Empty without a window,
        # where every layer reads the whole context (the plain path of `cost`).
        self.attention_groups: tuple[tuple[int | None, int, int], ...] = ()
        if any(group.window is not None for group in groups):
            self.attention_groups = tuple(
                (group.window, group.num_layers, group.bytes_per_layer_token) for group in groups)
        self.attention_flops_per_pair = 4 * self.heads * hd  # QK^T and PV, one layer
        attention_gemms: tuple[tuple[int, int], ...] = (
            (h, self.q_dim + 2 * self.kv_dim),  # QKV
            (self.q_dim, h),  # O
        )
        if model.mla is not None:
            attention_gemms = self._latent_attention(model.mla, h)
        if model.hybrid is not None and model.hybrid.attention_output_gate:  # q and its gate
            attention_gemms = ((h, 2 * self.q_dim + 2 * self.kv_dim), (self.q_dim, h))
        self.layer_gemms = (
            *attention_gemms,
            (h, 2 * self.inter),  # gate + up
            (self.inter, h),  # down
        )
        self.layer_weights = sum(k * n for k, n in self.layer_gemms)
        # Weights one token computes with (FLOPs) and those a GPU holds (bytes): the same for
        # a dense model; a mixture of experts holds every expert and runs top_k of them.
        self.layer_flop_weights = self.layer_weights
        self.expert_gemms: tuple[tuple[int, int], ...] = ()
        self.num_moe_layers = model.num_moe_layers
        # A mixture's dense layers (DeepSeek's first_k_dense_replace, Qwen3-MoE's
        # mlp_only_layers) run a dense MLP of intermediate_size instead of router, shared
        # experts and experts: their gemms, and their share of the layers.
        self.dense_gemms: tuple[tuple[int, int], ...] = ()
        num_dense = model.num_layers - self.num_moe_layers
        if model.is_moe:
            experts, top_k = model.num_local_experts, model.num_experts_per_tok
            self.expert_gemms = self.layer_gemms[-2:]
            self.layer_gemms = (*attention_gemms, (h, experts))  # attention, router
            if model.num_shared_experts:  # run by every token, split as a dense MLP
                shared = -(-model.num_shared_experts * model.moe_intermediate_size // tp)
                self.layer_gemms = (*self.layer_gemms, (h, 2 * shared), (shared, h))
            expert_weights = sum(k * n for k, n in self.expert_gemms)
            attention_router = sum(k * n for k, n in self.layer_gemms)
            self.layer_weights = attention_router + experts * expert_weights
            self.layer_flop_weights = attention_router + top_k * expert_weights
            self.expert_weights = expert_weights
            if num_dense:
                dense_inter = -(-model.intermediate_size // tp)
                self.dense_gemms = ((h, 2 * dense_inter), (dense_inter, h))
                self.attention_gemms = attention_gemms
                attention = sum(k * n for k, n in attention_gemms)
                dense_weights = attention + sum(k * n for k, n in self.dense_gemms)
                L = model.num_layers
                # per mean layer: weights and FLOPs summed over the layers, / L
                self.layer_weights = (self.num_moe_layers * self.layer_weights
                                      + num_dense * dense_weights) / L
                self.layer_flop_weights = (self.num_moe_layers * self.layer_flop_weights
                                           + num_dense * dense_weights) / L
        self.recurrent: RecurrentCost | None = None
        if model.hybrid is not None:
            self._hybrid_layers(model, tp, attention_gemms, state_element_bytes, groups)
        # Elementwise kernels per layer and the bytes they move per token (activations): two
        # RMS norms (read + write h), rope on q and k, the gated activation (read 2I, write I),
        # the residual add (read 2h, write h); per-head q/k norms are two more kernels, each
        # reading and writing q or k.
        self.elementwise_kernels = 5
        self.elementwise_token_elements = (
            4 * h + 2 * (self.q_dim + self.kv_dim) + 3 * self.inter + 3 * h
        )
        if model.is_moe:  # the gated activation runs on each token's top_k experts
            self.elementwise_token_elements += 3 * self.inter * (model.num_experts_per_tok - 1)
            if model.num_shared_experts:  # and on the shared experts
                shared = -(-model.num_shared_experts * model.moe_intermediate_size // tp)
                self.elementwise_token_elements += 3 * shared
        if model.qk_norm:
            self.elementwise_kernels += 2
            self.elementwise_token_elements += 2 * (self.q_dim + self.kv_dim)
        extra_norms = model.norms_per_layer - 2  # Gemma's pre/post feed-forward norms
        self.elementwise_kernels += extra_norms
        self.elementwise_token_elements += 2 * h * extra_norms
        self.weight_bytes = weight_element_bytes * (
            round(model.num_layers * self.layer_weights) + h * self.vocab
        )
        # Matmuls are FLOP-bound from this many tokens on (2 T / (peak x eff(T)) >= w / (bw x e)).
        c = gpu.constants
        self.compute_bound_tokens = next(
            (t for t in range(1, 1 << 20)
             if 2.0 * t / (self.hw.peak_flops * c.gemm_peak_efficiency * t
                           / (t + c.gemm_half_tokens))
             >= weight_element_bytes / (gpu.hbm_bandwidth_bytes_s * c.gemm_bandwidth_efficiency)),
            1 << 20,
        )
        # What depends only on a step's token count, rows sampled or decode run's size,
        # memoized per model: a simulation's steps repeat the same sizes again and again.
        self._token_parts = lru_cache(maxsize=65536)(self._token_parts)
        self._lm_head = lru_cache(maxsize=65536)(self._lm_head)
        self._decode_run_terms = lru_cache(maxsize=65536)(self._decode_run_terms)

    def _hybrid_layers(self, model: ModelConfig, tp: int, attention_gemms, state_bytes: int,
                       groups) -> None:
        """A hybrid's mean layer: each kind of layer's matmuls and weights by its count, its
        attention charged by group (the attention layers only)."""
        hybrid = model.hybrid
        assert hybrid is not None
        h = model.hidden_size
        rec = self.recurrent = RecurrentCost(model, tp, state_bytes)
        self.attention_gemms = attention_gemms
        shared = rec.shared_expert
        self.moe_gemms: tuple[tuple[int, int], ...] = ()
        if model.is_moe:
            self.moe_gemms = ((h, model.num_local_experts),
                              *(((h, 2 * shared), (shared, h)) if shared else ()))
        width = -(-model.intermediate_size // tp)
        self.dense_gemms = ((h, (rec.mlp_matrices - 1) * width), (width, h))
        attention = sum(k * n for k, n in attention_gemms)
        moe = sum(k * n for k, n in self.moe_gemms)
        experts = sum(k * n for k, n in self.expert_gemms)
        dense = sum(k * n for k, n in self.dense_gemms)
        self.layer_weights = rec.mean(attention, rec.weights,
                                      moe + model.num_local_experts * experts, dense)
        self.layer_flop_weights = rec.mean(attention, rec.weights,
                                           moe + model.num_experts_per_tok * experts, dense)
        self.num_moe_layers = rec.moe_layers
        # every attention group charged by its layers: the windowed path of `cost`
        self.attention_groups = tuple(
            (group.window, group.num_layers, group.bytes_per_layer_token) for group in groups)

    def _gemms_s(self, tokens: int, shapes) -> float:
        wb = self.weight_element_bytes
        return sum(gemm_s(self.gpu.constants, self.hw, tokens, k, n, wb, wb) for k, n in shapes)

    def _experts_s(self, tokens: int) -> float:
        """The grouped matmuls of the experts a step of `tokens` tokens activates."""
        m, wb = self.model, self.weight_element_bytes
        return sum(grouped_gemm_s(self.gpu.constants, self.hw, tokens, k, n, wb, wb,
                                  m.num_local_experts, m.num_experts_per_tok)
                   for k, n in self.expert_gemms)

    def _latent_attention(self, mla, h: int) -> tuple[tuple[int, int], ...]:
        """Latent attention's matmuls on one GPU, the up-projections absorbed as vLLM's MLA
        decode runs them (docs/simulator.md); attention is multi-query over the one row."""
        heads = self.heads
        q_out = heads * mla.qk_head_dim
        query = (((h, q_out),) if mla.q_lora_rank is None
                 else ((h, mla.q_lora_rank), (mla.q_lora_rank, q_out)))
        self.q_dim = heads * mla.latent_dim  # the absorbed query
        self.kv_dim = mla.latent_dim
        self.attention_flops_per_pair = 2 * heads * (mla.latent_dim + mla.kv_lora_rank)
        return (
            *query,
            (h, mla.latent_dim),  # kv_a_proj_with_mqa
            (mla.qk_nope_head_dim, heads * mla.kv_lora_rank),  # W_UK absorbed into q
            (mla.kv_lora_rank, heads * mla.v_head_dim),  # W_UV on the output
            (heads * mla.v_head_dim, h),  # o_proj
        )

    def _token_parts(self, tokens: int) -> tuple[float, float, float, float, float, float]:
        """Parts that depend only on the step's token count."""
        c, hw, m = self.gpu.constants, self.hw, self.model
        ab = wb = self.weight_element_bytes
        h = m.hidden_size
        rec = self.recurrent
        if rec is not None:  # each kind of layer's matmuls by its count
            gemm = rec.mean(self._gemms_s(tokens, self.attention_gemms),
                            self._gemms_s(tokens, rec.gemms),
                            self._gemms_s(tokens, self.moe_gemms) + self._experts_s(tokens),
                            self._gemms_s(tokens, self.dense_gemms))
        else:
            gemm = self._gemms_s(tokens, self.layer_gemms)
        weights_read = float(self.weight_bytes)
        if self.expert_gemms:
            experts, top_k = m.num_local_experts, m.num_experts_per_tok
            idle = experts - expected_active_experts(tokens, experts, top_k)
            weights_read -= wb * self.num_moe_layers * idle * self.expert_weights
        if self.expert_gemms and rec is None:
            gemm += self._experts_s(tokens)
            if self.dense_gemms:  # the mean layer: mixture and dense layers by their counts
                attention = self._gemms_s(tokens, self.attention_gemms)
                dense = self._gemms_s(tokens, self.dense_gemms)
                num_moe = self.num_moe_layers
                gemm = attention + (num_moe * (gemm - attention)
                                    + (m.num_layers - num_moe) * dense) / m.num_layers
        elt_bytes = tokens * ab * self.elementwise_token_elements
        elt = elementwise_s(c, hw, self.elementwise_kernels, elt_bytes) if tokens else 0.0
        kv_write = elementwise_s(c, hw, 1, tokens * self.kv_layer_token_bytes) if tokens else 0.0
        ar = 0.0
        if self.tensor_parallel_size > 1 and tokens:
            ar = 2 * hw.interconnect.all_reduce_s(tokens * h * ab, self.tensor_parallel_size)
        # the embedding gather and the final norm, once per step
        outer = elementwise_s(c, hw, 2, tokens * h * ab * 3) if tokens else 0.0
        return gemm, elt, kv_write, ar, outer, weights_read

    def _lm_head(self, rows: int) -> float:
        return gemm_s(self.gpu.constants, self.hw, rows, self.model.hidden_size, self.vocab,
                      self.weight_element_bytes, self.weight_element_bytes)

    def cost(
        self,
        query_lens: Sequence[int],
        seq_lens: Sequence[int],
        num_sample_rows: int,
        num_copied_slots: int = 0,
        num_decodes: int = 0,
        decodes_context: int = 0,
    ) -> StepTime:
        """The step of rows `query_lens` (tokens computed) over `seq_lens` (tokens held,
        new ones included), and `num_decodes` decode rows more, given by their sum
        `decodes_context` of lengths alone (the decode cohort of a fast-forwarded mixed
        step: every figure is integer sums of the rows, so the cost is the one of the same
        rows listed, to the bit); `num_sample_rows` counts all that sample."""
        tokens = sum(query_lens)
        if tokens == len(query_lens):  # decodes only: every q is 1
            decode_batch, decode_context = tokens, sum(seq_lens)
            prefill_tokens = pairs = prefill_context = 0
        else:
            decode_batch = decode_context = prefill_tokens = pairs = prefill_context = 0
            for q, s in zip(query_lens, seq_lens, strict=True):
                if q == 1:
                    decode_batch += 1
                    decode_context += s
                else:
                    prefill_tokens += q
                    prefill_context += s
                    pairs += q * (s - q) + q * (q + 1) // 2
        if num_decodes:
            if self.attention_groups:
                raise ValueError("a windowed model's decode cost needs each sequence's length")
            tokens += num_decodes
            decode_batch += num_decodes
            decode_context += decodes_context
        windowed = None
        if self.attention_groups:
            windowed = self._windowed_attention(query_lens, seq_lens, decode_batch,
                                                prefill_tokens)
        return self._cost_of_sums(tokens, decode_batch, decode_context, prefill_tokens, pairs,
                                  prefill_context, num_sample_rows, num_copied_slots, windowed)

    def _decode_run_terms(self, num_seqs: int) -> tuple:
        """What `decode_run_costs` keeps fixed over a run of `num_seqs` sequences."""
        c, hw = self.gpu.constants, self.hw
        L = self.model.num_layers
        tokens = rows = num_seqs
        gemm, elt, kv_write, ar, outer, weights_read = self._token_parts(tokens)
        # `attention_decode_s`, `_cost_of_sums`: their terms that stay fixed in the run
        att_fixed = c.attn_decode_floor_s + c.attn_decode_per_seq_s * num_seqs
        att_rate = hw.hbm_bandwidth_bytes_s * c.attn_decode_bandwidth_efficiency
        fixed_flops = (2.0 * tokens * self.layer_flop_weights * L
                       + 2.0 * rows * self.model.hidden_size * self.vocab)
        kvb = self.kv_bytes_per_token
        return (L, weights_read, att_fixed, att_rate, self.kv_layer_token_bytes,
                L * self.attention_flops_per_pair, kvb, c.layer_floor_s, gemm, elt, kv_write,
                ar, L * gemm, L * elt + outer, L * kv_write, L * ar, self._lm_head(rows),
                c.cpu_overhead_s, fixed_flops,
                tokens * kvb,  # a decode writes one token a sequence, reads no prompt
                tokens >= self.compute_bound_tokens)

    def decode_run_costs(
        self, num_seqs: int, context_tokens: int, max_steps: int, start_s: float,
        until_s: float, sums: tuple[float, float, float], overlap_after_gpu_s: float | None = None,
    ) -> tuple[list[float], tuple[float, float, float], int, StepTime]:
        """`cost` of each step of a run of decode steps of `num_seqs` sequences
        (`context_tokens` at the first, `num_seqs` more each step) from `start_s`, at most
        `max_steps`, none after the first starting at or after `until_s`: the steps' ends,
        `sums` (times, FLOPs, bytes) with each step's added in turn, the compute-bound steps
        and the last step's `StepTime`. The same operations as `cost`'s in the same order, to
        the bit, what the run keeps fixed looked up once. `overlap_after_gpu_s`: the GPU time
        of the step before the run under async scheduling (`overlapped_cpu_overhead_s`)."""
        if self.attention_groups:
            raise ValueError("a windowed model's decode cost needs each sequence's length")
        (L, weights_read, att_fixed, att_rate, layer_bytes, L_afpp, kvb, layer_floor, gemm,
         elt, kv_write, ar, L_gemm, L_elt_outer, L_kv_write, L_ar, lm_head, cpu_full, fixed_flops,
         new_bytes, compute_bound) = self._decode_run_terms(num_seqs)
        cpu = cpu_full
        now_s = start_s
        ends: list[float] = []
        busy_s, flops_sum, bytes_sum = sums
        flops = moved = 0.0
        context = context_tokens
        floor = 0.0  # no layer floor: as `max(0, floor - layer)` gives it
        att_dec = 0.0
        for step in range(max_steps):
            if step and now_s >= until_s:
                break
            att_dec = att_fixed + context * layer_bytes / att_rate
            if layer_floor:
                layer = gemm + att_dec + 0.0 + elt + kv_write + ar  # 0.0: no prefill attention
                floor = layer_floor - layer if layer_floor > layer else 0.0
            # `sum` of the parts (`_cost_of_sums`' `values`), added in their order
            gpu_s = (L_gemm + L * att_dec + 0.0 + L_elt_outer + L_kv_write + L_ar
                     + L * floor + lm_head + 0.0)
            if overlap_after_gpu_s is not None:
                cpu = overlapped_cpu_overhead_s(cpu_full, overlap_after_gpu_s)
                overlap_after_gpu_s = gpu_s
            step_s = gpu_s + cpu
            if step_s < 0:
                raise ValueError(f"the simulated clock cannot go back ({step_s} s)")
            flops = fixed_flops + L_afpp * context
            moved = float(weights_read + (context * kvb + new_bytes))
            now_s += step_s
            ends.append(now_s)
            busy_s += step_s
            flops_sum += flops
            bytes_sum += moved
            context += num_seqs
        values = (L_gemm, L * att_dec, 0.0, L_elt_outer, L_kv_write, L_ar, L * floor, lm_head,
                  0.0, cpu) if ends else ()
        last = StepTime(values, flops, moved, compute_bound)
        return ends, (busy_s, flops_sum, bytes_sum), compute_bound * len(ends), last

    @property
    def has_windows(self) -> bool:
        """Whether some layer's attention is charged for its window, not the whole context."""
        return bool(self.attention_groups)

    def _cost_of_sums(
        self, tokens: int, decode_batch: int, decode_context: int, prefill_tokens: int,
        pairs: int, prefill_context: int, num_sample_rows: int, num_copied_slots: int,
        windowed: tuple[float, ...] | None = None,
    ) -> StepTime:
        c, hw = self.gpu.constants, self.hw
        L = self.model.num_layers
        gemm, elt, kv_write, ar, outer, weights_read = self._token_parts(tokens)
        if windowed is not None:
            att_dec_all, att_pf_all, attention_flops, kv_read = windowed
            att_dec, att_pf = att_dec_all / L, att_pf_all / L  # a layer's mean
        else:
            att_dec = attention_decode_s(
                c, hw, decode_batch, decode_context * self.kv_layer_token_bytes
            )
            att_pf = 0.0
            if prefill_tokens:
                att_pf = attention_prefill_s(
                    c, hw, prefill_tokens, self.attention_flops_per_pair * pairs
                ) + prefill_context * self.kv_layer_token_bytes / hw.hbm_bandwidth_bytes_s
            attention_flops = L * self.attention_flops_per_pair * (pairs + decode_context)
            kv_read = (decode_context + prefill_context) * self.kv_bytes_per_token
        layer = gemm + att_dec + att_pf + elt + kv_write + ar
        floor = c.layer_floor_s - layer if c.layer_floor_s > layer else 0.0
        copies = (elementwise_s(c, hw, 1, 2 * num_copied_slots * self.kv_bytes_per_token)
                  if num_copied_slots else 0.0)
        # in PART_NAMES order
        values = (L * gemm, L * att_dec, L * att_pf, L * elt + outer, L * kv_write, L * ar,
                  L * floor, self._lm_head(num_sample_rows), copies, c.cpu_overhead_s)
        flops = (2.0 * tokens * self.layer_flop_weights * L
                 + 2.0 * num_sample_rows * self.model.hidden_size * self.vocab + attention_flops)
        moved = weights_read + (
            kv_read + (tokens + 2 * num_copied_slots) * self.kv_bytes_per_token)
        return StepTime(values, flops, float(moved), tokens >= self.compute_bound_tokens)

    def _windowed_attention(self, query_lens: Sequence[int], seq_lens: Sequence[int],
                            decode_batch: int, prefill_tokens: int) -> tuple[float, ...]:
        """Decode and prefill attention over all layers, their FLOPs and KV bytes read, each
        window group charged for the tokens its window reaches: a decode at context s reads
        min(s, W) tokens; a prefill of q tokens ending at s scores, for its query at position
        i, min(i + 1, W) keys (`_window_pairs`) and reads min(s, q + W - 1) tokens."""
        c, hw = self.gpu.constants, self.hw
        per_pair = self.attention_flops_per_pair
        if prefill_tokens:
            decoding = [s for q, s in zip(query_lens, seq_lens, strict=True) if q == 1]
            prefills = [(q, s) for q, s in zip(query_lens, seq_lens, strict=True) if q != 1]
        else:
            decoding, prefills = seq_lens, []
        # the whole context's figures, which a window at least as long as every sequence keeps
        whole_context = sum(decoding)
        longest = max(decoding, default=0)
        whole_pairs = sum(q * (s - q) + q * (q + 1) // 2 for q, s in prefills)
        whole_read = sum(s for _, s in prefills)
        att_dec = att_pf = flops = 0.0
        kv_read = 0
        for window, layers, layer_bytes in self.attention_groups:
            context, pairs, read = whole_context, whole_pairs, whole_read
            if window is not None:
                if longest > window:
                    context = sum(s if s < window else window for s in decoding)
                if prefills:
                    pairs = sum(_window_pairs(s, window) - _window_pairs(s - q, window)
                                for q, s in prefills)
                    read = sum(min(s, q + window - 1) for q, s in prefills)
            att_dec += layers * attention_decode_s(c, hw, decode_batch, context * layer_bytes)
            if prefill_tokens:
                att_pf += layers * (attention_prefill_s(c, hw, prefill_tokens, per_pair * pairs)
                                    + read * layer_bytes / hw.hbm_bandwidth_bytes_s)
            flops += layers * per_pair * (pairs + context)
            kv_read += layers * layer_bytes * (context + read)
        rec = self.recurrent
        if rec is not None:  # each recurrent layer: the state streamed, the prompt scanned
            layers, state = rec.recurrent_layers, rec.state_bytes
            if decode_batch:
                att_dec += layers * elementwise_s(c, hw, 1, 2 * state * decode_batch)
            if prefill_tokens:
                att_pf += layers * (
                    attention_prefill_s(c, hw, prefill_tokens,
                                        rec.scan_flops_per_token * prefill_tokens)
                    + 2 * state * len(prefills) / hw.hbm_bandwidth_bytes_s)
            flops += layers * (rec.scan_flops_per_token * prefill_tokens
                               + rec.step_flops_per_token * decode_batch)
            kv_read += layers * state * (decode_batch + len(prefills))
        return att_dec, att_pf, flops, kv_read


def _window_pairs(n: int, window: int) -> int:
    """Query-key pairs of the first `n` positions under a causal window of `window` tokens:
    the sum over i < n of min(i + 1, window)."""
    if n <= window:
        return n * (n + 1) // 2
    return window * (window + 1) // 2 + (n - window) * window
