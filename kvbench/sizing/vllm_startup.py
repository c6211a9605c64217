"""The memory of a vLLM start-up, term by term: what its profiler subtracts before the KV cache.

docs/estimate.md ("The KV cache vLLM would give you") tables each term, the vLLM code it
follows and the serving defaults. On every GPU, as vLLM's worker (`determine_available_memory`)
computes it:

    available  = total x gpu_memory_utilization - weights (`kvbench.sizing.loaded_weights`)
                 - peak activation - non-torch growth [- CUDA graph estimate, from 0.21]

with the peak = MoE workspace (tokens x top-k x (max(2 x expert width, hidden) + expert
width) x dtype; none for MXFP4 experts) + block tables (max_num_seqs x cdiv(max_model_len,
block) x 4 B per KV cache group) + max(forward, sampler). The engine turns `available` into
blocks (`kvbench.sizing.vllm_kv_cache`; a hybrid's unified pages: `kvbench.sizing.state_pages`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from kvbench.core.block_size import DEFAULT_BLOCK_SIZE
from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.sizes import DTYPE_BYTES
from kvbench.sizing.kv_budget import parse_fraction
from kvbench.sizing.loaded_weights import WeightQuantization, loaded_weights
from kvbench.sizing.state_pages import state_pages, state_pool, state_refusal
from kvbench.sizing.vllm_kv_cache import (
    GiB,
    VllmKVPool,
    group_layout,
    kv_pool,
    refusal,
    stage_groups,
)
from kvbench.sizing.vllm_versions import VllmRelease, vllm_release

GRAPH_BYTES_PER_LAYER = 2**20 // 4  # one captured graph, one decoder layer
LARGE_GPU_BYTES = 70 * GiB  # vLLM's threshold for its larger serving defaults


@dataclass(frozen=True)
class VllmFlags:
    """The `vllm serve` flags the memory profile depends on (None: vLLM's default)."""

    gpu_memory_utilization: Fraction | float | str | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int = DEFAULT_BLOCK_SIZE
    kv_cache_dtype: str = "auto"
    dtype: str = "bf16"  # canonical weights / compute dtype
    quantization: WeightQuantization | None = None
    enforce_eager: bool = False
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    weights_memory: int | None = None  # per GPU, instead of the loaded weights
    vllm_version: str | None = None


@dataclass(frozen=True)
class StageMemory:
    """One GPU of one pipeline stage: each term vLLM's profiler subtracts, in bytes."""

    stage: int
    layers: tuple[int, ...]
    total: int
    requested: int
    weights: int
    forward: int
    sampler: int  # 0 before the last stage
    moe_workspace: int
    request_buffers: int  # block tables for max_num_seqs requests
    activation: int  # the peak: what vLLM logs as "torch peak memory increase"
    non_torch: int
    cuda_graphs: int  # the estimate, whether subtracted or not
    cuda_graphs_subtracted: bool
    available: int

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__, layers=len(self.layers))


@dataclass(frozen=True)
class VllmStartup:
    """What vLLM would allocate at start-up: the terms, the pool, or why it would not start."""

    release: VllmRelease
    gpu: str
    utilization: Fraction
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    cuda_graph_sizes: tuple[int, int]  # piecewise, full graphs captured (0, 0: eager)
    stages: tuple[StageMemory, ...]
    pool: VllmKVPool | None  # None when vLLM would not start
    refusal: str | None
    weights_source: str  # "loaded" | "given"
    memory_source: str = "as CUDA reports it"  # where the total memory comes from

    @property
    def available(self) -> int:
        """The smallest stage's available KV memory (what the pool is sized by)."""
        return min(stage.available for stage in self.stages)

    def to_dict(self) -> dict[str, object]:
        pool = self.pool
        return {
            "vllm_version": self.release.name,
            "gpu": self.gpu,
            "gpu_memory_utilization": float(self.utilization),
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "block_size": self.block_size,
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "cuda_graphs_captured": {"piecewise": self.cuda_graph_sizes[0],
                                     "full": self.cuda_graph_sizes[1]},
            "weights_source": self.weights_source,
            "stages": [stage.to_dict() for stage in self.stages],
            "available_kv_cache_bytes": self.available,
            "kv_cache_blocks": pool.num_blocks if pool else None,
            "kv_cache_tokens": pool.tokens if pool else None,
            "kv_cache_groups": pool.num_groups if pool else None,
            "padding_layers": pool.padding_layers if pool else None,
            "max_concurrency": round(pool.max_concurrency, 2) if pool else None,
            "refusal": self.refusal,
        }


