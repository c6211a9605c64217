"""`kvbench estimate --kv-offload SIZE`: what a host KV tier adds, and when loading beats
recomputing (docs/estimate.md, "A host tier"): host blocks sized as vLLM's CPU offloading
sizes them (`vllm/v1/kv_offload/cpu/spec.py`), the tiers' prefix-cache capacity, and one
full-context request's load over the host link (`kvbench.simulator.host_transfer`) against
its prefill by the simulator's step-time model.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from kvbench.core.block_size import DEFAULT_BLOCK_SIZE
from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.sizes import DTYPE_BYTES, WEIGHT_DTYPES, canonical_dtype, weights_dtype
from kvbench.simulator.gpus import GPUSpec
from kvbench.simulator.host_transfer import arena_fragments_per_block, transfer_seconds
from kvbench.simulator.step_time import StepTimeModel
from kvbench.sizing.estimate import KVEstimate, text_table
from kvbench.units import format_bytes

HOST_PAGE_BYTES = 4096  # vLLM aligns a host block to the host's memory page


@dataclass(frozen=True)
class LoadVsRecompute:
    """One full-context request's KV: loaded back from the host tier, or prefilled again."""

    gpu: str
    link: str
    tokens: int
    blocks: int
    bytes_per_gpu: int
    load_s: float  # vLLM's cross-layer layout: one fragment a block
    load_per_layer_s: float  # a K and a V fragment per layer and block (kvbench's arena)
    last_token_s: float  # the step a loaded request still runs: its last token, recomputed
    recompute_s: float  # the prefill of `tokens` by the step-time model
    chunk_tokens: int  # prefill chunk

    @property
    def speedup(self) -> float:
        """Recompute / (load + the last token's step), cross-layer blocks: above 1, loading
        wins."""
        return self.recompute_s / (self.load_s + self.last_token_s)

    @property
    def speedup_per_layer(self) -> float:
        return self.recompute_s / (self.load_per_layer_s + self.last_token_s)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "speedup": self.speedup,
                "speedup_per_layer": self.speedup_per_layer}


@dataclass(frozen=True)
class HostTierEstimate:
    host_bytes: int
    block_size: int
    tensor_parallel_size: int
    block_bytes_per_gpu: int
    host_block_bytes: int  # one host block: every rank's share, page-aligned
    host_blocks: int
    host_tokens: int
    gpu_blocks: int | None  # None without a KV budget
    gpu_tokens: int | None
    context: int
    load: LoadVsRecompute | None  # None without a GPU (its link and prefill time)

    @property
    def tokens_exclusive(self) -> int | None:
        return None if self.gpu_tokens is None else self.gpu_tokens + self.host_tokens

    @property
    def tokens_inclusive(self) -> int | None:
        return None if self.gpu_tokens is None else max(self.gpu_tokens, self.host_tokens)

    def requests(self, tokens: int | None) -> int | None:
        """Full-context requests whose KV `tokens` hold."""
        if tokens is None:
            return None
        return tokens // (math.ceil(self.context / self.block_size) * self.block_size)

    def to_dict(self) -> dict[str, Any]:
        tiers = {"gpu": self.gpu_tokens, "host": self.host_tokens,
                 "exclusive": self.tokens_exclusive, "inclusive": self.tokens_inclusive}
        return {
            "host_bytes": self.host_bytes,
            "block_size": self.block_size,
            "block_bytes_per_gpu": self.block_bytes_per_gpu,
            "host_block_bytes": self.host_block_bytes,
            "host_blocks": self.host_blocks,
            "tokens": tiers,
            "requests": {tier: self.requests(tokens) for tier, tokens in tiers.items()},
            "context": self.context,
            "load_vs_recompute": self.load.to_dict() if self.load else None,
        }


