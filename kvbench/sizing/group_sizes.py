"""One sequence's KV bytes per layer group (`kvbench estimate`'s per-group table;
docs/estimate.md, Sliding windows): a window layer needs min(context, W) tokens of KV, what an
allocator that frees window blocks holds (vLLM's hybrid KV cache manager), beside the whole
context `paged` and `prefix` keep in every layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbench.core.kv_groups import KVGroup
from kvbench.units import format_bytes


@dataclass(frozen=True)
class GroupSize:
    """One group's share of one sequence's KV at `context` tokens."""

    attention: str  # "full" | "sliding"
    window: int | None
    num_layers: int
    bytes_per_token: int
    tokens_needed: int  # min(context, window): the tokens its layers attend to
    bytes_per_sequence: int  # bytes_per_token x tokens_needed
    bytes_per_sequence_whole_context: int  # bytes_per_token x context

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def group_sizes(groups: tuple[KVGroup, ...], context: int) -> tuple[GroupSize, ...]:
    sizes = []
    for group in groups:
        needed = context if group.window is None else min(context, group.window)
        per_token = group.bytes_per_token
        sizes.append(GroupSize(group.attention, group.window, group.num_layers, per_token,
                               needed, per_token * needed, per_token * context))
    return tuple(sizes)


GROUP_TABLE_HEADER = ("group", "layers", "bytes/token", "tokens needed", "bytes/sequence",
                      "binary", "whole context")


def group_rows(sizes: tuple[GroupSize, ...]) -> list[tuple[str, ...]]:
    """The per-group table's rows (GROUP_TABLE_HEADER's columns), then the sum over groups."""
    rows = []
    for size in sizes:
        rows.append((
            size.attention if size.window is None else f"sliding (window {size.window:,})",
            f"{size.num_layers:,}",
            f"{size.bytes_per_token:,}",
            f"{size.tokens_needed:,}",
            f"{size.bytes_per_sequence:,}",
            format_bytes(size.bytes_per_sequence),
            format_bytes(size.bytes_per_sequence_whole_context),
        ))
    needed = sum(s.bytes_per_sequence for s in sizes)
    whole = sum(s.bytes_per_sequence_whole_context for s in sizes)
    rows.append(("all groups", f"{sum(s.num_layers for s in sizes):,}",
                 f"{sum(s.bytes_per_token for s in sizes):,}", "", f"{needed:,}",
                 format_bytes(needed), format_bytes(whole)))
    return rows
