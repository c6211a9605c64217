"""The time to move KV blocks between GPU memory and a host tier over a `HostLink`.

How vLLM's CPU offloading copies (`vllm/v1/kv_offload/cpu/gpu_worker.py`,
`SingleDirectionOffloadingHandler.transfer_async`): one *transfer* per request and direction
(a load job before the request's prefill; its stores, gathered once a step and submitted at
the start of the next one), each one batched copy call (`swap_blocks_batch`:
cuMemcpyBatchAsync on the copy engines) of one descriptor per (block, page tensor). A page
tensor is one layer's K, V or KV pages, or, with vLLM's cross-layer layout (0.12 on), every
layer of a block in one contiguous page: one descriptor per block. Transfers of one direction
run in submission order on their own streams, overlapping the model's compute.

So a transfer of `num_blocks` blocks of `block_bytes` bytes each, every block cut into
`fragments_per_block` contiguous pieces, takes

    latency_s + num_blocks * (fragments_per_block * fragment_overhead_s
                              + block_bytes / bandwidth)

`latency_s` is the submission and completion of one batched copy; `fragment_overhead_s` what a
descriptor costs the copy engine beyond its bytes. vLLM's blog on the connector (January 2026)
reports 4-5x the throughput once per-layer fragments of 8-72 KB became 0.5-2 MB blocks on an
H100: with 2 us a fragment, a 32 KiB fragment at PCIe 5's 55.6 GB/s moves at 0.2x the link's
rate and a 1 MiB one at 0.9x, the same ratio. Neither constant is measured here; a user's
`--gpu-spec` `[host_link]` table can give its own.

kvbench's own arena (`kvbench.execution.model_executor.KVArena`) keeps a K and a V tensor per
layer (one tensor for a latent-attention layer): its blocks are per-layer fragments,
`arena_fragments_per_block` of them.
"""

from __future__ import annotations

from kvbench.simulator.host_link import HostLink

CROSS_LAYER_FRAGMENTS = 1  # vLLM's cross-layer layout: a block is one contiguous page


def arena_fragments_per_block(num_layers: int, separate_v: bool = True) -> int:
    """Contiguous pieces of one block in a per-layer arena: a K and a V piece per layer, or one
    per layer where V is a view of K (latent attention)."""
    return num_layers * (2 if separate_v else 1)


def transfer_seconds(
    link: HostLink,
    direction: str,
    num_blocks: int,
    block_bytes: int,
    fragments_per_block: int = CROSS_LAYER_FRAGMENTS,
    num_transfers: int = 1,
) -> float:
    """Seconds to move `num_blocks` blocks of `block_bytes` bytes (a block's bytes over every
    layer) in `num_transfers` transfers ("load": host to GPU, "store": GPU to host), each block
    in `fragments_per_block` contiguous pieces. Zero blocks take no time."""
    if num_blocks < 0 or block_bytes < 0 or fragments_per_block < 1 or num_transfers < 0:
        raise ValueError("counts and bytes must be >= 0 and fragments_per_block >= 1")
    if num_blocks == 0:
        return 0.0
    per_block = fragments_per_block * link.fragment_overhead_s + block_bytes / link.bandwidth(
        direction)
    return max(num_transfers, 1) * link.latency_s + num_blocks * per_block


def tokens_per_second(link: HostLink, direction: str, token_bytes: float, block_size: int,
                      fragments_per_block: int = CROSS_LAYER_FRAGMENTS) -> float:
    """Tokens of KV a long transfer moves per second (the fixed latency amortised away)."""
    if token_bytes <= 0 or block_size < 1:
        raise ValueError("token_bytes must be > 0 and block_size >= 1")
    per_block = transfer_seconds(link, direction, 1, round(token_bytes * block_size),
                                 fragments_per_block) - link.latency_s
    return block_size / per_block