def estimate_host_tier(est: KVEstimate, host_bytes: int, model: ModelConfig | None = None,
                       gpu: GPUSpec | None = None, dtype: str = "bf16",
                       max_num_batched_tokens: int | None = None) -> HostTierEstimate:
    """The host tier of `host_bytes` beside the estimate's GPU budget; with a model and a GPU
    that has a host link, a full-context request's load time against its prefill."""
    if host_bytes <= 0:
        raise KvbenchInputError("--kv-offload must be a positive size")
    block = est.block_size or DEFAULT_BLOCK_SIZE
    tp = est.tensor_parallel_size
    block_bytes = est.kv_bytes_per_token * block
    host_block = -(-block_bytes * tp // HOST_PAGE_BYTES) * HOST_PAGE_BYTES
    host_blocks = host_bytes // host_block
    gpu_blocks = None
    if est.kv_budget_bytes is not None:
        gpu_blocks = (est.vllm.pool.num_blocks if est.vllm is not None and est.vllm.pool
                      else est.kv_budget_bytes // block_bytes)
    load = None
    if model is not None and gpu is not None:
        load = _load_vs_recompute(est, model, gpu, block, dtype, max_num_batched_tokens)
    return HostTierEstimate(
        host_bytes, block, tp, block_bytes, host_block, host_blocks, host_blocks * block,
        gpu_blocks, None if gpu_blocks is None else gpu_blocks * block, est.context, load)


def _load_vs_recompute(est: KVEstimate, model: ModelConfig, gpu: GPUSpec, block: int,
                       dtype: str, chunk: int | None) -> LoadVsRecompute:
    if gpu.host_link is None:
        raise KvbenchInputError(f"GPU {gpu.name} has no host link: give its [host_link] in "
                                "the --gpu-spec file (docs/simulator.md, Host link)")
    tokens = est.context
    blocks = math.ceil(tokens / block)
    block_bytes = est.kv_bytes_per_token * block
    layers = [(g.num_layers, g.separate_v) for g in est.kv_groups]
    fragments = sum(arena_fragments_per_block(n, separate_v) for n, separate_v in layers)
    link = gpu.host_link
    stored = weights_dtype(model, canonical_dtype(dtype, WEIGHT_DTYPES))
    time_model = StepTimeModel(model, gpu, DTYPE_BYTES[stored], est.kv_element_bytes,
                               est.tensor_parallel_size)
    if chunk is None and est.vllm is not None:  # vLLM's step budget for the GPU
        chunk = est.vllm.max_num_batched_tokens
    chunk = min(chunk or tokens, tokens)
    recompute = 0.0
    for start in range(0, tokens, chunk):
        end = min(start + chunk, tokens)
        recompute += time_model.cost([end - start], [end], 1).time_s
    # a full hit still computes the prompt's last token (vLLM's, and kvbench's, prefix hits
    # stop one token short), in a step of its own at the full context
    last_token = time_model.cost([1], [tokens], 1).time_s
    return LoadVsRecompute(
        gpu.name, link.name, tokens, blocks, blocks * block_bytes,
        transfer_seconds(link, "load", blocks, block_bytes),
        transfer_seconds(link, "load", blocks, block_bytes, fragments),
        last_token, recompute, chunk)


def format_host_tier(host: HostTierEstimate) -> str:
    """The tiers, the capacity and the load-or-recompute rows of `kvbench estimate`."""
    tp = f" x TP {host.tensor_parallel_size}" if host.tensor_parallel_size > 1 else ""
    lines = [f"host KV tier (--kv-offload {format_bytes(host.host_bytes)}): blocks of "
             f"{host.block_size} tokens, {format_bytes(host.block_bytes_per_gpu)} a GPU block, "
             f"{format_bytes(host.host_block_bytes)} a host block (every rank's, "
             f"{HOST_PAGE_BYTES}-byte aligned{tp})", ""]

    def cell(value: int | None) -> str:
        return "n/a" if value is None else f"{value:,}"

    rows = [("GPU", cell(host.gpu_blocks), cell(host.gpu_tokens),
             cell(host.requests(host.gpu_tokens)), "KV budget in whole blocks"),
            ("host", f"{host.host_blocks:,}", f"{host.host_tokens:,}",
             cell(host.requests(host.host_tokens)), "floor(SIZE / host block)"),
            ("both, stored on eviction", "", cell(host.tokens_exclusive),
             cell(host.requests(host.tokens_exclusive)), "GPU + host (different blocks)"),
            ("both, every block stored", "", cell(host.tokens_inclusive),
             cell(host.requests(host.tokens_inclusive)),
             "max(GPU, host): vLLM's connector, the host holds copies")]
    lines += text_table(("tier", "blocks", "tokens", f"{host.context:,}-token requests",
                         "formula"), rows, right=(1, 2, 3))
    if host.gpu_tokens is None:
        lines.append("(no KV budget: give --gpu, --gpu-memory or --kv-memory for the GPU tier)")
    load = host.load
    if load is None:
        lines += ["", "give --model and --gpu (or --gpu-spec) for a request's load time over the "
                  "GPU's host link against recomputing it"]
        return "\n".join(lines)
    def verdict(speedup: float) -> str:
        return f"{'loading' if speedup > 1 else 'recomputing'} wins ({speedup:.2f}x)"

    lines += ["", f"one {load.tokens:,}-token request's KV on {load.gpu} ({load.link} host link)"
              f": {load.blocks:,} blocks, {format_bytes(load.bytes_per_gpu)} per GPU", ""]
    last = load.last_token_s * 1e3
    rows = [("load, cross-layer blocks (vLLM 0.12+)", f"{load.load_s * 1e3:.3f}",
             f"{last:.3f}", f"{load.load_s * 1e3 + last:.3f}", f"{load.speedup:.2f}x"),
            ("load, per-layer blocks (kvbench's arena)", f"{load.load_per_layer_s * 1e3:.3f}",
             f"{last:.3f}", f"{load.load_per_layer_s * 1e3 + last:.3f}",
             f"{load.speedup_per_layer:.2f}x"),
            (f"recompute: prefill in chunks of {load.chunk_tokens:,}",
             f"{load.recompute_s * 1e3:.3f}", "", f"{load.recompute_s * 1e3:.3f}", "1x")]
    lines += text_table(("path", "transfer or prefill ms", "last token ms", "ms",
                         "recompute / path"), rows, right=(1, 2, 3, 4))
    lines.append(f"cross-layer blocks: {verdict(load.speedup)}; per-layer blocks: "
                 f"{verdict(load.speedup_per_layer)} (a loaded request still runs its last "
                 "token's step)")
    return "\n".join(lines)
