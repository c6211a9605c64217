"""The `CacheStrategy` seam: KV allocation bookkeeping, never tensors."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from kvbench.core.layout import KVLayout, SlotCopy
from kvbench.core.sequence import Sequence


@dataclass
class MemorySplit:
    """The arena's slots split as in DESIGN.md; the first five add up to the arena.

    `cached` is the part of `free` that holds evictable prefix-cache blocks.
    """

    token: int = 0
    reserved: int = 0
    internal: int = 0
    external: int = 0
    free: int = 0
    cached: int = 0
    prompt_blocks: int | None = None  # distinct blocks holding prompt positions (block strategies)

    @property
    def total(self) -> int:
        return self.token + self.reserved + self.internal + self.external + self.free

    @property
    def held(self) -> int:
        return self.token + self.reserved + self.internal + self.external

    @property
    def utilization(self) -> float | None:
        return self.token / self.held if self.held else None


def split_held(held: int, token: int, final_kv_len: int) -> tuple[int, int, int]:
    """(token, reserved, internal) of `held` slots of a sequence that will hold `final_kv_len`."""
    will_use = min(held, max(final_kv_len, token))
    return token, will_use - token, held - will_use


class CacheStrategy(ABC):
    """Decides which arena slots each sequence's KV occupies.

    The engine calls `admit` when a waiting sequence is scheduled for (re)computation,
    `allocate` before every step for the tokens the sequence computes in it, `free` when it
    finishes or is preempted, and `fork` for parallel-sampling children. `build_layout`
    hands the result to the executor.
    """

    name: str = "?"
    layout_kind: str = "paged"
    can_preempt: bool = True  # whether a running sequence's allocation may fail mid-run

    def __init__(self, num_slots: int, max_model_len: int) -> None:
        self.num_slots = num_slots
        self.max_model_len = max_model_len

    def reset_stats(self) -> None:
        """Zero the strategy's own counters after a warm-up (none by default)."""
        return None

    @property
    def capacity_tokens(self) -> int:
        """Slots that can hold KV (the arena rounded down to whole blocks for paged)."""
        return self.num_slots

    @abstractmethod
    def required_slots(self, seq: Sequence) -> int:
        """Slots the sequence needs to be admitted and finish alone in an empty arena."""

    @abstractmethod
    def can_admit(self, seq: Sequence, num_running: int) -> bool:
        """Whether `admit` would succeed now (without changing anything)."""

    @abstractmethod
    def admit(self, seq: Sequence) -> int:
        """Take the memory to (re)compute the sequence's uncomputed tokens.

        Returns how many leading tokens are already in the cache (prefix hits); the engine
        marks them computed.
        """

    @abstractmethod
    def allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Make room for `num_new_tokens` more tokens; False when the arena cannot."""

    @abstractmethod
    def free(self, seq: Sequence) -> None:
        """Give back everything the sequence holds."""

    @abstractmethod
    def fork(self, parent: Sequence, child: Sequence) -> list[SlotCopy] | None:
        """Give `child` the parent's cached tokens; None when the arena cannot."""

    @abstractmethod
    def slot_of(self, seq: Sequence, position: int) -> int: ...

    @abstractmethod
    def memory_split(self, running: list[Sequence], head_waiting: Sequence | None) -> MemorySplit:
        """The split in slots, from the sequences that hold memory and the queue head."""

    @abstractmethod
    def is_whole(self) -> bool:
        """True when no slot is held by anyone (prefix-cache blocks count as free)."""

    def pending_copies(self) -> list[SlotCopy]:
        """Copies (fork, copy-on-write) decided since the last call, to run before the step."""
        copies, self._copies = getattr(self, "_copies", []), []
        return copies

    def stats(self) -> dict[str, float]:
        """Strategy-specific counters for the summary (evictions, hit rate, ...)."""
        return {}

    def build_layout(self, scheduled: list[tuple[Sequence, int]]) -> KVLayout:
        layout = KVLayout(kind=self.layout_kind, slot_copies=self.pending_copies())
        for seq, num_new in scheduled:
            start = seq.num_computed
            layout.slot_mapping.extend(self.slot_of(seq, p) for p in range(start, start + num_new))
            layout.query_lens.append(num_new)
            layout.seq_lens.append(start + num_new)
            self._add_table(layout, seq)
        return layout

    @abstractmethod
    def _add_table(self, layout: KVLayout, seq: Sequence) -> None:
        """Append the sequence's block table or start slot to the layout."""
