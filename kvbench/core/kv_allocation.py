"""`HybridAllocation`: how `hybrid` lays every KV group's pages into one pool of equal pages.

vLLM's hybrid KV cache manager (`_get_kv_cache_groups_uniform_page_size`), transcribed: each
KV group's layers are split into *allocation groups* of `group_size` layers (the smallest
group's layer count, or the largest's when every group is within 1.25x of it, to pad less),
`ceil(n / group_size)` of them for a group of n layers, dealt round-robin (`layers[i::k]`).
The arena holds `group_size` K and V tensors of `[slots, KV heads, head dim]`; the layer at
position j of any allocation group uses tensor j through its allocation group's block table,
so a page is always `block_size x group_size` layer-token KVs and one free list serves all.
A group with fewer layers leaves its missing positions unused (`padding_layers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvbench.core.kv_groups import KVGroup

# vLLM pads every group to the largest one's layer count when all are this close to it.
PAD_TO_LARGEST_RATIO = 1.25


@dataclass(frozen=True)
class AllocationGroup:
    """Layers that share one block table: `window` None for full attention."""

    layers: tuple[int, ...]
    window: int | None


@dataclass(frozen=True)
class HybridAllocation:
    groups: tuple[AllocationGroup, ...]
    group_size: int  # layers per page: the arena's K (and V) tensors
    bytes_per_layer_token: int
    num_layers: int

    @property
    def slot_bytes(self) -> int:
        """One slot of the pool: one token of one allocation group (`group_size` layers)."""
        return self.group_size * self.bytes_per_layer_token

    @property
    def windows(self) -> tuple[int | None, ...]:
        return tuple(group.window for group in self.groups)

    @property
    def padding_layers(self) -> int:
        """Layer positions left unused across the allocation groups (per slot of each)."""
        return sum(self.group_size - len(group.layers) for group in self.groups)

    def group_of_layer(self) -> list[int]:
        """Allocation group of each model layer."""
        out = [0] * self.num_layers
        for g, group in enumerate(self.groups):
            for layer in group.layers:
                out[layer] = g
        return out

    def tensor_of_layer(self) -> list[int]:
        """The arena tensor (position in its allocation group) of each model layer."""
        out = [0] * self.num_layers
        for group in self.groups:
            for j, layer in enumerate(group.layers):
                out[layer] = j
        return out


def hybrid_allocation(kv_groups: Sequence[KVGroup]) -> HybridAllocation:
    """The allocation groups of `kv_groups` (every layer must have one slot shape: vLLM's
    uniform page size needs equal per-layer pages)."""
    per_layer = {group.bytes_per_layer_token for group in kv_groups}
    shapes = {group.slot_shape for group in kv_groups}
    if len(per_layer) != 1 or len(shapes) != 1:
        raise ValueError("hybrid allocation needs one KV shape per layer across every group")
    counts = [group.num_layers for group in kv_groups]
    group_size = min(counts)
    if max(counts) < min(counts) * PAD_TO_LARGEST_RATIO:
        group_size = max(counts)
    groups: list[AllocationGroup] = []
    for group in kv_groups:
        parts = -(-group.num_layers // group_size)
        for i in range(parts):
            groups.append(AllocationGroup(group.layers[i::parts], group.window))
    return HybridAllocation(tuple(groups), group_size, per_layer.pop(),
                            sum(counts))