def serving_defaults(total_memory: int, gpu_name: str) -> tuple[int, int]:
    """vLLM's default (max_num_seqs, max_num_batched_tokens) for `vllm serve` on this GPU."""
    if total_memory >= LARGE_GPU_BYTES and "a100" not in gpu_name.lower():
        return 1024, 8192
    return 256, 2048


def cuda_graph_counts(max_num_seqs: int, enforce_eager: bool) -> tuple[int, int]:
    """(piecewise, full decode) graphs vLLM captures by default."""
    if enforce_eager:
        return 0, 0
    largest = min(2 * max_num_seqs, 512)
    sizes = [s for s in [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)] if s <= largest]
    full_limit = min(max_num_seqs, largest // 2)
    return len(sizes), sum(1 for s in sizes if s <= full_limit)


def vllm_startup(model: ModelConfig, total_memory: int, flags: VllmFlags,
                 gpu_name: str = "", memory_source: str = "as CUDA reports it") -> VllmStartup:
    """The start-up vLLM would make of `model` on GPUs of `total_memory` (as CUDA reports it)."""
    release = vllm_release(flags.vllm_version)
    util = parse_fraction(flags.gpu_memory_utilization if flags.gpu_memory_utilization
                          is not None else release.default_utilization,
                          "--gpu-memory-utilization")
    seqs_default, tokens_default = serving_defaults(total_memory, gpu_name)
    max_num_seqs = flags.max_num_seqs or seqs_default
    max_batched = flags.max_num_batched_tokens or tokens_default
    max_model_len = flags.max_model_len or model.max_position_embeddings
    for name, value in (("--max-num-seqs", max_num_seqs),
                        ("--max-num-batched-tokens", max_batched),
                        ("--max-model-len", max_model_len), ("--block-size", flags.block_size)):
        if value <= 0:
            raise KvbenchInputError(f"{name} must be a positive integer, got {value}")
    tp, pp = flags.tensor_parallel_size, flags.pipeline_parallel_size
    d = DTYPE_BYTES[flags.dtype]
    kv_dtype = flags.dtype if flags.kv_cache_dtype == "auto" else flags.kv_cache_dtype
    groups = model.kv_groups(DTYPE_BYTES[kv_dtype], tp)  # checks that tp splits the heads
    pages = None
    if model.hybrid is not None:  # one page for attention and state, the block raised
        if pp != 1:
            raise KvbenchInputError(
                f"model {model.name}: --pipeline-parallel-size {pp} is not modelled for a "
                "state-space hybrid")
        pages = state_pages(model, DTYPE_BYTES[kv_dtype], d, tp, flags.block_size)
    block_size = pages.block_size if pages is not None else flags.block_size
    weights = loaded_weights(model, flags.dtype, flags.quantization, tp, pp)
    graphs = cuda_graph_counts(max_num_seqs, flags.enforce_eager)
    requested = math.floor(total_memory * util)
    non_torch = release.non_torch_bytes_tp1 if tp == 1 else release.non_torch_bytes_tp
    experts_mxfp4 = flags.quantization is not None and flags.quantization.scheme == "mxfp4"
    per_stage = [stage_groups(groups, stage.layers) for stage in weights]
    stages = []
    for index, (stage, stage_kv) in enumerate(zip(weights, per_stage, strict=True)):
        weight_bytes = flags.weights_memory if flags.weights_memory is not None else stage.bytes
        forward = _forward_bytes(model, stage.layers, max_batched, d, tp, sends=not stage.last)
        sampler = _sampler_bytes(model, release, max_batched, max_num_seqs, d, tp) if (
            stage.last) else 0
        moe = 0 if experts_mxfp4 else _moe_workspace_bytes(model, stage.layers, max_batched, d,
                                                           tp)
        if pages is not None:  # a state group's table is one block a request
            table = pages.blocks_per_request(max_model_len)
        else:
            table = -(-max_model_len // block_size) * len(group_layout(stage_kv)[1])
        buffers = max_num_seqs * table * 4
        activation = moe + buffers + max(forward, sampler)
        graph_bytes = GRAPH_BYTES_PER_LAYER * len(stage.layers) * sum(graphs)
        subtracted = release.subtracts_cuda_graphs and graph_bytes > 0
        available = (requested - weight_bytes - activation - non_torch
                     - (graph_bytes if subtracted else 0))
        stages.append(StageMemory(index, stage.layers, total_memory, requested, weight_bytes,
                                  forward, sampler, moe, buffers, activation, non_torch,
                                  graph_bytes, subtracted, available))
    available = [stage.available for stage in stages]
    spent = [f"requested {s.requested / GiB:.2f} GiB - weights {s.weights / GiB:.2f} GiB - "
             f"activation {s.activation / GiB:.2f} GiB - non-torch {s.non_torch / GiB:.2f} GiB"
             + (f" - CUDA graphs {s.cuda_graphs / GiB:.2f} GiB" if s.cuda_graphs_subtracted
                else "") for s in stages]
    largest = max(stages, key=lambda s: s.request_buffers)
    advice = (f"use a smaller --max-num-seqs (the {max_num_seqs:,} given size "
              f"{largest.request_buffers / GiB:.2f} GiB of per-request block tables)"
              if largest.request_buffers > largest.weights else None)
    if pages is not None:
        why = state_refusal(pages, available[0], max_model_len, spent[0])
        pool = None if why else state_pool(pages, available[0], max_model_len)
    else:
        why = refusal(per_stage, available, block_size, max_model_len, max_batched, spent,
                      advice)
        pool = None if why else kv_pool(per_stage, available, block_size, max_model_len,
                                        max_batched)
    return VllmStartup(release, gpu_name, util, max_model_len, max_num_seqs, max_batched,
                       block_size, tp, pp, graphs, tuple(stages), pool, why,
                       "given" if flags.weights_memory is not None else "loaded",
                       memory_source)


def _forward_bytes(model: ModelConfig, layers: tuple[int, ...], tokens: int, d: int, tp: int,
                   sends: bool) -> int:
    """The forward's transient peak: the widest MLP's gate/up and activation outputs beside
    the residual stream; plus the hidden states and residual a stage sends on."""
    h = model.hidden_size
    hybrid = model.hybrid
    widths = [model.intermediate_size for i in layers if not model.is_moe_layer(i)
              and (hybrid is None or hybrid.ffn[i])]
    if model.num_shared_experts and any(model.is_moe_layer(i) for i in layers):
        widths.append(model.num_shared_experts * model.moe_intermediate_size)
    mixer = 0
    if hybrid is not None:  # a hybrid's shared expert; its recurrent in_proj's output
        if hybrid.shared_expert_intermediate_size:
            widths.append(hybrid.shared_expert_intermediate_size)
        mixer = hybrid.recurrent.projections(h)[0][1] // tp
    width = max(widths, default=0) // tp
    return tokens * (max(3 * width, mixer) + 4 * h + (2 * h if sends else 0)) * d


def _sampler_bytes(model: ModelConfig, release: VllmRelease, tokens: int, max_num_seqs: int,
                   d: int, tp: int) -> int:
    """The dummy sampler run: the forward's output, the logits and the sampler's copies."""
    rows = min(max_num_seqs, tokens)
    return tokens * model.hidden_size * d + rows * model.vocab_size * (
        d + release.sampler_bytes_per_logit)


def _moe_workspace_bytes(model: ModelConfig, layers: tuple[int, ...], tokens: int, d: int,
                         tp: int) -> int:
    """The fused-MoE workspace for the profile's batch (0 without expert layers)."""
    if not any(model.is_moe_layer(i) for i in layers):
        return 0
    width = model.moe_intermediate_size // tp
    return tokens * model.num_experts_per_tok * (max(2 * width, model.hidden_size) + width) * d
