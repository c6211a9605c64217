"""`WindowedContiguousStrategy`: `contiguous` on a model with sliding-window layers.

The layers are in allocation groups as for `hybrid` (`kvbench.core.kv_allocation`: one arena
slot is one token of `group_size` layers), and a sequence holds one range per group, each
carved first-fit from the one arena at admission and kept to the end: a full-attention group
its whole reservation (`--reserve`), a window group a ring of `ring_slots` slots
(`window_ring.py`), token p at `start + p % ring` (a ring no longer than the reservation
never wraps, so one addressing serves both). This is what a contiguous allocator that knows
windows would do; vLLM has no contiguous mode to compare with.

The executor receives one table per group, each a sequence's (start slot, ring length; 0 for
a full-attention group). The memory split has a part per group (`MemorySplit.groups`); a
ring's token slots are the computed positions it still holds, min(computed, ring).
"""

from __future__ import annotations

from kvbench.core.layout import DROP_TABLE
from kvbench.core.sequence import Sequence
from kvbench.strategies.base import MemorySplit
from kvbench.strategies.contiguous import ContiguousStrategy

START, RING = 0, 1  # the entries of a sequence's table in each group


class WindowedContiguousStrategy(ContiguousStrategy):
    """A range per allocation group; window groups hold rings. Decode runs are not declared
    here (`kvbench.engine.fast_forward`): a ring's token slots change with every decode step."""

    reads_no_token_ids = True  # lengths only, never ids (`declares`)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.num_groups = len(self.windows)
        self.ring_groups = tuple(g for g, w in enumerate(self.windows) if w is not None)
        self._group_logs = [[] for _ in self.windows]
        self._g_held = [0] * self.num_groups
        self._g_will = [0] * self.num_groups

    def _hold(self, seq: Sequence, taken: tuple[tuple[int, int], ...]) -> None:
        sid = seq.seq_id
        self.group_ranges[sid] = taken
        final = seq.final_kv_len
        for g, (start, length) in enumerate(taken):
            self._g_held[g] += length
            self._g_will[g] += min(length, final)
            log = self._group_logs[g]
            log.append((sid, START, start))
            log.append((sid, RING, 0 if self.windows[g] is None else length))

    def _unhold(self, seq: Sequence, taken: tuple[tuple[int, int], ...]) -> None:
        final = seq.final_kv_len
        for g, (_, length) in enumerate(taken):
            self._g_held[g] -= length
            self._g_will[g] -= min(length, final)
            self._group_logs[g].append((seq.seq_id, DROP_TABLE, 0))

    # Accounting -------------------------------------------------------------------------

    def _split_from_totals(
        self, running: list[Sequence], head_waiting: Sequence | None
    ) -> MemorySplit:
        # A ring's token slots move with every step until it wraps: one pass over the
        # running sequences (as `token` itself needs), not over their ranges' slots.
        computed = 0
        ring_tokens = [0] * self.num_groups
        ring_groups = self.ring_groups
        ranges = self.group_ranges
        for seq in running:
            taken = ranges.get(seq.seq_id)
            if taken is None:
                continue
            n = seq.num_computed
            computed += n
            for g in ring_groups:
                length = taken[g][1]
                ring_tokens[g] += n if n < length else length
        groups = []
        for g, window in enumerate(self.windows):
            token = computed if window is None else ring_tokens[g]
            groups.append(MemorySplit(token=token, reserved=self._g_will[g] - token,
                                      internal=self._g_held[g] - self._g_will[g]))
        return MemorySplit.of_groups(tuple(groups), self.num_slots, computed,
                                     self._external(head_waiting))

    def memory_split_from_scratch(
        self, running: list[Sequence], head_waiting: Sequence | None
    ) -> MemorySplit:
        groups = [MemorySplit() for _ in self.windows]
        computed = 0
        for seq in running:
            taken = self.group_ranges.get(seq.seq_id)
            if taken is None:
                continue
            computed += seq.num_computed
            for split, (_, length), window in zip(groups, taken, self.windows, strict=True):
                in_ring = seq.num_computed if window is None else min(seq.num_computed, length)
                split.add_held(length, in_ring, seq.final_kv_len)
        return MemorySplit.of_groups(tuple(groups), self.num_slots, computed,
                                     self._external(head_waiting))
