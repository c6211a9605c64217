"""`contiguous`: one contiguous KV range per request, reserved at admission.

How much is reserved is the `--reserve` mode: `max` (the model's maximum length, as Orca and
FasterTransformer-style servers do), `pow2` (the final length rounded up to a power of two,
capped at the maximum length) or `exact` (the oracle final length). A reservation never grows,
so a running sequence never runs out and is never preempted; admission waits for a hole
that fits (first-fit), and free slots in smaller holes are external fragmentation. On a
model with sliding-window layers it is `WindowedContiguousStrategy` (`contiguous_windows.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbench.core.decode_run_rows import BooksAfterStep
from kvbench.core.layout import KVLayout, SlotCopy
from kvbench.core.sequence import Sequence
from kvbench.errors import KvbenchInputError
from kvbench.strategies.base import CacheStrategy, MemorySplit
from kvbench.strategies.free_ranges import FreeRanges
from kvbench.strategies.registry import register_strategy
from kvbench.strategies.window_ring import ring_copies, ring_slots


@dataclass(frozen=True)
class ContiguousOptions:
    reserve: str = "max"  # max | pow2 | exact
    # One entry per allocation group: its window (None: full attention); the engine build
    # fills it for a model with sliding-window layers (`kvbench.core.kv_allocation`).
    allocation_windows: tuple[int | None, ...] = (None,)
    # What bounds one step's write of a sequence, hence a window group's ring (`ring_slots`).
    chunked_prefill: bool = False
    max_num_batched_tokens: int = 2048
    # A state-space hybrid's recurrent state, in slots (its bytes over a slot's): reserved
    # with the sequence's range, after its KV positions, from admission to finish.
    state_slots: int = 0

RESERVE_MODES = ("max", "pow2", "exact")


@register_strategy(
    "contiguous", "one range per request reserved at admission (--reserve max|pow2|exact)",
    ContiguousOptions,
)
class ContiguousStrategy(CacheStrategy):
    name = "contiguous"
    layout_kind = "contiguous"

    def __init__(
        self,
        num_slots: int,
        max_model_len: int,
        reserve: str = "max",
        allocation_windows: tuple[int | None, ...] = (None,),
        chunked_prefill: bool = False,
        max_num_batched_tokens: int = 2048,
        check_accounting: bool | None = None,
        state_slots: int = 0,
    ) -> None:
        super().__init__(num_slots, max_model_len, check_accounting)
        self.state_slots = state_slots
        if reserve not in RESERVE_MODES:
            raise KvbenchInputError(
                f"unknown --reserve {reserve!r} (choose from {', '.join(RESERVE_MODES)})"
            )
        self.reserve = reserve
        self.ranges = FreeRanges(num_slots)
        # seq_id -> (start slot, length) of its range in each allocation group
        self.group_ranges: dict[int, tuple[tuple[int, int], ...]] = {}
        self.windows = tuple(allocation_windows) or (None,)
        self.chunked_prefill = chunked_prefill
        self.max_num_batched_tokens = max_num_batched_tokens

    def __new__(cls, *args, allocation_windows: tuple[int | None, ...] = (None,), **kwargs):
        # A window group anywhere: one range per allocation group, rings for the windows.
        if cls is ContiguousStrategy and any(w is not None for w in allocation_windows):
            # here, not at the top: the windowed class subclasses this one (a cycle)
            from kvbench.strategies.contiguous_windows import WindowedContiguousStrategy

            cls = WindowedContiguousStrategy
        return super().__new__(cls)

    def reservation(self, seq: Sequence) -> int:
        """The range reserved for `seq`: its KV (by `--reserve`), then its state (held, no
        token: the split's `internal`, as slots past the final length)."""
        final = seq.final_kv_len
        if self.reserve == "max":
            kv = max(self.max_model_len, final)
        elif self.reserve == "pow2":
            kv = max(min(1 << (final - 1).bit_length(), self.max_model_len), final)
        else:
            kv = final
        return kv + self.state_slots

    def group_lengths(self, seq: Sequence) -> tuple[int, ...]:
        """Slots the sequence holds in each allocation group: the reservation, or a window's
        ring (`window_ring.py`)."""
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
        num_full = sum(1 for w in self.windows if w is None)
        if not num_full:
            return self.num_slots
        return max(0, self.num_slots - window_slots) // num_full

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
        """Book the ranges `taken` for `seq`: its table is its range's start slot."""
        self.group_ranges[seq.seq_id] = taken
        (start, length), = taken
        self._account(seq, length)
        self._log_table(seq.seq_id, 0, start)

    def _unhold(self, seq: Sequence, taken: tuple[tuple[int, int], ...]) -> None:
        self._account(seq, 0)
        self._log_drop(seq.seq_id)

    def allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        # Reserved at admission: growing always fits, and a ring holds the window's past
        # tokens beside the step's new ones (`ring_slots`); checked, as a token overwritten
        # while still visible would change the output without an error.
        p = seq.num_computed
        for (_, length), window in zip(self.group_ranges[seq.seq_id], self.windows,
                                       strict=True):
            need = p + num_new_tokens if window is None else min(p, window - 1) + num_new_tokens
            if need > length:
                raise AssertionError(
                    f"sequence {seq.seq_id} outgrew its {'ring' if window else 'reservation'}")
        return True

    # Decode runs (`kvbench.engine.fast_forward.RunStrategy`): a reservation covers the
    # final length, so growing never allocates and never opens a hole for admission.

    decode_runs = True
    reads_no_token_ids = True  # lengths only, never ids (`declares`)

    def join_decode_cohort(self, seq: Sequence, ordinal: int, rank: int) -> None:
        return None

    def leave_decode_cohort(self, seq: Sequence) -> None:
        return None

    def clear_decode_cohort(self) -> None:
        return None

    def cohort_run_steps(self, ordinal: int, num_members: int, max_steps: int) -> int:
        return max_steps

    def cohort_step_victims(self, ordinal: int,
                            candidates: list[Sequence]) -> list[Sequence] | None:
        raise AssertionError("a reservation never runs dry")

    def grow_cohort_run(self, ordinal: int, num_steps: int) -> list[BooksAfterStep]:
        return []

    def decode_run_split_parts(self, head_waiting: Sequence | None) -> tuple[int, int, bool]:
        return self._external(head_waiting), 0, False

    def free(self, seq: Sequence) -> None:
        taken = self.group_ranges.pop(seq.seq_id, None)
        if taken is not None:
            for held in taken:
                self.ranges.release(*held)
            self._unhold(seq, taken)

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
        if self.state_slots:  # the state's bytes live in the range's last slots
            copies.append(SlotCopy(self._state_start(parent), self._state_start(child),
                                   self.state_slots))
        self._copies.extend(copies)
        return copies

    def _state_start(self, seq: Sequence) -> int:
        """The first of the slots a hybrid's state fills, at the end of its range."""
        start, length = self.group_ranges[seq.seq_id][0]
        return start + length - self.state_slots

    def build_layout(self, scheduled: list[tuple[Sequence, int]]) -> KVLayout:
        layout = super().build_layout(scheduled)
        if self.state_slots:  # one-slot blocks: the executor keeps the state in their bytes
            layout.state_blocks = [
                list(range(self._state_start(seq), self._state_start(seq) + self.state_slots))
                for seq, _ in scheduled]
        return layout

    def slot_of(self, seq: Sequence, position: int) -> int:
        """The slot of `position` in the first allocation group (a full-attention one when
        the model has any)."""
        start, length = self.group_ranges[seq.seq_id][0]
        return start + (position if self.windows[0] is None else position % length)

    def _split_from_totals(
        self, running: list[Sequence], head_waiting: Sequence | None,
        computed_tokens: int | None = None,
    ) -> MemorySplit:
        split = super()._split_from_totals(running, head_waiting, computed_tokens)
        split.external = self._external(head_waiting)
        split.free -= split.external
        return split

    def _external(self, head_waiting: Sequence | None) -> int:
        """Free slots in holes too small for any of the queue head's ranges."""
        if head_waiting is None or head_waiting.seq_id in self.group_ranges:
            return 0
        need = min(self.group_lengths(head_waiting))
        return sum(n for _, n in self.ranges.holes if n < need)

    def memory_split_from_scratch(
        self, running: list[Sequence], head_waiting: Sequence | None
    ) -> MemorySplit:
        split = MemorySplit()
        for seq in running:
            taken = self.group_ranges.get(seq.seq_id)
            if taken is None:
                continue
            split.add_held(taken[0][1], seq.num_computed, seq.final_kv_len)
        split.external = self._external(head_waiting)
        split.free = self.num_slots - split.held
        return split

    def is_whole(self) -> bool:
        return not self.group_ranges and self.ranges.is_whole()
