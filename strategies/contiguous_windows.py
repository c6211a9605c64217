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

from kvbench.core.layout import DROP_TABLE, SlotCopy
from kvbench.core.sequence import Sequence
from kvbench.strategies.base import MemorySplit
from kvbench.strategies.contiguous import ContiguousStrategy
from kvbench.strategies.window_ring import ring_slots

START, RING = 0, 1  # the entries of a sequence's table in each group


class WindowedContiguousStrategy(ContiguousStrategy):
    """A range per allocation group; window groups hold rings. Decode runs are not declared
    here (`kvbench.engine.fast_forward`): a ring's token slots change with every decode step."""

    reads_no_token_ids = True  # lengths only, never ids (`declares`)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.num_groups = len(self.windows)
        self.ring_groups = tuple(g for g, w in enumerate(self.windows) if w is not None)
        # seq_id -> (start slot, length) of each group's range
        self.group_ranges: dict[int, tuple[tuple[int, int], ...]] = {}
        self._group_logs = [[] for _ in self.windows]
        self._g_held = [0] * self.num_groups
        self._g_will = [0] * self.num_groups

    # Sizes ------------------------------------------------------------------------------

    def group_lengths(self, seq: Sequence) -> tuple[int, ...]:
        """Slots the sequence holds in each group: the reservation, or a window's ring."""
        reservation = self.reservation(seq)
        return tuple(
            reservation if w is None else ring_slots(
                w, seq.prompt_len, reservation, self.chunked_prefill,
                self.max_num_batched_tokens)
            for w in self.windows)

    def required_slots(self, seq: Sequence) -> int:
        return sum(self.group_lengths(seq))

    @property
    def capacity_tokens(self) -> int:
        """Tokens of context the arena holds for one decoding sequence: each window group's
        W-slot ring taken out, the rest shared by the full-attention groups."""
        window_slots = sum(w for w in self.windows if w is not None)
        num_full = self.num_groups - len(self.ring_groups)
        if not num_full:
            return self.num_slots
        return max(0, self.num_slots - window_slots) // num_full

    # Ranges -----------------------------------------------------------------------------

    def _take(self, lengths: tuple[int, ...]) -> tuple[tuple[int, int], ...] | None:
        """Carve every group's range first-fit, in group order; None (nothing taken) when
        one does not fit."""
        taken: list[tuple[int, int]] = []
        for length in lengths:
            start = self.ranges.allocate(length)
            if start is None:
                for held in reversed(taken):  # in reverse: the holes are as they were
                    self.ranges.release(*held)
                return None
            taken.append((start, length))
        return tuple(taken)

    def can_admit(self, seq: Sequence, num_running: int) -> bool:
        if seq.seq_id in self.group_ranges:
            return True
        taken = self._take(self.group_lengths(seq))
        if taken is None:
            return False
        for held in reversed(taken):
            self.ranges.release(*held)
        return True

    def admit(self, seq: Sequence) -> int:
        if seq.seq_id not in self.group_ranges:
            taken = self._take(self.group_lengths(seq))
            if taken is None:
                raise MemoryError(f"admit of sequence {seq.seq_id} without holes that fit")
            self._hold(seq, taken)
        return 0

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

    def allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        # Reserved at admission: growing always fits, and a ring holds the window's past
        # tokens beside the step's new ones (`ring_slots`); checked, as a token overwritten
        # while still visible would change the output without an error.
        taken = self.group_ranges[seq.seq_id]
        p = seq.num_computed
        for (_, length), window in zip(taken, self.windows, strict=True):
            need = p + num_new_tokens if window is None else min(p, window - 1) + num_new_tokens
            if need > length:
                raise AssertionError(
                    f"sequence {seq.seq_id} outgrew its {'ring' if window else 'reservation'}")
        return True

    def free(self, seq: Sequence) -> None:
        sid = seq.seq_id
        taken = self.group_ranges.pop(sid, None)
        if taken is None:
            return
        final = seq.final_kv_len
        for g, held in enumerate(taken):
            self.ranges.release(*held)
            self._g_held[g] -= held[1]
            self._g_will[g] -= min(held[1], final)
            self._group_logs[g].append((sid, DROP_TABLE, 0))

    def fork(self, parent: Sequence, child: Sequence) -> list[SlotCopy] | None:
        taken = self._take(self.group_lengths(child))
        if taken is None:
            return None
        self._hold(child, taken)
        n = parent.num_computed
        copies: list[SlotCopy] = []
        for (src, src_len), (dst, dst_len), window in zip(
                self.group_ranges[parent.seq_id], taken, self.windows, strict=True):
            if window is None:
                copies.append(SlotCopy(src, dst, n))
            else:
                copies += ring_copies(src, src_len, dst, dst_len, n)
        self._copies.extend(copies)
        return copies

    def slot_of(self, seq: Sequence, position: int) -> int:
        """The slot of `position` in the first allocation group (a full-attention one when
        the model has any)."""
        start, length = self.group_ranges[seq.seq_id][0]
        return start + (position if self.windows[0] is None else position % length)

    # Accounting -------------------------------------------------------------------------

    def _external(self, head_waiting: Sequence | None) -> int:
        """Free slots in holes too small for any of the queue head's ranges."""
        if head_waiting is None or head_waiting.seq_id in self.group_ranges:
            return 0
        need = min(self.group_lengths(head_waiting))
        return sum(n for _, n in self.ranges.holes if n < need)

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

    def is_whole(self) -> bool:
        return not self.group_ranges and self.ranges.is_whole()


def ring_copies(src: int, src_len: int, dst: int, dst_len: int,
                num_tokens: int) -> list[SlotCopy]:
    """Copies that move the last tokens of a ring of `src_len` at `src` (of `num_tokens`
    computed) into a ring of `dst_len` at `dst`, as many as both hold, in runs of slots that
    are consecutive in both."""
    first = max(0, num_tokens - min(src_len, dst_len))
    copies: list[SlotCopy] = []
    pos = first
    while pos < num_tokens:
        s, d = pos % src_len, pos % dst_len
        run = min(num_tokens - pos, src_len - s, dst_len - d)
        copies.append(SlotCopy(src + s, dst + d, run))
        pos += run
    return copies

