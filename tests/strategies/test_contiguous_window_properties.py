"""Property tests of `contiguous` on a model with sliding windows: under random admit / step /
fork / finish sequences (prompts cut by a step budget: chunked prefill) a window group never
holds more than min(reservation, W - 1 + B) slots of a sequence, B being the most one step
writes; no key is overwritten while a query of the step or a later one still sees it (checked
on a model of the arena's contents, written through the executor's slot mapping, which the
table logs alone feed); every group's running totals equal their from-scratch recomputation;
and nothing leaks once every sequence is gone."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.core.layout import SlotCopy
from kvbench.core.sequence import Sequence
from kvbench.execution.step_inputs import BlockTableArrays, layout_indices
from kvbench.strategies.contiguous import ContiguousStrategy
from kvbench.strategies.contiguous_windows import WindowedContiguousStrategy
from kvbench.strategies.window_ring import ring_copies
from tests.strategies.test_accounting_properties import MAX_LEN, Driver, op_st
from tests.strategies.test_hybrid_properties import run_ops

STEP_TOKENS = 16  # the strategy's max_num_batched_tokens: no step writes more of a sequence


class RingDriver(Driver):
    """Writes every step's tokens into a model of the arena (slot -> (group, origin sequence,
    position)) and checks that each query's visible keys are still there."""

    def __init__(self, strategy: WindowedContiguousStrategy) -> None:
        super().__init__(strategy)
        self.group_arrays: list[BlockTableArrays] = []
        self.arena: dict[int, tuple[int, int, int]] = {}
        self.parent: dict[int, tuple[Sequence, int]] = {}  # child id -> (parent, fork point)

    def origin(self, seq: Sequence, position: int) -> int:
        """The sequence whose write holds `position` of `seq` (a fork copies its parent's)."""
        while seq.seq_id in self.parent and position < self.parent[seq.seq_id][1]:
            seq = self.parent[seq.seq_id][0]
        return seq.seq_id

    def fork(self, i: int, token: int) -> None:
        before = {s.seq_id for s in self.live}
        super().fork(i, token)
        for child in self.live:
            if child.seq_id not in before:
                parent = next(s for s in self.live if s.seq_id in before
                              and s.token_ids[:-1] == child.token_ids[:-1]
                              and s.num_computed == child.num_computed)
                self.parent[child.seq_id] = (parent, child.num_computed)

    def step(self, budget: int, token: int) -> None:
        strategy = self.strategy
        budget = min(budget, STEP_TOKENS)
        scheduled: list[tuple[Sequence, int]] = []
        for seq in self.live:
            n = min(seq.num_uncomputed, budget)
            if n > 0:
                assert strategy.allocate(seq, n)
                scheduled.append((seq, n))
                budget -= n
        if not scheduled:
            return
        layout = strategy.build_layout(scheduled)
        for copy in layout.slot_copies:
            self.copy(copy)
        host = layout_indices(layout, self.arrays, 0, self.group_arrays)
        num_tokens = sum(n for _, n in scheduled)
        for g, window in enumerate(strategy.windows):
            slots = host.slot_mapping[g * num_tokens : (g + 1) * num_tokens].tolist()
            for (seq, n), at in zip(scheduled, _starts(scheduled), strict=True):
                for j in range(n):
                    self.arena[slots[at + j]] = (g, seq.seq_id, seq.num_computed + j)
            for (seq, n), at in zip(scheduled, _starts(scheduled), strict=True):
                self.check_visible(seq, n, g, window, slots[at : at + n])
        for seq, n in scheduled:
            seq.num_computed += n
            if seq.num_computed == len(seq.token_ids):
                seq.token_ids.append(token)
                if seq.is_finished:
                    self.finish(seq)

    def copy(self, copy: SlotCopy) -> None:
        """A copy moves the parent's writes as they are (their origin stays the parent)."""
        moved = [self.arena.get(copy.src_slot + i) for i in range(copy.num_slots)]
        for i, held in enumerate(moved):
            assert held is not None, "a copy reads a slot nothing wrote"
            self.arena[copy.dst_slot + i] = held

    def check_visible(self, seq: Sequence, n: int, group: int, window: int | None,
                      new_slots: list[int]) -> None:
        """Every key a query of this step sees holds that key, from the right sequence."""
        start, length = self.strategy.group_ranges[seq.seq_id][group]
        first_query = seq.num_computed
        low = 0 if window is None else max(0, first_query - window + 1)
        for key in range(low, first_query + n):
            slot = start + (key if window is None else key % length)
            assert start <= slot < start + length
            got = self.arena.get(slot)
            assert got == (group, self.origin(seq, key), key), (
                f"group {group} (window {window}): key {key} of sequence {seq.seq_id} was "
                f"overwritten while visible (slot {slot} holds {got})")

    def check(self) -> None:
        head = self.waiting[0] if self.waiting else None
        strategy = self.strategy
        split = strategy.memory_split(self.live, head)  # raises if the totals are off
        assert split.total == strategy.num_slots
        assert min(split.token, split.reserved, split.internal, split.external,
                   split.free) >= 0
        assert len(split.groups) == strategy.num_groups
        assert sum(g.held for g in split.groups) + split.external + split.free == \
            strategy.num_slots
        for seq in self.live:
            reservation = strategy.reservation(seq)
            for (_, length), window in zip(strategy.group_ranges[seq.seq_id],
                                           strategy.windows, strict=True):
                bound = reservation if window is None else min(
                    reservation, window - 1 + STEP_TOKENS)
                assert length <= bound, (window, reservation, length)


