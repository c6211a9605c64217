"""The time to move KV blocks between GPU memory and a host tier over a `HostLink`.

As vLLM's CPU offloading copies (`vllm/v1/kv_offload/cpu/gpu_worker.py`): one batched copy
per transfer of one descriptor per (block, page tensor), so a transfer of `num_blocks` blocks
of `block_bytes`, each in `fragments_per_block` contiguous pieces, takes

    latency_s + num_blocks * (fragments_per_block * fragment_overhead_s
                              + block_bytes / bandwidth)

docs/simulator.md, "Host link", sources the constants. vLLM's cross-layer layout copies a
block as one piece; kvbench's own arena (a K and a V tensor per layer) in
`arena_fragments_per_block` pieces.
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
