"""The KV pool vLLM builds from its available memory, and when it refuses to start.

As vllm/v1/core/kv_cache_utils.py does it (docs/estimate.md tables the rows): num_blocks =
available // (page x layers per block), every layer's page `block_size` tokens of its K and V,
layers per block every layer or, with sliding windows, the hybrid allocator's `group_size`
(`kvbench.core.kv_allocation`); "GPU KV cache size" num_blocks // groups x block_size;
"Maximum concurrency" num_blocks / the blocks one max_model_len request holds over the groups
(a window W: cdiv(min(W - 1 + max_num_batched_tokens, L), block) + 1). Pipeline stages each
size a pool and all take the smallest. Refusals are `check_enough_kv_cache_memory`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from kvbench.core.kv_allocation import hybrid_allocation
from kvbench.core.kv_groups import KVGroup

GiB = 2**30


@dataclass(frozen=True)
class VllmKVPool:
    """The pool vLLM allocates: blocks, tokens and concurrency as it logs them."""

    block_size: int
    page_bytes: int  # one layer's block
    layers_per_block: int  # every layer, or the hybrid allocator's group_size
    num_groups: int  # KV cache groups (1 without sliding windows)
    padding_layers: int  # hybrid: layer positions left empty in the groups' pages
    num_blocks: int
    blocks_per_request: int  # one request of max_model_len tokens, over the groups
    max_model_len: int

    @property
    def block_bytes(self) -> int:
        return self.page_bytes * self.layers_per_block

    @property
    def tokens(self) -> int:
        """"GPU KV cache size": the blocks shared out over the groups, in tokens."""
        return self.num_blocks // self.num_groups * self.block_size

    @property
    def max_concurrency(self) -> float:
        return self.num_blocks / self.blocks_per_request


def stage_groups(groups: tuple[KVGroup, ...], layers: tuple[int, ...]) -> tuple[KVGroup, ...]:
    """The KV groups restricted to one pipeline stage's layers."""
    keep = set(layers)
    out = []
    for group in groups:
        held = tuple(i for i in group.layers if i in keep)
        if held:
            out.append(replace(group, layers=held))
    return tuple(out)


def group_layout(groups: tuple[KVGroup, ...]) -> tuple[int, list[int | None], int]:
    """(layers per block, each KV cache group's window, padding layers) for one stage."""
    if len(groups) == 1:
        return groups[0].num_layers, [groups[0].window], 0
    allocation = hybrid_allocation(groups)
    return allocation.group_size, list(allocation.windows), allocation.padding_layers


def blocks_per_request(windows: list[int | None], tokens: int, block_size: int,
                       max_num_batched_tokens: int) -> int:
    """Blocks one request of `tokens` tokens holds across the KV cache groups."""
    total = 0
    for window in windows:
        if window is None:
            total += -(-tokens // block_size)
        else:
            held = min(window - 1 + max_num_batched_tokens, tokens)
            total += -(-held // block_size) + 1
    return total


def kv_pool(stage_group_list: list[tuple[KVGroup, ...]], available: list[int], block_size: int,
            max_model_len: int, max_num_batched_tokens: int) -> VllmKVPool:
    """The pool of a model whose pipeline stages hold `stage_group_list` with `available`
    bytes each (every available > 0)."""
    blocks, layouts = [], []
    for groups, memory in zip(stage_group_list, available, strict=True):
        page = block_size * groups[0].bytes_per_layer_token
        layers_per_block, windows, padding = group_layout(groups)
        blocks.append(memory // (page * layers_per_block))
        layouts.append((page, layers_per_block, windows, padding))
    num_blocks = min(blocks)
    page, layers_per_block, windows, padding = layouts[blocks.index(num_blocks)]
    per_request = blocks_per_request(windows, max_model_len, block_size, max_num_batched_tokens)
    return VllmKVPool(block_size, page, layers_per_block, len(windows), padding, num_blocks,
                      per_request, max_model_len)


def needed_bytes(groups: tuple[KVGroup, ...], tokens: int, block_size: int,
                 max_num_batched_tokens: int) -> int:
    """KV bytes one request of `tokens` tokens needs in one stage (every layer's pages)."""
    total = 0
    for group in groups:
        page = block_size * group.bytes_per_layer_token
        blocks = blocks_per_request([group.window], tokens, block_size, max_num_batched_tokens)
        total += group.num_layers * blocks * page
    return total


def refusal(stage_group_list: list[tuple[KVGroup, ...]], available: list[int], block_size: int,
            max_model_len: int, max_num_batched_tokens: int,
            spent: list[str] | None = None, advice: str | None = None) -> str | None:
    """vLLM's reason not to start, in one line (None: it starts); `spent` says, per stage,
    what the memory went to, `advice` the way out when it is not the usual one."""
    for index, (groups, memory) in enumerate(zip(stage_group_list, available, strict=True)):
        if memory <= 0:
            return no_memory(memory, spent[index] if spent else "", advice)
        why = too_long(partial(needed_bytes, groups, block_size=block_size,
                               max_num_batched_tokens=max_num_batched_tokens),
                       memory, max_model_len)
        if why:
            return why
    return None


def no_memory(memory: int, spent: str = "", advice: str | None = None) -> str:
    """vLLM's refusal when nothing is left for the blocks (`spent`: what the memory went to)."""
    where = f" ({spent})" if spent else ""
    return (f"No available memory for the cache blocks: vLLM would not start, "
            f"{memory / GiB:.2f} GiB left for the KV cache{where}; " + (
                advice or "raise --gpu-memory-utilization, use a larger GPU, a higher "
                "--tensor-parallel-size or a smaller model"))


def too_long(needed: Callable[[int], int], memory: int, max_model_len: int,
             what: str = "KV cache") -> str | None:
    """vLLM's refusal when one request of max_model_len needs more than `memory`
    (`needed(tokens)`: its bytes), naming the longest max_model_len that fits (vLLM's binary
    search); None when it fits."""
    need = needed(max_model_len)
    if need <= memory:
        return None
    low, high = 0, max_model_len
    while low < high:
        mid = (low + high + 1) // 2
        if needed(mid) <= memory:
            low = mid
        else:
            high = mid - 1
    return (f"vLLM would not start: one request of max_model_len {max_model_len:,} "
            f"needs {need / GiB:.2f} GiB of {what}, more than the available "
            f"{memory / GiB:.2f} GiB; the estimated maximum model length is {low:,} "
            f"(--max-model-len {low}), or raise --gpu-memory-utilization")
