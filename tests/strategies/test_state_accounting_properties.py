"""Property tests of every strategy holding a state-space hybrid's state: under random
new / admit / chunked step / preempt / fork / finish sequences (the accounting properties'
driver), the running totals equal the from-scratch split after every operation (both count
the states as held without tokens), every running sequence holds exactly its state, no block
is lost or counted twice (a block is held by the tables, the states, or nobody), and the
strategy is whole at the end."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.scheduling.base import in_prefill
from kvbench.strategies import STRATEGIES
from kvbench.strategies.contiguous import ContiguousStrategy
from kvbench.strategies.hybrid import FREED, HybridStrategy
from kvbench.strategies.prefix import PrefixCachingStrategy
from tests.strategies.consistency import check_consistency
from tests.strategies.test_accounting_properties import MAX_LEN, Driver, op_st
from tests.strategies.test_hybrid_properties import HybridDriver

# (strategy, --mamba-cache-mode)
KINDS = [("contiguous", None), ("paged", None), ("prefix", "none"), ("prefix", "align"),
         ("prefix", "all"), ("hybrid", None), ("hybrid-prefix", None)]


class StateHybridDriver(HybridDriver):
    """`hybrid`'s driver (a table per group); the whole split also holds the states, which
    no group's split does."""

    def check(self) -> None:
        Driver.check(self)
        check_consistency(self.strategy)
        self.check_windows()
        split = self.strategy.memory_split(self.live, None)
        states = sum(map(len, self.strategy.states.values())) * self.strategy.block_size
        assert sum(g.held for g in split.groups) + states == split.held


def make(kind: str, mode: str | None, num_slots: int, block_size: int, state: int):
    """The strategy class itself (`make_strategy` leaves `check_accounting` out), checking
    its books after every operation."""
    if kind == "contiguous":
        return ContiguousStrategy(num_slots, MAX_LEN, reserve="pow2",
                                  state_slots=state * block_size, check_accounting=True)
    cls = STRATEGIES.get(kind).factory
    options = {"mamba_cache_mode": mode} if mode else {}
    return cls(num_slots, MAX_LEN, block_size=block_size, watermark=0.0, state_blocks=state,
               check_accounting=True, **options)


def check_state_books(driver: Driver, state: int) -> None:
    strategy = driver.strategy
    running = {seq.seq_id for seq in driver.live}
    if isinstance(strategy, ContiguousStrategy):
        for seq_id, [(_, length)] in strategy.group_ranges.items():
            seq = next(s for s in driver.live if s.seq_id == seq_id)
            assert length == strategy.reservation(seq) >= seq.final_kv_len + strategy.state_slots
        return
    assert set(strategy.states) == running, "a running sequence without its state, or a leak"
    if isinstance(strategy, HybridStrategy):
        tables = {b for groups in strategy.tables.values() for t in groups for b in t
                  if b != FREED}
    else:
        tables = {b for t in strategy.tables.values() for b in t}
    states = [b for pages in strategy.states.values() for b in pages]
    assert len(set(states)) == len(states), "a state block held twice"
    assert not tables & set(states), "a block both a table's and a state's"
    held = {b for b, c in enumerate(strategy.pool.ref_counts) if c > 0}
    assert held == tables | set(states), "a held block nobody holds, or one not held"
    for seq_id, pages in strategy.states.items():
        if isinstance(strategy, PrefixCachingStrategy) and strategy.mamba_cache_mode == "all":
            held_blocks = len(strategy.tables[seq_id]) - strategy._state_base[seq_id]
            assert len(pages) == state * held_blocks
        else:
            assert len(pages) == state


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(KINDS),
    num_slots=st.integers(40, 240),
    block_size=st.sampled_from([1, 4, 16]),
    state=st.integers(1, 3),
    ops=st.lists(op_st, min_size=1, max_size=40),
)
def test_state_blocks_balance_under_every_strategy(kind, num_slots, block_size, state, ops):
    strategy = make(*kind, num_slots, block_size, state)
    driver = (StateHybridDriver if isinstance(strategy, HybridStrategy) else Driver)(strategy)
    for op in ops:
        if op[0] == "new":
            driver.new(op[1], op[2], op[3])
        elif op[0] == "admit":
            driver.admit(op[1])
        elif op[0] == "step":
            driver.step(op[1], op[2])
        elif op[0] == "fork":
            driver.fork(op[1], op[2])
        else:
            done = [seq for seq in driver.live if not in_prefill(seq)]
            if done:
                driver.finish(done[op[1] % len(done)])
        driver.check()
        check_state_books(driver, state)
        split = driver.strategy.memory_split(driver.live, None)
        strategy = driver.strategy
        held = (len(driver.live) * strategy.state_slots if isinstance(strategy, ContiguousStrategy)
                else sum(map(len, strategy.states.values())) * block_size)
        assert split.internal >= held  # the states hold no token
    for seq in list(driver.live):
        driver.finish(seq)
    driver.check()
    assert driver.strategy.is_whole()
