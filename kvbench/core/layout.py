"""`KVLayout`: where a step's tokens live in the KV arena, handed from strategy to executor."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SlotCopy:
    """Copy `num_slots` slots of KV from `src_slot` to `dst_slot` before the step (fork, CoW)."""

    src_slot: int
    dst_slot: int
    num_slots: int


@dataclass
class KVLayout:
    """Per scheduled sequence (in batch order): its new tokens' slots and how to find its past.

    `kind` is "paged" (read through `block_tables`, `block_size`) or "contiguous" (read from
    `start_slots`). `seq_lens[i]` counts the sequence's tokens in the cache once this step's
    tokens are written; `query_lens[i]` how many of them this step computes.
    """

    kind: str
    slot_mapping: list[int] = field(default_factory=list)
    query_lens: list[int] = field(default_factory=list)
    seq_lens: list[int] = field(default_factory=list)
    block_size: int = 1
    block_tables: list[list[int]] = field(default_factory=list)
    start_slots: list[int] = field(default_factory=list)
    slot_copies: list[SlotCopy] = field(default_factory=list)