def _starts(scheduled: list[tuple[Sequence, int]]) -> list[int]:
    out, at = [], 0
    for _, n in scheduled:
        out.append(at)
        at += n
    return out


windows_st = st.lists(st.one_of(st.none(), st.integers(1, 12)), min_size=1, max_size=4).filter(
    lambda ws: any(w is not None for w in ws))
# Mostly steps, so that sequences live long enough for their rings to wrap many times.
step_st = st.tuples(st.just("step"), st.sampled_from([3, 16, 1000]), st.integers(0, 2))
# Prompts and outputs long beside the windows (MAX_LEN bounds a sequence).
long_new_st = st.tuples(st.just("new"), st.integers(1, 36), st.integers(1, 28), st.integers(0, 2))
ring_op_st = st.one_of(op_st, long_new_st, step_st, step_st, step_st)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    windows=windows_st,
    reserve=st.sampled_from(["max", "pow2", "exact"]),
    num_slots=st.integers(40, 400),
    ops=st.lists(ring_op_st, min_size=1, max_size=60),
)
def test_rings_bound_the_slots_keep_visible_keys_and_the_books_balance(
    windows, reserve, num_slots, ops
):
    strategy = ContiguousStrategy(num_slots, MAX_LEN, reserve=reserve,
                                  allocation_windows=tuple(windows), chunked_prefill=True,
                                  max_num_batched_tokens=STEP_TOKENS, check_accounting=True)
    assert isinstance(strategy, WindowedContiguousStrategy)
    run_ops(RingDriver(strategy), ops)


def test_without_a_window_contiguous_keeps_one_range():
    strategy = ContiguousStrategy(100, MAX_LEN, allocation_windows=(None, None))
    assert type(strategy) is ContiguousStrategy


def test_an_unchunked_prompt_longer_than_the_window_is_ringed_whole():
    """A prompt written in one step needs all its slots at once; decodes then need W."""
    from kvbench.core.request import Request

    strategy = ContiguousStrategy(1000, 256, reserve="max", allocation_windows=(None, 8))
    long = Sequence(0, Request(0, 0.0, tuple(range(40)), 100), 0, list(range(40)))
    short = Sequence(1, Request(1, 0.0, (1, 2, 3), 100), 0, [1, 2, 3])
    assert strategy.group_lengths(long) == (256, 40)
    assert strategy.group_lengths(short) == (256, 8)
    strategy.admit(long)
    assert strategy.allocate(long, 40)


def test_ring_copies_move_the_last_tokens_between_rings_of_other_lengths():
    src, dst = 100, 500
    copies = ring_copies(src, 7, dst, 5, num_tokens=12)
    moved = {c.dst_slot + i: c.src_slot + i for c in copies for i in range(c.num_slots)}
    # positions 7..11: source slot 100 + p % 7, destination 500 + p % 5
    assert moved == {dst + p % 5: src + p % 7 for p in range(7, 12)}
