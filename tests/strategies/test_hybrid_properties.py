"""Property tests of `hybrid` with sliding windows: under random admit / step / fork /
preempt / finish sequences a decoding sequence holds at most ceil(W / block) + 1 blocks in a
window group (a prefill of n tokens: the window and the n tokens), every block is held by
exactly one table entry, the running totals of every allocation group equal their
from-scratch recomputation, the executor's per-group table arrays (fed only by the logs)
give the slots the strategy's tables name, and nothing leaks once every sequence is gone."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.core.sequence import Sequence
from kvbench.execution.step_inputs import BlockTableArrays, layout_indices
from kvbench.scheduling.base import in_prefill
from kvbench.strategies.hybrid import FREED, HybridStrategy
from kvbench.strategies.hybrid_prefix import HybridPrefixStrategy
from tests.strategies.consistency import check_consistency, held_blocks
from tests.strategies.test_accounting_properties import MAX_LEN, Driver, op_st


class HybridDriver(Driver):
    def __init__(self, strategy: HybridStrategy) -> None:
        super().__init__(strategy)
        self.group_arrays: list[BlockTableArrays] = []
        self.last_tokens: dict[int, int] = {}  # seq_id -> tokens it held memory for at its last step
        self.chunked: set[int] = set()  # sequences admitted with memory for no token

    def admit(self, whole: bool = True) -> None:
        before = {seq.seq_id for seq in self.live}
        super().admit(whole)
        for seq in self.live:
            if seq.seq_id not in before:  # (re)admitted: bounded by its next step's tokens
                (self.chunked.discard if whole else self.chunked.add)(seq.seq_id)
                self.last_tokens.pop(seq.seq_id, None)

    def step(self, budget: int, token: int) -> None:
        strategy = self.strategy
        scheduled: list[tuple[Sequence, int]] = []
        pending = list(self.live)
        while pending and budget > 0:
            seq = pending.pop(0)
            n = min(seq.num_uncomputed, budget)
            if n <= 0:
                continue
            while not strategy.allocate(seq, n):
                victim = pending.pop() if pending else seq
                self.preempt(victim)
                if victim is seq:
                    break
            else:
                scheduled.append((seq, n))
                budget -= n
        if not scheduled:
            return
        layout = strategy.build_layout(scheduled)
        host = layout_indices(layout, self.arrays, 0, self.group_arrays)
        num_tokens = sum(n for _, n in scheduled)
        bs = strategy.block_size
        for g in range(strategy.num_groups):
            expected = []
            for seq, n in scheduled:
                table = strategy.tables[seq.seq_id][g]
                for p in range(seq.num_computed, seq.num_computed + n):
                    assert table[p // bs] != FREED, "a written position has no block"
                    expected.append(table[p // bs] * bs + p % bs)
            got = host.slot_mapping[g * num_tokens : (g + 1) * num_tokens].tolist()
            assert got == expected, f"group {g}: slots from the table arrays differ"
        self.check_arrays()  # every log so far is applied now
        for seq, n in scheduled:  # memory for the chunk, or (admitted whole) the rest
            self.last_tokens[seq.seq_id] = n if seq.seq_id in self.chunked else seq.num_uncomputed
            seq.num_computed += n
            if seq.num_computed == len(seq.token_ids):
                seq.token_ids.append(token)
                if seq.is_finished:
                    self.finish(seq)

    def check_arrays(self) -> None:
        for seq in self.live:
            for g, table in enumerate(self.strategy.tables.get(seq.seq_id, [])):
                if not table:  # admitted, no chunk scheduled yet: nothing logged
                    continue
                arrays = self.group_arrays[g]
                row = arrays.row_of[seq.seq_id]
                for i, block in enumerate(table):
                    if block != FREED:
                        assert arrays.table[row, i] == block

    def check_windows(self) -> None:
        strategy = self.strategy
        bs = strategy.block_size
        for seq in self.live:
            n = self.last_tokens.get(seq.seq_id)
            if n is None or seq.seq_id not in strategy.tables:
                continue
            for window, held in zip(strategy.windows, held_blocks(strategy, seq), strict=True):
                if window is None:
                    continue
                if n == 1:  # a decode: the bound the issue names
                    assert held <= math.ceil(window / bs) + 1, (window, bs, held)
                assert held <= math.ceil((window - 1 + n) / bs) + 1, (window, bs, n, held)

    def check(self) -> None:
        super().check()
        check_consistency(self.strategy)
        self.check_windows()
        head = self.waiting[0] if self.waiting else None
        split = self.strategy.memory_split(self.live, head)
        assert len(split.groups) == self.strategy.num_groups
        for part in split.groups:
            assert min(part.token, part.reserved, part.internal) >= 0
        assert sum(g.held for g in split.groups) == split.held


windows_st = st.lists(st.one_of(st.none(), st.integers(1, 24)), min_size=1, max_size=4)


def run_ops(driver: HybridDriver, ops, check_admitted: bool = False):
    """Apply `ops` through `driver`, checking the books after each, then finish every
    sequence: the strategy must be whole again, every slot free. `check_admitted`: a newly
    admitted sequence never has its last token cached (a prefix hit leaves one to compute).
    Returns the final split."""
    for op in ops:
        if op[0] == "new":
            driver.new(op[1], op[2], op[3])
        elif op[0] == "admit":
            before = {s.seq_id for s in driver.live}
            driver.admit(op[1])
            if check_admitted:
                for seq in driver.live:
                    if seq.seq_id not in before:
                        assert seq.num_computed < len(seq.token_ids)
        elif op[0] == "step":
            driver.step(op[1], op[2])
        elif op[0] == "fork":
            driver.fork(op[1], op[2])
        else:
            done = [seq for seq in driver.live if not in_prefill(seq)]
            if done:
                driver.finish(done[op[1] % len(done)])
        driver.check()
    for seq in list(driver.live):
        driver.finish(seq)
    driver.check()
    strategy = driver.strategy
    assert strategy.is_whole()
    split = strategy.memory_split([], None)
    assert split.held == 0 and split.free == strategy.num_slots
    return split


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    windows=windows_st,
    num_slots=st.integers(40, 300),
    block_size=st.sampled_from([1, 4, 16]),
    ops=st.lists(op_st, min_size=1, max_size=40),
)
def test_windows_bound_the_blocks_and_the_books_balance(windows, num_slots, block_size, ops):
    strategy = HybridStrategy(num_slots, MAX_LEN, block_size=block_size, watermark=0.0,
                              allocation_windows=tuple(windows), check_accounting=True)
    run_ops(HybridDriver(strategy), ops)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    windows=windows_st,
    num_slots=st.integers(40, 300),
    block_size=st.sampled_from([1, 4, 16]),
    ops=st.lists(op_st, min_size=1, max_size=40),
)
def test_prefix_hits_keep_the_window_bound_and_each_shared_block_is_counted_once(
    windows, num_slots, block_size, ops
):
    """`hybrid-prefix` under the same operations (prompts of few distinct tokens, so blocks
    repeat and hit): the same bounds and books, a hit never covers the last token, and what
    is freed stays as evictable cache, never held."""
    strategy = HybridPrefixStrategy(num_slots, MAX_LEN, block_size=block_size, watermark=0.0,
                                    allocation_windows=tuple(windows), check_accounting=True)
    split = run_ops(HybridDriver(strategy), ops, check_admitted=True)
    assert split.cached == strategy.pool.num_evictable * block_size


def test_a_window_group_hits_with_only_its_windows_blocks_cached():
    """A 1-token window needs no block before the hit's end: with that group's early blocks
    evicted, the full group's whole cached run still hits (a full-attention rule for every
    layer would find nothing)."""
    from kvbench.core.request import Request

    strategy = HybridPrefixStrategy(400, MAX_LEN, block_size=4, watermark=0.0,
                                    allocation_windows=(None, 1), check_accounting=True)
    prompt = tuple(range(21))
    first = Sequence(0, Request(0, 0.0, prompt, 2), 0, list(prompt))
    strategy.admit(first)
    first.num_computed = 21
    strategy.allocate(first, 1)  # names the five full blocks, frees the window's behind
    assert held_blocks(strategy, first) == [6, 1]
    strategy.free(first)
    filler_prompt = tuple(range(1000, 1184))  # 46 blocks a group: evicts the two oldest,
    filler = Sequence(1, Request(1, 0.0, filler_prompt, 1), 0, list(filler_prompt))
    strategy.admit(filler)  # the window group's blocks 0 and 1 (freed first)
    assert strategy.pool.evictions == 2
    strategy.free(filler)
    second = Sequence(2, Request(2, 0.0, prompt, 2), 0, list(prompt))
    assert strategy.admit(second) == 20  # five blocks: all but the one with the last token
    assert held_blocks(strategy, second) == [6, 1]
