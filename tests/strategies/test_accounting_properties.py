"""Property tests of the strategies' running memory totals and table logs.

Under random admit / step / fork / preempt / finish sequences, every strategy's `memory_split`
(kept as running totals) equals its from-scratch recomputation after every operation (the
`check_accounting` mode raises otherwise), the split adds up to the arena, and the executor's
persistent table arrays, fed only by the strategies' table logs, hold exactly each live
sequence's block table or start slot and give the slots `slot_of` names.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.execution.step_inputs import BlockTableArrays, layout_indices
from kvbench.scheduling.base import in_prefill
from kvbench.strategies.base import CacheStrategy
from kvbench.strategies.contiguous import ContiguousStrategy
from kvbench.strategies.paged import PagedStrategy
from kvbench.strategies.prefix import PrefixCachingStrategy

MAX_LEN = 64


def make(kind: str, num_slots: int, block_size: int) -> CacheStrategy:
    if kind == "contiguous":
        return ContiguousStrategy(num_slots, MAX_LEN, reserve="pow2", check_accounting=True)
    if kind == "paged":
        return PagedStrategy(num_slots, MAX_LEN, block_size=block_size, watermark=0.0,
                             check_accounting=True)
    return PrefixCachingStrategy(num_slots, MAX_LEN, block_size=block_size, watermark=0.0,
                                 check_accounting=True)


class Driver:
    """Calls a strategy as the engine and its policies do; `live` are the holders."""

    def __init__(self, strategy: CacheStrategy) -> None:
        self.strategy = strategy
        self.live: list[Sequence] = []
        self.waiting: list[Sequence] = []
        self.arrays = BlockTableArrays(rows=1, width=1)
        self.next_id = 0

    def new(self, prompt_len: int, output_len: int, token: int) -> None:
        prompt = tuple((token + j) % 3 for j in range(prompt_len))
        request = Request(self.next_id, 0.0, prompt, output_len)
        self.waiting.append(Sequence(self.next_id, request, 0, list(prompt)))
        self.next_id += 1

    def admit(self, whole: bool = True) -> None:
        """Admit from the queue while the strategy takes the head: with memory for all its
        uncomputed tokens (`whole`), or for none, its chunks taking theirs in `step` (as the
        engine's chunked admissions do)."""
        while self.waiting and self.strategy.can_admit(self.waiting[0], len(self.live)):
            seq = self.waiting.pop(0)
            chunked = not whole and self.strategy.admits_chunks
            seq.num_computed += (self.strategy.admit(seq, 0) if chunked
                                 else self.strategy.admit(seq))
            self.live.append(seq)

    def step(self, budget: int, token: int) -> None:
        """Sequences in admission order take what they need of a token budget (a prompt may
        be cut: chunked prefill)."""
        scheduled: list[tuple[Sequence, int]] = []
        pending = list(self.live)
        while pending and budget > 0:
            seq = pending.pop(0)
            n = min(seq.num_uncomputed, budget)
            if n <= 0:
                continue
            while not self.strategy.allocate(seq, n):
                victim = pending.pop() if pending else seq
                self.preempt(victim)
                if victim is seq:
                    break
            else:
                scheduled.append((seq, n))
                budget -= n
        if not scheduled:
            return
        layout = self.strategy.build_layout(scheduled)
        slots = layout_indices(layout, self.arrays, 0).slot_mapping.tolist()
        expected = [self.strategy.slot_of(seq, p) for seq, n in scheduled
                    for p in range(seq.num_computed, seq.num_computed + n)]
        assert slots == expected, "slots from the table arrays differ from the strategy's"
        self.check_arrays()
        for seq, n in scheduled:
            seq.num_computed += n
            if seq.num_computed == len(seq.token_ids):
                seq.token_ids.append(token)
                if seq.is_finished:
                    self.finish(seq)

    def preempt(self, seq: Sequence) -> None:
        self.strategy.free(seq)
        self.live.remove(seq)
        seq.num_computed = 0
        self.waiting.insert(0, seq)

    def finish(self, seq: Sequence) -> None:
        self.strategy.free(seq)
        self.live.remove(seq)

    def fork(self, i: int, token: int) -> None:
        parents = [s for s in self.live if s.num_generated == 1 and s.request.n == 1
                   and s.num_computed == s.prompt_len]
        if not parents:
            return
        parent = parents[i % len(parents)]
        request = parent.request
        child = Sequence(self.next_id, request, 1, list(parent.token_ids[:-1]) + [token])
        self.next_id += 1
        if self.strategy.fork(parent, child) is None:
            return
        child.num_computed = parent.num_computed
        self.live.append(child)

    def check_arrays(self) -> None:
        arrays = self.arrays
        for seq in self.live:
            if isinstance(self.strategy, ContiguousStrategy):
                table = [self.strategy.group_ranges[seq.seq_id][0][0]]
            else:
                table = self.strategy.tables.get(seq.seq_id) or []
            if table:
                row = arrays.row_of[seq.seq_id]
                assert arrays.table[row, : len(table)].tolist() == table
        assert set(arrays.row_of) <= {s.seq_id for s in self.live} | {
            s.seq_id for s in self.waiting}

    def check(self) -> None:
        head = self.waiting[0] if self.waiting else None
        split = self.strategy.memory_split(self.live, head)  # raises if the totals are off
        assert split.total == self.strategy.num_slots
        assert min(split.token, split.reserved, split.internal, split.external, split.free) >= 0


op_st = st.one_of(
    st.tuples(st.just("new"), st.integers(1, 20), st.integers(1, 12), st.integers(0, 2)),
    st.tuples(st.just("admit"), st.booleans()),
    st.tuples(st.just("step"), st.sampled_from([3, 16, 1000]), st.integers(0, 2)),
    st.tuples(st.just("step"), st.sampled_from([3, 16, 1000]), st.integers(0, 2)),
    st.tuples(st.just("fork"), st.integers(0, 9), st.integers(0, 2)),
    st.tuples(st.just("finish"), st.integers(0, 9)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["contiguous", "paged", "prefix"]),
    num_slots=st.integers(40, 200),
    block_size=st.sampled_from([1, 4, 16]),
    ops=st.lists(op_st, min_size=1, max_size=40),
)
def test_running_totals_equal_the_from_scratch_split_after_every_operation(
    kind, num_slots, block_size, ops
):
    driver = Driver(make(kind, num_slots, block_size))
    for op in ops:
        if op[0] == "new":
            driver.new(op[1], op[2], op[3])
        elif op[0] == "admit":
            driver.admit(op[1])
        elif op[0] == "step":
            driver.step(op[1], op[2])
        elif op[0] == "fork":
            driver.fork(op[1], op[2])
        else:  # a sequence leaves once it has computed its prompt (as it can only finish then)
            done = [seq for seq in driver.live if not in_prefill(seq)]
            if done:
                driver.finish(done[op[1] % len(done)])
        driver.check()
    for seq in list(driver.live):
        driver.finish(seq)
    driver.check()
    assert driver.strategy.is_whole()
    split = driver.strategy.memory_split([], None)
    assert split.held == 0 and split.free == driver.strategy.num_slots


def test_the_check_catches_totals_that_drift():
    """The debug mode is not vacuous: a total changed behind the strategy's back is caught."""
    strategy = make("paged", 64, 4)
    request = Request(0, 0.0, (1, 2, 3, 4, 5), 3)
    seq = Sequence(0, request, 0, [1, 2, 3, 4, 5])
    strategy.admit(seq)
    strategy._held_slots += 1
    try:
        strategy.memory_split([seq], None)
    except AssertionError:
        return
    raise AssertionError("a drifted total went unnoticed")


def test_table_arrays_grow_rows_and_width_and_reuse_dropped_rows():
    arrays = BlockTableArrays(rows=1, width=1)
    arrays.apply([(7, 0, 3), (7, 1, 4), (7, 2, 5), (9, 0, 8)])
    assert arrays.table[arrays.row_of[7], :3].tolist() == [3, 4, 5]
    assert arrays.lengths[arrays.rows([7, 9])].tolist() == [3, 1]
    row9 = arrays.row_of[9]
    arrays.apply([(9, -1, 0), (11, 0, 2)])
    assert 9 not in arrays.row_of and arrays.row_of[11] == row9
    assert np.array_equal(arrays.lengths[[row9]], [1])
